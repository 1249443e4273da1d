"""Kernels behind the statistics: Geyer truncation, compensated sums, the pilot grid."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz.stats.diagnostics import _ess
from arviz.stats.stats_utils import autocov
from tests.stats.helpers import ar1

from sluice.stats._numerics import Compensated, compensated_add, compensated_value, geyer_tau
from sluice.stats.grid import (
    GridSpec,
    bucket_edges,
    bucket_edges_at,
    bucket_index,
    exponent,
    remap,
)
from sluice.stats.histogram import _search_counts, counts_quantile

geyer = jax.jit(geyer_tau)


def _lags_read_by_arviz(acov_mean, within, var_plus, n):
    """The largest lag ArviZ's initial-sequence loop reads (a transcription of its loop)."""
    rho = 1.0 - (within - acov_mean) / var_plus
    t, even, odd, largest = 1, 1.0, rho[1], 1
    while t < n - 3 and even + odd > 0.0:
        even, odd = rho[t + 1], rho[t + 2]
        largest = t + 2
        t += 2
    return largest


@pytest.mark.parametrize("lags", [3, 8, 31, 64])
def test_geyer_equals_arviz_within_its_lags(lags):
    """Random chain counts, lengths and correlations: the vectorised truncation
    reports termination exactly when ArviZ's loop reads no lag beyond the given
    ones, and then gives ArviZ's ESS to float64 round-off."""
    rng = np.random.default_rng(lags)
    ends = 0
    with jax.enable_x64(True):
        for _ in range(40):
            m = int(rng.integers(1, 5))
            n = int(rng.integers(4, 90))
            rho = float(rng.choice([-0.5, 0.0, 0.4, 0.8, 0.97]))
            x = ar1(int(rng.integers(1 << 30)), m, n, rho)[..., 0]
            ac = autocov(x, axis=1)
            full = np.zeros(n + 3)
            full[:n] = ac.mean(0)
            w = ac[:, 0].mean() * n / (n - 1)
            vp = w * (n - 1) / n + (x.mean(1).var(ddof=1) if m > 1 else 0.0)
            acm = (
                full[: lags + 1]
                if lags + 1 <= len(full)
                else np.pad(full, (0, lags + 1 - len(full)))
            )
            res = geyer(jnp.asarray(acm), jnp.asarray(w), jnp.asarray(vp), n)
            needed = _lags_read_by_arviz(full, w, vp, n)
            assert bool(res.terminated) == (needed <= lags), (m, n, rho, needed)
            if bool(res.terminated):
                ends += 1
                size = m * n
                ess = size / max(float(res.tau), 1 / np.log10(size))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    np.testing.assert_allclose(ess, _ess(x), rtol=1e-9)
    assert ends >= 10  # the comparison is not vacuous


def test_compensated_sum_keeps_float32_digits():
    rng = np.random.default_rng(0)
    values = (1e4 + rng.normal(size=200_000)).astype(np.float32)
    exact = values.astype(np.float64).sum()

    @jax.jit
    def both(v):
        def body(carry, x):
            plain, comp = carry
            return (plain + x, compensated_add(comp, x)), None

        zero = jnp.zeros((), jnp.float32)
        return jax.lax.scan(body, (zero, Compensated(zero, zero)), v)[0]

    plain, comp = both(jnp.asarray(values))
    plain_err = abs(float(plain) - exact) / exact
    comp_err = abs(float(compensated_value(comp)) - exact) / exact
    assert comp_err < 1e-7 < plain_err  # the plain float32 sum has lost digits


def test_exponent_matches_log2_including_subnormals():
    x = np.array([1.0, 0.75, 3e-40, 1e-45, 2.0**-126, 5.0, 2.0**100, -0.3], np.float32)
    expected = np.floor(np.log2(np.abs(x.astype(np.float64)))).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(exponent(jnp.asarray(x))), expected)


SPEC = GridSpec(4, 6)


def _random_grid(rng, d):
    floor = rng.integers(-12, 12, size=d).astype(np.int32)
    top = (floor + rng.integers(1, SPEC.binades + 1, size=d)).astype(np.int32)
    u = (rng.standard_cauchy(d) * 2.0 ** rng.integers(-14, 14, size=d)).astype(np.float32)
    u[:3] = [0.0, -0.0, 2.0 ** float(floor[2])]
    return floor, top, u


