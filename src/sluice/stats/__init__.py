"""Streaming statistics computed on the device while sampling.

Every statistic is a :class:`Statistic`, a bundle of four pure functions
(``init / update / merge / finalize``) for one chain; chains, devices and
hosts combine with ``merge``. See ``docs/statistics.md``.

* the default summary, every element in 1.5 KB per chain and open-ended
  (a run may stop when it has converged): :func:`sluice.stats.streaming.summary`;
* moments (exact): :func:`count`, :func:`mean`, :func:`variance`,
  :func:`covariance`, :func:`extrema`;
* distribution: :func:`quantiles`, :func:`hdi` (histograms on a shared grid);
* convergence, as ArviZ 0.23 (the exact set, opt-in: ~10.7 KB per element and
  chain, histograms and lags for the first 4,096 elements of each quantity):
  :func:`rhat`, :func:`ess`, :func:`mcse`, and all of them at once:
  :func:`diagnostics`, :func:`summary_statistics` with
  :func:`summary_table` (a pandas DataFrame like ``az.summary``);
* combinators: :func:`group`, :func:`restrict`, :func:`transform`.
"""

from sluice.stats import streaming
from sluice.stats._layout import element_labels
from sluice.stats.base import Statistic
from sluice.stats.combinators import group, restrict, transform
from sluice.stats.convergence import (
    diagnostics,
    ess,
    hdi,
    mcse,
    quantiles,
    rhat,
    summary_statistics,
)
from sluice.stats.moments import count, covariance, extrema, mean, variance
from sluice.stats.summary import summary_table

__all__ = [
    "Statistic",
    "count",
    "covariance",
    "diagnostics",
    "element_labels",
    "ess",
    "extrema",
    "group",
    "hdi",
    "mcse",
    "mean",
    "quantiles",
    "restrict",
    "rhat",
    "streaming",
    "summary_statistics",
    "summary_table",
    "transform",
    "variance",
]
