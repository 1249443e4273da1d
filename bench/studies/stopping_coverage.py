"""Does ``until=sluice.converged(...)`` report honest Monte Carlo errors?

Stopping at the first chunk boundary where a noisy ESS estimate crosses its
target favours runs whose ESS, and so whose MCSE, is misjudged in their favour
(Flegal & Gong, arXiv 1303.0238; Vats, Flegal & Jones, arXiv 1512.07713). This
script measures it: over ``--runs`` runs per setting (seeds 0..runs-1, 4
chains, 500 warmup iterations, ``sink=None``, NUTS), the share of elements
whose ``mean +- 1.96 mcse_mean`` covers the true mean, for runs stopped by
``converged(ess_bulk=...)`` and for runs of a fixed length equal to the
stopped runs' median, side by side. Targets with known means: a standard
2-dim Gaussian, and a 2-dim Gaussian with correlation 0.95 and means (1, -1).

Run: ``PYTHONPATH=src python bench/studies/stopping_coverage.py --out FILE``
(about 15 minutes on two cores); one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import time

import jax.numpy as jnp
import numpy as np

import sluice

TARGETS = ("gauss2", "corr95")


def model(target: str) -> tuple[sluice.Model, np.ndarray]:
    if target == "gauss2":
        return sluice.Model(lambda p: -0.5 * jnp.sum(p["x"] ** 2), init={"x": jnp.zeros(2)}), (
            np.zeros(2)
        )
    precision = jnp.asarray(np.linalg.inv(np.array([[1.0, 0.95], [0.95, 1.0]])), jnp.float32)
    mu = jnp.array([1.0, -1.0])
    density = lambda p: -0.5 * (p["x"] - mu) @ precision @ (p["x"] - mu)  # noqa: E731
    return sluice.Model(density, init={"x": jnp.zeros(2)}), np.array([1.0, -1.0])


def coverage(target: str, runs: int, chunk: int | None, ess: float | None, draws: int) -> dict:
    m, truth = model(target)
    hits, kept = [], []
    t0 = time.perf_counter()
    for seed in range(runs):
        until = None if ess is None else sluice.converged(ess_bulk=ess)
        run = sluice.sample(m, chains=4, warmup=500, draws=draws, chunk_size=chunk, until=until,
                            sink=None, progress=False, seed=seed)  # fmt: skip
        s = run.stats["summary"]
        mean, mcse = np.asarray(s["mean"]["x"]), np.asarray(s["mcse_mean"]["x"])
        hits.extend(np.abs(mean - truth) <= 1.96 * mcse)
        kept.append(run.info.draws)
    share = float(np.mean(hits))
    return {
        "target": target, "rule": "fixed" if ess is None else f"converged(ess_bulk={ess:g})",
        "chunk_size": chunk, "runs": runs, "cases": len(hits), "coverage": share,
        "coverage_mc_se": float(np.sqrt(share * (1 - share) / len(hits))),
        "median_draws": float(np.median(kept)), "seconds": time.perf_counter() - t0,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--ess", type=float, default=200.0)
    parser.add_argument("--chunks", default="default,25", help="chunk sizes, comma separated")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lines = []
    for target in TARGETS:
        for c in args.chunks.split(","):
            chunk = None if c == "default" else int(c)
            stopped = coverage(target, args.runs, chunk, args.ess, 5000)
            fixed = coverage(target, args.runs, chunk, None, int(stopped["median_draws"]))
            for line in (stopped, fixed):
                print(json.dumps(line), flush=True)
                lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)


if __name__ == "__main__":
    main()
