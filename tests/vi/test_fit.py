"""fit(): recovery of conjugate posteriors, chunk invariance, compile reuse, errors, results."""

import io
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import sluice
from sluice import vi
from sluice._jax import compile as programs

# -- conjugate targets with known posteriors ------------------------------------------------------

_rng = np.random.default_rng(0)

# Bayesian linear regression, known noise: w ~ N(0, tau^2 I), y ~ N(X w, sigma^2 I).
# Correlated columns give a correlated posterior N(m, S).
SIGMA, TAU = 1.0, 2.0
_z = _rng.normal(size=(20, 1))
X = (0.8 * _z + 0.6 * _rng.normal(size=(20, 3))).astype(np.float32)
Y = (X @ np.array([1.0, -0.5, 0.3]) + SIGMA * _rng.normal(size=20)).astype(np.float32)
REG_PRECISION = np.eye(3) / TAU**2 + X.T.astype(np.float64) @ X / SIGMA**2
REG_COV = np.linalg.inv(REG_PRECISION)
REG_MEAN = REG_COV @ X.T.astype(np.float64) @ Y / SIGMA**2


def regression_model(X, Y):
    X, Y = jnp.asarray(X), jnp.asarray(Y)
    return sluice.Model(
        lambda p: (
            -0.5 * jnp.sum((Y - X @ p["w"]) ** 2) / SIGMA**2 - 0.5 * jnp.sum(p["w"] ** 2) / TAU**2
        ),
        init={"w": jnp.zeros(3)},
    )


# Independent normal means with known scales: a diagonal posterior.
GROUP_SCALES = np.array([0.5, 1.0, 2.0, 4.0], np.float32)
GROUP_DATA = (
    _rng.normal(size=(4, 10)) * GROUP_SCALES[:, None] + np.array([[1.0], [-2.0], [0.0], [3.0]])
).astype(np.float32)
GROUP_PRECISION = 1.0 / TAU**2 + 10 / GROUP_SCALES.astype(np.float64) ** 2
GROUP_MEAN = GROUP_DATA.astype(np.float64).sum(1) / GROUP_SCALES**2 / GROUP_PRECISION
GROUP_MODEL = sluice.Model(
    lambda p: (
        -0.5 * jnp.sum(((GROUP_DATA - p["mu"][:, None]) / GROUP_SCALES[:, None]) ** 2)
        - 0.5 * jnp.sum(p["mu"] ** 2) / TAU**2
    ),
    init={"mu": jnp.zeros(4)},
)

NUM_SEEDS = 16
STEPS = 4000
OPTIMIZER = optax.adam(optax.cosine_decay_schedule(0.05, STEPS))  # one object: compiled once
ALPHA = 1e-3  # family-wise false-alarm rate of each recovery test


def _fits(model, family):
    """Fitted means and covariances over NUM_SEEDS independent fits."""
    means, covs = [], []
    for seed in range(NUM_SEEDS):
        result = vi.fit(
            model,
            family=family,
            particles=64,
            steps=STEPS,
            optimizer=OPTIMIZER,
            seed=seed,
            progress=False,
            chunk_size=STEPS,
        )
        tril = np.asarray(family.scale_tril(result.params), np.float64)
        means.append(np.asarray(family.mean(result.params), np.float64))
        covs.append(tril @ tril.T)
    return np.array(means), np.array(covs)


def _recovers(estimates, exact, scale):
    """Whether independent fits agree with the exact answer.

    The mean over seeds must be within a Bonferroni-corrected t bound of the
    exact value (its standard error is the spread over seeds / sqrt(seeds)),
    and every fit must be precise: a spread over seeds under 5% of ``scale``
    (the posterior standard deviation of that quantity's units), so the test
    has power. Returns (ok, worst t, worst relative spread).
    """
    estimates = estimates.reshape(len(estimates), -1)
    exact, scale = np.ravel(exact), np.ravel(scale)
    spread = estimates.std(0, ddof=1)
    t = (estimates.mean(0) - exact) / (spread / np.sqrt(len(estimates)))
    bound = stats.t.isf(ALPHA / (2 * t.size), len(estimates) - 1)
    ok = np.all(np.abs(t) < bound) and np.all(spread < 0.05 * scale)
    return ok, float(np.max(np.abs(t))), float(np.max(spread / scale))


