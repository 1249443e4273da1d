"""Edge cases of the default summary, mirrored from ArviZ 0.23 (or documented where sluice
differs), and errors."""

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
from sluice.stats import streaming
from sluice.stats.base import block_update

N_ODD = 101  # odd: ArviZ drops the middle draw from both halves
PILOT = 32
# ess_mean on halves of 50 draws: the lag products across the split and at the halves'
# ends (about lags / n of the pairs) are approximated; 4.3% at most here
SHORT_ESS = 0.05


def _chains(seed: int, chains: int, draws: int, rho: float, dim: int = 2):
    """``(pilot rows (chains * PILOT, dim), draws (chains, draws, dim))``, float32."""
    x = ar1(seed, chains, PILOT + draws, rho, dim=dim).astype(np.float32)
    return x[:, :PILOT].reshape(-1, dim), x[:, PILOT:]


def _states(x: np.ndarray, pilot: np.ndarray, chunk: int | None = None) -> list:
    """Each chain's summary state, fed a chunk at a time as the engine does."""
    draws = x.shape[1]
    chunk = chunk or draws
    s = streaming.summary(draws, chunk_size=chunk)
    advance = jit(block_update(s))
    out = []
    for c in range(x.shape[0]):
        state = s.init({"x": jnp.asarray(pilot)})
        for start in range(0, draws, chunk):
            rows = x[c, start : start + chunk]
            piece = np.zeros((chunk, x.shape[2]), x.dtype)
            piece[: len(rows)] = rows
            state = advance(state, {"x": jnp.asarray(piece)}, len(rows))
        out.append(state)
    return s, out


def _summary(x: np.ndarray, pilot: np.ndarray, chunk: int | None = None) -> dict:
    s, states = _states(x, pilot, chunk)
    merged = merge_tree(jit(s.merge), states, np.random.default_rng(0))
    out = jax.device_get(s.finalize(merged))
    return {k: np.asarray(v["x"]) for k, v in out.items() if isinstance(v, dict)}


