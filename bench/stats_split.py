"""Where the default statistics' cost goes inside NUTS: per-draw path, rare path, block levels.

Samples a ``--dim``-dimensional standard Gaussian (default 1000; 4 chains,
``--draws`` draws (default 1,000) in one chunk, ``sink=None``) with the default summary statistics and variants of them:
the rare path never taken (every part's rare-work events forced to False, so
the one ``cond`` per draw never takes its branch: the per-draw path's cost
alone; those statistics are wrong), other
block sizes of the block levels, no block levels, and the per-draw path of
subsets (moments; + histograms; + lags without proxies; all but the bulk
proxy's exact lags). Each variant compiles
once, then the variants alternate ``--reps`` times in one process; minimum
and median sampling time per draw (the minimum resists this machine's bursts
of noise).

    PYTHONPATH=src python bench/stats_split.py [--reps 6] [--dim 1000] [--draws 1000]
"""

from __future__ import annotations

import argparse
import collections

import jax.numpy as jnp
import numpy as np
from harness import markdown_table

import sluice
from sluice.stats import convergence as cv
from sluice.stats import fused
from sluice.stats.base import Statistic

DEFAULT = dict(histogram=True, lags=True, proxies=True)
# name -> (settings, rare path forced off)
VARIANTS = {
    "default": (DEFAULT, False),
    "rare path never taken": (DEFAULT, True),
    "block sizes (16, 64, 256)": ({**DEFAULT, "block_sizes": (16, 64, 256)}, False),
    "block sizes (32, 128, 512)": ({**DEFAULT, "block_sizes": (32, 128, 512)}, False),
    "block sizes (64, 256)": ({**DEFAULT, "block_sizes": (64, 256)}, False),
    "no block levels": ({**DEFAULT, "block_sizes": ()}, False),
    # the per-draw path by part (rare path forced off)
    "per-draw: moments": (dict(histogram=False, lags=False, proxies=False), True),
    "per-draw: moments + histograms": (dict(histogram=True, lags=False, proxies=False), True),
    "per-draw: moments + lags (no proxies)": (
        dict(histogram=False, lags=True, proxies=False),
        True,
    ),
    "per-draw: all, proxies without exact lags": ({**DEFAULT, "proxy_lags": 0}, True),
}


def _never(events):
    """A part's ``events`` with every event off (the rare branch is never taken)."""

    def events_off(draw):
        return {k: v & False for k, v in events(draw).items()}

    return events_off


def statistic(draws: int, flags: dict, rare_off: bool) -> Statistic:
    """The fused diagnostics built from ``flags``; with ``rare_off``, the same parts with
    their rare work never triggered."""
    settings = cv._build(draws, **flags)
    if not rare_off:
        return cv._statistic(settings, "all", cv._all(settings))
    parts = {
        name: part._replace(events=_never(part.events))
        for name, part in cv._parts(settings).items()
    }
    geometry = fused.Geometry(settings.num_draws, settings.max_elements)
    init, update, merge, finalize = fused.fuse(
        parts, geometry, lambda state, closed: cv.read_flat(state, closed, settings)
    )
    return Statistic(init, update, merge, finalize)


def log_density(x):
    return -0.5 * jnp.sum(x**2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args()
    n = args.draws
    statistics = {
        name: statistic(n, flags, rare_off) for name, (flags, rare_off) in VARIANTS.items()
    }
    times = collections.defaultdict(list)
    for rep in range(args.reps + 1):  # round 0 compiles
        for name in ["none", *VARIANTS]:
            extra = {} if name == "none" else {"stats": {"v": statistics[name]}}
            run = sluice.sample(log_density, init=jnp.zeros(args.dim), chains=4, warmup=100,
                                draws=n, sink=None, progress=False, seed=1,
                                chunk_size=n, default_stats=False, **extra)  # fmt: skip
            if rep:
                times[name].append(run.info.sampling_seconds / (4 * n) * 1e6)
    base = float(np.min(times["none"]))
    rows = [
        {"name": name, "min": min(v), "median": float(np.median(v)), "added": min(v) - base}
        for name, v in times.items()
    ]
    columns = (("name", "statistics", ""), ("min", "min us per draw", ".1f"),
               ("median", "median", ".1f"), ("added", "added (min)", "+.1f"))  # fmt: skip
    print(f"{args.dim}-dim Gaussian, 4 chains x {n} draws, one chunk, {args.reps} reps")
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
