"""Cost of the default statistics' update when other work evicts the caches between draws.

In a plain ``jit(scan(update))`` the update's per-draw working set stays in the
CPU caches; inside NUTS the sampler's own arrays run between two updates. This
script runs the update over ``--draws`` draws of a ``--dim``-element vector with a
dummy pass over ``MB`` megabytes between updates (``--mb``), and prints the
statistics' cost per draw (with minus without them, same dummy pass), minimum of
``--reps`` runs. ``--dependent`` computes each draw from the dummy pass's output,
as a sampler's draw comes out of its step.

Run: ``PYTHONPATH=src python bench/stats_cache.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from sluice.stats import summary_statistics


def cost_per_draw(
    dim: int, draws: int, reps: int, mb: float, with_stats: bool, dependent: bool = False
) -> float:
    statistic = summary_statistics(1000)  # what sample(default_stats=True) runs for 1000 draws
    xs = jax.random.normal(jax.random.PRNGKey(0), (draws, dim))
    n = max(int(mb * 1e6 / 4), 1)

    def body(carry, x):
        state, buf = carry
        buf = buf * 0.999 + x[0]  # the dummy pass: reads and writes n floats
        if with_stats:
            # dependent: the draw is computed in the step, from the dummy pass's output
            # (as a sampler's draw comes out of its step), not read from the input
            draw = x + buf[:1] * 0.0 if dependent else x
            state = statistic.update(state, {"x": draw})
        return (state, buf), None

    run = jax.jit(lambda c, xs: jax.lax.scan(body, c, xs)[0], donate_argnums=0)
    best = float("inf")
    for rep in range(reps + 1):  # the first run compiles
        carry = (statistic.init({"x": xs[0]}), jnp.zeros(n))
        t0 = time.perf_counter()
        jax.block_until_ready(run(carry, xs))
        if rep:
            best = min(best, time.perf_counter() - t0)
    return best / draws * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--mb", type=float, nargs="*", default=[0, 0.25, 0.5, 1, 2])
    parser.add_argument(
        "--dependent", action="store_true", help="compute each draw from the dummy pass's output"
    )
    args = parser.parse_args()
    print(f"dim={args.dim} draws={args.draws} dependent={args.dependent} "
          f"backend={jax.default_backend()}")  # fmt: skip
    for mb in args.mb:
        plain = cost_per_draw(args.dim, args.draws, args.reps, mb, False, args.dependent)
        full = cost_per_draw(args.dim, args.draws, args.reps, mb, True, args.dependent)
        print(f"{mb:5.2f} MB between updates: statistics {full - plain:6.1f} us/draw "
              f"(dummy pass alone {plain:5.1f} us)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