def _az(fn, x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(np.asarray(fn(x, **kw)).item())


def test_odd_num_draws_matches_arviz():
    pilot, x = _chains(5, 4, N_ODD, 0.3)
    out = _summary(x, pilot)
    x64 = x.astype(np.float64)
    for d in range(2):
        xd = x64[..., d]
        np.testing.assert_allclose(out["mean"][d], xd.mean(), atol=1e-6)  # middle included
        np.testing.assert_allclose(out["r_hat_split"][d], _az(az.rhat, xd, method="split"),
                                   rtol=1e-5)  # fmt: skip
        np.testing.assert_allclose(
            out["ess_mean"][d], _az(az.ess, xd, method="mean"), rtol=SHORT_ESS
        )


def test_odd_chunks_split_where_arviz_does():
    """Chunks of 25 draws: ArviZ's split of 101 draws falls on the middle draw of
    the third chunk (draw 50), with a short last chunk: split R-hat stays exact."""
    pilot, x = _chains(15, 3, N_ODD, 0.3)
    out = _summary(x, pilot, chunk=25)
    for d in range(2):
        xd = x[..., d].astype(np.float64)
        np.testing.assert_allclose(out["r_hat_split"][d], _az(az.rhat, xd, method="split"),
                                   rtol=1e-5)  # fmt: skip


def _constant():
    pilot, x = _chains(6, 4, N_ODD, 0.3)
    x[..., 0] = 2.5
    pilot[:, 0] = 2.5  # its warmup too
    return x, _summary(x, pilot)


def test_constant_element_follows_arviz():
    """A constant element: ESS is the split size, split R-hat NaN, sd and MCSE of the
    mean 0, as in ArviZ; its quantiles are the value. ArviZ's ``mcse_sd`` is NaN there
    (0 / 0); the summary reads 0, the MCSE of an sd known exactly."""
    x, out = _constant()
    const = x[..., 0].astype(np.float64)
    split_size = 4 * 2 * (N_ODD // 2)
    assert out["ess_mean"][0] == _az(az.ess, const, method="mean") == split_size
    assert out["ess_bulk"][0] == _az(az.ess, const, method="bulk") == split_size
    assert out["ess_tail"][0] == _az(az.ess, const, method="tail") == split_size
    assert np.isnan(out["r_hat_split"][0]) and np.isnan(_az(az.rhat, const, method="split"))
    assert out["sd"][0] == 0 and out["mcse_mean"][0] == 0
    assert out["mcse_sd"][0] == 0 and np.isnan(_az(az.mcse, const, method="sd"))
    assert np.all(out["quantiles"][0] == 2.5) and np.all(out["hdi"][0] == 2.5)
    assert np.isfinite(out["r_hat"][1])  # the other element is unaffected


def test_constant_element_has_nan_rank_rhat_like_arviz():
    """ArviZ's rank R-hat of a constant element is NaN (no variance); so is the
    summary's, its warmup constant too (every reference knot tied)."""
    x, out = _constant()
    assert np.isnan(_az(az.rhat, x[..., 0].astype(np.float64)))
    assert np.isnan(out["r_hat"][0])


def test_chains_stuck_apart_give_numbers_like_arviz():
    """Chains that never moved, each at its own value, warmup included (HMC with a
    step size far too large): every knot of the reference is tied to another. The
    summary gives a number wherever ArviZ does, and the HDI and the outer quantiles
    are the draws' extremes, as ArviZ's."""
    values = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    x = np.repeat(values[:, None, :], N_ODD, axis=1)
    out = _summary(x, np.repeat(values, PILOT, axis=0))
    for d in range(3):
        xd = x[..., d].astype(np.float64)
        np.testing.assert_allclose(out["hdi"][d], _az_hdi(xd), rtol=1e-6)
        np.testing.assert_allclose(out["quantiles"][d][[0, 2]], [xd.min(), xd.max()], rtol=1e-6)
        for key, fn in (("ess_bulk", az.ess), ("mcse_mean", az.mcse)):
            assert np.isfinite(out[key][d]) == np.isfinite(_az(fn, xd)), key
        for key in ("mean", "sd", "mcse_sd", "ess_tail"):
            assert np.isfinite(out[key][d]), key


def _az_hdi(x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(az.hdi(x.ravel(), hdi_prob=0.94)).ravel()


@pytest.mark.parametrize("warmup", ["constant", "stuck low", "stuck high"])
def test_a_warmup_stuck_at_one_value_still_reads_the_quantiles(warmup):
    """Half the chains, or all, stuck at one value through warmup (a short warmup, a
    small pilot) and moving afterwards: the reference's knots are tied at one end, or
    all of them. The quantiles read from the histogram still miss the draws' exact
    quantiles by less than the Monte Carlo error (ArviZ's MCSE of each quantile): rms
    under half of it, none over 1.5 times it."""
    errors = []
    for seed in range(4):
        pilot, x = _chains(seed, 4, N_ODD, 0.3, dim=4)
        stuck = slice(None) if warmup == "constant" else slice(0, 2 * PILOT)
        at = {"constant": 0.7, "stuck low": pilot.min(0) - 0.5, "stuck high": pilot.max(0) + 0.5}
        pilot[stuck] = at[warmup]
        out = _summary(x, pilot)
        for d in range(4):
            xd = x[..., d].astype(np.float64)
            for i, prob in enumerate((0.03, 0.5, 0.97)):
                mcse = _az(az.mcse, xd, method="quantile", prob=prob)
                errors.append((out["quantiles"][d][i] - np.quantile(xd, prob)) / mcse)
            assert out["hdi"][d][0] <= out["quantiles"][d][1] <= out["hdi"][d][1]
    errors = np.abs(errors)
    assert np.sqrt(np.mean(errors**2)) < 0.5 and errors.max() < 1.5, errors.max()


def test_nan_draw_gives_nan_like_arviz():
    pilot, x = _chains(7, 4, N_ODD, 0.3)
    x[2, 40, 1] = np.nan
    out = _summary(x, pilot)
    for key in ("mean", "sd", "r_hat", "r_hat_split", "ess_mean", "ess_bulk", "ess_tail",
                "mcse_mean", "quantiles"):  # fmt: skip
        assert np.all(np.isnan(out[key][1])), key
        assert np.all(np.isfinite(out[key][0])), key
    x1 = x[..., 1].astype(np.float64)
    assert np.isnan(_az(az.ess, x1)) and np.isnan(_az(az.rhat, x1))


def test_one_chain_has_nan_rhat_and_arviz_ess():
    pilot, x = _chains(5, 4, N_ODD, 0.3)
    s, states = _states(x, pilot)
    out = jax.device_get(s.finalize(states[0]))
    x0 = x[:1].astype(np.float64)
    for d in range(2):
        assert np.isnan(out["r_hat"]["x"][d]) and np.isnan(_az(az.rhat, x0[..., d]))
        np.testing.assert_allclose(
            out["ess_mean"]["x"][d], _az(az.ess, x0[..., d], method="mean"), rtol=SHORT_ESS
        )
        np.testing.assert_allclose(out["mean"]["x"][d], x0[..., d].mean(), atol=1e-6)


def test_fewer_than_four_draws_give_nan():
    pilot, x = _chains(8, 2, 3, 0.0)
    out = _summary(x, pilot)
    assert np.all(np.isnan(out["ess_mean"])) and np.all(np.isnan(out["r_hat_split"]))
    assert np.isnan(_az(az.ess, x[..., 0].astype(np.float64), method="mean"))


def test_states_with_different_pilots_cannot_be_merged():
    """Every chain must get the same pilot (the engine guarantees it). The summary,
    whose sums and histograms are relative to its reference, returns NaN when merged
    otherwise; plain moments re-centre and stay exact."""
    pilot, x = _chains(10, 2, N_ODD, 0.3)
    s, (a, _) = _states(x, pilot)
    _, (_, b) = _states(x, pilot + 1.0)
    out = jax.device_get(s.finalize(s.merge(a, b)))
    assert np.all(np.isnan(out["mean"]["x"])) and np.all(np.isnan(out["r_hat"]["x"]))
    for m, ref in (
        (stats.mean(), x.astype(np.float64).mean(axis=(0, 1))),
        (stats.variance(), x.astype(np.float64).reshape(-1, 2).var(axis=0, ddof=1)),
    ):
        run = scan_runner(m.init, m.update)
        sa = take_chain(run({"x": jnp.asarray(x[0, 0])}, {"x": jnp.asarray(x[:1])}), 0)
        sb = take_chain(run({"x": jnp.asarray(x[1, 0])}, {"x": jnp.asarray(x[1:])}), 0)
        np.testing.assert_allclose(m.finalize(m.merge(sa, sb))["x"], ref, rtol=1e-5)


def test_float64_draws_under_x64():
    with jax.enable_x64(True):
        x = ar1(12, 3, PILOT + N_ODD, 0.5, dim=2)
        pilot, x = x[:, :PILOT].reshape(-1, 2), x[:, PILOT:]
        s, states = _states(x, pilot)
        assert states[0].knots.dtype == jnp.float64
        out = jax.device_get(s.finalize(s.merge(s.merge(states[0], states[1]), states[2])))
    for d in range(2):
        np.testing.assert_allclose(
            out["r_hat_split"]["x"][d], _az(az.rhat, x[..., d], method="split"), rtol=1e-12
        )


def test_strongly_antithetic_short_chains_give_arviz_capped_ess_not_negative():
    """A lag-1 autocorrelation near -1 makes the first Geyer pair sum below 1/2, so
    tau = -1 + 2 (rho_0 + rho_1) < 0. ArviZ clamps tau at 1 / log10(N): the ESS is
    its cap N log10 N, never negative."""
    draws = 60
    pilot, x = _chains(14, 1, draws, -0.95, dim=3)
    out = _summary(x, pilot)
    x64 = x.astype(np.float64)
    cap = draws * np.log10(draws)
    for d in range(3):
        reference = _az(az.ess, x64[..., d], method="mean")
        assert reference == pytest.approx(cap), "the chain must reach ArviZ's clamp"
        np.testing.assert_allclose(out["ess_mean"][d], reference, rtol=1e-4)


@pytest.mark.parametrize(
    ("factory", "name", "value"),
    [
        (lambda v: streaming.summary(v), "num_draws", 0),
        (lambda v: streaming.summary(100, chunk_size=v), "chunk_size", 0),
        (lambda v: streaming.summary(100, hdi_prob=v), "hdi_prob", 1.5),
        (lambda v: streaming.summary(100, hdi_prob=v), "hdi_prob", -0.5),
        (lambda v: streaming.summary(100, lags=v), "lags", 1),
        (lambda v: streaming.summary(100, block=v), "block", 1),
        (lambda v: streaming.summary(100, block_lags=v), "block_lags", 2),
        (lambda v: streaming.summary(100, buckets=v), "buckets", 4),
        (lambda v: streaming.summary(100, pilot=v), "pilot", 0),
        (lambda v: stats.variance(ddof=v), "ddof", -1),
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
