"""Streaming statistics computed on the device while sampling (docs/statistics.md).

Every statistic is a :class:`Statistic`, a bundle of four pure functions
(``init / update / merge / finalize``) for one chain; chains, devices and
hosts combine with ``merge``.

* the summary diagnostics (``az.summary``'s columns), every element in 1.5 KB
  per chain: :func:`sluice.stats.streaming.summary`, what ``sluice.sample``
  computes by default, and :func:`summary_table` of its values;
* moments (exact): :func:`count`, :func:`mean`, :func:`variance`,
  :func:`covariance`, :func:`extrema`;
* combinators: :func:`group`, :func:`restrict`, :func:`transform`;
* nested R-hat of many short chains: :mod:`sluice.stats.nested`.
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
