"""The default statistics at scale: accuracy against ArviZ, memory, compile and finalize.

``accuracy``: NUTS, 4 chains x ``--draws`` draws stored, on ``--model`` (``logreg``:
the seed's logistic regression, 10 coefficients; ``gauss20k``: a 20,000-dim
Gaussian with scales in [e^-1, e]), the default statistics
(:func:`sluice.stats.streaming.summary`, every element) against ArviZ on the
same stored draws: relative error of
``ess_bulk`` / ``ess_tail`` (rms and max), absolute error of rank and split
R-hat, quantiles (3%, 50%, 97%) and HDI ends in units of ArviZ's quantile MCSE
at those levels, mean and sd relative to sd. On the Gaussian, whose posterior is
known, the quantiles and HDI ends of both (ArviZ on the draws included) are
also compared with the exact ones: an estimator's own Monte Carlo error, against
which the differences between estimators read.

``cost``: bytes of state per element and chain, compile times on the 10-dim
demo model (without statistics, default, default with the 16-row windows a large
model's update takes: the whole run's, the chunk program's and merge +
finalize's, from JAX's compile log), and the
time from a run's return to its summary (merge + finalize + table) on a 10-dim
and a 10,000-dim model.

Run: ``PYTHONPATH=src python bench/stats_scale.py accuracy --model gauss20k``,
``... accuracy --model logreg --seeds 4``, ``... cost``.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from harness import CompileClock, markdown_table

import sluice
import sluice.apps.datasets as datasets
from sluice._jax.compile import clear_caches
from sluice.stats import streaming

PROBS = (0.03, 0.5, 0.97)


def reference(draws: np.ndarray) -> dict[str, np.ndarray]:
    """ArviZ (and NumPy) on the stored draws ``(chains, draws, D)``."""
    import arviz as az

    data = az.convert_to_dataset({"x": draws.astype(np.float64)})
    flat = draws.reshape(-1, draws.shape[-1]).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "ess_bulk": az.ess(data, method="bulk")["x"].values,
            "ess_tail": az.ess(data, method="tail")["x"].values,
            "r_hat": az.rhat(data)["x"].values,
            "r_hat_split": az.rhat(data, method="split")["x"].values,
            "quantiles": np.quantile(flat, PROBS, axis=0).T,
            "qmcse": np.stack(
                [az.mcse(data, method="quantile", prob=p)["x"].values for p in PROBS], 1
            ),
            "hdi": az.hdi(data, hdi_prob=0.94)["x"].values,
            "mean": flat.mean(0),
            "sd": flat.std(0, ddof=1),
        }


def errors(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    n = got["mean"].shape[0]
    ref = {k: v[:n] for k, v in ref.items()}
    return {
        "ess_bulk (rel.)": got["ess_bulk"] / ref["ess_bulk"] - 1,
        "ess_tail (rel.)": got["ess_tail"] / ref["ess_tail"] - 1,
        "rank R-hat (abs.)": got["r_hat"] - ref["r_hat"],
        "split R-hat (abs.)": got["r_hat_split"] - ref["r_hat_split"],
        "quantiles (/ MCSE)": ((got["quantiles"] - ref["quantiles"]) / ref["qmcse"]).ravel(),
        "HDI ends (/ quantile MCSE)": ((got["hdi"] - ref["hdi"]) / ref["qmcse"][:, [0, 2]]).ravel(),
        "mean (/ sd)": (got["mean"] - ref["mean"]) / ref["sd"],
        "sd (rel.)": got["sd"] / ref["sd"] - 1,
    }


def exact_errors(got: dict[str, np.ndarray], ref: dict[str, np.ndarray],
                 scales: np.ndarray) -> dict[str, np.ndarray]:  # fmt: skip
    """Quantiles and HDI ends against the exact posterior ``N(0, scales^2)``, in units
    of ArviZ's quantile MCSE (``ref``): which estimator is closer to the truth."""
    from statistics import NormalDist

    n = got["quantiles"].shape[0]
    scales, qmcse = scales[:n, None], ref["qmcse"][:n]
    quantiles = scales * np.array([NormalDist().inv_cdf(p) for p in PROBS])
    half = NormalDist().inv_cdf(0.97)  # a centred Gaussian's 94% HDI is its 3%-97% interval
    hdi = scales * np.array([-half, half])
    return {
        "quantiles vs exact (/ MCSE)": ((got["quantiles"] - quantiles) / qmcse).ravel(),
        "HDI ends vs exact (/ quantile MCSE)": ((got["hdi"] - hdi) / qmcse[:, [0, 2]]).ravel(),
    }


