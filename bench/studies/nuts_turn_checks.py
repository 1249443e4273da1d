"""NUTS's sub-trajectory checks: every checkpoint row at once (masked) or a loop, by dimension.

Each leapfrog step of sluice's NUTS tests the sub-trajectories that close at it
against the checkpoints of their starts (``sluice.mcmc.hamiltonian._turns``).
The *masked* form tests every row of the ``(max_depth + 1, 2, dim)``
checkpoint array at once and writes a step's checkpoint to a scratch row; the
*loop* form tests only the rows that close (one or two on average), newest
first, and, for one chain, skips the write by a branch. This study times both
on a ``dim``-dimensional Gaussian (scales in [0.5, 2], the metric its
variances, step size 0.5): ``--transitions`` NUTS transitions in one compiled
loop, one chain or a ``vmap`` of ``batch`` chains (the vectorized chain method),
the two forms compiled ahead and run alternately ``--reps`` times; medians, in
microseconds per gradient. Both forms take the same trajectories (the gradient
counts are checked equal).

    PYTHONPATH=src python bench/studies/nuts_turn_checks.py
    PYTHONPATH=src python bench/studies/nuts_turn_checks.py --dims 32,64 --batches 1 --x64
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from sluice.mcmc import hamiltonian

OPTIONS = {"xla_cpu_use_fusion_emitters": False}  # the chunk program's for such runs


def compiled(dim: int, batch: int, masked: bool, transitions: int, dtype) -> tuple:
    """The compiled loop of ``transitions`` NUTS transitions and its arguments."""
    saved = hamiltonian._MASKED_MAX_DIM, hamiltonian._MASKED_MAX_DIM_BATCHED
    bound = dim if masked else dim - 1  # read when the step is traced
    hamiltonian._MASKED_MAX_DIM = hamiltonian._MASKED_MAX_DIM_BATCHED = bound
    try:
        scales = jnp.linspace(0.5, 2.0, dim, dtype=dtype)

        def logdensity(x):
            return -0.5 * jnp.sum((x / scales) ** 2)

        def chain(key, x):
            state = (x, *jax.value_and_grad(logdensity)(x))

            def body(i, carry):
                state, n = carry
                state, info = hamiltonian.nuts_step(
                    jax.random.fold_in(key, i), state, logdensity, 0.5, scales**2
                )
                return state, n + info["n_steps"]

            return jax.lax.fori_loop(0, transitions, body, (state, 0))

        key = jax.random.PRNGKey(0)
        if batch > 1:
            fn, key, x = (
                jax.vmap(chain),
                jax.random.split(key, batch),
                jnp.zeros((batch, dim), dtype),
            )
        else:
            fn, x = chain, jnp.zeros(dim, dtype)
        return jax.jit(fn).lower(key, x).compile(OPTIONS), key, x
    finally:
        hamiltonian._MASKED_MAX_DIM, hamiltonian._MASKED_MAX_DIM_BATCHED = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="8,16,24,32,48,64,96,128,175,256")
    ap.add_argument("--batches", default="1,2,4")
    ap.add_argument("--transitions", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--x64", action="store_true", help="float64 (as PyMC models run)")
    args = ap.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.float64 if args.x64 else jnp.float32
    print(f"{jnp.dtype(dtype).name}: us per gradient, medians of {args.reps}")
    print("batch    dim   masked     loop   loop / masked")
    for batch in map(int, args.batches.split(",")):
        for dim in map(int, args.dims.split(",")):
            forms = {m: compiled(dim, batch, m, args.transitions, dtype) for m in (True, False)}
            times: dict[bool, list[float]] = {True: [], False: []}
            counts = {}
            for rep in range(args.reps):
                for masked in (True, False) if rep % 2 else (False, True):
                    fn, key, x = forms[masked]
                    t0 = time.perf_counter()
                    state, n = fn(key, x)
                    jax.block_until_ready(state)
                    elapsed = time.perf_counter() - t0
                    counts[masked] = int(jnp.sum(n))
                    times[masked].append(elapsed / counts[masked] * 1e6)
            if counts[True] != counts[False]:
                raise AssertionError(f"the two forms took different trajectories: {counts}")
            m, lo = statistics.median(times[True]), statistics.median(times[False])
            print(f"{batch:5d} {dim:6d} {m:8.3f} {lo:8.3f} {lo / m:9.2f}", flush=True)


if __name__ == "__main__":
    main()
