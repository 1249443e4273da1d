"""The summary table: same rows and columns as ``az.summary``, values within accuracy."""

from __future__ import annotations

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from tests.stats.helpers import ar1, jit, merge_tree, scan_runner, take_chain

from sluice import stats

CHAINS, DRAWS = 4, 2000


@pytest.fixture(scope="module")
def tables():
    x = ar1(21, CHAINS, DRAWS, 0.5, dim=7).astype(np.float32)
    draws = {
        "beta": x[..., :2],
        "sigma": np.exp(x[..., 2]),
        "x": x[..., 3:].reshape(CHAINS, DRAWS, 2, 2),
    }
    s = stats.summary_statistics(DRAWS)
    example = {k: jnp.asarray(v[0, -1]) for k, v in draws.items()}
    states = scan_runner(s.init, s.update)(example, jax.tree.map(jnp.asarray, draws))
    merge = jit(s.merge)
    merged = merge_tree(
        merge, [take_chain(states, c) for c in range(CHAINS)], np.random.default_rng(1)
    )
    result = jax.device_get(jit(s.finalize)(merged))
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
    """Exact columns to float tolerance; the others within the bounds measured for the
    defaults on 4 x 2,000 draws (block size 8 for the bulk and tail proxies): rank R-hat
    5e-3, ESS 25% (replicate sd of the ratio 3-6%), MCSE of the sd 10%, intervals 5% of
    the sd (two order statistics at an argmin, about 2 MCSE of a 3% quantile)."""
    result, reference, _ = tables
    table = stats.summary_table(result, round_to="none")
    np.testing.assert_allclose(table["mean"], reference["mean"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(table["sd"], reference["sd"], rtol=1e-5)
    np.testing.assert_allclose(table["mcse_mean"], reference["mcse_mean"], rtol=0.10)
    np.testing.assert_allclose(table["mcse_sd"], reference["mcse_sd"], rtol=0.10)
    np.testing.assert_allclose(table["r_hat"], reference["r_hat"], atol=5e-3)
    for column in ("ess_bulk", "ess_tail"):
        np.testing.assert_allclose(table[column], reference[column], rtol=0.25)
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
