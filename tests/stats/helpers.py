"""Shared helpers for the statistics tests (imported as ``tests.stats.helpers``): processes with known answers and runners.

Compiles are the main cost of these tests, so runners are cached per update
function (statistics that share settings share their compiled update).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax.compile import FAST_COMPILE_OPTIONS

warnings.filterwarnings("ignore", message=".*ArviZ is undergoing a major refactor.*")


def jit(fn=None, **options):
    """``jax.jit`` with sluice's fast-compile options (the statistics' programs in these
    tests run over small arrays: compiling them is most of the tests' time; the options
    change code generation, not what a program computes)."""
    if fn is None:
        return functools.partial(jit, **options)
    return jax.jit(fn, compiler_options=FAST_COMPILE_OPTIONS, **options)


def ar1(seed: int, chains: int, draws: int, rho: float, dim: int = 1) -> np.ndarray:
    """Stationary AR(1) chains with unit marginal variance: ``(chains, draws, dim)`` float64."""
    rng = np.random.default_rng(seed)
    x = np.empty((chains, draws, dim))
    x[:, 0] = rng.normal(size=(chains, dim))
    noise = rng.normal(size=(chains, draws, dim)) * np.sqrt(1 - rho**2)
    for t in range(1, draws):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x


@functools.cache
def scan_runner(init, update):
    """``run(example, draws) -> states``: every chain scanned draw by draw (``vmap`` over chains).

    ``draws`` is a pytree with leading axes ``(chain, draw)``.
    """

    @jit
    def run(example, draws):
        def one(chain):
            return jax.lax.scan(lambda s, d: (update(s, d), None), init(example), chain)[0]

        return jax.vmap(one)(draws)

    return run


@functools.cache
def sequential_runner(init, update, long_chains: bool = False):
    """Like :func:`scan_runner` with ``lax.map`` over chains (the CPU engine default).

    ``long_chains``: compiled with XLA's default options, whose code runs the tens of
    thousands of draws of the accuracy tests' chains faster than the fast options'
    (46 s against 18 s for four chains of 50,000 draws and 2,048 lags)."""

    compile_ = jax.jit if long_chains else jit

    @compile_
    def run(example, draws):
        def one(chain):
            return jax.lax.scan(lambda s, d: (update(s, d), None), init(example), chain)[0]

        return jax.lax.map(one, draws)

    return run


class TraceCounter:
    """Counts how often a function is traced (a Python side effect at trace time)."""

    def __init__(self, fn):
        self.fn = fn
        self.count = 0

    def __call__(self, *args):
        self.count += 1
        return self.fn(*args)


@functools.cache
def chunk_runner(update, chunk: int):
    """``(advance, counter)``: one jitted chunk of ``chunk`` draws, masked past ``n_valid``.

    This mirrors the engine: a fixed chunk length, the update under a ``cond``.
    """
    counted = TraceCounter(update)

    @jit
    def advance(state, draws, n_valid):
        def body(s, item):
            i, d = item
            return jax.lax.cond(i < n_valid, lambda s: counted(s, d), lambda s: s, s), None

        return jax.lax.scan(body, state, (jnp.arange(chunk), draws))[0]

    return advance, counted


def take_chain(tree, c):
    return jax.tree.map(lambda x: x[c], tree)


def merge_tree(merge, states: list, rng: np.random.Generator):
    """Merge ``states`` in a random binary tree (random pairings and orders)."""
    states = list(states)
    while len(states) > 1:
        i, j = rng.choice(len(states), size=2, replace=False)
        a, b = states[i], states[j]
        merged = merge(a, b) if rng.random() < 0.5 else merge(b, a)
        states = [s for k, s in enumerate(states) if k not in (i, j)] + [merged]
    return states[0]


def assert_trees_close(a, b, rtol: float, atol: float = 0.0, err_msg: str = ""):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b), err_msg
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(
            np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol,
            equal_nan=True, err_msg=err_msg,
        )  # fmt: skip
