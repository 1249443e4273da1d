"""The summary table of the default summary: the rows and columns of ``az.summary``,
values within accuracy."""

from __future__ import annotations

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from tests.stats.helpers import ar1, jit, merge_tree

from sluice import stats
from sluice.stats import streaming
from sluice.stats.base import block_update

CHAINS, DRAWS, CHUNK, PILOT = 4, 2000, 500, 128


@pytest.fixture(scope="module")
def tables():
    x = ar1(21, CHAINS, PILOT + DRAWS, 0.5, dim=7).astype(np.float32)
    every = {
        "beta": x[..., :2],
        "sigma": np.exp(x[..., 2]),
        "x": x[..., 3:].reshape(CHAINS, PILOT + DRAWS, 2, 2),
    }
    pilot = {k: jnp.asarray(v[:, :PILOT].reshape(-1, *v.shape[2:])) for k, v in every.items()}
    draws = {k: v[:, PILOT:] for k, v in every.items()}
    s = streaming.summary(DRAWS, chunk_size=CHUNK)
    advance = jit(block_update(s))
    states = []
    for c in range(CHAINS):
        state = s.init(pilot)
        for start in range(0, DRAWS, CHUNK):
            chunk = {k: jnp.asarray(v[c, start : start + CHUNK]) for k, v in draws.items()}
            state = advance(state, chunk, CHUNK)
        states.append(state)
    merged = merge_tree(jit(s.merge), states, np.random.default_rng(1))
    result = jax.device_get(s.finalize(merged))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = az.from_dict({k: v.astype(np.float64) for k, v in draws.items()})
        reference = az.summary(data, round_to="none")
        reference_eti = az.summary(data, round_to="none", stat_focus="median")
    return result, reference, reference_eti


def test_rows_and_columns_match_arviz(tables):
    result, reference, reference_eti = tables
    table = stats.summary_table(result, round_to="none")
    assert table.index.tolist() == reference.index.tolist()
    assert table.columns.tolist() == reference.columns.tolist()
    eti = stats.summary_table(result, interval="eti", round_to="none")
    assert [c for c in eti.columns if c.startswith("eti")] == [
        c for c in reference_eti.columns if c.startswith("eti")
    ]


def test_values_within_accuracy(tables):
    """Exact columns to float tolerance; the others within the accuracy of the default
    summary (``test_stats_accuracy.py``): rank R-hat 5e-3, bulk ESS and MCSE of the
    mean and sd 10%, tail ESS 15%, HDI ends 5% of the sd (two order statistics at an
    argmin, about 2 MCSE of a 3% quantile)."""
    result, reference, _ = tables
    table = stats.summary_table(result, round_to="none")
    np.testing.assert_allclose(table["mean"], reference["mean"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(table["sd"], reference["sd"], rtol=1e-5)
    np.testing.assert_allclose(table["mcse_mean"], reference["mcse_mean"], rtol=0.10)
    np.testing.assert_allclose(table["mcse_sd"], reference["mcse_sd"], rtol=0.10)
    np.testing.assert_allclose(table["r_hat"], reference["r_hat"], atol=5e-3)
    np.testing.assert_allclose(table["ess_bulk"], reference["ess_bulk"], rtol=0.10)
    np.testing.assert_allclose(table["ess_tail"], reference["ess_tail"], rtol=0.15)
    for column in ("hdi_3%", "hdi_97%"):
        np.testing.assert_allclose(
            table[column], reference[column], atol=0.05 * float(reference["sd"].max())
        )


def test_default_rounding_is_arviz_rounding(tables):
    result, _, _ = tables
    raw = stats.summary_table(result, round_to="none")
    rounded = stats.summary_table(result)
    pd.testing.assert_series_equal(rounded["mean"], raw["mean"].round(3))
    pd.testing.assert_series_equal(rounded["ess_bulk"], raw["ess_bulk"].round(0))
    pd.testing.assert_series_equal(rounded["r_hat"], raw["r_hat"].round(2))
    with pytest.raises(ValueError, match="round_to"):
        stats.summary_table(result, round_to=1.5)
    with pytest.raises(ValueError, match="interval"):
        stats.summary_table(result, interval="hpd")