def accuracy(args: argparse.Namespace) -> None:
    rows, pooled = [], {}
    for seed in range(args.seeds):
        scales = None
        if args.model == "logreg":
            model, name = datasets.logistic_regression_model(), "beta"
        else:
            scales = jnp.exp(jnp.linspace(-1.0, 1.0, 20_000))
            model = sluice.Model(lambda p, s=scales: -0.5 * jnp.sum((p["x"] / s) ** 2),
                                 init={"x": jnp.zeros(20_000)})  # fmt: skip
            name = "x"
        run = sluice.sample(
            model, chains=4, warmup=500, draws=args.draws, seed=seed, progress=False,
            default_stats=True,
        )  # fmt: skip
        draws = np.asarray(run.draws[name])
        ref = reference(draws)
        if scales is not None:  # ArviZ's own error against the exact posterior
            label = "ArviZ on the stored draws"
            for k, v in exact_errors(ref, ref, np.asarray(scales, np.float64)).items():
                pooled.setdefault((label, k), []).append(v)
            pooled.setdefault((label, "elements"), []).append(np.array([draws.shape[-1]]))
        label, out = "default (every element)", jax.device_get(run.stats["summary"])
        got = {k: np.asarray(v[name]).reshape(np.shape(v[name])[0], -1).squeeze(-1)
               if k not in ("quantiles", "hdi") else np.asarray(v[name])
               for k, v in out.items() if isinstance(v, dict)}  # fmt: skip
        covered = np.isfinite(got["ess_bulk"])
        got = {k: v[covered] for k, v in got.items()}
        covered_ref = {k: v[covered] for k, v in ref.items()}
        measured = errors(got, covered_ref)
        if scales is not None:
            exact = np.asarray(scales, np.float64)[covered]
            measured.update(exact_errors(got, covered_ref, exact))
        for k, v in measured.items():
            pooled.setdefault((label, k), []).append(v)
        pooled.setdefault((label, "elements"), []).append(np.array([covered.sum()]))
    for (label, metric), parts in pooled.items():
        if metric == "elements":
            continue
        v = np.concatenate(parts)
        n = int(sum(int(p[0]) for p in pooled[(label, "elements")]))
        rows.append({"statistics": label, "metric": metric, "elements": n,
                     "rms": f"{np.sqrt(np.mean(v ** 2)):.4f}",
                     "max": f"{np.max(np.abs(v)):.4f}"})  # fmt: skip
    model = {"logreg": "logistic regression, 10 coefficients",
             "gauss20k": "Gaussian, 20,000 dims, scales in [e^-1, e]"}[args.model]  # fmt: skip
    print(f"model={args.model} draws={args.draws} seeds={args.seeds} chains=4")
    print(f"{model}: 4 x {args.draws} NUTS draws, {args.seeds} seed(s) pooled, vs ArviZ\n")
    columns = [(k, k, "") for k in ("statistics", "metric", "elements", "rms", "max")]
    print(markdown_table(rows, columns, left=("statistics", "metric")))


class _CompileLog(logging.Handler):
    """XLA compile seconds per program name, from JAX's compile log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: dict[str, float] = {}
        jax.config.update("jax_log_compiles", True)
        logger = logging.getLogger("jax")
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # (the log itself is not printed)

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r"Finished XLA compilation of (\S+) in ([\d.e+-]+) sec", record.getMessage())
        if m:
            self.seconds[m.group(1)] = self.seconds.get(m.group(1), 0.0) + float(m.group(2))


def chunk_seconds(seconds: dict[str, float]) -> float:
    """The chunk program's XLA compile: ``batched`` on one device, ``sharded`` on several."""
    return seconds.get("jit(batched)", 0.0) + seconds.get("jit(sharded)", 0.0)