def test_meanfield_is_exact_for_a_diagonal_gaussian_posterior():
    means, covs = _fits(GROUP_MODEL, vi.meanfield())
    sd = np.sqrt(1.0 / GROUP_PRECISION)
    assert _recovers(means, GROUP_MEAN, sd)[0], _recovers(means, GROUP_MEAN, sd)
    fitted_sd = np.sqrt(np.diagonal(covs, axis1=1, axis2=2))
    assert _recovers(fitted_sd, sd, sd)[0], _recovers(fitted_sd, sd, sd)


def test_fullrank_is_exact_for_a_correlated_gaussian_posterior():
    means, covs = _fits(regression_model(X, Y), vi.fullrank())
    sd = np.sqrt(np.diag(REG_COV))
    assert _recovers(means, REG_MEAN, sd)[0], _recovers(means, REG_MEAN, sd)
    scale = np.outer(sd, sd)
    assert _recovers(covs, REG_COV, scale)[0], _recovers(covs, REG_COV, scale)


def test_meanfield_on_a_correlated_posterior_finds_the_known_kl_optimum():
    """Mean-field q minimising KL(q||p) for Gaussian p: exact means, sd_j = 1/sqrt(P_jj).

    The same criterion rejects the true marginal sds, so it is not vacuous.
    """
    means, covs = _fits(regression_model(X, Y), vi.meanfield())
    sd = np.sqrt(np.diag(REG_COV))
    assert _recovers(means, REG_MEAN, sd)[0], _recovers(means, REG_MEAN, sd)
    fitted_sd = np.sqrt(np.diagonal(covs, axis1=1, axis2=2))
    kl_optimum = 1.0 / np.sqrt(np.diag(REG_PRECISION))
    assert _recovers(fitted_sd, kl_optimum, sd)[0], _recovers(fitted_sd, kl_optimum, sd)
    assert not _recovers(fitted_sd, sd, sd)[0]


# -- chunks, particles in chunks, compile once ------------------------------------------------------

SMALL = dict(family="fullrank", particles=8, steps=250, seed=3, progress=False)


def test_fit_does_not_depend_on_chunk_size():
    model = regression_model(X, Y)
    reference = vi.fit(model, chunk_size=250, **SMALL)
    for chunk_size in (100, 37):  # 37: a short, masked last chunk
        other = vi.fit(model, chunk_size=chunk_size, **SMALL)
        assert other.info.chunk_size == chunk_size
        np.testing.assert_array_equal(other.elbo, reference.elbo)
        for a, b in zip(other.params, reference.params, strict=True):
            np.testing.assert_array_equal(a, b)
    # Particles evaluated in chunks of 3: the same fit up to float summation order.
    chunked = vi.fit(model, chunk_size=250, particle_chunk_size=3, **SMALL)
    np.testing.assert_allclose(chunked.elbo, reference.elbo, rtol=1e-4)
    np.testing.assert_allclose(chunked.params.loc, reference.params.loc, rtol=1e-4, atol=1e-5)
    assert np.all(np.isfinite(reference.elbo)) and reference.elbo.shape == (250,)


def test_new_data_seed_and_steps_reuse_the_compiled_program():
    """Also with the default optimizer (keyed by its settings, built anew each fit)."""
    programs.clear()
    model = regression_model(X, Y)
    first = vi.fit(model, chunk_size=50, **SMALL)
    compiled = [key for key in programs.cached() if key[0].startswith("vi.")]
    assert sorted(key[0] for key in compiled) == ["vi.advance", "vi.init"]
    other_data = regression_model(X[::-1], Y[::-1] + 1.0)
    second = vi.fit(other_data, chunk_size=50, **{**SMALL, "seed": 9, "steps": 120})
    assert second._program.key == first._program.key
    assert [key for key in programs.cached() if key[0].startswith("vi.")] == compiled
    assert not np.allclose(second.params.loc, first.params.loc)


