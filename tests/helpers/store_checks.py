"""Checks shared by the store tests: a resumed store equals an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
from tests.helpers import store_child as child

import sluice
from sluice.io.store import ZarrSink


def reference_run():
    """The crash tests' run, uninterrupted, in memory, with the statistics a Zarr run
    streams by default (the memory sink's default leaves them off)."""
    return sluice.sample(
        child.model(), stats=child.STATS, default_stats=True, progress=False, **child.SETTINGS
    )


def assert_same_run(store: Path, reference, **options) -> None:
    """Resume the store to its end (``options``: more arguments of ``sluice.resume``);
    draws, statistics and totals equal the reference."""
    resumed = sluice.resume(store, child.model(), stats=child.STATS, progress=False, **options)
    sink = ZarrSink.open_existing(store)
    assert sink.draws_done() == child.SETTINGS["draws"]
    for group in ("posterior", "sample_stats", "log_likelihood"):
        expected = reference.sink.kept()[group]
        for name, values in expected.items():
            np.testing.assert_array_equal(
                sink.kept()[group][name][...], values, err_msg=f"{group}/{name}"
            )
    for a, b in zip(
        jax.tree.leaves(resumed.stats["sums"]), jax.tree.leaves(reference.stats["sums"]),
        strict=True,
    ):  # fmt: skip
        np.testing.assert_array_equal(a, b)
    for a, b in zip(
        jax.tree.leaves(resumed.stats["summary"]),
        jax.tree.leaves(reference.stats["summary"]),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)  # the default statistics resume exactly too
    assert resumed.info.num_gradients == reference.info.num_gradients
    assert resumed.info.num_divergent == reference.info.num_divergent
