"""Streaming statistics inside the engine: defaults, user statistics, stats-only runs.

The statistics themselves are checked against NumPy and ArviZ in ``tests/stats``;
here: they are fed the run's draws in order, per chain, and report the same
summary whether or not the draws are kept.
"""

import warnings
from typing import NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice import stats

MODEL = sluice.Model(
    lambda p: (
        -0.5 * jnp.sum(((p["b"] - jnp.array([1.0, -2.0])) / jnp.array([1.0, 3.0])) ** 2)
        - 0.5 * p["log_s"] ** 2
    ),
    init={"b": jnp.zeros(2), "log_s": jnp.zeros(())},
    transform=lambda p: {"b": p["b"], "s": jnp.exp(p["log_s"])},
    dims={"b": ["city"]},
    coords={"city": ["Oslo", "Lima"]},
)
SETTINGS = dict(chains=4, warmup=200, draws=400, seed=11, chunk_size=100, progress=False)


class NormState(NamedTuple):
    total: jax.Array
    count: jax.Array


def mean_norm() -> stats.Statistic:
    """A user statistic: the mean Euclidean norm of ``b``."""

    def init(example):
        return NormState(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))

    def update(state, draw):
        return NormState(state.total + jnp.linalg.norm(draw["b"]), state.count + 1)

    def merge(a, b):
        return NormState(a.total + b.total, a.count + b.count)

    def finalize(state):
        return state.total / state.count

    return stats.Statistic(init, update, merge, finalize)


USER = {"norm": mean_norm(), "count": stats.count()}


@pytest.fixture(scope="module")
def stored():
    return sluice.sample(MODEL, stats=USER, default_stats=True, **SETTINGS)


@pytest.fixture(scope="module")
def streamed():
    return sluice.sample(MODEL, stats=USER, sink=None, **SETTINGS)


def test_streaming_and_stored_runs_give_the_same_statistics(stored, streamed):
    a, b = stored.stats, streamed.stats
    assert set(a) == {"summary", "norm", "count"}
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert stored.summary().equals(streamed.summary())


