import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.model import FlatModel, as_model


def gaussian(p):
    return -0.5 * jnp.sum(p["mu"] ** 2) - 0.5 * p["log_s"] ** 2


INIT = {"mu": jnp.zeros(3), "log_s": jnp.zeros(())}


def test_flatten_names_and_shapes():
    model = sluice.Model(
        gaussian, INIT, transform=lambda p: {"mu": p["mu"], "s": jnp.exp(p["log_s"])}
    )
    flat = model.flatten()
    assert flat.dim == 4
    shapes = flat.draw_shapes()
    assert {k: v.shape for k, v in shapes.items()} == {"mu": (3,), "s": ()}


def test_default_transform_names_pytree_paths():
    flat = as_model(
        lambda t: -0.5 * jnp.sum(t[0] ** 2) - 0.5 * jnp.sum(t[1]["b"] ** 2),
        (jnp.zeros(2), {"b": jnp.zeros(())}),
    ).flatten()
    assert sorted(flat.draw_shapes()) == ["0", "1.b"]
    bare = as_model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(2)).flatten()
    assert list(bare.draw_shapes()) == ["x"]


def test_data_is_hoisted_and_fingerprint_ignores_values():
    def make(data):
        return sluice.Model(lambda b: -0.5 * jnp.sum((data @ b) ** 2), jnp.zeros(3)).flatten()

    a = make(np.ones((50, 3), np.float32))
    b = make(np.full((50, 3), 2.0, np.float32))
    c = make(np.ones((60, 3), np.float32))
    assert any(getattr(x, "shape", None) == (50, 3) for x in jax.tree.leaves(a.consts))
    assert a.fingerprint == b.fingerprint != c.fingerprint
    x = jnp.ones(3)
    assert float(a.logdensity_fn(a.consts, x)) == pytest.approx(-0.5 * 50 * 9)
    # the hoisted program evaluates with the other model's data
    assert float(a.logdensity_fn(b.consts, x)) == pytest.approx(-0.5 * 50 * 36)


@pytest.mark.parametrize(
    "init, match",
    [
        ({"mu": jnp.zeros(3, jnp.int32)}, r"leaf 'mu' has dtype int32"),
        ({}, "empty pytree"),
        ({"mu": "zero"}, r"leaf 'mu' is str"),
    ],
)
def test_bad_init(init, match):
    with pytest.raises(TypeError, match=match):
        FlatModel.from_model(sluice.Model(lambda p: 0.0, init))


def test_non_scalar_log_density():
    with pytest.raises(ValueError, match=r"must return a scalar .* got shape \(3,\)"):
        sluice.Model(lambda x: -0.5 * x**2, jnp.zeros(3)).flatten()


def test_plain_function_needs_init():
    with pytest.raises(TypeError, match="init is required"):
        as_model(lambda x: -0.5 * x**2)


def test_not_callable():
    with pytest.raises(TypeError, match="log_density must be a function"):
        sluice.Model(3.0, jnp.zeros(1))
