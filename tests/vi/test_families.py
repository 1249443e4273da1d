"""Gaussian families: parameterisation, reparameterised draws, log q and entropy vs SciPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from sluice import vi
from sluice.vi.families import get_family

KEY = jax.random.PRNGKey(5)
LOC = jnp.array([0.5, -1.0, 2.0])


def _params(name):
    family = getattr(vi, name)(init_scale=0.7)
    params = family.init(LOC)
    if name == "meanfield":
        return family, params._replace(log_scale=jnp.array([0.1, -0.4, 0.3]))
    off = jnp.array([[9.0, 9.0, 9.0], [0.4, 9.0, 9.0], [-0.3, 0.8, 9.0]])  # 9s are unused
    return family, params._replace(log_diag=jnp.array([0.2, -0.1, 0.0]), off_diag=off)


def test_init_centres_q_at_loc_with_init_scale():
    for family in (vi.meanfield(0.7), vi.fullrank(0.7)):
        params = family.init(LOC)
        np.testing.assert_array_equal(family.mean(params), LOC)
        np.testing.assert_allclose(family.scale_tril(params), 0.7 * np.eye(3), rtol=1e-6)


@pytest.mark.parametrize("name", ["meanfield", "fullrank"])
def test_sample_is_loc_plus_tril_times_standard_normal(name):
    family, params = _params(name)
    tril = np.asarray(family.scale_tril(params))
    assert np.allclose(np.triu(tril, 1), 0.0) and np.all(np.diag(tril) > 0)
    eps = jax.random.normal(KEY, (3,))
    np.testing.assert_allclose(family.sample(KEY, params), LOC + tril @ eps, rtol=1e-6)


@pytest.mark.parametrize("name", ["meanfield", "fullrank"])
def test_log_prob_and_entropy_match_scipy(name):
    family, params = _params(name)
    tril = np.asarray(family.scale_tril(params), np.float64)
    reference = stats.multivariate_normal(np.asarray(LOC, np.float64), tril @ tril.T)
    xs = np.asarray(jax.random.normal(KEY, (5, 3)) * 2.0)
    log_q = jax.vmap(family.log_prob, in_axes=(None, 0))(params, xs)
    np.testing.assert_allclose(log_q, reference.logpdf(xs), rtol=1e-5)
    np.testing.assert_allclose(family.entropy(params), reference.entropy(), rtol=1e-6)


def test_fullrank_ignores_diagonal_and_upper_triangle_of_off_diag():
    family, params = _params("fullrank")
    other = params._replace(off_diag=jnp.tril(params.off_diag, -1))
    x = jnp.array([0.3, 0.2, -0.1])
    assert family.sample(KEY, params).tolist() == family.sample(KEY, other).tolist()
    assert float(family.log_prob(params, x)) == float(family.log_prob(other, x))
    grad = jax.grad(lambda p: family.log_prob(p, x))(params)
    assert np.all(np.asarray(grad.off_diag)[np.triu_indices(3)] == 0.0)


def test_families_are_keyed_by_their_settings_and_validated():
    assert vi.meanfield(0.5).cache_key == vi.meanfield(0.5).cache_key == ("meanfield", 0.5)
    assert vi.meanfield(0.5).cache_key != vi.meanfield(0.4).cache_key
    assert get_family("fullrank").cache_key == vi.fullrank().cache_key
    for bad in (0.0, -1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="init_scale"):
            vi.meanfield(bad)
    with pytest.raises(ValueError, match=r"family must be one of .* got 'gauss'"):
        get_family("gauss")