def test_statistics_see_every_draw_in_order(stored):
    b = stored.draws["b"].astype(np.float64)
    assert int(stored.stats["count"]) == 4 * 400
    np.testing.assert_allclose(stored.stats["norm"], np.linalg.norm(b, axis=-1).mean(), rtol=1e-5)
    per_chain = stored.stats_per_chain
    assert len(per_chain) == 4
    for c in range(4):
        np.testing.assert_allclose(per_chain[c]["summary"]["mean"]["b"], b[c].mean(0), atol=1e-5)
        np.testing.assert_allclose(
            per_chain[c]["norm"], np.linalg.norm(b[c], axis=-1).mean(), rtol=1e-5
        )
    summary = stored.stats["summary"]
    np.testing.assert_allclose(summary["mean"]["b"], b.reshape(-1, 2).mean(0), atol=1e-5)
    np.testing.assert_allclose(summary["sd"]["b"], b.reshape(-1, 2).std(0, ddof=1), rtol=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in range(2):
            np.testing.assert_allclose(
                summary["r_hat_split"]["b"][d], az.rhat(b[..., d], method="split"), rtol=1e-4
            )
            # exact lags up to 16, block means beyond: within the 5% the defaults promise
            np.testing.assert_allclose(
                summary["ess_mean"]["b"][d], az.ess(b[..., d], method="mean"), rtol=0.05
            )


def test_summary_from_statistics_matches_arviz_on_the_draws(stored):
    table = stored.summary()
    expected = stored.summary(source="draws")
    assert list(table.columns) == list(expected.columns)
    # rows named with the model's coordinates, as ArviZ names them
    assert list(table.index) == list(expected.index) == ["b[Oslo]", "b[Lima]", "s"]
    np.testing.assert_allclose(table["mean"], expected["mean"], atol=2e-3)
    np.testing.assert_allclose(table["sd"], expected["sd"], atol=2e-3)
    np.testing.assert_allclose(table["r_hat"], expected["r_hat"], atol=0.011)
    # interval ends and ESS are approximate (see docs/statistics.md)
    sd = expected["sd"].to_numpy()
    for col in ("hdi_3%", "hdi_97%"):
        assert np.all(np.abs(table[col] - expected[col]) < 0.2 * sd), col
    eti = stored.summary(interval="eti")
    assert list(eti.columns[2:4]) == ["eti_3%", "eti_97%"]


def test_default_statistics_can_be_switched_off_and_clash_is_named():
    plain = sluice.sample(MODEL, default_stats=False, **SETTINGS)
    assert plain.stats == {}
    table = plain.summary()  # falls back to ArviZ on the kept draws
    assert list(table.index) == ["b[Oslo]", "b[Lima]", "s"]
    nothing = sluice.sample(MODEL, default_stats=False, sink=None, **SETTINGS)
    with pytest.raises(ValueError, match="computed no summary statistics"):
        nothing.summary()
    with pytest.raises(ValueError, match="clashes with the default summary"):
        sluice.sample(MODEL, stats={"summary": stats.count()}, sink=None, **SETTINGS)
    with pytest.raises(TypeError, match="default_stats must be True, False or 'auto', got 'yes'"):
        sluice.sample(MODEL, default_stats="yes", **SETTINGS)
    with pytest.raises(ValueError, match="source must be"):
        plain.summary(source="disk")


def test_default_statistics_auto_follow_the_sink():
    """ "auto": streamed when the draws are not kept in memory; ArviZ on kept draws."""
    kept = sluice.sample(MODEL, **SETTINGS)
    assert kept.stats == {}
    assert list(kept.summary().index) == ["b[Oslo]", "b[Lima]", "s"]
    streamed = sluice.sample(MODEL, sink=None, **SETTINGS)
    assert set(streamed.stats) == {"summary"}


def test_draws_do_not_depend_on_the_statistics_and_these_update_in_a_program_apart(
    monkeypatch,
):
    """Past plan.CLASSIC_STATISTICS_ELEMENTS elements the statistics' update compiles
    with other XLA options than the sampler: in a program of its own, so the sampler's
    program, and the draws, are the same whether or not statistics are computed. That
    program compiles once, in the background beside init, for the draws the run
    keeps (with their sample statistics) as for a run that keeps none."""
    from sluice._jax import compile as programs
    from sluice.runtime import plan

    d = plan.CLASSIC_STATISTICS_ELEMENTS + 20
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(d), name="separate-stats")
    settings = dict(chains=2, warmup=40, draws=50, chunk_size=20, seed=3, progress=False)
    plain = sluice.sample(model, default_stats=False, **settings)
    programs.clear()
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    with_stats = sluice.sample(model, default_stats=True, **settings)
    programs.wait()
    np.testing.assert_array_equal(with_stats.draws["x"], plain.draws["x"])
    names = [key[1] for key in programs.cached() if key[0] == "mcmc.chunk"]
    assert sorted(names) == [
        "advance_donated", "init", "update_statistics_donated", "window_end_donated"
    ]  # fmt: skip
    x = plain.draws["x"].astype(np.float64)
    np.testing.assert_allclose(with_stats.stats["summary"]["mean"]["x"], x.mean((0, 1)), atol=1e-5)
    np.testing.assert_allclose(
        with_stats.stats["summary"]["sd"]["x"], x.reshape(-1, d).std(0, ddof=1), rtol=1e-4
    )


@pytest.mark.filterwarnings("ignore::sluice.DiagnosticWarning")  # 20 warmup iterations
def test_statistics_that_cannot_fit_are_refused_before_anything_runs(monkeypatch, tmp_path):
    """A run whose statistics' states alone exceed the memory free on its devices fails
    at once, naming the sizes and what to change, before a store is created; where the
    free memory is unknown the run goes ahead."""
    from sluice._jax.memory import free_bytes
    from sluice.runtime import plan

    assert free_bytes(jax.devices()) > 0  # the host's available memory, on this CPU
    wide = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(200), name="wide")
    settings = dict(chains=4, warmup=20, draws=20, seed=1, progress=False)
    monkeypatch.setattr(plan, "free_bytes", lambda devices: 2**20)  # 1 MiB free
    path = tmp_path / "run.zarr"
    with pytest.raises(ValueError, match=r"need .* GiB for this process's 4 chains of 200 "
                       r"elements .*default_stats=False"):  # fmt: skip
        sluice.sample(wide, sink=sluice.ZarrSink(str(path)), **settings)
    assert not path.exists()
    with pytest.raises(ValueError, match="default_stats"):
        sluice.sample(wide, sink=None, **settings)
    sluice.sample(wide, default_stats=False, **settings)  # no statistics: nothing to hold
    monkeypatch.setattr(plan, "free_bytes", lambda devices: None)
    run = sluice.sample(wide, sink=None, **settings)
    assert run.summary().shape[0] == 200
