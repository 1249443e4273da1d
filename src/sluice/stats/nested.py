"""Nested R-hat for many short chains grouped in superchains (Margossian et al. 2024).

:func:`nested_rhat` reads it from the per-chain sums of ``y`` and ``y^2`` of the
default summary statistic, before they are merged; chain ``c`` is in superchain
``c // M``. docs/statistics.md ("Many short chains: nested R-hat") gives the
formula.

Reference: Margossian, Hoffman, Sountsov, Riou-Durand, Vehtari & Gelman (2024),
"Nested R-hat", Bayesian Analysis; arXiv:2110.13017.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MIN_CHAINS", "nested_rhat", "nested_rhat_from_moments"]

MIN_CHAINS = 64  # the summary reports nested R-hat from this many chains on


def nested_rhat_from_moments(
    count: np.ndarray, means: np.ndarray, variances: np.ndarray, superchains: int
) -> np.ndarray:
    """Nested R-hat from per-chain draw counts ``(C,)``, means and variances ``(C, D)``."""
    count = np.asarray(count, np.float64)
    means = np.asarray(means, np.float64)
    variances = np.asarray(variances, np.float64)
    chains = means.shape[0]
    if not isinstance(superchains, int | np.integer) or isinstance(superchains, bool):
        raise TypeError(f"superchains must be an int, got {superchains!r}")
    if superchains < 2 or chains % superchains:
        raise ValueError(
            f"superchains must be at least 2 and divide the chains ({chains}), got {superchains}"
        )
    per = chains // superchains
    m = means.reshape(superchains, per, -1)
    super_means = m.mean(axis=1)  # (K, D)
    between = super_means.var(axis=0, ddof=1)
    within_super = m.var(axis=1, ddof=1) if per > 1 else np.zeros_like(super_means)
    within_chain = variances.reshape(superchains, per, -1).mean(axis=1)
    if np.all(count <= 1):
        within_chain = np.zeros_like(within_chain)
    within = (within_super + within_chain).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(1.0 + between / within)


def nested_rhat(state: Any, superchains: int) -> np.ndarray:
    """Nested R-hat ``(D,)`` (the elements in the summary's order) from the default
    summary's per-chain states stacked over chains (``StreamState`` with a leading
    chain axis, before any merge)."""
    count = np.asarray(state.count, np.float64)  # (C,)
    if count.ndim != 1:
        raise ValueError("nested_rhat needs the per-chain states, stacked over chains")
    s1 = np.asarray(state.sum1.hi, np.float64) + np.asarray(state.sum1.lo, np.float64)
    s2 = np.asarray(state.sum2.hi, np.float64) + np.asarray(state.sum2.lo, np.float64)
    n = np.maximum(count, 1.0)[:, None]
    means = s1 / n
    with np.errstate(divide="ignore", invalid="ignore"):
        variances = np.where(n > 1, (s2 - s1 * means) / (n - 1), 0.0)
    return nested_rhat_from_moments(count, means, np.maximum(variances, 0.0), superchains)
