"""Edge cases, mirrored from ArviZ 0.23 (or documented where sluice differs), and errors."""

from __future__ import annotations

import re
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.stats.helpers import ar1, jit, merge_tree, scan_runner, take_chain

from sluice import stats

N_ODD = 101  # odd: ArviZ drops the middle draw from both halves
# lags 48 >= every lag ArviZ reads for halves of 50 draws: ess_mean is exact
DIAG = stats.diagnostics(N_ODD, probs=(0.5,), max_lag=48, block_sizes=(1,), block_lags=48)


def _run(statistic, x: np.ndarray, example=None):
    """Per-chain states of ``x`` (chain, draw, 2) under ``statistic`` (example: chain 0's last draw)."""
    example = {"x": jnp.asarray(x[0, -1] if example is None else example)}
    return scan_runner(statistic.init, statistic.update)(example, {"x": jnp.asarray(x)})


def _merged(statistic, states, chains):
    merge = jit(statistic.merge)
    out = merge_tree(
        merge, [take_chain(states, c) for c in range(chains)], np.random.default_rng(0)
    )
    return jax.device_get(jit(statistic.finalize)(out))


def _az(fn, x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(x, **kw))


@pytest.fixture(scope="module")
def odd():
    x = ar1(5, 4, N_ODD, 0.3, dim=2).astype(np.float32)
    return x, _merged(DIAG, _run(DIAG, x), 4)


def test_odd_num_draws_matches_arviz(odd):
    x, out = odd
    x64 = x.astype(np.float64)
    for d in range(2):
        xd = x64[..., d]
        np.testing.assert_allclose(out["mean"]["x"][d], xd.mean(), atol=1e-6)  # middle included
        np.testing.assert_allclose(
            out["r_hat_split"]["x"][d], _az(az.rhat, xd, method="split"), rtol=1e-5
        )
        np.testing.assert_allclose(
            out["ess_mean"]["x"][d], _az(az.ess, xd, method="mean"), rtol=1e-4
        )


