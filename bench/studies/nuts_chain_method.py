"""Sequential or vectorized chains: NUTS transitions per second both ways, alternated.

For each model, ``--chains`` chains make ``--steps`` NUTS transitions with
fixed, pre-adapted parameters, once with ``lax.map`` over the chains
(sequential) and once with ``vmap`` (vectorized), compiled ahead and run
alternately ``--reps`` times. Prints the median time ratio vectorized /
sequential (below 1: vectorized is faster) and the choice of
:func:`sluice.mcmc.chain_method.choose_chain_method` (a cost model, no timing).

    PYTHONPATH=src python bench/studies/nuts_chain_method.py logreg_small logreg_large gaussian
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
import nuts_kernels

import sluice
from sluice.mcmc import hamiltonian
from sluice.mcmc.chain_method import choose_chain_method


def measure(model: str, chains: int, steps: int, reps: int) -> tuple[float, str]:
    """(median time vectorized / sequential, the choice of choose_chain_method)."""
    fn, _ = nuts_kernels.flat_target(model)
    eps, imm, x = nuts_kernels.tuned_params(model)

    def chain(key, x):
        state = (x, *jax.value_and_grad(fn)(x))

        def body(s, k):
            s, info = hamiltonian.nuts_step(k, s, fn, eps, imm)
            return s, info["n_steps"]

        return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

    keys = jax.random.split(jax.random.PRNGKey(0), chains)
    xs = jnp.broadcast_to(x, (chains, *x.shape))
    programs = {
        "sequential": jax.jit(lambda k, x: jax.lax.map(lambda a: chain(*a), (k, x))),
        "vectorized": jax.jit(jax.vmap(chain)),
    }
    compiled = {m: f.lower(keys, xs).compile() for m, f in programs.items()}
    times = {m: [] for m in compiled}
    for rep in range(reps):
        for m in sorted(compiled, reverse=rep % 2 == 1):
            t = time.perf_counter()
            jax.block_until_ready(compiled[m](keys, xs))
            times[m].append(time.perf_counter() - t)
    pairs = zip(times["vectorized"], times["sequential"], strict=True)
    ratio = statistics.median(v / s for v, s in pairs)
    flat = sluice.Model(fn, init=x).flatten()
    return ratio, choose_chain_method(flat, sluice.nuts(), jax.devices()[:1], chains)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    for model in args.models:
        ratio, choice = measure(model, args.chains, args.steps, args.reps)
        print(
            f"{model:14s} vectorized/sequential time {ratio:5.2f} (median of {args.reps})  "
            f"choose_chain_method -> {choice}"
        )


if __name__ == "__main__":
    main()
