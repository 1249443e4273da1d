"""NUTS's loop carry packed into few arrays against the named fields carried as they are.

``sluice.mcmc.hamiltonian`` carries its trajectory and subtree through the
doubling and leaf loops packed (``_Tree.pack`` / ``_Subtree.pack``). This study
compiles the same transition with the packing switched off (``pack`` and
``unpack`` made the identity, so the loops carry every named field) and times
both, alternated, in one process: ``jit(lax.scan)`` of 300 transitions, one
chain and ``vmap`` over 4, microseconds per gradient (medians of 5), and
whether the draws are identical.

    PYTHONPATH=src python bench/studies/nuts_packing.py
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from sluice.mcmc import hamiltonian


def logistic(dim: int, n: int = 500):
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(k1, (n, dim))
    y = (x @ jax.random.normal(k2, (dim,)) + jax.random.logistic(k2, (n,)) > 0).astype(x.dtype)

    def logdensity(b):
        z = x @ b
        return jnp.sum(y * z - jnp.logaddexp(0.0, z)) - 0.5 * jnp.sum(b**2)

    return logdensity


def gaussian(dim: int):
    scales = jnp.linspace(0.5, 2.0, dim)
    return lambda x: -0.5 * jnp.sum((x / scales) ** 2)


def compiled(logdensity, dim, step_size, chains, steps, packed):
    saved = hamiltonian._Tree.pack, hamiltonian._Tree.unpack
    saved_sub = hamiltonian._Subtree.pack, hamiltonian._Subtree.unpack
    if not packed:
        for cls in (hamiltonian._Tree, hamiltonian._Subtree):
            cls.pack = lambda self: self
            cls.unpack = classmethod(lambda cls, carry: carry)

    def one(key, x):
        state = (x, *jax.value_and_grad(logdensity)(x))

        def body(s, k):
            s, info = hamiltonian.nuts_step(k, s, logdensity, step_size, jnp.ones(dim))
            return s, info["n_steps"]

        s, n = jax.lax.scan(body, state, jax.random.split(key, steps))
        return s[0], jnp.sum(n)

    keys = jax.random.split(jax.random.PRNGKey(1), chains) if chains > 1 else jax.random.PRNGKey(1)
    x0 = jnp.zeros((chains, dim) if chains > 1 else (dim,))
    try:
        fn = jax.jit(jax.vmap(one) if chains > 1 else one).lower(keys, x0).compile()
    finally:
        hamiltonian._Tree.pack, hamiltonian._Tree.unpack = saved
        hamiltonian._Subtree.pack, hamiltonian._Subtree.unpack = saved_sub
    return lambda: fn(keys, x0)


def main(steps: int = 300, reps: int = 5) -> None:
    cases = [
        ("logistic 10", logistic(10), 10, 0.15),
        ("logistic 50", logistic(50), 50, 0.08),
        ("gaussian 300", gaussian(300), 300, 0.25),
    ]
    for name, logdensity, dim, step_size in cases:
        for chains in (1, 4):
            fns = {
                packed: compiled(logdensity, dim, step_size, chains, steps, packed)
                for packed in (True, False)
            }
            times = {True: [], False: []}
            for rep in range(reps):
                for packed in (True, False) if rep % 2 == 0 else (False, True):
                    start = time.perf_counter()
                    _, n = jax.block_until_ready(fns[packed]())
                    times[packed].append((time.perf_counter() - start) / int(np.sum(n)))
            same = np.array_equal(np.asarray(fns[True]()[0]), np.asarray(fns[False]()[0]))
            p, u = statistics.median(times[True]), statistics.median(times[False])
            print(
                f"{name:13s} chains={chains}  packed {p * 1e6:6.2f} us/gradient  "
                f"named fields {u * 1e6:6.2f}  ratio {u / p:4.2f}  same draws {same}",
                flush=True,
            )


if __name__ == "__main__":
    main()