def cost(args: argparse.Namespace) -> None:
    rows = []
    dim = 1000
    statistic = streaming.summary(1000, chunk_size=100)
    state = jax.eval_shape(statistic.init, {"x": jnp.zeros((128, dim))})
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    rows.append({"what": "state per element and chain", "statistics": "default (every element)",
                 "value": f"{nbytes / dim:.0f} B"})  # fmt: skip

    def demo(seed):  # the demo's model, fresh each time (a fresh compile)
        return datasets.logistic_regression_model(prior_scale=1.0 + 1e-6 * seed)

    settings = dict(chains=4, warmup=100, draws=200, chunk_size=100, progress=False)
    clock = CompileClock()
    programs = _CompileLog()
    small = streaming.SMALL
    values: dict[tuple[str, str], list[float]] = {}

    def note(what: str, label: str, seconds: float) -> None:
        values.setdefault((what, label), []).append(seconds)

    i = 0
    for _ in range(args.reps):  # the variants alternated, every run compiling afresh
        for label, kwargs, streaming.SMALL in (  # (SMALL = 0: every model takes 16 rows)
            ("none", {"default_stats": False}, small),
            ("default (every element)", {"default_stats": True}, small),
            ("default, windows of 16 rows (as a large model's)", {"default_stats": True}, 0),
        ):  # fmt: skip
            clear_caches()  # every run compiles all its programs
            t0 = clock.now()
            programs.seconds.clear()
            i += 1
            run = sluice.sample(demo(i), **settings, **kwargs)
            run.summary()
            note("compile seconds, 10-dim demo run to its summary (all programs)", label,
                 clock.seconds(t0, clock.now()))  # fmt: skip
            note("compile seconds, the chunk program (XLA), 10-dim demo run", label,
                 chunk_seconds(programs.seconds))  # fmt: skip
            if label != "none":  # their own program, compiled beside init
                note("compile seconds, the statistics' update program (XLA), 10-dim demo run",
                     label, programs.seconds.get("jit(update_statistics)", 0.0))  # fmt: skip
            if label.startswith("default ("):
                # (merge and finalize called through sluice._jax.compile.eager: "eager")
                merge_finalize = sum(programs.seconds.get(f"jit({n})", 0.0)
                                     for n in ("merge", "finalize", "eager"))  # fmt: skip
                note("compile seconds, merge + finalize (XLA), 10-dim demo run", label,
                     merge_finalize)  # fmt: skip
        streaming.SMALL = small
        for dim in (10, 10_000):
            model = sluice.Model(lambda p: -0.5 * jnp.sum(p["x"] ** 2),
                                 init={"x": jnp.zeros(dim)})  # fmt: skip
            clear_caches()  # as in a fresh process: the summary's programs compile
            run = sluice.sample(model, chains=4, warmup=200, draws=1000, chunk_size=100,
                                sink=None, progress=False, default_stats=True)  # fmt: skip
            t0 = time.perf_counter()
            run.summary()
            note(f"merge + finalize + table after the run returns, {dim:,}-dim, 4 x 1,000",
                 "default (every element)", time.perf_counter() - t0)  # fmt: skip
    for (what, label), v in values.items():
        runs = ", ".join(f"{x:.2f}" for x in v)
        rows.append({"what": what, "statistics": label,
                     "value": f"{np.median(v):.2f} s (median of {runs})"})  # fmt: skip
    print(f"backend={jax.default_backend()}\n")
    columns = [(k, k, "") for k in ("what", "statistics", "value")]
    print(markdown_table(rows, columns, left=("what", "statistics")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--model", choices=("logreg", "gauss20k"), default="logreg")
    acc.add_argument("--draws", type=int, default=1000)
    acc.add_argument("--seeds", type=int, default=1)
    acc.set_defaults(func=accuracy)
    cst = sub.add_parser("cost")
    cst.add_argument("--reps", type=int, default=3, help="runs of each variant, alternated")
    cst.set_defaults(func=cost)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
