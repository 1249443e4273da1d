"""MCLMC's tuner, stage 3: the streamed integrated autocorrelation time against BlackJAX's
``effective_sample_size`` on the same draws (its stage 3 computes ``n / ESS`` by FFT over
stored draws). The tuned kernel's draws are checked by the posterior, chunk-size and
resume tests of ``test_external_kernels.py`` and ``test_external_resume.py``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.stats.helpers import ar1

from sluice.interop import mclmc_tuning

blackjax = pytest.importorskip("blackjax")


def _streamed_tau(x: np.ndarray) -> np.ndarray:
    add = jax.jit(mclmc_tuning.autocovariances_add)
    a = mclmc_tuning.autocovariances_init(jnp.asarray(x[0]))
    for row in x:
        a = add(a, jnp.asarray(row))
    return np.asarray(mclmc_tuning.integrated_time(a))


@pytest.mark.parametrize(("rho", "n"), [(0.0, 300), (0.5, 300), (0.8, 300), (-0.3, 300), (0.5, 40)])
def test_integrated_time_is_blackjax_n_over_ess(rho, n):
    # shifted far from zero: the streamed sums are centred exactly, not by luck
    x = (ar1(seed=7, chains=1, draws=n, rho=rho, dim=20)[0] + 30.0).astype(np.float32)
    ess = np.asarray(blackjax.diagnostics.effective_sample_size(jnp.asarray(x)[None]))
    np.testing.assert_allclose(_streamed_tau(x), n / ess, rtol=2e-3)


def test_a_sequence_longer_than_the_lags_gives_a_smaller_time():
    """rho = 0.97: Geyer's sequence runs past LAGS lags; the streamed time stops there."""
    x = ar1(seed=8, chains=1, draws=600, rho=0.97, dim=20)[0].astype(np.float32)
    ess = np.asarray(blackjax.diagnostics.effective_sample_size(jnp.asarray(x)[None]))
    tau = _streamed_tau(x)
    assert np.all(tau <= 600 / ess * (1 + 1e-3)) and np.all(tau > 0.5 * 600 / ess)


def test_a_coordinate_that_does_not_move_is_left_out():
    x = np.random.default_rng(0).normal(size=(100, 3)).astype(np.float32)
    x[:, 1] = 2.0
    tau = _streamed_tau(x)
    assert np.isnan(tau[1]) and np.all(np.isfinite(tau[[0, 2]]))