def test_buckets_contain_their_values():
    rng = np.random.default_rng(1)
    floor, top, u = _random_grid(rng, 2000)
    b = np.asarray(bucket_index(jnp.asarray(u), jnp.asarray(floor), jnp.asarray(top), SPEC))
    lo, hi = (
        np.asarray(a) for a in bucket_edges(jnp.asarray(floor), jnp.asarray(top), SPEC, jnp.float32)
    )
    rows = np.arange(len(u))
    low, high = lo[rows, b], hi[rows, b]
    inside = ((low <= u) & (u < high)) | ((u < 0) & (low < u) & (u <= high)) | (u == 0)
    assert inside.all()
    assert (np.diff(lo, axis=1) >= 0).all()  # buckets are ordered by value


def test_edges_at_given_buckets_equal_the_full_table():
    """The gathered edges (used by quantiles) are the same numbers as the full table."""
    rng = np.random.default_rng(3)
    floor, top, _ = _random_grid(rng, 500)
    floor, top = jnp.asarray(floor), jnp.asarray(top)
    lo, hi = (np.asarray(a) for a in bucket_edges(floor, top, SPEC, jnp.float32))
    index = rng.integers(0, SPEC.size, size=(500, 7, 3)).astype(np.int32)
    lo_at, hi_at = bucket_edges_at(floor, top, jnp.asarray(index), SPEC, jnp.float32)
    rows = np.arange(500)[:, None, None]
    np.testing.assert_array_equal(np.asarray(lo_at), lo[rows, index])
    np.testing.assert_array_equal(np.asarray(hi_at), hi[rows, index])


def test_remap_equals_binning_on_the_coarser_grid():
    """Raising the floor and lowering the top re-bins exactly (merging is exact)."""
    rng = np.random.default_rng(2)
    d = 2000
    floor, top, u = _random_grid(rng, d)
    # what merging produces: a higher floor and a lower top, the floor not above the top
    new_floor = floor + rng.integers(0, top - floor + 1).astype(np.int32)
    new_top = np.minimum(top, new_floor + SPEC.binades)
    new_top = (new_top - rng.integers(0, new_top - new_floor + 1)).astype(np.int32)
    old = np.asarray(bucket_index(jnp.asarray(u), jnp.asarray(floor), jnp.asarray(top), SPEC))
    new = np.asarray(
        bucket_index(jnp.asarray(u), jnp.asarray(new_floor), jnp.asarray(new_top), SPEC)
    )
    counts = np.zeros((d, SPEC.size), np.int32)
    counts[np.arange(d), old] = 1
    moved = np.asarray(remap(jnp.asarray(counts), jnp.asarray(floor), jnp.asarray(top),
                             jnp.asarray(new_floor), jnp.asarray(new_top), SPEC))  # fmt: skip
    direct = np.zeros_like(counts)
    direct[np.arange(d), new] = 1
    np.testing.assert_array_equal(moved, direct)


@pytest.mark.parametrize("num_levels", [3, 40])  # two-level search, full cumulative sum
def test_bucket_search_equals_searchsorted(num_levels):
    rng = np.random.default_rng(4)
    d, g = 300, 578
    counts = rng.poisson(rng.uniform(0.0, 3.0, size=(d, 1)), size=(d, g)) * (
        rng.uniform(size=(d, g)) < rng.uniform(0.0, 1.0, size=(d, 1))
    )
    counts[:5] = 0  # empty rows
    counts[5:10, :-3] = 0  # everything in the last buckets
    total = counts.sum(axis=1)
    level = rng.uniform(-0.5, 1.1, size=(d, num_levels)) * np.maximum(total, 1)[:, None]
    level[:, 0] = total - 0.5  # the last draw
    b, c_b = _search_counts(jnp.asarray(counts, jnp.int32), jnp.asarray(level, jnp.float32))
    c = np.cumsum(counts, axis=1)
    expected = np.minimum([np.searchsorted(c[i], level[i], side="right") for i in range(d)], g - 1)
    np.testing.assert_array_equal(np.asarray(b), expected)
    np.testing.assert_array_equal(np.asarray(c_b), np.take_along_axis(c, expected, axis=1))


def test_counts_quantile_is_monotone_and_exact_at_bucket_edges():
    counts = jnp.asarray([[0, 4, 0, 6, 0]])
    lo = jnp.asarray([[0.0, 1.0, 2.0, 3.0, 4.0]])
    hi = lo + 1.0
    probs = jnp.linspace(0.0, 1.0, 41)
    q = np.asarray(counts_quantile(counts, (lo, hi), probs))[0]
    assert (np.diff(q) >= 0).all()
    # order statistics 0..3 lie in [1, 2), 4..9 in [3, 4): the 4.5th is between buckets
    assert 1.0 <= q[0] < 2.0 and 3.0 <= q[-1] <= 4.0
