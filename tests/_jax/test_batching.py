"""uniform_cond: a branch under vmap when chains agree; disagreement is flagged."""

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax.batching import uniform_cond


def _step(x, k):
    """Add 10 to x when k is a multiple of 3, else 1; nested cond on k inside.

    x is (value, valid); a batch that disagrees on k sets valid to False.
    """

    def rare(o, s):
        inner = jax.lax.cond(s % 2 == 0, lambda v: v * 2.0, lambda v: v, o[0])
        return inner + 10.0, o[1]

    return uniform_cond(
        k % 3 == 0, rare, lambda o, s: (o[0] + 1.0, o[1]), x, k, lambda o: (o[0], False)
    )


def _reference(x, k):
    return np.where(k % 3 == 0, np.where(k % 2 == 0, x * 2.0, x) + 10.0, x + 1.0)


def test_outside_vmap_it_is_a_cond():
    for k in range(7):
        value, valid = jax.jit(_step)((jnp.float32(1.5), True), k)
        np.testing.assert_allclose(value, _reference(1.5, k))
        assert bool(valid)


def test_under_vmap_agreeing_chains_are_exact_and_disagreeing_ones_flagged():
    x = (jnp.arange(4.0), jnp.ones(4, bool))
    batched = jax.jit(jax.vmap(_step))
    for k in (6, 3, 1, 4):
        value, valid = batched(x, jnp.full(4, k))
        np.testing.assert_allclose(value, _reference(np.arange(4.0), k))
        assert bool(np.all(valid))
    _, valid = batched(x, jnp.asarray([0, 1, 2, 3]))
    assert not bool(np.any(valid))
    # an unbatched schedule with batched operands (the shape the engine produces)
    value, valid = jax.jit(jax.vmap(_step, in_axes=((0, 0), None)))(x, 6)
    np.testing.assert_allclose(value, _reference(np.arange(4.0), 6))
    assert bool(np.all(valid))


def test_the_batched_program_branches_instead_of_selecting():
    """A plain lax.cond under vmap with a batched predicate leaves no cond in the jaxpr."""
    jaxpr = str(
        jax.make_jaxpr(jax.vmap(_step))((jnp.arange(4.0), jnp.ones(4, bool)), jnp.arange(4))
    )
    assert "cond" in jaxpr
