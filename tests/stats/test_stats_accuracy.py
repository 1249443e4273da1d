"""Accuracy of the streaming diagnostics against ArviZ 0.23 on AR(1) chains.

Four chains of a stationary AR(1) process (unit variance) per ``rho``; two
elements per draw serve as two replicates. Exact quantities are compared to
float tolerance; approximate ones within the bounds the project requires:

* rank R-hat within 0.005;
* ess_bulk and ess_tail within 10%;
* quantiles within half their MCSE (``az.mcse(method="quantile")``).

The chain lengths make those bounds meaningful, not loose. Measured in
calibration runs with these settings (16 replicates: 4 seeds x 4 elements),
the ratio to ArviZ had replicate sd 0.3% / 1.4% (bulk / tail) at rho = 0,
0.5% / 2.2% at 0.5 and 1.3% / 3.6% at 0.9 with 20,000 draws per chain: 10% is
2.8 sd or more. Rank R-hat differed by at most 6e-5. Quantile errors were at
most 0.27 MCSE over 100 cases with 4,000 draws per chain.

rho = 0.99 (autocorrelation time 199) needs longer chains and lags than the
defaults (which cover autocorrelation times of tens of draws): 50,000 draws
per chain, 2,048 exact lags and block size 4 with 512 lags for the proxies,
marked slow. There the bulk ratio had sd 3-4% (10%
holds), but the tail ratio had sd 8-10% (6 replicates): ArviZ's own tail ESS
rests on a handful of excursions per split chain and the proxy thresholds
differ from the pooled ones. That case is checked at 3 measured sd (30%), a
documented limitation of the tail ESS in this regime.
"""

from __future__ import annotations

import functools
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.stats.helpers import ar1, sequential_runner, take_chain

from sluice import stats

CHAINS, ELEMENTS = 4, 2
# rho -> (draws per chain, lags); lags = exact lags = block lags at block size 1
SETTINGS = {0.0: (20_000, 256), 0.5: (20_000, 256), 0.9: (20_000, 256), 0.99: (50_000, 2048)}
BLOCKS = {0.99: ((4,), 512)}  # block level for the proxies (default: block size 1, same lags)
RHOS = [0.0, 0.5, 0.9, pytest.param(0.99, marks=pytest.mark.slow)]


@functools.cache
def _statistic(draws: int, lags: int, blocks: tuple[int, ...], block_lags: int) -> stats.Statistic:
    return stats.diagnostics(
        draws, probs=(), hdi_prob=None, max_lag=lags, block_sizes=blocks, block_lags=block_lags
    )


@functools.cache
def _result(rho: float):
    draws, lags = SETTINGS[rho]
    blocks, block_lags = BLOCKS.get(rho, ((1,), lags))
    x = ar1(seed=int(rho * 1000) + 7, chains=CHAINS, draws=draws, rho=rho, dim=ELEMENTS)
    x = x.astype(np.float32)
    s = _statistic(draws, lags, blocks, block_lags)
    # chains one after another (lax.map), as the engine on CPU: conds skip the rare work
    states = sequential_runner(s.init, s.update, long_chains=True)(
        {"x": jnp.asarray(x[0, -1])}, {"x": jnp.asarray(x)}
    )
    merge = s.merge
    merged = merge(
        merge(take_chain(states, 0), take_chain(states, 1)),
        merge(take_chain(states, 2), take_chain(states, 3)),
    )
    out = jax.device_get(s.finalize(merged))
    return x.astype(np.float64), {
        k: np.asarray(v["x"]) for k, v in out.items() if isinstance(v, dict)
    }


def _arviz(fn, x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(x, **kw))