def test_constant_element_follows_arviz():
    x = ar1(6, 4, N_ODD, 0.3, dim=2).astype(np.float32)
    x[..., 0] = 2.5
    out = _merged(DIAG, _run(DIAG, x), 4)
    const = x[..., 0].astype(np.float64)
    split_size = 4 * 2 * (N_ODD // 2)
    assert out["ess_mean"]["x"][0] == _az(az.ess, const, method="mean") == split_size
    assert out["ess_bulk"]["x"][0] == _az(az.ess, const, method="bulk") == split_size
    assert out["ess_tail"]["x"][0] == _az(az.ess, const, method="tail") == split_size
    assert np.isnan(out["r_hat"]["x"][0]) and np.isnan(_az(az.rhat, const))
    assert out["sd"]["x"][0] == 0 and out["mcse_mean"]["x"][0] == 0
    assert np.isnan(out["mcse_sd"]["x"][0]) and np.isnan(_az(az.mcse, const, method="sd"))
    assert out["quantiles"]["x"][0, 0] == 2.5
    assert np.isfinite(out["r_hat"]["x"][1])  # the other element is unaffected


def test_nan_draw_gives_nan_like_arviz():
    x = ar1(7, 4, N_ODD, 0.3, dim=2).astype(np.float32)
    x[2, 40, 1] = np.nan
    out = _merged(DIAG, _run(DIAG, x), 4)
    for key in (
        "mean",
        "sd",
        "r_hat",
        "r_hat_split",
        "ess_mean",
        "ess_bulk",
        "ess_tail",
        "mcse_mean",
        "quantiles",
    ):
        assert np.all(np.isnan(out[key]["x"][1])), key
        assert np.all(np.isfinite(out[key]["x"][0])), key
    assert np.isnan(_az(az.ess, x[..., 1].astype(np.float64))) and np.isnan(
        _az(az.rhat, x[..., 1].astype(np.float64))
    )


def test_one_chain_has_nan_rhat_and_arviz_ess(odd):
    x, _ = odd
    state = take_chain(_run(DIAG, x), 0)
    out = jax.device_get(jit(DIAG.finalize)(state))
    x0 = x[:1].astype(np.float64)
    for d in range(2):
        assert np.isnan(out["r_hat"]["x"][d]) and np.isnan(_az(az.rhat, x0[..., d]))
        np.testing.assert_allclose(
            out["ess_mean"]["x"][d], _az(az.ess, x0[..., d], method="mean"), rtol=1e-4
        )
        np.testing.assert_allclose(out["mean"]["x"][d], x0[..., d].mean(), atol=1e-6)


def test_fewer_than_four_draws_give_nan():
    s = stats.ess(3, method="mean", max_lag=2)
    x = ar1(8, 2, 3, 0.0, dim=2).astype(np.float32)
    out = _merged(s, _run(s, x), 2)
    assert np.all(np.isnan(out["x"]))
    assert np.isnan(_az(az.ess, x[..., 0].astype(np.float64), method="mean"))
    r = stats.rhat(3, method="split")
    assert np.all(np.isnan(_merged(r, _run(r, x), 2)["x"]))


def test_finalize_mid_run_reports_the_draws_so_far():
    """Finalize is callable at any time; mid-run, the split follows ``num_draws``
    (the first half is partial), so only the moments are ArviZ's on the draws seen."""
    x = ar1(9, 2, 30, 0.3, dim=2).astype(np.float32)
    out = _merged(DIAG, _run(DIAG, x), 2)
    np.testing.assert_allclose(out["mean"]["x"], x.astype(np.float64).mean(axis=(0, 1)), atol=1e-6)
    assert np.all(np.isfinite(out["ess_mean"]["x"]))


def test_states_with_different_pilots_cannot_be_merged():
    """Examples must be the same on every chain (the engine guarantees it). The
    diagnostics, whose histograms depend on the pilot, return NaN when merged
    otherwise; plain moments re-centre and stay exact."""
    x = ar1(10, 2, N_ODD, 0.3, dim=2).astype(np.float32)
    a = take_chain(_run(DIAG, x[:1], example=x[0, 0]), 0)
    b = take_chain(_run(DIAG, x[1:], example=x[1, 0]), 0)
    out = jax.device_get(jit(DIAG.finalize)(jit(DIAG.merge)(a, b)))
    assert np.all(np.isnan(out["mean"]["x"])) and np.all(np.isnan(out["r_hat"]["x"]))
    for s, ref in (
        (stats.mean(), x.astype(np.float64).mean(axis=(0, 1))),
        (stats.variance(), x.astype(np.float64).reshape(-1, 2).var(axis=0, ddof=1)),
    ):
        sa = take_chain(_run(s, x[:1], example=x[0, 0]), 0)
        sb = take_chain(_run(s, x[1:], example=x[1, 0]), 0)
        np.testing.assert_allclose(s.finalize(s.merge(sa, sb))["x"], ref, rtol=1e-5)


def test_max_elements_caps_histograms_and_lags_per_quantity():
    s = stats.rhat(N_ODD, max_elements=1)
    x = ar1(11, 2, N_ODD, 0.3, dim=2).astype(np.float32)
    out = _merged(s, _run(s, x), 2)["x"]
    assert np.isfinite(out[0]) and np.isnan(out[1])
    state = s.init({"x": jnp.zeros(2), "y": jnp.zeros(())})
    assert state.parts[1].counts.shape[1] == 2  # one element of x, and y


def test_float64_draws_under_x64():
    with jax.enable_x64(True):
        s = stats.rhat(N_ODD, method="split")
        x = ar1(12, 3, N_ODD, 0.5, dim=2)
        states = scan_runner(s.init, s.update)({"x": jnp.asarray(x[0, -1])}, {"x": jnp.asarray(x)})
        assert states.parts[0].xmin.dtype == jnp.float64
        out = _merged(s, states, 3)["x"]
    for d in range(2):
        np.testing.assert_allclose(out[d], _az(az.rhat, x[..., d], method="split"), rtol=1e-12)


@pytest.mark.parametrize(
    ("factory", "name", "value"),
    [
        (lambda v: stats.diagnostics(v), "num_draws", 0),
        (lambda v: stats.ess(100, max_lag=v), "max_lag", -1),
        (lambda v: stats.ess(100, block_sizes=v), "block_sizes", (4, 6)),
        (lambda v: stats.ess(100, block_lags=v), "block_lags", 0),
        (lambda v: stats.diagnostics(100, proxy_lags=v), "proxy_lags", 2),
        (lambda v: stats.ess(100, method=v), "method", "median"),
        (lambda v: stats.rhat(100, method=v), "method", "identity"),
        (lambda v: stats.quantiles(v), "probs", (0.5, 1.5)),
        (lambda v: stats.hdi(v), "prob", 0.0),
        (lambda v: stats.diagnostics(100, hdi_prob=v), "hdi_prob", 1.5),
        (lambda v: stats.diagnostics(100, max_elements=v), "max_elements", 0),
        (lambda v: stats.diagnostics(100, mantissa_bits=v), "mantissa_bits", 9),
        (lambda v: stats.variance(ddof=v), "ddof", -1),
        (lambda v: stats.summary_statistics(100, hdi_prob=v), "hdi_prob", -0.5),
    ],
)
def test_bad_settings_name_the_argument_and_value(factory, name, value):
    with pytest.raises(ValueError, match=rf"{name}.*{re.escape(repr(value))}"):
        factory(value)


def test_restrict_unknown_name_fails_at_init():
    s = stats.restrict(stats.mean(), ["beta"])
    with pytest.raises(ValueError, match="beta"):
        s.init({"alpha": jnp.zeros(2)})


def test_group_requires_statistics():
    with pytest.raises(TypeError, match="statistics"):
        stats.group({"a": lambda x: x})


def test_unfinished_block_of_the_first_half_stays_out_of_the_second():
    """With 10 draws per half and blocks of 8, the first half's last 2 draws are an
    unfinished block: the second half's first block mean is of its own 8 draws only."""
    s = stats.diagnostics(20, probs=(), hdi_prob=None, max_lag=2, block_sizes=(8,), block_lags=1)
    x = jnp.arange(1.0, 21.0) ** 2  # distinct values, one element
    state = s.init({"x": jnp.zeros(1)})
    state = jit(
        lambda st: jax.lax.scan(lambda c, v: (s.update(c, {"x": v[None]}), None), st, x)[0]
    )(state)
    level = state.parts[2].levels[0]
    y_sums = np.asarray(level.half_sum[0])[:, 0]  # feature y: per half, the sum of block means
    np.testing.assert_allclose(y_sums, [np.mean(x[0:8]), np.mean(x[10:18])], rtol=1e-6)


def test_strongly_antithetic_short_chains_give_arviz_capped_ess_not_negative():
    """A lag-1 autocorrelation near -1 makes the first Geyer pair sum below 1/2, so
    tau = -1 + 2 (rho_0 + rho_1) < 0. ArviZ clamps tau at 1 / log10(N): the ESS is
    its cap N log10 N. The streaming ESS was negative there (it capped only from above)."""
    draws = 60
    s = stats.ess(draws, method="mean", max_lag=8)
    x = ar1(14, 1, draws, -0.95, dim=3).astype(np.float32)
    out = _merged(s, _run(s, x), 1)
    x64 = x.astype(np.float64)
    cap = draws * np.log10(draws)
    for d in range(3):
        reference = _az(az.ess, x64[..., d], method="mean")
        assert reference == pytest.approx(cap), "the chain must reach ArviZ's clamp"
        np.testing.assert_allclose(out["x"][d], reference, rtol=1e-4)
