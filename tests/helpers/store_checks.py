"""Checks shared by the store tests: a resumed store equals an uninterrupted run; and
stores edited on purpose (a test's tampering, a store of an older format)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import jax
import numpy as np
import pytest
from tests.helpers import store_child as child

import sluice
from sluice.io.store import COMMIT, ZarrSink


def reference_run():
    """The crash tests' run, uninterrupted, in memory, with the statistics a Zarr run
    streams by default (the memory sink's default leaves them off)."""
    return sluice.sample(
        child.model(), stats=child.STATS, default_stats=True, progress=False, **child.SETTINGS
    )


class Interrupted(Exception):
    pass


class StopsAfter(ZarrSink):
    """Raises after its ``limit``-th chunk of draws (the run stops; its store stays)."""

    def __init__(self, path, limit, **kwargs):
        super().__init__(path, **kwargs)
        self.limit, self.writes = limit, 0

    def write(self, start, chunk):
        super().write(start, chunk)
        self.writes += 1
        if self.writes == self.limit:
            raise Interrupted


def interrupted_store(path: Path, limit: int = 3, **options) -> Path:
    """The crash tests' run at ``path``, stopped by an exception after its ``limit``-th
    chunk of draws (``options``: more arguments of ``sluice.sample``)."""
    with pytest.raises(Interrupted):
        sluice.sample(child.model(), sink=StopsAfter(path, limit), stats=child.STATS,
                      progress=False, **child.SETTINGS, **options)  # fmt: skip
    return path


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


def reseal(store: Path) -> None:
    """List the store's metadata documents as they are now in its commit record: what an
    edit of a store must do to pass as undamaged (the record holds their CRC-32s)."""
    record = json.loads((store / COMMIT).read_text())
    record["metadata"] = {
        file.relative_to(store).as_posix(): [zlib.crc32(file.read_bytes())]
        for file in sorted(store.rglob("zarr.json"))
    }
    write_commit_record(store, record)


def as_older_format(store: Path, version: int) -> None:
    """Make ``store`` what a sluice of store format ``version`` (1 or 2) wrote: chunks
    without their CRC-32C, a commit record without a version or manifest."""
    for file in store.rglob("zarr.json"):
        meta = json.loads(file.read_text())
        if meta["node_type"] == "array":
            assert meta["codecs"][-1] == {"name": "crc32c"}
            meta["codecs"] = meta["codecs"][:-1]
            chunks = file.parent / "c"
            for chunk in [chunks] if chunks.is_file() else chunks.rglob("*"):
                if chunk.is_file():
                    chunk.write_bytes(chunk.read_bytes()[:-4])
        if file.parent == store:
            meta["attributes"]["sluice"]["version"] = version
        file.write_text(json.dumps(meta))
    record = json.loads((store / COMMIT).read_text())
    for field in ("version", "metadata", "summary"):
        record.pop(field, None)
    write_commit_record(store, record)


def write_commit_record(store: Path, record: dict) -> None:
    """A commit record with the CRC-32 of its other fields (the documented layout)."""
    fields = {k: v for k, v in record.items() if k != "crc32"}
    crc = zlib.crc32(json.dumps(fields, sort_keys=True).encode())
    (store / COMMIT).write_text(json.dumps({**fields, "crc32": crc}))
