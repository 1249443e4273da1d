"""Streaming statistics computed on the device while sampling."""

from sluice.stats.base import Statistic, group

__all__ = ["Statistic", "group"]
