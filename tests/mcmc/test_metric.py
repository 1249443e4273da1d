"""The low-rank metric (sluice.mcmc.metric): its algebra, its fit, and NUTS adapting it.

References are independent of the code: the dense matrix built by NumPy, the
covariance of a Gaussian the draws come from, its exact moments.
"""

import os
import subprocess
import sys
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.mcmc import metric

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def x64():
    """float64 for the algebra's tests (restored after: the runs below are float32)."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def _random_low_rank(rng, dim, rank):
    u, _ = np.linalg.qr(rng.normal(size=(dim, rank)))
    return metric.LowRank(
        jnp.asarray(np.exp(rng.normal(size=dim))),
        jnp.asarray(u),
        jnp.asarray(np.exp(2 * rng.normal(size=rank))),
    )


def test_the_factor_squares_to_the_inverse_mass_matrix(x64):
    rng = np.random.default_rng(0)
    imm = _random_low_rank(rng, 7, 3)
    d, u, lam = (np.asarray(a) for a in imm)
    dense = np.sqrt(d)[:, None] * (np.eye(7) + u @ np.diag(lam - 1) @ u.T) * np.sqrt(d)[None, :]
    np.testing.assert_allclose(imm.dense(), dense, rtol=1e-12)
    f = metric.factor(imm)
    eye = np.eye(7)
    L = np.stack([metric.to_x(f, e) for e in eye], axis=1)  # columns L e_i
    np.testing.assert_allclose(L @ L.T, dense, rtol=1e-10)
    y = rng.normal(size=7)
    np.testing.assert_allclose(metric.to_y(f, metric.to_x(f, y)), y, rtol=1e-10)
    g = rng.normal(size=7)
    np.testing.assert_allclose(metric.grad_y(f, g), L.T @ g, rtol=1e-10)
    # every eigenvalue one: the diagonal alone
    plain = metric.identity_low_rank(7, 3, jnp.float64)._replace(diagonal=imm.diagonal)
    np.testing.assert_allclose(plain.dense(), np.diag(d), rtol=1e-12)


@pytest.mark.parametrize("kept", [True, False])
def test_a_large_factor_applies_as_the_dense_matrix_with_or_without_directions(x64, kept):
    # U of 2,000 x 4 entries: past metric.SKIP_ELEMENTS, so the products sit in a cond
    rng = np.random.default_rng(1)
    imm = _random_low_rank(rng, 2000, 4)
    assert imm.vectors.size >= metric.SKIP_ELEMENTS
    if not kept:
        imm = imm._replace(values=jnp.ones(4))
    d, u, lam = (np.asarray(a) for a in imm)
    root = np.sqrt(d)[:, None] * (np.eye(2000) + u @ np.diag(np.sqrt(lam) - 1) @ u.T)
    f = metric.factor(imm)
    y, g = rng.normal(size=2000), rng.normal(size=2000)
    np.testing.assert_allclose(metric.to_x(f, y), root @ y, rtol=1e-9)
    np.testing.assert_allclose(metric.grad_y(f, g), root.T @ g, rtol=1e-9)
    np.testing.assert_allclose(metric.to_y(f, root @ y), y, rtol=1e-9)


def test_auto_fits_a_low_rank_metric_up_to_its_bound_and_a_diagonal_beyond(monkeypatch):
    from sluice.mcmc import kernels

    position = jnp.zeros(3, jnp.float32)
    point = sluice.nuts().init(position, lambda x: -0.5 * jnp.sum(x**2))  # with its gradient
    auto = sluice.nuts()
    assert auto.mass_matrix == "auto"
    state = auto.adaptation().init(point, 1.0)
    assert isinstance(state.inverse_mass_matrix, metric.LowRank)
    assert state.window.shape == (128, 2, 3)
    # one element: no direction to fit
    one = sluice.nuts().init(jnp.zeros(1), lambda x: -0.5 * jnp.sum(x**2))
    assert auto.adaptation().init(one, 1.0).window is None
    # a point without its gradient: the diagonal (Stan's estimator)
    state = auto.adaptation().init(position, 1.0)
    assert state.inverse_mass_matrix.shape == (3,) and state.window is None
    monkeypatch.setattr(kernels, "LOW_RANK_MAX_DIM", 2)
    state = sluice.nuts().adaptation().init(point, 1.0)
    assert state.inverse_mass_matrix.shape == (3,) and state.window is None
    # an explicit choice is kept whatever the size
    state = sluice.nuts(mass_matrix="low_rank").adaptation().init(point, 1.0)
    assert isinstance(state.inverse_mass_matrix, metric.LowRank)


def _gaussian(rng, dim, strong):
    """A covariance with scales over a decade and ``strong`` far-from-round directions."""
    q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    values = np.ones(dim)
    values[:strong] = np.geomspace(50.0, 0.02, strong)
    scales = np.exp(rng.uniform(-1.2, 1.2, dim))
    return scales[:, None] * (q * values) @ q.T * scales[None, :]


def test_the_fit_recovers_a_gaussian_from_its_draws_and_gradients(x64):
    # For a Gaussian g = -Sigma^{-1} x whatever the draws, so the Fisher fit is exact
    # given enough directions: the metric is Sigma itself (without the ridge).
    rng = np.random.default_rng(1)
    dim, n = 8, 100
    cov = _gaussian(rng, dim, 3)
    x = rng.multivariate_normal(np.zeros(dim), cov, size=n)
    g = -x @ np.linalg.inv(cov)
    diagonal = np.sqrt(x.var(0) / g.var(0))  # the Fisher diagonal
    fit, misfit = metric.fit_low_rank(
        jnp.asarray(x),
        jnp.asarray(g),
        jnp.ones(n, bool),
        jnp.asarray(diagonal),
        rank=dim,
        cutoff=1.0 + 1e-9,
        gamma=0.0,
    )  # no ridge: exact up to float64 rounding
    np.testing.assert_allclose(fit.dense(), cov, rtol=2e-3, atol=2e-3 * np.abs(cov).max())
    # the gradients are linear in the draws along every direction: no misfit
    np.testing.assert_allclose(float(misfit), 1.0, rtol=1e-6)
    # with fewer directions than that, the farthest from round in the scaled space
    # (D^{-1/2} Sigma D^{-1/2}) are kept, and the rest left to the diagonal
    scaled = np.linalg.eigvalsh(cov / np.sqrt(np.outer(diagonal, diagonal)))
    farthest = scaled[np.argsort(-np.abs(np.log(scaled)))[:2]]
    fit, _ = metric.fit_low_rank(
        jnp.asarray(x), jnp.asarray(g), jnp.ones(n, bool), jnp.asarray(diagonal), rank=2,
        cutoff=1.5, gamma=0.0,
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(fit.values), farthest, rtol=1e-4)
    assert np.all(np.abs(np.log(farthest)) > np.log(1.5))


def test_rows_not_marked_valid_are_ignored_and_chains_fit_one_by_one(x64):
    rng = np.random.default_rng(2)
    dim, n = 6, 40
    cov = _gaussian(rng, dim, 2)
    x = rng.multivariate_normal(np.zeros(dim), cov, size=(3, n))
    g = -x @ np.linalg.inv(cov)
    valid = np.arange(n) < 25
    diagonal = np.sqrt(x[:, :25].var(1) / g[:, :25].var(1))

    def fit(x, g, valid, d):
        return metric.fit_low_rank(x, g, valid, d, rank=3)[0]

    junk = np.where(valid[None, :, None], x, 1e3)  # what the ring held before
    one = [fit(x[c, :25], g[c, :25], np.ones(25, bool), diagonal[c]) for c in range(3)]
    batched = jax.jit(jax.vmap(fit, in_axes=(0, 0, None, 0)))(junk, g, valid, diagonal)
    for c in range(3):
        np.testing.assert_allclose(
            metric.LowRank(*(a[c] for a in batched)).dense(), one[c].dense(), rtol=1e-8
        )


def test_mass_matrix_settings_are_validated_and_round_trip():
    assert sluice.nuts(dense_mass=True).mass_matrix == "dense"
    assert sluice.nuts(mass_matrix="dense").dense_mass is True
    kernel = sluice.nuts(mass_matrix="low_rank", max_rank=4)
    from sluice.mcmc.kernels import kernel_from_config

    assert kernel_from_config(kernel.to_config()) == kernel
    # the shortcuts of sluice.sample override either name
    from sluice.mcmc.kernels import get_kernel

    assert get_kernel(sluice.nuts(dense_mass=True), dense_mass=False).mass_matrix == "auto"
    assert get_kernel(kernel, dense_mass=False).mass_matrix == "low_rank"
    assert get_kernel("nuts", dense_mass=False).mass_matrix == "auto"
    assert get_kernel("nuts", mass_matrix="low_rank").dense_mass is False
    assert get_kernel("hmc", dense_mass=True).mass_matrix == "dense"
    with pytest.raises(ValueError, match="mass_matrix must be one of"):
        sluice.nuts(mass_matrix="full")
    with pytest.raises(ValueError, match="contradict"):
        sluice.nuts(mass_matrix="low_rank", dense_mass=True)
    with pytest.raises(ValueError, match="max_rank"):
        sluice.nuts(mass_matrix="low_rank", max_rank=0)


@pytest.fixture(scope="module")
def correlated():
    rng = np.random.default_rng(3)
    dim = 10
    cov = _gaussian(rng, dim, 3)
    precision = jnp.asarray(np.linalg.inv(cov), jnp.float32)
    run = sluice.sample(
        lambda x: -0.5 * x @ precision @ x, init=jnp.zeros(dim, jnp.float32), chains=4,
        warmup=600, draws=1000, seed=4, progress=False,
        kernel=sluice.nuts(mass_matrix="low_rank", max_rank=6),
    )  # fmt: skip
    return cov, run


def test_nuts_with_a_low_rank_metric_recovers_a_correlated_gaussian(correlated):
    cov, run = correlated
    x = np.asarray(run.draws["x"], np.float64)
    for k in range(x.shape[-1]):
        xk = x[..., k]
        mcse_mean, mcse_sd = float(az.mcse(xk, method="mean")), float(az.mcse(xk, method="sd"))
        assert abs(xk.mean()) <= 4.5 * mcse_mean, (k, xk.mean(), mcse_mean)
        assert abs(xk.std(ddof=1) - np.sqrt(cov[k, k])) <= 4.5 * mcse_sd, (k, xk.std(), mcse_sd)
    assert float(az.rhat(az.convert_to_dataset({"x": x}))["x"].max()) < 1.01


def test_the_adapted_metric_finds_the_posteriors_long_direction(correlated):
    cov, run = correlated
    values, vectors = np.linalg.eigh(cov)
    longest = vectors[:, -1]
    imm = run.info.inverse_mass_matrix
    assert isinstance(imm, metric.LowRank)
    for chain in range(4):
        dense = np.asarray(metric.LowRank(*(a[chain] for a in imm)).dense(), np.float64)
        w, v = np.linalg.eigh(dense)
        assert abs(v[:, -1] @ longest) > 0.95, chain
        assert 0.5 < w[-1] / values[-1] < 2.0, (chain, w[-1], values[-1])
    # the diagonal metric needs many more leapfrog steps per draw on this posterior
    diag = sluice.sample(
        lambda x: -0.5 * x @ jnp.asarray(np.linalg.inv(cov), jnp.float32) @ x,
        init=jnp.zeros(10, jnp.float32), chains=4, warmup=600, draws=200, seed=4,
        progress=False, mass_matrix="diag",
    )  # fmt: skip
    steps = lambda r: np.asarray(r.sample_stats["n_steps"]).mean()  # noqa: E731
    assert steps(diag) > 3 * steps(run), (steps(diag), steps(run))


def test_vectorized_chains_on_several_cpu_devices_fit_without_hanging():
    # jaxlib's batched SVD waits on XLA's intra-op thread pool; 4 vectorized chains on
    # 2 CPU devices hung there for good before the fit ran chain by chain. A child
    # process, so that a hang fails the test instead of stopping the suite.
    code = (
        "import jax, jax.numpy as jnp, sluice\n"
        "run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(30), chains=4,\n"
        "    warmup=60, draws=10, chunk_size=30, chain_method='vectorized', progress=False,\n"
        "    kernel=sluice.nuts(mass_matrix='low_rank'), devices=jax.devices()[:2])\n"
        "print('done', run.draws['x'].shape)\n"
    )
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 0 and "done (4, 10, 30)" in proc.stdout, proc.stderr[-2000:]


def test_the_docs_example_runs_and_the_low_rank_metric_takes_fewer_steps(capsys):
    import re

    text = (ROOT / "docs" / "kernels.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "low_rank" in b)
    exec(compile(block, "docs/kernels.md", "exec"), {})
    steps = dict(re.findall(r"(diag|low_rank) (\d+) gradients per draw", capsys.readouterr().out))
    assert int(steps["diag"]) > 5 * int(steps["low_rank"]), steps