def test_the_iwae_bound_can_be_optimised():
    """Optimising IWAE with the exact family also drives q to the posterior (the bound is then log Z)."""
    result = vi.fit(
        regression_model(X, Y),
        family="fullrank",
        bound="iwae",
        particles=16,
        steps=1500,
        optimizer=optax.adam(optax.cosine_decay_schedule(0.05, 1500)),
        progress=False,
        chunk_size=1500,
    )
    log_z = (
        -0.5 * float(np.sum(Y.astype(np.float64) ** 2)) / SIGMA**2
        + 0.5 * REG_MEAN @ REG_PRECISION @ REG_MEAN
        + 1.5 * np.log(2 * np.pi)
        - 0.5 * np.linalg.slogdet(REG_PRECISION)[1]
    )
    # The last 100 estimates scatter around a bound <= log Z; the fit's noise is small.
    tail = result.elbo[-100:].astype(np.float64)
    assert np.all(np.isfinite(result.elbo))
    assert abs(tail.mean() - log_z) < 0.05 + 5 * tail.std(ddof=1) / 10


# -- errors ----------------------------------------------------------------------------------------


class _Counting:
    """A log density that counts how often it is traced (to prove nothing compiled)."""

    calls = 0

    def __call__(self, x):
        type(self).calls += 1
        return -0.5 * jnp.sum(x**2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(particles=0), ValueError, "particles must be a positive integer, got 0"),
        (dict(particles=True), ValueError, "particles must be a positive integer, got True"),
        (dict(steps=-5), ValueError, "steps must be a positive integer, got -5"),
        (dict(steps=10.0), ValueError, "steps must be a positive integer, got 10.0"),
        (dict(seed="a"), TypeError, "seed must be an integer, got 'a'"),
        (dict(family="gaussian"), ValueError, "family must be one of .* got 'gaussian'"),
        (dict(bound="kl"), ValueError, "bound must be one of .* got 'kl'"),
        (dict(particle_chunk_size=0), ValueError, "particle_chunk_size must be .* got 0"),
        (dict(chunk_size=-1), ValueError, "chunk_size must be a positive integer, got -1"),
        (dict(optimizer="adam"), TypeError, "optimizer must be an optax .* got 'adam'"),
        (dict(progress="yes"), TypeError, "progress must be True or False, got 'yes'"),
        (dict(init=None), TypeError, "init is required"),
        (dict(init=jnp.array([0.0, jnp.nan])), ValueError, "init must be finite"),
    ],
)
def test_bad_arguments_are_rejected_before_anything_is_traced(kwargs, error, match):
    _Counting.calls = 0
    settings = {"init": jnp.zeros(2), "progress": False, **kwargs}
    with pytest.raises(error, match=match):
        vi.fit(_Counting(), **settings)
    assert _Counting.calls == 0


CLIFF = sluice.Model(  # pulled towards 20, but log density is nan past x[1] = 10
    lambda p: -0.5 * jnp.sum((p["x"] - 20.0) ** 2) + jnp.sqrt(10.0 - p["x"][1]),
    init={"x": jnp.zeros(3)},
)
CLIFF_SETTINGS = dict(particles=16, steps=2000, optimizer=optax.sgd(0.05), progress=False)


