"""uniform_cond: a branch under vmap when chains agree, exact when they do not."""

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._batching import uniform_cond


def _step(x, k):
    """Add 10 to x when k is a multiple of 3, else 1; nested cond on k inside."""

    def rare(o, s):
        inner = jax.lax.cond(s % 2 == 0, lambda v: v * 2.0, lambda v: v, o)
        return inner + 10.0

    return uniform_cond(k % 3 == 0, rare, lambda o, s: o + 1.0, x, k)


def _reference(x, k):
    return np.where(k % 3 == 0, np.where(k % 2 == 0, x * 2.0, x) + 10.0, x + 1.0)


def test_outside_vmap_it_is_a_cond():
    for k in range(7):
        np.testing.assert_allclose(jax.jit(_step)(jnp.float32(1.5), k), _reference(1.5, k))


def test_under_vmap_agreeing_and_disagreeing_chains_give_the_same_values():
    x = jnp.arange(4.0)
    batched = jax.jit(jax.vmap(_step))
    for ks in ([6, 6, 6, 6], [3, 3, 3, 3], [1, 1, 1, 1], [0, 1, 2, 3], [6, 3, 4, 9]):
        k = jnp.asarray(ks)
        np.testing.assert_allclose(batched(x, k), _reference(np.arange(4.0), np.asarray(ks)))
    # unbatched schedule, batched operand (the shape the engine produces)
    shared_k = jax.jit(jax.vmap(_step, in_axes=(0, None)))
    np.testing.assert_allclose(shared_k(x, 6), _reference(np.arange(4.0), 6))


def test_agreeing_chains_do_not_evaluate_the_rare_branch_every_step():
    """With agreeing predicates the batched program branches (the select path is the
    fallback): a jaxpr of the batched step holds a cond on the agreement."""
    jaxpr = jax.make_jaxpr(jax.vmap(_step))(jnp.arange(4.0), jnp.arange(4))
    assert "cond" in str(jaxpr)
