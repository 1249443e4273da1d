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

from sluice.stats._numerics import Compensated, compensated_add, compensated_value, geyer_tau

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
