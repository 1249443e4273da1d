"""Streaming ESS against ArviZ on short and single-chain NUTS runs of a standard Gaussian.

NUTS on a standard Gaussian gives antithetic draws (lag-1 autocorrelation
below zero, ESS above the number of draws): the hardest case for the
streaming ESS's proxies. For each ``chains x draws`` setting, one run keeps
its draws (memory sink) with the default streaming statistics on, and each
element's streaming ``ess_bulk``, ``ess_tail``, ``ess_sd`` and ``ess_mean``
is compared with ArviZ's on the same draws (relative error, max and rms over
the elements, and how many are off by more than 10%).

    PYTHONPATH=src python bench/studies/stats_short_runs.py [--dim 200] [--settings 4x1000]
"""

from __future__ import annotations

import argparse
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np

import sluice

SETTINGS = ((1, 200), (4, 200), (1, 1000), (4, 1000))
METHODS = {"ess_bulk": "bulk", "ess_tail": "tail", "ess_sd": "sd", "ess_mean": "mean"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settings", nargs="*", default=None, help="e.g. 4x1000 1x200")
    args = parser.parse_args()
    settings = SETTINGS
    if args.settings:
        settings = tuple(tuple(int(v) for v in s.split("x")) for s in args.settings)
    warnings.filterwarnings("ignore")
    print(f"standard Gaussian, {args.dim} elements, seed {args.seed}, 300 warmup iterations")
    print("| chains x draws | statistic | max rel. error | rms rel. error | elements > 10% |")
    print("|---|---|---:|---:|---:|")
    for chains, draws in settings:
        run = sluice.sample(
            lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(args.dim), chains=chains,
            warmup=300, draws=draws, progress=False, seed=args.seed,
            default_stats=True,
        )  # fmt: skip
        summary = run.stats["summary"]
        x = np.asarray(run.draws["x"], np.float64)  # (chains, draws, dim)
        for key, method in METHODS.items():
            streamed = np.asarray(jax.tree.leaves(summary[key])[0], np.float64)
            reference = np.array([az.ess(x[:, :, i], method=method) for i in range(args.dim)])
            rel = np.abs(streamed - reference) / reference
            print(
                f"| {chains} x {draws} | {key} | {np.nanmax(rel):.1%} | "
                f"{np.sqrt(np.nanmean(rel**2)):.1%} | {int(np.sum(rel > 0.1))} of {args.dim} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