@pytest.mark.parametrize("rho", RHOS)
def test_exact_outputs(rho):
    x, out = _result(rho)
    for d in range(ELEMENTS):
        xd = x[..., d]
        np.testing.assert_allclose(out["mean"][d], xd.mean(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(out["sd"][d], xd.std(ddof=1), rtol=1e-5)
        np.testing.assert_allclose(
            out["r_hat_split"][d], _arviz(az.rhat, xd, method="split"), rtol=1e-5
        )
        # ess_mean: exact whenever Geyer's truncation falls within max_lag (resolution 1)
        assert out["ess_mean_resolution"][d] == 1
        np.testing.assert_allclose(out["ess_mean"][d], _arviz(az.ess, xd, method="mean"), rtol=1e-3)
        np.testing.assert_allclose(
            out["mcse_mean"][d], _arviz(az.mcse, xd, method="mean"), rtol=1e-3
        )


@pytest.mark.parametrize("rho", RHOS)
def test_rank_rhat_within_0005(rho):
    x, out = _result(rho)
    for d in range(ELEMENTS):
        assert abs(out["r_hat"][d] - _arviz(az.rhat, x[..., d])) <= 0.005


@pytest.mark.parametrize("rho", RHOS)
def test_ess_bulk_and_tail_within_10_percent(rho):
    x, out = _result(rho)
    tail_bound = 0.30 if rho == 0.99 else 0.10  # see the module docstring
    for d in range(ELEMENTS):
        xd = x[..., d]
        assert abs(out["ess_bulk"][d] / _arviz(az.ess, xd, method="bulk") - 1) <= 0.10
        assert abs(out["ess_tail"][d] / _arviz(az.ess, xd, method="tail") - 1) <= tail_bound


@pytest.mark.parametrize("rho", RHOS)
def test_mcse_sd_within_10_percent(rho):
    """``mcse_sd``: ESS of ``(x - mean)^2`` from the exact y, y^2 cross lags (block size 1)."""
    x, out = _result(rho)
    for d in range(ELEMENTS):
        assert abs(out["mcse_sd"][d] / _arviz(az.mcse, x[..., d], method="sd") - 1) <= 0.10


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9, 0.99])
def test_quantiles_within_half_mcse(rho):
    draws = 4000
    probs = (0.05, 0.25, 0.5, 0.75, 0.95)
    x = ar1(seed=int(rho * 1000) + 3, chains=CHAINS, draws=draws, rho=rho, dim=ELEMENTS)
    x = x.astype(np.float32)
    s = stats.quantiles(probs)
    states = sequential_runner(s.init, s.update)(
        {"x": jnp.asarray(x[0, -1])}, {"x": jnp.asarray(x)}
    )
    merged = s.merge(
        s.merge(take_chain(states, 0), take_chain(states, 1)),
        s.merge(take_chain(states, 2), take_chain(states, 3)),
    )
    q = np.asarray(s.finalize(merged)["x"])
    x64 = x.astype(np.float64)
    for d in range(ELEMENTS):
        xd = x64[..., d]
        for j, p in enumerate(probs):
            mcse = _arviz(az.mcse, xd, method="quantile", prob=p)
            assert abs(q[d, j] - np.quantile(xd, p)) <= 0.5 * mcse, (d, p)


@functools.cache
def _antithetic(proxy_lags: int | None):
    """4 x 1,000 draws of AR(1) with rho = -0.3 (ESS about 1.9 x the draws, like NUTS output),
    4 elements, through the default diagnostics (block levels 8, 32, ...)."""
    draws = 1000
    x = ar1(seed=11, chains=CHAINS, draws=draws, rho=-0.3, dim=4).astype(np.float32)
    s = stats.diagnostics(draws, probs=(), hdi_prob=None, proxy_lags=proxy_lags)
    states = sequential_runner(s.init, s.update)(
        {"x": jnp.asarray(x[0, -1])}, {"x": jnp.asarray(x)}
    )
    merged = s.merge(
        s.merge(take_chain(states, 0), take_chain(states, 1)),
        s.merge(take_chain(states, 2), take_chain(states, 3)),
    )
    out = jax.device_get(s.finalize(merged))
    return x.astype(np.float64), {k: np.asarray(v["x"]) for k, v in out.items()
                                  if isinstance(v, dict)}  # fmt: skip


def test_ess_tail_antithetic_uses_exact_lags():
    """Antithetic chains with the default settings: the tail indicators' exact lags
    (resolution 1) give ArviZ's tail ESS within 10% (measured within 2.5%). Block means
    alone (``proxy_lags=1``) missed it by up to 14% on
    these chains."""
    x, out = _antithetic(None)
    for d in range(x.shape[-1]):
        assert out["ess_tail_resolution"][d] == 1
        reference = _arviz(az.ess, x[..., d], method="tail")
        assert abs(out["ess_tail"][d] / reference - 1) <= 0.10, d


def test_ess_bulk_antithetic_uses_exact_lags():
    """Antithetic chains with the default settings: the bulk proxy's exact lags (resolution
    1) give ArviZ's ESS within 10%. Block means alone (``proxy_lags=0``) missed it by up to 18% on these chains: Geyer's sequence on means of 8
    draws is noisy when the lag-1 autocorrelation is negative."""
    x, out = _antithetic(None)
    for d in range(x.shape[-1]):
        assert out["ess_bulk_resolution"][d] == 1
        reference = _arviz(az.ess, x[..., d], method="bulk")
        assert abs(out["ess_bulk"][d] / reference - 1) <= 0.10, d
