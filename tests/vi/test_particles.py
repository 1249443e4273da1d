"""Particle bounds: the fold_in key contract, chunking, and unbiasedness against closed forms."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy import stats

import sluice
from sluice import vi

DIM = 3
M = jnp.array([1.0, -2.0, 0.5])
PRECISION = jnp.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]])


def log_p(x):
    """Unnormalised Gaussian N(M, PRECISION^-1), written for one point."""
    return -0.5 * (x - M) @ PRECISION @ (x - M)


LOG_Z = 0.5 * DIM * math.log(2 * math.pi) - 0.5 * float(jnp.linalg.slogdet(PRECISION)[1])
FAMILIES = {"meanfield": vi.meanfield(), "fullrank": vi.fullrank()}


def exact_elbo(family, params):
    """Closed form: E_q[log p] + H[q] for the Gaussian target and a Gaussian q."""
    loc, tril = family.mean(params), family.scale_tril(params)
    expected_log_p = -0.5 * (
        jnp.trace(PRECISION @ tril @ tril.T) + (loc - M) @ PRECISION @ (loc - M)
    )
    return expected_log_p + family.entropy(params)


def random_params(family, key):
    k1, k2, k3 = jax.random.split(key, 3)
    params = family.init(jax.random.normal(k1, (DIM,)))
    log_scale = jax.random.uniform(k2, (DIM,), minval=-1.0, maxval=0.5)
    if isinstance(params, vi.MeanFieldParams):
        return params._replace(log_scale=log_scale)
    return params._replace(log_diag=log_scale, off_diag=0.4 * jax.random.normal(k3, (DIM, DIM)))


def flat(tree):
    return ravel_pytree(tree)[0]


# -- the particle-key contract ------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=0)
def _particle(family, params, key, i):
    """log p and log q of particle i, drawn with fold_in(key, i) as the contract says."""
    x = family.sample(jax.random.fold_in(key, i), params)
    return log_p(x), family.log_prob(params, x)


def test_vectorized_chunked_and_sequential_particles_agree():
    """The particle machinery does not depend on the family: checked with the full-rank one."""
    family = FAMILIES["fullrank"]
    params = random_params(family, jax.random.PRNGKey(1))
    key = jax.random.PRNGKey(2)
    num = 50

    @functools.partial(jax.jit, static_argnums=0)
    def both_bounds(chunk):
        return [
            jax.value_and_grad(vi.elbo, argnums=2)(log_p, family, params, key, num, chunk, b)
            for b in ("elbo", "iwae")
        ]

    reference = both_bounds(None)
    for chunk in (7, 1):  # chunks with a remainder; one by one
        for (v, g), (value, grad) in zip(both_bounds(chunk), reference, strict=True):
            np.testing.assert_allclose(v, value, rtol=1e-5, err_msg=f"chunk {chunk}")
            np.testing.assert_allclose(
                flat(g), flat(grad), rtol=1e-4, atol=1e-5, err_msg=f"chunk {chunk}"
            )

    # The contract itself, particle by particle in a Python loop.
    terms = np.array([_particle(family, params, key, i) for i in range(num)], np.float64)
    expected_elbo = np.mean(terms[:, 0]) + family.entropy(params)
    log_w = terms[:, 0] - terms[:, 1]
    expected_iwae = np.log(np.mean(np.exp(log_w - log_w.max()))) + log_w.max()
    np.testing.assert_allclose(reference[0][0], expected_elbo, rtol=1e-5)
    np.testing.assert_allclose(reference[1][0], expected_iwae, rtol=1e-5)


def test_log_weights_follow_the_contract_in_any_chunking():
    family = FAMILIES["fullrank"]
    params = random_params(family, jax.random.PRNGKey(3))
    key = jax.random.PRNGKey(4)
    expected = [
        log_p_x - log_q_x
        for log_p_x, log_q_x in (_particle(family, params, key, i) for i in range(23))
    ]

    no_entropy = family._replace(entropy=None)

    @jax.jit
    def weights_and_bounds(params):
        chunkings = [vi.log_weights(log_p, family, params, key, 23, c) for c in (None, 5, 1)]
        iwae_1 = vi.elbo(log_p, family, params, key, 1, bound="iwae")
        return chunkings, iwae_1, vi.elbo(log_p, no_entropy, params, key, 23, 5)

    chunkings, iwae_1, elbo_without_entropy = weights_and_bounds(params)
    for w in chunkings:
        np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-5)
    # K = 1: the IWAE bound is the single particle's log weight.
    np.testing.assert_allclose(iwae_1, expected[0], rtol=1e-6)
    # A family without a closed-form entropy: the ELBO is the mean log weight.
    np.testing.assert_allclose(elbo_without_entropy, np.mean(expected), rtol=1e-5)


def test_a_model_with_data_and_pytree_parameters_gives_the_same_bound():
    """A sluice.Model (data hoisted out, dict parameters) and the flat function agree."""
    model = sluice.Model(
        lambda p: log_p(jnp.concatenate([p["a"], p["b"][None]])),
        init={"a": jnp.zeros(2), "b": jnp.zeros(())},
    )
    family = FAMILIES["meanfield"]
    params = random_params(family, jax.random.PRNGKey(6))
    key = jax.random.PRNGKey(7)
    np.testing.assert_allclose(
        vi.elbo(model, family, params, key, 40, 8),
        vi.elbo(log_p, family, params, key, 40),
        rtol=1e-5,
    )


def test_bad_arguments_are_rejected_with_name_and_value():
    family, params = FAMILIES["meanfield"], FAMILIES["meanfield"].init(jnp.zeros(DIM))
    key = jax.random.PRNGKey(0)
    for kwargs, match in [
        (dict(num_particles=0), "num_particles must be a positive integer, got 0"),
        (dict(num_particles=2.5), "num_particles must be a positive integer, got 2.5"),
        (dict(num_particles=4, particle_chunk_size=0), "particle_chunk_size .* got 0"),
        (dict(num_particles=4, bound="kl"), "bound must be one of .* got 'kl'"),
    ]:
        with pytest.raises(ValueError, match=match):
            vi.elbo(log_p, family, params, key, **kwargs)
    with pytest.raises(TypeError, match="model must be"):
        vi.elbo(3.0, family, params, key, 4)


# -- unbiasedness against the closed form, over a grid of parameter settings --------------------

NUM_SETTINGS = 50
NUM_PARTICLES = 100_000
# Family-wise false-alarm rate of the whole grid; Bonferroni over all comparisons.
ALPHA = 1e-3


def _grid_estimates(family):
    """For each setting: the bound and its gradient from ONE call with 10^5 particles,
    the closed forms, and per-particle values and gradients (for the standard errors)."""
    value_and_grad = jax.value_and_grad(vi.elbo, argnums=2)
    per_particle = jax.vmap(
        jax.value_and_grad(lambda p, k: log_p(family.sample(k, p)) + family.entropy(p)),
        in_axes=(None, 0),
    )

    def one_setting(key):
        params = random_params(family, key)
        rng_key = jax.random.fold_in(key, 99)
        value, grad = value_and_grad(log_p, family, params, rng_key, NUM_PARTICLES)
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(rng_key, jnp.arange(NUM_PARTICLES))
        values, grads = per_particle(params, keys)
        grads = jax.vmap(flat)(grads)
        exact, exact_grad = jax.value_and_grad(exact_elbo, argnums=1)(family, params)
        return dict(
            value=value,
            grad=flat(grad),
            exact=exact,
            exact_grad=flat(exact_grad),
            mean_values=jnp.mean(values),
            sd_values=jnp.std(values, ddof=1),
            mean_grads=jnp.mean(grads, 0),
            sd_grads=jnp.std(grads, 0, ddof=1),
        )

    keys = jax.random.split(jax.random.PRNGKey(2024), NUM_SETTINGS)
    return jax.device_get(jax.jit(lambda ks: jax.lax.map(one_setting, ks))(keys))


@pytest.mark.parametrize("name", ["meanfield", "fullrank"])
def test_elbo_and_gradient_are_unbiased_over_a_grid_of_settings(name):
    out = _grid_estimates(FAMILIES[name])
    # The one-call estimates are the means of the per-particle terms (same particles).
    np.testing.assert_allclose(out["value"], out["mean_values"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["grad"], out["mean_grads"], rtol=1e-4, atol=1e-4)

    estimates = np.concatenate([out["value"][:, None], out["grad"]], axis=1)
    exact = np.concatenate([out["exact"][:, None], out["exact_grad"]], axis=1)
    se = np.concatenate([out["sd_values"][:, None], out["sd_grads"]], axis=1) / np.sqrt(
        NUM_PARTICLES
    )
    # Entries with no Monte Carlo noise (full-rank's unused upper triangle) must be exact.
    noiseless = se == 0
    np.testing.assert_array_equal(estimates[noiseless], exact[noiseless])
    z = (estimates[~noiseless] - exact[~noiseless]) / se[~noiseless]
    bound = stats.norm.isf(ALPHA / (2 * z.size))
    print(f"{name}: max |z| {np.max(np.abs(z)):.2f} (bound {bound:.2f}, {z.size} comparisons)")
    assert np.max(np.abs(z)) < bound, f"max |z| = {np.max(np.abs(z)):.2f} over {z.size} comparisons"
    # The standard errors are not inflated: each setting's mean z^2 has mean 1 and variance at
    # most 2 (if its comparisons were fully correlated), so the grid mean is 1 +- 0.2 (1 sd).
    z2 = np.where(noiseless, np.nan, (estimates - exact) / np.where(noiseless, 1.0, se)) ** 2
    mean_z2 = float(np.mean(np.nanmean(z2, axis=1)))
    print(f"{name}: mean z^2 {mean_z2:.3f}")
    assert 0.3 < mean_z2 < 1.7, mean_z2


# -- the importance-weighted bound ----------------------------------------------------------------


def test_iwae_is_exact_with_the_exact_posterior_and_tightens_with_particles():
    family = FAMILIES["fullrank"]
    cov = jnp.linalg.inv(PRECISION)
    tril = jnp.linalg.cholesky(cov)
    exact_q = family.init(M)._replace(log_diag=jnp.log(jnp.diag(tril)), off_diag=tril)
    key = jax.random.PRNGKey(11)
    # q = posterior: every log weight is log Z, so the bound is log Z for any K.
    exact_bounds = jax.jit(
        lambda q: [vi.elbo(log_p, family, q, key, n, bound="iwae") for n in (1, 7)]
    )
    np.testing.assert_allclose(exact_bounds(exact_q), [LOG_Z, LOG_Z], rtol=1e-5)

    # q != posterior: E[ELBO] < E[IWAE_8] < E[IWAE_64] <= log Z, each mean over 4000 keys.
    params = random_params(family, jax.random.PRNGKey(12))
    keys = jax.random.split(jax.random.PRNGKey(13), 4000)

    bounds = jax.jit(
        jax.vmap(lambda k: [vi.elbo(log_p, family, params, k, n, bound="iwae") for n in (8, 64)])
    )
    (iwae_8, se_8), (iwae_64, se_64) = [
        (v.mean(), v.std(ddof=1) / np.sqrt(v.size))
        for v in (np.asarray(b, np.float64) for b in bounds(keys))
    ]
    elbo = float(exact_elbo(family, params))
    z = stats.norm.isf(ALPHA / 8)
    assert elbo < iwae_8 - z * se_8
    assert iwae_8 + z * se_8 < iwae_64 - z * se_64
    assert iwae_64 - z * se_64 < LOG_Z


def test_gradient_memory_is_that_of_one_chunk_whatever_the_particle_count():
    """Compiled temp memory of grad(elbo): flat in K when particles run in chunks.

    Each particle makes a 1000-float intermediate. Unchunked, the gradient keeps
    all K of them; in chunks of 100 the scan rematerialises each chunk, so it
    needs a few chunk-sized buffers (value and cotangent) plus one scalar carry
    per chunk.
    """
    matrix = jnp.ones((DIM, 1000))
    family = FAMILIES["meanfield"]
    params = family.init(jnp.zeros(DIM))
    key = jax.random.PRNGKey(0)

    def temp_bytes(num, chunk):
        grad = jax.jit(
            jax.grad(
                lambda p: vi.elbo(
                    lambda x: -0.5 * jnp.sum((x @ matrix) ** 2), family, p, key, num, chunk
                )
            )
        )
        return grad.lower(params).compile().memory_analysis().temp_size_in_bytes

    one_chunk = 100 * 1000 * 4
    unchunked = temp_bytes(10_000, None)
    assert unchunked > 10_000 * 1000 * 4  # every particle's intermediate is kept
    small, large = temp_bytes(10_000, 100), temp_bytes(1_000_000, 100)
    assert small < 3 * one_chunk and large < 3 * one_chunk
    assert large - small < 16 * (1_000_000 - 10_000) // 100  # <= 16 bytes per extra chunk
