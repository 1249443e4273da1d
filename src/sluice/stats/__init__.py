"""Streaming statistics computed on the device while sampling.

Every statistic is a :class:`Statistic`, a bundle of four pure functions
(``init / update / merge / finalize``) for one chain; chains, devices and
hosts combine with ``merge``. See ``docs/statistics.md``.

* the summary diagnostics (``az.summary``'s columns: mean, sd, quantiles, HDI,
  R-hat, bulk and tail ESS, MCSE), every element in 1.5 KB per chain and
  open-ended (a run may stop when it has converged):
  :func:`sluice.stats.streaming.summary`, what ``sluice.sample`` computes by
  default, and :func:`summary_table` (a pandas DataFrame like ``az.summary``)
  of its values;
* moments (exact): :func:`count`, :func:`mean`, :func:`variance`,
  :func:`covariance`, :func:`extrema`;
* combinators: :func:`group`, :func:`restrict`, :func:`transform`;
* nested R-hat of many short chains: :mod:`sluice.stats.nested`.

ArviZ's own diagnostics of stored draws are ArviZ on them (a store converts
to ``InferenceData``).
"""

from sluice.stats import streaming
from sluice.stats._layout import element_labels
from sluice.stats.base import Statistic
from sluice.stats.combinators import group, restrict, transform
from sluice.stats.moments import count, covariance, extrema, mean, variance
from sluice.stats.streaming_readout import summary_table

__all__ = [
    "Statistic",
    "count",
    "covariance",
    "element_labels",
    "extrema",
    "group",
    "mean",
    "restrict",
    "streaming",
    "summary_table",
    "transform",
    "variance",
]
