"""Peak memory and wall of many vectorized chains, by metric and statistics.

Static HMC (8 leapfrog steps) on a ``--dim``-dimensional standard Gaussian,
``--warmup`` warmup iterations and ``--draws`` draws per chain, vectorized,
``sink=None``, each configuration in a fresh process (peak RSS from
``getrusage``). Prints one line per run and, per metric and statistics, the
bytes per element per added chain between the smallest and largest chain count.

    PYTHONPATH=src python bench/studies/many_chains_memory.py --chains 256,1024

``--summary`` reads the run's summary too: the peak then covers the chains' merge.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from harness import emit_result, peak_rss_bytes, run_isolated


def one(chains: int, dim: int, metric: str, stats: bool, warmup: int, draws: int,
        summary: bool) -> dict:  # fmt: skip
    import jax.numpy as jnp

    import sluice

    t0 = time.perf_counter()
    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(dim), chains=chains,
                  warmup=warmup, draws=draws, sink=None, chain_method="vectorized",
                  kernel=sluice.hmc(num_integration_steps=8, mass_matrix=metric),
                  default_stats=stats, progress=False, seed=1)  # fmt: skip
    sampled = peak_rss_bytes()
    if summary and stats:
        assert run.stats  # the chains' states merged and finalized
    return {"chains": chains, "sampled_peak_bytes": sampled, "dim": dim, "metric": metric, "stats": stats,
            "wall_s": time.perf_counter() - t0,
            "peak_bytes": peak_rss_bytes()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", default="256,1024")
    ap.add_argument("--dim", type=int, default=2000)
    ap.add_argument("--metrics", default="auto,diag")
    ap.add_argument("--stats", default="no,yes")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--summary", action="store_true",
                    help="read the summary after the run (the peak then covers its merge)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        c, m, s = args.one.split(",")
        emit_result(one(int(c), args.dim, m, s == "yes", args.warmup, args.draws, args.summary))
        return
    counts = [int(c) for c in args.chains.split(",")]
    rows = {}
    for metric in args.metrics.split(","):
        for stats in args.stats.split(","):
            for c in counts:
                r = run_isolated(__file__, ["--one", f"{c},{metric},{stats}", "--dim",
                                            str(args.dim), "--warmup", str(args.warmup),
                                            "--draws", str(args.draws),
                                            *(["--summary"] if args.summary else [])])  # fmt: skip
                rows[(metric, stats, c)] = r
                print(
                    f"chains {c:5d}  metric {metric:5s}  statistics {stats:3s}  "
                    f"wall {r['wall_s']:6.1f} s  peak {r['peak_bytes'] / 1e9:6.2f} GB"
                    f" (sampling {r['sampled_peak_bytes'] / 1e9:6.2f} GB)"
                )
            lo, hi = rows[(metric, stats, counts[0])], rows[(metric, stats, counts[-1])]
            per = (hi["peak_bytes"] - lo["peak_bytes"]) / (counts[-1] - counts[0]) / args.dim
            print(
                f"  metric {metric}, statistics {stats}: {per:,.0f} B per element per added chain"
            )


if __name__ == "__main__":
    main()
