"""Where the default statistics stop scaling: cost per element and draw at large dimension.

NUTS on a ``--dim``-dimensional Gaussian (scales in [e^-1, e]), 4 chains,
``sink=None``, ``--warmup`` + ``--draws``, with and without the default
statistics (``default_stats``), the engine's chunking (or ``--chunk-size``):
warmup and sampling seconds, and the sampling time per element and draw.
The configurations alternate ``--reps`` times in this process: in the first
round the statistics' start, merge and finalize compile in a background
thread during warmup (on two cores, beside the sampler); later rounds find
every program compiled.

    PYTHONPATH=src python bench/stats_large.py --dim 100000
"""

from __future__ import annotations

import argparse

import jax.numpy as jnp
from harness import markdown_table, peak_rss_bytes

import sluice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    scales = jnp.exp(jnp.linspace(-1.0, 1.0, args.dim))
    model = sluice.Model(lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2),
                         init={"x": jnp.zeros(args.dim)})  # fmt: skip
    rows = []
    for rep in range(1, args.reps + 1):
        for stats in (False, True):
            run = sluice.sample(model, chains=4, warmup=args.warmup, draws=args.draws,
                                sink=None, progress=False, seed=0, default_stats=stats,
                                chunk_size=args.chunk_size)  # fmt: skip
            i = run.info
            per = i.sampling_seconds / (4 * args.draws * args.dim) * 1e9
            rows.append({
                "run": rep, "statistics": "default" if stats else "none",
                "chain method": i.chain_method, "chunk": i.chunk_size,
                "warmup s": f"{i.warmup_seconds:.1f}", "sampling s": f"{i.sampling_seconds:.1f}",
                "ns per element-draw": f"{per:.0f}",
                "gradients/draw": f"{i.num_gradients / (4 * args.draws):.0f}",
            })  # fmt: skip
    print(f"dim={args.dim} warmup={args.warmup} draws={args.draws} chains=4 sink=None")
    print(f"peak RSS {peak_rss_bytes() / 2**30:.1f} GiB\n")
    keys = list(rows[0])
    print(
        markdown_table(rows, [(k, k, "") for k in keys], left=("run", "statistics", "chain method"))
    )


if __name__ == "__main__":
    main()
