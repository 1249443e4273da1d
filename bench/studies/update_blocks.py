"""Time per element and draw of the default statistics' update by the size of its blocks.

``update_chains`` of a stack of ``--chains`` chains' states (one device's share at
the defaults), ``--chunk`` draws at a time, ``--dim`` elements, compiled with XLA's
defaults, for each block size of ``--blocks`` (``streaming.CPU_UPDATE_BLOCK``; ``rule``:
the library's own, from a core's cache; a number: blocks of that many elements): the
median wall time of ``--reps`` calls after one that compiles, per element and draw.

    PYTHONPATH=src python bench/studies/update_blocks.py --dim 100000 --chains 4 \
        --chunk 100 --draws 1000 --reps 5 --blocks rule,256,512,1024,2048
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp

from sluice.stats import streaming


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--draws", type=int, default=None,
                        help="the summary's draws per chain (default: one chunk per call)")
    parser.add_argument("--blocks", default="rule,16384")
    parser.add_argument("--reps", type=int, default=1, help="timed calls (their median)")
    args = parser.parse_args()
    d, c, n = args.dim, args.chains, args.chunk
    key = jax.random.key(0)
    pilot = jax.random.normal(key, (c * 16, d))
    draws = jax.random.normal(key, (c, n, d))
    default_block = streaming.CPU_UPDATE_BLOCK
    print("| elements | block setting | elements per block | blocks | ns per element and draw |")
    print("|---:|---|---:|---:|---:|")
    for setting in args.blocks.split(","):
        streaming.CPU_UPDATE_BLOCK = default_block if setting == "rule" else int(setting)
        statistic = streaming.summary(args.draws or n * (args.reps + 1), chunk_size=n, pilot=16)
        settings = statistic.key[1]
        init = jax.jit(jax.vmap(statistic.init, in_axes=None, axis_size=c))
        shapes = jax.eval_shape(init, pilot)
        e = streaming.block_elements(streaming._bytes_per_element(shapes, d, c))
        update = jax.jit(functools.partial(streaming.update_chains, settings), donate_argnums=0)
        states = update(init(pilot), draws, jnp.int32(n))  # compiles
        jax.block_until_ready(states)
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            states = update(states, draws, jnp.int32(n))
            jax.block_until_ready(states)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        blocks = -(-d // e) if d > streaming.whole_elements() else 1
        print(f"| {d} | {setting} | {e if blocks > 1 else d} | {blocks} | {seconds / (c * n * d) * 1e9:.1f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
