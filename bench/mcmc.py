"""sluice vs NumPyro vs BlackJAX: NUTS on the same log-densities, side by side.

One run of this script measures every (model, variant) pair ``--reps`` times,
each measurement in a fresh Python process (so that peak RSS and compile
caches belong to one library only), rotating the order of the variants from
one repetition to the next. It prints medians per variant and the medians of
the per-repetition ratios sluice/NumPyro and sluice/BlackJAX (same chain
method).

    PYTHONPATH=src python bench/mcmc.py --quick            # smoke run, a few minutes
    PYTHONPATH=src python bench/mcmc.py --reps 3 --json bench-mcmc.json

Internally, ``--one VARIANT MODEL`` performs one measurement and prints it
as one JSON line; the orchestrating process starts those. NumPyro is
measured twice: once as a user runs it (wall and compile time, draws,
memory) and once with synchronous CPU dispatch (``--sync-phases``), where
no compilation can overlap a run, for its warmup and sampling times.

Metrics (see samplers.py for exactly what each library's numbers count):

* wall: the library call(s), compile included; compile: JAX trace + lower +
  XLA compile inside it; sampling: the sampling phase without compilation;
  warmup: wall - compile - sampling (start-up and adaptation);
* grad/s: sampling gradients / sampling seconds;
* floor: seconds per gradient of the same log-density in ``jit(lax.scan(...))``
  (vmapped over the chains for vectorized variants, divided by the chains),
  measured in every process; the report uses the median over all processes
  of a model and chain method. overhead = sampling seconds / (sampling
  gradients x floor), 1.0 being a sampler that costs nothing but its gradients;
* min ESS_bulk: ArviZ's bulk ESS, minimum over all parameters; ESS/s over the
  sampling seconds and over the wall seconds;
* peak RSS: the process's high-water mark after the run (before diagnostics);
  base RSS: after imports and building the model, before the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

import harness

VARIANTS: dict[str, tuple[str, str]] = {  # name: (library, chain method)
    "sluice/seq": ("sluice", "sequential"),
    "sluice/vec": ("sluice", "vectorized"),
    "numpyro/seq": ("numpyro", "sequential"),
    "numpyro/vec": ("numpyro", "vectorized"),
    "blackjax/seq": ("blackjax", "sequential"),
    "blackjax/vec": ("blackjax", "vectorized"),
    # BlackJAX's kernels in sluice's chunk engine (sluice.kernels.from_blackjax)
    "sluice+blackjax.nuts/seq": ("sluice+blackjax.nuts", "sequential"),
    "sluice+blackjax.adjusted_mclmc/seq": ("sluice+blackjax.adjusted_mclmc", "sequential"),
}
# the variants a run measures unless told (--variants)
CORE_VARIANTS = [v for v in VARIANTS if "+" not in v]
MODELS = ("logreg_small", "logreg_large", "gaussian")
DEFAULTS = {
    "models": list(MODELS),
    "reps": 3,
    "warmup": 1000,
    "draws": 1000,
    "variants": CORE_VARIANTS,
    "rhat": True,
}
QUICK = {
    "models": ["logreg_small", "logreg_large"],  # the 10k-dim Gaussian takes minutes
    "reps": 1,
    "warmup": 100,
    "draws": 100,
    "variants": [v for v in CORE_VARIANTS if v.endswith("/seq")],
    "rhat": False,
}


# Libraries whose phase times come from a second process with synchronous dispatch
# (see samplers.run_numpyro): their compilations overlap their own runs otherwise.
PHASES_IN_SYNC_PROCESS = frozenset({"numpyro"})


# -- one measurement (runs in its own process) ------------------------------------
def measure(
    variant: str, model: str, settings: Any, rhat: bool = True, phases_only: bool = False
) -> dict[str, Any]:
    """Sample ``model`` with ``variant`` once; return the raw measurements as a dict.

    With ``phases_only``, return just the times and counts (no floor, no diagnostics).
    """
    import importlib
    import os

    from samplers import LIBRARIES
    from targets import make_target

    library, chain_method = VARIANTS[variant]
    for module in library.split("+"):  # sluice+blackjax.nuts: both libraries
        importlib.import_module(module.split(".")[0])
    clock = harness.CompileClock()
    target = make_target(model)
    settings = dataclasses.replace(settings, chain_method=chain_method)
    load_average = os.getloadavg()[0]  # other processes' work: > 0 means shared cores
    base_rss = harness.rss_bytes()

    run = LIBRARIES[library](target, settings, clock)
    record = {
        "variant": variant,
        "library": library,
        "chain_method": chain_method,
        "model": model,
        "dim": target.dim,
        "settings": dataclasses.asdict(settings),
        "wall_s": run.wall_seconds,
        "compile_s": run.compile_seconds,
        "warmup_s": run.warmup_seconds,
        "sampling_s": run.sampling_seconds,
        "compile_in_sampling_s": run.compile_in_sampling_seconds,
        "grads_warmup": run.num_gradients_warmup,
        "grads_sampling": run.num_gradients,
        "divergent": run.num_divergent,
        "load_average_1min": load_average,
    }
    if phases_only:
        return record

    batch = settings.chains if chain_method == "vectorized" else None
    return {
        **record,
        "floor_us": harness.gradient_seconds(target.logdensity_fn, target.init, batch=batch) * 1e6,
        "min_ess_bulk": harness.min_ess_bulk(run.draws),
        "max_rhat": harness.max_rhat(run.draws) if rhat else None,
        "step_size": run.step_size,
        "base_rss_mb": base_rss / 2**20,
        "peak_rss_mb": run.peak_rss_bytes / 2**20,
        "extra": run.extra,
    }


def derive(records: list[dict[str, Any]]) -> None:
    """Add the metrics computed from the raw measurements, in place.

    The floor is measured in every process; one floor per (model, chain
    method), the median of all, keeps one process's noise out of the
    comparison between libraries.
    """
    for r in records:
        floors = [
            q["floor_us"]
            for q in records
            if (q["model"], q["chain_method"]) == (r["model"], r["chain_method"])
        ]
        floor = harness.median(floors) * 1e-6
        num_draws = r["settings"]["chains"] * r["settings"]["draws"]
        r["floor_us_pooled"] = floor * 1e6
        r["grads_per_draw"] = r["grads_sampling"] / num_draws
        r["grads_per_s"] = r["grads_sampling"] / r["sampling_s"]
        r["overhead"] = r["sampling_s"] / (r["grads_sampling"] * floor)
        r["overhead_warmup"] = r["warmup_s"] / (r["grads_warmup"] * floor)
        r["ess_per_s_sampling"] = r["min_ess_bulk"] / r["sampling_s"]
        r["ess_per_s_total"] = r["min_ess_bulk"] / r["wall_s"]


# -- orchestration --------------------------------------------------------------
CHILD_ARGS = ("chains", "warmup", "draws", "seed", "max_tree_depth", "rhat")


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    variants = args.variants
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    for rep in range(args.reps):
        shift = rep % len(variants)
        order = variants[shift:] + variants[:shift]  # each variant takes each slot in turn
        for model in args.models:
            for slot, variant in enumerate(order):
                print(
                    f"[rep {rep + 1}/{args.reps}] {model:<13} {variant:<13}",
                    end=" ",
                    file=sys.stderr,
                    flush=True,
                )
                t = time.perf_counter()
                command = ["--one", variant, model, *harness.child_args(args, CHILD_ARGS)]
                record = harness.run_isolated(__file__, command)
                if VARIANTS.get(variant, ("",))[0] in PHASES_IN_SYNC_PROCESS:
                    _use_sync_phases(
                        record, harness.run_isolated(__file__, [*command, "--sync-phases"])
                    )
                record.update(rep=rep, slot=slot)
                records.append(record)
                print(f"{time.perf_counter() - t:6.1f}s", file=sys.stderr, flush=True)
    return {
        "script": "bench/mcmc.py",
        "command": " ".join(sys.argv),
        "machine": harness.machine_info(),
        "elapsed_s": time.perf_counter() - started,
        "records": records,
    }


def _use_sync_phases(record: dict[str, Any], phases: dict[str, Any]) -> None:
    """Take warmup and sampling times from the synchronous-dispatch process.

    Wall time, compile time, draws and memory stay those of the first process,
    which ran as a user runs it; both processes used the same keys, so they
    did the same work (checked by the gradient counts).
    """
    if phases["grads_sampling"] != record["grads_sampling"]:
        raise RuntimeError(f"the two processes of {record['variant']} did different work")
    record["async_phases"] = {
        k: record[k] for k in ("warmup_s", "sampling_s", "compile_in_sampling_s")
    }
    record["sync_process"] = phases
    for key in ("warmup_s", "sampling_s", "compile_in_sampling_s"):
        record[key] = phases[key]


# -- reports ----------------------------------------------------------------------
TIME_COLUMNS = [
    ("variant", "variant", ""),
    ("wall_s", "wall s", ".2f"),
    ("compile_s", "compile s", ".2f"),
    ("warmup_s", "warmup s", ".2f"),
    ("sampling_s", "sampling s", ".2f"),
    ("grads_warmup", "grads warmup", ".0f"),
    ("grads_sampling", "grads sampling", ".0f"),
    ("grads_per_draw", "grads/draw", ".1f"),
    ("grads_per_s", "grad/s", ".3g"),
    ("floor_us_pooled", "floor µs/grad", ".3g"),
    ("overhead", "overhead", ".2f"),
    ("overhead_warmup", "overhead warmup", ".2f"),
]
QUALITY_COLUMNS = [
    ("variant", "variant", ""),
    ("min_ess_bulk", "min ESS_bulk", ".0f"),
    ("ess_per_s_sampling", "ESS/s sampling", ".3g"),
    ("ess_per_s_total", "ESS/s total", ".3g"),
    ("max_rhat", "max R-hat", ".3f"),
    ("divergent", "divergent", ".0f"),
    ("base_rss_mb", "base RSS MB", ".0f"),
    ("peak_rss_mb", "peak RSS MB", ".0f"),
]
RATIO_METRICS = [  # (key, label): ratios sluice / other, < 1 is better for sluice unless noted
    ("wall_s", "wall time"),
    ("compile_s", "compile time"),
    ("warmup_s", "warmup time"),
    ("sampling_s", "sampling time"),
    ("grads_per_draw", "gradients per draw"),
    ("overhead", "overhead (time per gradient / floor)"),
    ("ess_per_s_sampling", "ESS/s sampling (> 1 better)"),
    ("ess_per_s_total", "ESS/s total (> 1 better)"),
    ("peak_rss_mb", "peak RSS"),
]


def _medians(records: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    return {k: harness.median([r[k] for r in records]) for k in keys}


def report(result: dict[str, Any]) -> str:
    """Markdown tables: per-model medians and paired ratios."""
    records = [r for r in result["records"] if r["variant"] in VARIANTS]  # older files: more
    derive(records)
    models = list(dict.fromkeys(r["model"] for r in records))
    reps = len({r["rep"] for r in records})
    lines = [f"Medians over {reps} repetition(s); each measurement in a fresh process.", ""]
    keys = [k for k, _, _ in TIME_COLUMNS + QUALITY_COLUMNS if k != "variant"]
    for model in models:
        mine = [r for r in records if r["model"] == model]
        s = mine[0]["settings"]
        lines += [
            f"### {model} (dim {mine[0]['dim']}; {s['chains']} chains, {s['warmup']} warmup + "
            f"{s['draws']} draws, max tree depth {s['max_tree_depth']})",
            "",
        ]
        variants = list(dict.fromkeys(r["variant"] for r in mine))
        rows = [
            {"variant": v, **_medians([r for r in mine if r["variant"] == v], keys)}
            for v in variants
        ]
        lines += [markdown(rows, TIME_COLUMNS), "", markdown(rows, QUALITY_COLUMNS), ""]
        ratio_rows = _ratio_rows(mine)
        if ratio_rows:
            columns = [("metric", "ratio (median of per-rep ratios)", "")] + [
                (name, name, ".2f") for name in ratio_rows[0] if name != "metric"
            ]
            lines += [markdown(ratio_rows, columns), ""]
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    return harness.markdown_table(rows, columns)


def _ratio_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over repetitions of sluice/<other> for each metric, same chain method and rep."""
    pairs: dict[str, list[tuple[dict, dict]]] = {}
    by_key = {(r["variant"], r["rep"]): r for r in records}
    for (variant, rep), mine in by_key.items():
        library, _, method = variant.partition("/")
        if library.startswith("sluice+blackjax"):  # the engine around BlackJAX's kernel
            theirs = by_key.get((f"blackjax/{method}", rep))
            if theirs is not None:
                pairs.setdefault(f"{library}/blackjax ({method})", []).append((mine, theirs))
            continue
        if library != "sluice":
            continue
        for other in ("numpyro", "blackjax"):
            theirs = by_key.get((f"{other}/{method}", rep))
            if theirs is not None:
                pairs.setdefault(f"sluice/{other} ({method})", []).append((mine, theirs))
    if not pairs:
        return []
    rows = []
    for key, label in RATIO_METRICS:
        row: dict[str, Any] = {"metric": label}
        for name, matched in sorted(pairs.items()):
            row[name] = harness.median([_ratio(a[key], b[key]) for a, b in matched])
        rows.append(row)
    return rows


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# -- command line -----------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = harness.script_parser(__doc__, QUICK, one=("VARIANT", "MODEL"))
    parser.add_argument("--reps", type=int, help="repetitions of every measurement (default 3)")
    parser.add_argument(
        "--models",
        type=harness.comma_list(lambda m: m in MODELS or m.startswith("gaussian:")),
        help=f"comma-separated models from {','.join(MODELS)} or gaussian:DIM "
        "(default all; --quick: the two regressions)",
    )
    parser.add_argument(
        "--variants",
        type=harness.comma_list(VARIANTS.__contains__),
        help=f"comma-separated variants from {','.join(VARIANTS)} "
        f"(default {','.join(CORE_VARIANTS)})",
    )
    parser.add_argument(
        "--rhat",
        action=argparse.BooleanOptionalAction,
        help="compute the max R-hat as a sanity check (default on; off with --quick)",
    )
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, help="warmup iterations per chain (default 1000)")
    parser.add_argument("--draws", type=int, help="draws per chain (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tree-depth", type=int, default=10)
    parser.add_argument(
        "--sync-phases",
        action="store_true",
        help="internal, with --one: synchronous CPU dispatch, times and counts only",
    )
    args = parser.parse_args(argv)

    def one(variant: str, model: str) -> dict[str, Any]:
        from samplers import Settings

        if args.sync_phases:
            import jax

            # Every computation returns when it is done, so no compilation can
            # overlap a run and the compile time taken out of a phase is exact.
            jax.config.update("jax_cpu_enable_async_dispatch", False)
        settings = Settings(chains=args.chains, warmup=args.warmup, draws=args.draws,
                            seed=args.seed, max_tree_depth=args.max_tree_depth)  # fmt: skip
        return measure(variant, model, settings, rhat=args.rhat, phases_only=args.sync_phases)

    harness.run_script(args, DEFAULTS, QUICK, one, orchestrate, report)


if __name__ == "__main__":
    main()
