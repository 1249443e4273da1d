"""The summary's time by the size of its blocks of elements, alternated in one process.

Samples a ``--dim``-dimensional standard Gaussian once (static HMC, 4 chains, 20
warmup iterations and 100 draws in chunks of 50, ``sink=None``), then merges
and finalizes its default statistics (``sluice.runtime.statistics.summarize``)
with each block size of ``--blocks`` in turn, ``--reps`` rounds; the first
round's times include each block size's compile.

    PYTHONPATH=src python bench/studies/summary_blocks.py --dim 1000000
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=1_000_000)
    ap.add_argument("--blocks", default="16384,65536")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import jax.numpy as jnp

    import sluice
    from sluice.runtime import statistics as run_statistics

    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(args.dim), chains=4,
                        warmup=20, draws=100, chunk_size=50, sink=None,
                        kernel=sluice.hmc(), progress=False, seed=1)  # fmt: skip
    name = run._summary_key
    statistic = run._statistics[name]
    states = [run._chain_state(name, c) for c in range(run.info.chains)]
    print(f"{args.dim:,} elements, 4 chains, 100 draws: summarize's seconds by block size")
    for rep in range(args.reps):
        for block in (int(b) for b in args.blocks.split(",")):
            run_statistics.ELEMENT_BLOCK = block
            t0 = time.perf_counter()
            run_statistics.summarize(statistic, states)
            print(f"round {rep + 1}  blocks of {block:6d}: {time.perf_counter() - t0:6.2f} s",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
