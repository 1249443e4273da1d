"""``map_in_place``: chains one after another, the stacked carry advanced in place."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax.batching import map_in_place


def _one(carry, chain_id):
    """A chain step with a pytree carry and two other outputs (one of them a pytree)."""
    a, b = carry["a"], carry["b"]
    new = {"a": a * 2.0 + chain_id, "b": b + jnp.sum(a).astype(b.dtype)}
    return new, jnp.sum(a) * chain_id, {"rows": jnp.outer(jnp.arange(3.0), a)}


def testmap_in_place_equals_lax_map():
    rng = np.random.default_rng(0)
    carry = {
        "a": jnp.asarray(rng.normal(size=(5, 4)), jnp.float32),
        "b": jnp.asarray(rng.integers(0, 9, size=(5,)), jnp.int32),
    }
    ids = jnp.arange(5, dtype=jnp.int32)
    expected = jax.lax.map(lambda xs: _one(*xs), (carry, ids))
    got = jax.jit(lambda c, i: map_in_place(_one, (c, i)))(carry, ids)
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


def testmap_in_place_with_a_donated_carry_reads_each_chain_before_overwriting_it():
    # chain c's result must come from chain c's input, not from a slot already rewritten
    carry = {"a": jnp.ones((3, 2)), "b": jnp.zeros((3,), jnp.int32)}
    ids = jnp.arange(3, dtype=jnp.int32)
    f = jax.jit(lambda c, i: map_in_place(_one, (c, i)), donate_argnums=0)
    new, sums, _ = f(carry, ids)
    np.testing.assert_array_equal(np.asarray(new["a"]), [[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    np.testing.assert_array_equal(np.asarray(new["b"]), [2, 2, 2])
    np.testing.assert_array_equal(np.asarray(sums), [0.0, 2.0, 4.0])
