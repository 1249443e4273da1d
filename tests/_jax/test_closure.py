"""Closure conversion (sluice._jax.closure): every closed-over array becomes an input.

Also the reason the module exists: ``jax.closure_convert`` leaves an integer
array that is a tracer of an outer ``jit`` closed over, which breaks a
``custom_vmap`` rule under ``vmap`` and ``scan``. The last test fails the day
JAX fixes that.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sluice._jax.closure import closure_convert

WEIGHTS = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
INDEX = np.array([3, 0, 0, 2], np.int32)


def _by_dtype(consts):
    """The hoisted float and integer arrays (in whichever order they were hoisted)."""
    floats = [c for c in consts if jnp.issubdtype(jnp.result_type(c), jnp.floating)]
    ints = [c for c in consts if jnp.issubdtype(jnp.result_type(c), jnp.integer)]
    return floats, ints


def test_converted_function_equals_the_function_and_takes_its_data_as_inputs():
    w, idx = jnp.asarray(WEIGHTS), jnp.asarray(INDEX)

    def fn(x):
        return jnp.sum(w[idx] * x**2), w[idx] * x

    def reference(x, weights, index):  # by hand, in NumPy
        x = np.asarray(x, np.float64)
        return np.sum(weights[index] * x**2), weights[index] * x

    converted, consts, _ = closure_convert(fn, jnp.zeros(4))
    floats, ints = _by_dtype(consts)
    assert len(consts) == 2 and len(floats) == 1 and len(ints) == 1  # the int data too
    np.testing.assert_array_equal(floats[0], WEIGHTS)
    np.testing.assert_array_equal(ints[0], INDEX)
    rng = np.random.default_rng(0)
    for x in (np.zeros(4), np.ones(4), rng.normal(size=4), rng.normal(size=4) * 10):
        x = jnp.asarray(x, jnp.float32)
        value, vector = converted(consts, x)
        ref_value, ref_vector = reference(x, WEIGHTS, INDEX)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(vector, ref_vector, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, fn(x)[0], rtol=1e-6)

    # the data are arguments, not constants of the program: new data, new result
    new_w, new_idx = np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([1, 1, 3, 0], np.int32)
    new = [new_w if c is floats[0] else new_idx for c in consts]
    x = jnp.asarray([1.0, -2.0, 0.5, 3.0], jnp.float32)
    value, vector = jax.jit(converted)([jnp.asarray(c) for c in new], x)
    ref_value, ref_vector = reference(x, new_w, new_idx)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    np.testing.assert_allclose(vector, ref_vector, rtol=1e-5)


def test_pytree_arguments_and_outputs_keep_their_structure():
    offset = jnp.asarray([1.0, 2.0], jnp.float32)
    count = jnp.asarray(3, jnp.int32)

    def fn(args):
        return {"s": jnp.sum(args["a"] - offset) * count, "t": (args["b"] * count,)}

    example = {"a": jnp.zeros(2), "b": jnp.zeros(())}
    converted, consts, _ = closure_convert(fn, example)
    assert len(consts) == 2
    out = converted(consts, {"a": jnp.asarray([4.0, 6.0]), "b": jnp.asarray(2.0)})
    assert set(out) == {"s", "t"} and isinstance(out["t"], tuple)
    np.testing.assert_allclose(out["s"], ((4 - 1) + (6 - 2)) * 3)
    np.testing.assert_allclose(out["t"][0], 6.0)


def test_a_function_without_data_hoists_nothing():
    converted, consts, _ = closure_convert(lambda x: jnp.sin(x) * 2.0, jnp.zeros(3))
    assert consts == []
    x = jnp.asarray([0.0, 0.5, -1.0])
    np.testing.assert_allclose(converted(consts, x), 2 * np.sin(np.asarray(x)), rtol=1e-6)


# -- why not jax.closure_convert -------------------------------------------------
def _jax_convert(fn, x):
    converted, consts = jax.closure_convert(fn, x)
    return lambda cs, y: converted(y, *cs), consts


def _sluice_convert(fn, x):
    converted, consts, _ = closure_convert(fn, x)
    return converted, consts


def _sampler_like(convert):
    """A model's value-and-grad, closure-converted inside an outer jit, called by a
    custom_vmap rule inside lax.scan: the shape of a vectorized NUTS chain."""

    @jax.jit
    def run(data_f, data_i, x):
        def ld(x):
            return -0.5 * jnp.sum((x - data_f[data_i]) ** 2)

        vg, consts = convert(jax.value_and_grad(ld), x)

        @jax.custom_batching.custom_vmap
        def step(x, consts):
            return vg(consts, x)

        @step.def_vmap
        def _rule(axis_size, in_batched, x, consts):
            x = x if in_batched[0] else jnp.broadcast_to(x, (axis_size, *x.shape))
            out = jax.vmap(lambda y: vg(consts, y))(x)
            return out, jax.tree.map(lambda _: True, out)

        def body(c, _):
            value, grad = step(c, consts)
            return c + 0.1 * grad, value

        return jax.lax.scan(body, x, None, length=3)

    return jax.vmap(run, in_axes=(None, None, 0))


DATA_F = np.array([0.0, 1.0, 2.0, 3.0, 4.0], np.float32)
DATA_I = np.array([0, 2, 4], np.int32)


def _expected(xs):
    """The scan by hand: gradient ascent on -|x - t|^2 / 2, t = data_f[data_i]."""
    target = DATA_F[DATA_I].astype(np.float64)
    finals, values = [], []
    for x in np.asarray(xs, np.float64):
        vals = []
        for _ in range(3):
            vals.append(-0.5 * np.sum((x - target) ** 2))
            x = x + 0.1 * (target - x)
        finals.append(x)
        values.append(vals)
    return np.array(finals), np.array(values)


def test_sluice_closure_convert_works_where_jax_closure_convert_fails():
    xs = jnp.asarray(np.random.default_rng(1).normal(size=(4, 3)), jnp.float32)
    final, values = _sampler_like(_sluice_convert)(DATA_F, DATA_I, xs)
    ref_final, ref_values = _expected(xs)
    np.testing.assert_allclose(final, ref_final, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, ref_values, rtol=1e-5, atol=1e-5)

    try:
        _sampler_like(_jax_convert)(DATA_F, DATA_I, xs)
    except TypeError as error:
        assert "No constant handler" in str(error) and "Tracer" in str(error), error
    else:
        pytest.fail(
            "jax.closure_convert now handles an integer array that is a tracer of an outer "
            "jit inside a custom_vmap rule: switch sluice to jax.closure_convert and delete "
            "sluice._jax.closure"
        )
