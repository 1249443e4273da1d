"""Where the default statistics' cost goes inside NUTS: per-draw path, rare path, block levels.

Samples a 1000-dim standard Gaussian (4 chains, 1,000 draws in one chunk,
``sink=None``) with the default summary statistics and variants of them:
the rare path never taken (its predicate forced to False while the chunk is
traced: the per-draw path's cost alone; those statistics are wrong), other
block sizes of the block levels, no block levels, and the per-draw path of
subsets (moments; + histograms; + lags without proxies; all but the bulk
proxy's exact lags). Each variant compiles
once, then the variants alternate ``--reps`` times in one process; minimum
and median sampling time per draw (the minimum resists this machine's bursts
of noise).

    PYTHONPATH=src python bench/stats_split.py [--reps 6]
"""

from __future__ import annotations

import argparse
import collections

import jax.numpy as jnp
import numpy as np
from harness import markdown_table

import sluice
from sluice.stats import convergence as cv

DRAWS = 1000
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
    """``cv._events`` with every event off."""

    def events_off(index, seg, pos, in_split, settings):
        return {k: v & False for k, v in events(index, seg, pos, in_split, settings).items()}

    return events_off


def log_density(x):
    return -0.5 * jnp.sum(x**2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    statistics = {}
    for name, (flags, _) in VARIANTS.items():
        settings = cv._build(DRAWS, **flags)
        statistics[name] = cv._statistic(settings, cv._all(settings))
    events = cv._events
    times = collections.defaultdict(list)
    for rep in range(args.reps + 1):  # round 0 compiles (and traces the forced variant)
        for name in ["none", *VARIANTS]:
            extra = {} if name == "none" else {"stats": {"v": statistics[name]}}
            if name != "none" and VARIANTS[name][1]:
                cv._events = _never(events)
            try:
                run = sluice.sample(log_density, init=jnp.zeros(1000), chains=4, warmup=100,
                                    draws=DRAWS, sink=None, progress=False, seed=1,
                                    chunk_size=DRAWS, default_stats=False, **extra)  # fmt: skip
            finally:
                cv._events = events
            if rep:
                times[name].append(run.info.sampling_seconds / (4 * DRAWS) * 1e6)
    base = float(np.min(times["none"]))
    rows = [
        {"name": name, "min": min(v), "median": float(np.median(v)), "added": min(v) - base}
        for name, v in times.items()
    ]
    columns = (("name", "statistics", ""), ("min", "min us per draw", ".1f"),
               ("median", "median", ".1f"), ("added", "added (min)", "+.1f"))  # fmt: skip
    print(f"1000-dim Gaussian, 4 chains x {DRAWS} draws, one chunk, {args.reps} reps")
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    main()
