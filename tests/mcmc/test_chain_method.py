"""chain_method="auto" (sluice.mcmc.chain_method): the cost model's choices on cases whose
answer is known from measurements (bench/studies/nuts_chain_method.py)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.mcmc.chain_method import choose_chain_method


def _gaussian(dim):
    scales = jnp.asarray(np.linspace(0.5, 2.0, dim), jnp.float32)
    return sluice.Model(lambda x: -0.5 * jnp.sum((x / scales) ** 2), init=jnp.zeros(dim))


def _logistic(n, k):
    rng = np.random.default_rng(0)
    design = jnp.asarray(rng.normal(size=(n, k)), jnp.float32)
    y = jnp.asarray(rng.random(n) < 0.5, jnp.float32)

    def log_density(beta):
        z = design @ beta
        return jnp.sum(y * z - jnp.logaddexp(0.0, z)) - 0.5 * jnp.sum(beta**2)

    return sluice.Model(log_density, init=jnp.zeros(k))


@pytest.fixture(scope="module")
def cpus():
    return jax.devices()


def test_accelerators_vectorize_without_looking_at_the_model():
    gpu = types.SimpleNamespace(platform="gpu")
    # not even a model: the choice is made before the model is looked at
    assert choose_chain_method(None, sluice.nuts(), [gpu], 4) == "vectorized"
    assert choose_chain_method(None, sluice.nuts(), [gpu, gpu], 1) == "vectorized"
    tpu = types.SimpleNamespace(platform="tpu")
    assert choose_chain_method(_gaussian(20_000).flatten(), sluice.nuts(), [tpu], 4) == (
        "vectorized"
    )


def test_one_chain_per_device_is_sequential(cpus):
    for model in (_logistic(2000, 50), _gaussian(3)):
        assert choose_chain_method(model.flatten(), sluice.nuts(), cpus, 1) == "sequential"


def test_chains_sharing_a_design_matrix_are_vectorized(cpus):
    flat = _logistic(2000, 50).flatten()
    for kernel in (sluice.nuts(), sluice.hmc()):
        assert choose_chain_method(flat, kernel, cpus, 4) == "vectorized"


def test_a_high_dimensional_gaussian_is_sequential(cpus):
    flat = _gaussian(20_000).flatten()
    assert choose_chain_method(flat, sluice.nuts(), cpus, 4) == "sequential"


def test_a_tiny_model_is_vectorized(cpus):
    """A gradient so small that its fixed cost dominates: vectorizing amortizes it."""
    assert choose_chain_method(_gaussian(3).flatten(), sluice.nuts(), cpus, 4) == "vectorized"
