"""What each part of the default statistics costs inside NUTS.

Samples a ``--dim``-dimensional standard Gaussian (4 chains, ``sink=None``,
``--draws`` draws in one chunk) with, in turn: no statistic; a trivial one
(a running sum: the cost of carrying any statistic through the loop); the
split moments alone; moments + histograms; moments + lag autocovariances
(without the tail-ESS proxies); and the full default summary statistics
(histograms, lags, proxies). The variants alternate ``--reps`` times in one
process after a compiling round; medians of the sampling time per draw.
``--chunk-size 0`` lets the engine choose the chunks as it does by default
(about ten per run): each chunk reads every chain's statistics state out of
the stacked carry and writes it back, a cost per chunk that one chunk of
``--draws`` draws hides.

Run: ``PYTHONPATH=src python bench/stats_parts.py --dim 1000 --reps 5 [--chunk-size 0]``.
"""

from __future__ import annotations

import argparse
import collections

import jax
import jax.numpy as jnp
import numpy as np

import sluice
from sluice.stats import convergence as cv
from sluice.stats.base import Statistic


def part(num_draws: int, **flags: bool) -> Statistic:
    """The fused diagnostics with only the parts ``flags`` turn on (every output read)."""
    settings = cv._build(num_draws, **flags)
    return cv._statistic(settings, "all", cv._all(settings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--chunk-size", type=int, default=None, help="0: auto (default: --draws)")
    args = parser.parse_args()
    n = args.draws
    chunk = n if args.chunk_size is None else (args.chunk_size or None)
    trivial = Statistic(
        lambda ex: jax.tree.map(jnp.zeros_like, ex),
        lambda s, d: jax.tree.map(jnp.add, s, d),
        lambda a, b: jax.tree.map(jnp.add, a, b),
        lambda s: s,
    )
    variants = {
        "none": None,
        "trivial (running sum)": trivial,
        "moments": part(n, histogram=False, lags=False, proxies=False),
        "moments + histograms": part(n, histogram=True, lags=False, proxies=False),
        "moments + lags": part(n, histogram=False, lags=True, proxies=False),
        "default (all, with proxies)": sluice.stats.summary_statistics(n),
    }
    log_density = lambda x: -0.5 * jnp.sum(x**2)  # noqa: E731
    times = collections.defaultdict(list)
    for rep in range(args.reps + 1):  # round 0 compiles
        for name, statistic in variants.items():
            extra = {"stats": {"v": statistic}} if statistic is not None else {}
            run = sluice.sample(log_density, init=jnp.zeros(args.dim), chains=4, warmup=200,
                                draws=n, sink=None, progress=False, seed=1, chunk_size=chunk,
                                default_stats=False, **extra)  # fmt: skip
            if rep:
                times[name].append(run.info.sampling_seconds / (4 * n) * 1e6)
    base = float(np.median(times["none"]))
    print(
        f"dim={args.dim} draws={n} chains=4 reps={args.reps} chain_method={run.info.chain_method} "
        f"chunk_size={chunk or 'auto'}"
    )
    print("| statistics | us per draw (median) | added us | added % |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        m = float(np.median(values))
        print(f"| {name} | {m:.1f} | {m - base:+.1f} | {m / base - 1:+.0%} |")


if __name__ == "__main__":
    main()
