"""The ``sluice`` command line: demo, sample, resume, summary, plot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]


def print_table(table: Any) -> None:
    """Print a pandas table whole (up to 200 rows and 20 columns)."""
    import pandas as pd

    with pd.option_context(
        "display.width", 200, "display.max_columns", 20, "display.max_rows", 200
    ):
        print(table)


def _demo(args: argparse.Namespace) -> int:
    if args.what == "vi":
        from sluice.apps.vi_demo import main as vi_demo

        kwargs = {} if args.seed is None else {"seed": args.seed}  # default: the notebook's key
        fit, png = vi_demo(args.out, progress=not args.quiet, **kwargs)
        print(fit)
        print_table(fit.summary())
        print(f"figure: {png}")
        return 0
    from sluice.apps.demo import main as demo

    demo(
        args.out,
        chains=args.chains,
        warmup=args.warmup,
        draws=args.draws,
        num_chunks=args.num_chunks,
        seed=args.seed or 0,
        progress=not args.quiet,
    )
    return 0


def _sample(args: argparse.Namespace) -> int:
    import sluice
    from sluice.scripts import load_model_script, script_source

    model = load_model_script(args.script)
    sink = sluice.ZarrSink(
        args.out, overwrite=args.overwrite, model_source=script_source(args.script)
    )
    run = sluice.sample(
        model,
        chains=args.chains,
        warmup=args.warmup,
        draws=args.draws,
        chunk_size=args.chunk_size,
        seed=args.seed,
        sink=sink,
        progress=not args.quiet,
    )
    _report(run, args.out)
    return 0


def _resume(args: argparse.Namespace) -> int:
    import sluice
    from sluice.io.store import ZarrSink
    from sluice.scripts import load_model_script

    recorded = ZarrSink.open_existing(args.store, writable=False).model_source or {}
    model = load_model_script(args.model, expected_sha256=recorded.get("sha256"))
    run = sluice.resume(
        args.store, model, progress=not args.quiet, allow_model_change=args.allow_model_change
    )
    _report(run, args.store)
    return 0


def _print_diagnosis(diagnosis: Any) -> None:
    if diagnosis:
        print(f"\ndiagnostics: this run may not have explored its posterior:\n{diagnosis}")
    else:
        print("\ndiagnostics: no problems detected")


def _report(run: Any, store: str) -> None:
    import warnings

    from sluice.runtime.diagnostics import DiagnosticWarning

    with warnings.catch_warnings():  # printed below, with the table
        warnings.simplefilter("ignore", DiagnosticWarning)
        table = run.summary()
    print_table(table)
    info = run.info
    print(
        f"\n{info.chains} chains x {info.draws} draws in {store} ({info.num_chunks} chunks of "
        f"{info.chunk_size}); {info.num_divergent} divergent; warmup {info.warmup_seconds:.1f}s, "
        f"sampling {info.sampling_seconds:.1f}s"
    )
    _print_diagnosis(table.attrs["diagnosis"])


def _summary(args: argparse.Namespace) -> int:
    import sluice
    from sluice.io.arviz import import_arviz
    from sluice.io.stored_summary import read_summary
    from sluice.stats import summary_table

    if args.arviz:
        idata = sluice.open(args.store)
        print_table(import_arviz().summary(idata, var_names=args.var or None))
        return 0
    stored = read_summary(args.store)
    if stored is None:
        print(
            f"{args.store} holds no streamed summary (the run is unfinished, or it ran "
            "with default_stats=False); `sluice summary --arviz` computes one from its draws",
            file=sys.stderr,
        )
        return 1
    result, draws = stored
    if args.var:
        unknown = sorted(set(args.var) - set(result["mean"]))
        if unknown:
            raise SystemExit(f"--var: no quantity {unknown} in {args.store}; it has "
                             f"{sorted(result['mean'])}")  # fmt: skip
        result = {k: {n: v[n] for n in args.var} if isinstance(v, dict) else v
                  for k, v in result.items()}  # fmt: skip
    print_table(summary_table(result))
    print(f"\nstreamed over {draws} draws per chain (no draws read; --arviz reads them)")
    _print_diagnosis(_stored_diagnosis(args.store, summary_table(result, round_to="none")))
    return 0


def _stored_diagnosis(store: str, table: Any) -> Any:
    """The diagnosis of a finished store's run: its streamed summary's R-hat and ESS, and
    its recorded sample statistics (a few numbers per draw, not the draws)."""
    import numpy as np

    from sluice.io.store import ZarrSink
    from sluice.runtime.diagnostics import Diagnosis, convergence_problems, stored_sampler_problems

    sink = ZarrSink.open_existing(store, writable=False)
    config, done = sink.description()["config"], sink.draws_done()
    kernel = config.get("kernel", {})
    stats = sink.kept().get("sample_stats", {})  # read as arrays: no group's coordinates
    names = ("diverging", "tree_depth", "energy")
    arrays = {n: np.asarray(stats[n][:, :done]) for n in names if n in stats}
    problems = stored_sampler_problems(arrays, kernel.get("max_tree_depth"))
    problems += convergence_problems(table, int(config["chains"]))
    return Diagnosis(tuple(problems))


def _plot(args: argparse.Namespace) -> int:
    import warnings

    with warnings.catch_warnings():  # ArviZ 0.23 trips matplotlib deprecation notices
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        import sluice
        from sluice.io.store import ZarrSink
        from sluice.io.stored_summary import read_summary
        from sluice.runtime.plots import plot_convergence

        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        stored = read_summary(args.store)
        if stored is None:
            print(f"{args.store} holds no streamed summary (unfinished, or default_stats=False)",
                  file=sys.stderr)  # fmt: skip
            return 1
        result, draws = stored
        sink = ZarrSink.open_existing(args.store, writable=False)
        config = sink.description()["config"]
        plot_convergence(
            result, chains=config["chains"], draws=sink.kept().get("posterior"),
            path=out, title=f"{args.store}: {config['chains']} chains x {draws} draws",
        )  # fmt: skip
        plt.close("all")
        print(f"convergence plot: {out}")
        if not args.trace:
            return 0
        from sluice.io.arviz import import_arviz

        az = import_arviz()
        idata = sluice.open(args.store)
        if args.max_draws and idata.posterior.sizes["draw"] > args.max_draws:
            step = -(-idata.posterior.sizes["draw"] // args.max_draws)
            idata = idata.isel(draw=slice(None, None, step), groups="posterior")
        var_names = args.var or None
        trace = out.with_name(f"{out.stem}-trace{out.suffix or '.png'}")
        az.plot_trace(idata, var_names=var_names, compact=True)
        plt.gcf().suptitle(f"{args.store}: trace")
        plt.tight_layout()
        plt.savefig(trace, dpi=100)
        plt.close("all")
        rank = out.with_name(f"{out.stem}-rank{out.suffix or '.png'}")
        az.plot_rank(idata, var_names=var_names)
        plt.tight_layout()
        plt.savefig(rank, dpi=100)
        plt.close("all")
        print(f"trace plot: {trace}\nrank plot: {rank}")
        return 0


def _launch(args: argparse.Namespace) -> int:
    from sluice.runtime.launch import launch

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    result = launch(
        command,
        args.num_processes,
        devices_per_process=args.devices_per_process,
        timeout=args.timeout,
        grace=args.grace,
    )
    if not result.ok:
        print(f"sluice launch: {result.describe_failure()}", file=sys.stderr)
    return result.returncode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice", description="Bayesian inference on JAX, in chunks."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run a demo on built-in data")
    demo.add_argument(
        "what",
        nargs="?",
        default="mcmc",
        choices=["mcmc", "vi"],
        help="mcmc (default): chunked NUTS on a logistic regression; vi: the JAX notebook's "
        "variational example with 128 particles evaluated in parallel",
    )
    demo.add_argument(
        "--out", default="sluice-demo", help="folder for the figure (default: %(default)s)"
    )
    demo.add_argument("--chains", type=int, default=4)
    demo.add_argument("--warmup", type=int, default=1000)
    demo.add_argument("--draws", type=int, default=2000)
    demo.add_argument("--num-chunks", type=int, default=8)
    demo.add_argument("--seed", type=int, default=None, help="default: 0 (mcmc), 10003 (vi)")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)

    sample = sub.add_parser(
        "sample", help="sample the `model` defined in a Python file into a Zarr store"
    )
    sample.add_argument("script", help="a Python file defining `model` (a sluice.Model)")
    sample.add_argument("--out", required=True, help="the Zarr store to write (e.g. run.zarr)")
    sample.add_argument("--draws", type=int, default=1000)
    sample.add_argument("--warmup", type=int, default=1000)
    sample.add_argument("--chains", type=int, default=4)
    sample.add_argument("--chunk-size", type=int, default=None)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--overwrite", action="store_true", help="replace an existing sluice store")
    sample.add_argument("--quiet", action="store_true", help="no progress bars")
    sample.set_defaults(func=_sample)

    resume = sub.add_parser(
        "resume",
        help="finish an interrupted run from its last complete chunk",
        description="Finish an interrupted run. The model script is named here, never read "
        "from the store: a store runs no code. It must be the script the run started with "
        "(its SHA-256 is recorded) and define the same model.",
    )
    resume.add_argument("store")
    resume.add_argument(
        "--model", required=True, help="the Python file defining `model` that the run started from"
    )
    resume.add_argument(
        "--allow-model-change",
        action="store_true",
        help="continue with a model whose program or data differs from the one that started "
        "the run (the store then holds draws of both models)",
    )
    resume.add_argument("--quiet", action="store_true", help="no progress bars")
    resume.set_defaults(func=_resume)

    summary = sub.add_parser("summary", help="print the summary table of a store")
    summary.add_argument("store")
    summary.add_argument("--var", action="append", help="only these variables (repeatable)")
    summary.add_argument(
        "--arviz", action="store_true", help="compute it with ArviZ from the stored draws"
    )
    summary.set_defaults(func=_summary)

    plot = sub.add_parser(
        "plot", help="convergence plot of a store (and --trace: trace and rank plots)"
    )
    plot.add_argument("store")
    plot.add_argument(
        "--out", default="convergence.png",
        help="the convergence plot (R-hat and ESS of every element, the worst ones' ranks)",
    )  # fmt: skip
    plot.add_argument(
        "--trace", action="store_true",
        help="also ArviZ's trace and rank plots of the stored draws, beside --out",
    )  # fmt: skip
    plot.add_argument("--var", action="append", help="--trace: only these variables (repeatable)")
    plot.add_argument(
        "--max-draws", type=int, default=2000, help="--trace: thin to at most this many draws"
    )
    plot.set_defaults(func=_plot)

    launch = sub.add_parser(
        "launch",
        help="start N local processes of a multi-process run",
        description="Start N processes on 127.0.0.1 that join one run through "
        "sluice.runtime.distributed.initialize(); e.g. sluice launch -n 2 -- python script.py",
    )
    launch.add_argument("-n", "--num-processes", type=int, required=True)
    launch.add_argument(
        "--devices-per-process", type=int, help="CPU devices per process (default: JAX's)"
    )
    launch.add_argument(
        "--timeout", type=float, default=None, help="stop everything after this many seconds"
    )
    launch.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds the others get after one process fails (default: %(default)s)",
    )
    launch.add_argument("command_line", nargs=argparse.REMAINDER, help="-- program [args...]")
    launch.set_defaults(func=_launch)
    return parser


# the extra that brings a missing module (pyproject.toml's optional dependencies)
_EXTRAS = {"optax": "vi", "matplotlib": "plot", "scipy": "demo", "numpyro": "numpyro",
           "pymc": "pymc"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ModuleNotFoundError as error:
        module = (error.name or "").split(".")[0]
        extra = _EXTRAS.get(module)
        hint = f": pip install 'sluice[{extra}]'" if extra else ""
        print(f"sluice {args.command}: error: {module} is not installed{hint}", file=sys.stderr)
        return 2
    except (FileExistsError, FileNotFoundError, ValueError, OSError, ImportError) as error:
        # a StoreError (ValueError) or StoreWriteError (OSError) too: one line, no traceback
        message = " ".join(str(error).split())
        print(f"sluice {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
