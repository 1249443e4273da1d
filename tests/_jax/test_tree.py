"""Pytree helpers (sluice._jax.tree): names of leaves."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sluice._jax.tree import as_named, named_leaves, named_leaves_dict, path_name


class Pair(NamedTuple):
    loc: jax.Array
    scale: jax.Array


class Box:
    """A custom pytree node: its paths use FlattenedIndexKey."""

    def __init__(self, a, b):
        self.a, self.b = a, b


jax.tree_util.register_pytree_node(Box, lambda box: ((box.a, box.b), None), lambda _, c: Box(*c))


def _paths(tree):
    return [path_name(path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def test_path_names_of_every_key_kind():
    assert _paths({"a": [1.0, 2.0], "b": 3.0}) == ["a.0", "a.1", "b"]
    assert _paths({"outer": {"inner": (1.0, {"z": 2.0})}}) == ["outer.inner.0", "outer.inner.1.z"]
    assert _paths(Pair(1.0, 2.0)) == ["loc", "scale"]  # GetAttrKey
    assert _paths(Box(1.0, [2.0, 3.0])) == ["0", "1.0", "1.1"]  # FlattenedIndexKey
    assert path_name(()) == ""


def test_named_leaves():
    x = jnp.arange(3.0)
    assert list(named_leaves(x)) == ["x"]
    assert named_leaves(x)["x"] is x
    assert list(named_leaves(x, default="theta")) == ["theta"]
    tree = {"mu": x, "sigma": {"log": 1.0}, "z": [x, x]}
    assert list(named_leaves(tree)) == ["mu", "sigma.log", "z.0", "z.1"]
    assert named_leaves(tree)["sigma.log"] == 1.0
    assert list(named_leaves({"only": x})) == ["only"]  # one leaf with a path keeps its name
    assert named_leaves({}) == {}
    assert list(named_leaves(Pair(x, x))) == ["loc", "scale"]


def test_named_leaves_dict_prefixes_nested_values():
    x, y = jnp.zeros(2), jnp.ones(())
    out = named_leaves_dict({"a": {"b": x, "c": [y, y]}, "d": y, "e": (x,)})
    assert list(out) == ["a.b", "a.c.0", "a.c.1", "d", "e.0"]
    assert out["a.b"] is x and out["d"] is y
    assert named_leaves_dict({}) == {}


def test_as_named_returns_flat_dicts_of_arrays():
    theta = {"mu": jnp.asarray([1.0, 2.0]), "log_s": jnp.asarray(0.5)}

    bare = as_named(lambda p: p["mu"] * 2)(theta)
    assert list(bare) == ["x"]
    np.testing.assert_array_equal(bare["x"], [2.0, 4.0])

    assert list(as_named(lambda p: p["mu"], default="mu")(theta)) == ["mu"]

    nested = as_named(lambda p: {"mu": p["mu"], "s": {"value": jnp.exp(p["log_s"])}})(theta)
    assert list(nested) == ["mu", "s.value"]
    np.testing.assert_allclose(nested["s.value"], np.exp(0.5), rtol=1e-6)

    tupled = as_named(lambda p: (p["mu"], 3.0))(theta)  # not a dict: named by paths
    assert list(tupled) == ["0", "1"]
    assert isinstance(tupled["1"], jax.Array) and float(tupled["1"]) == 3.0  # Python -> array

    constants = as_named(lambda p: {"n": 7})(theta)
    assert isinstance(constants["n"], jax.Array) and int(constants["n"]) == 7


def test_named_leaves_dict_keeps_nested_names_and_refuses_clashes():
    x, y = jnp.zeros(2), jnp.ones(())
    assert list(named_leaves_dict({"a": {"a": x}})) == ["a.a"]
    with pytest.raises(ValueError, match=r"both be named 'a\.b'"):
        named_leaves_dict({"a": {"b": x}, "a.b": y})
