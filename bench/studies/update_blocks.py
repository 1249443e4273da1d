"""Time per element and draw of the default statistics' update by the size of its blocks.

``update_chains`` of a stack of ``--chains`` chains' states (one device's share at
the defaults), ``--chunk`` draws at a time, ``--dim`` elements, compiled with XLA's
defaults, for each block size of ``--blocks`` (``streaming.CPU_UPDATE_BLOCK``; ``rule``:
the library's own; a number: blocks of that many elements): the second call's wall
time, after one that compiles, per element and draw.

    PYTHONPATH=src python bench/studies/update_blocks.py --dim 1000000 --blocks rule,16384
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp

from sluice.stats import streaming


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--blocks", default="rule,16384")
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
        e = streaming.block_elements()
        statistic = streaming.summary(2 * n, chunk_size=n, pilot=16)
        settings = statistic.key[1]
        init = jax.jit(jax.vmap(statistic.init, in_axes=None, axis_size=c))
        update = jax.jit(functools.partial(streaming.update_chains, settings), donate_argnums=0)
        states = update(init(pilot), draws, jnp.int32(n))  # compiles
        jax.block_until_ready(states)
        start = time.perf_counter()
        jax.block_until_ready(update(states, draws, jnp.int32(n)))
        seconds = time.perf_counter() - start
        blocks = -(-d // e) if d > e else 1
        print(f"| {d} | {setting} | {min(e, d)} | {blocks} | {seconds / (c * n * d) * 1e9:.1f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
