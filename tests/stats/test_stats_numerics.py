"""Kernels behind the statistics: Geyer truncation, compensated sums."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz.stats.diagnostics import _ess
from arviz.stats.stats_utils import autocov
from tests.stats.helpers import ar1

from sluice.stats._numerics import (
    Compensated,
    compensated_add,
    compensated_value,
    cummax_rows,
    geyer_tau,
)

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


def test_cummax_rows_is_numpys_running_maximum():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 300)).astype(np.float32)
    a[2, 40] = np.inf
    a[3, :5] = -np.inf
    got = np.asarray(cummax_rows(jnp.asarray(a)))
    np.testing.assert_array_equal(got, np.maximum.accumulate(a, axis=1))
    ints = rng.integers(-50, 50, size=(3, 20)).astype(np.int32)
    np.testing.assert_array_equal(
        np.asarray(cummax_rows(jnp.asarray(ints))), np.maximum.accumulate(ints, axis=1)
    )


def test_the_proxys_inverse_is_the_piecewise_linear_interpolation_of_its_knots():
    """``inverse`` maps a score back to ``x`` through the knots the proxy passes:
    NumPy's interpolation between them, the outer slopes beyond; tied knots (a
    point mass in the pilot) map their score to the tie."""
    from sluice.stats import streaming_state as st

    rng = np.random.default_rng(6)
    pilot = rng.standard_t(4, size=(400, 5)).astype(np.float32)
    pilot[:300, 3] = 2.0  # a point mass: the knots from 0.02 to 0.7 tie
    pilot[:, 4] = np.exp(pilot[:, 4])  # skewed
    knots = st.reference(jnp.asarray(pilot))  # (9, D)
    h = st.hinges(knots)
    z_knots = np.asarray(st.proxy(knots, h), np.float64)  # the proxy at each knot, (9, D)
    z = np.linspace(z_knots.min() - 2.0, z_knots.max() + 2.0, 301).astype(np.float32)
    got = np.asarray(st.inverse(jnp.asarray(z), knots))  # (D, 301)
    # round trip: the proxy of the inverse is the score
    back = np.asarray(st.proxy(jnp.asarray(got.T), h)).T
    k = np.asarray(knots, np.float64)
    for d in range(5):
        zk, xk = z_knots[:, d], k[:, d]
        keep = np.concatenate([[True], np.diff(zk) > 0])  # a tie: the first of its knots
        want = np.interp(z, zk[keep], xk[keep])
        # beyond the outer knots: the slope of the nearest segment with width
        wide = np.flatnonzero(np.diff(zk) > 0)
        first, last = wide[0], wide[-1]
        lo, hi = z < zk[0], z > zk[-1]
        want[lo] = xk[0] + (z[lo] - zk[0]) * np.diff(xk)[first] / np.diff(zk)[first]
        want[hi] = xk[-1] + (z[hi] - zk[-1]) * np.diff(xk)[last] / np.diff(zk)[last]
        np.testing.assert_allclose(got[d], want, rtol=1e-5, atol=1e-5 * np.ptp(xk))
        np.testing.assert_allclose(back[d], z, rtol=1e-5, atol=1e-4)