def test_a_non_finite_step_stops_the_fit_naming_the_step_and_parameters():
    with pytest.raises(vi.FitError) as caught:
        vi.fit(CLIFF, chunk_size=4, **CLIFF_SETTINGS)
    error = caught.value
    assert error.step >= 8  # in a later chunk: the pipelined host loop still stops there
    assert error.parameters == ["loc of x[1]", "log_scale of x[1]"]
    message = str(error)
    assert f"step {error.step}:" in message and "loc of x[1], log_scale of x[1]" in message
    assert "ELBO estimate is nan" in message
    assert error.elbo.shape == (error.step,) and np.all(np.isfinite(error.elbo))
    assert all(np.all(np.isfinite(leaf)) for leaf in error.params)
    # The first failing step does not depend on the chunking.
    with pytest.raises(vi.FitError) as again:
        vi.fit(CLIFF, chunk_size=1000, **CLIFF_SETTINGS)
    assert again.value.step == error.step


def test_a_fit_starting_outside_the_support_says_so():
    model = sluice.Model(lambda p: jnp.sum(jnp.log(p["s"])), init={"s": -jnp.ones(2)})
    with pytest.raises(vi.FitError, match=r"step 0: .*log_density at the initial mean is nan"):
        vi.fit(model, particles=4, steps=10, progress=False)


# -- the result -----------------------------------------------------------------------------------

SCALE_MODEL = sluice.Model(
    lambda p: jnp.sum(stats_norm_logpdf(GROUP_DATA[0], p["mu"], jnp.exp(p["log_s"]))),
    init={"mu": jnp.zeros(()), "log_s": jnp.zeros(())},
    transform=lambda p: {"mu": p["mu"], "s": jnp.exp(p["log_s"])},
    log_likelihood=lambda p: {"y": stats_norm_logpdf(GROUP_DATA[0], p["mu"], jnp.exp(p["log_s"]))},
    observed_data={"y": GROUP_DATA[0]},
    dims={"y": ["obs"]},
)


def stats_norm_logpdf(x, loc, scale):
    return jax.scipy.stats.norm.logpdf(x, loc, scale)


@pytest.fixture(scope="module")
def scale_fit():
    return vi.fit(SCALE_MODEL, particles=32, steps=300, optimizer=optax.adam(0.05), progress=False)


def test_samples_are_named_constrained_quantities(scale_fit):
    draws = scale_fit.sample(500, seed=1)
    assert {k: v.shape for k, v in draws.items()} == {"mu": (500,), "s": (500,)}
    assert np.all(draws["s"] > 0)
    again = vi.sample(SCALE_MODEL, scale_fit.family, scale_fit.params, jax.random.PRNGKey(1), 500)
    np.testing.assert_allclose(draws["s"], again["s"], rtol=1e-6)
    np.testing.assert_array_equal(scale_fit.sample(500, seed=1)["mu"], draws["mu"])
    assert set(scale_fit.mean()) == {"mu", "log_s"}


def test_to_arviz_and_summary(scale_fit):
    idata = scale_fit.to_arviz(num_samples=200)
    assert set(idata.groups()) == {"posterior", "log_likelihood", "observed_data"}
    assert idata.posterior["s"].shape == (1, 200)
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "obs")
    assert idata.posterior.attrs["family"] == "meanfield"
    table = scale_fit.summary(num_samples=500)
    assert list(table.index) == ["mu", "s"]
    assert {"mean", "sd"} <= set(table.columns)
    draws = scale_fit.sample(500)
    np.testing.assert_allclose(table.loc["s", "mean"], draws["s"].mean(), atol=1e-3)
    assert "meanfield, 32 particles x 300 steps" in repr(scale_fit)


def test_progress_bar_shows_chunks_and_elbo(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    vi.fit(SCALE_MODEL, particles=32, steps=300, optimizer=optax.adam(0.05), chunk_size=100)
    shown = terminal.getvalue()
    assert "chunk 3/3" in shown and "ELBO" in shown and "300/300" in shown


def test_the_traced_modules_import_no_io_libraries():
    code = (
        "import sys, sluice.vi.particles, sluice.vi.families\n"
        "bad = [m for m in ('tqdm', 'arviz', 'matplotlib', 'xarray') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )
