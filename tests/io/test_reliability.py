"""Nothing lost, nobody in: the fault-injection suite of the store (docs/reliability.md).

Each test injects one fault (tampering, damage, a second writer, a kill at the
commit's rename, a power cut, another sluice or JAX version) and checks that the
store either resumes to exactly the draws of an uninterrupted run or refuses,
naming the file or the cause.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import jax
import numpy as np
import pytest
from tests.helpers import store_child as child
from tests.helpers.power_cut import Disk
from tests.helpers.store_checks import (
    as_older_format,
    assert_same_run,
    interrupted_store,
    reseal,
    write_commit_record,
)

import sluice
from sluice.apps.cli import main as cli_main
from sluice.io.checkpoint import Checkpoint
from sluice.io.durable import atomic_write
from sluice.io.sinks import Layout
from sluice.io.store import COMMIT, StoreError, StoreLockedError, ZarrSink

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "helpers" / "cli_model.py"


def _start_child(store: Path, **env: str) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.store_child", str(store)],
        cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


# -- nobody in -------------------------------------------------------------------------------
def test_a_tampered_store_runs_none_of_its_code(tmp_path, capsys):
    store = tmp_path / "run.zarr"
    assert cli_main(["sample", str(SCRIPT), "--draws", "20", "--warmup", "20", "--chunk-size",
                     "10", "--out", str(store), "--quiet"]) == 0  # fmt: skip
    marker = tmp_path / "pwned"
    evil = store / "helper.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\nmodel = None\n")
    meta = json.loads((store / "zarr.json").read_text())
    digest = __import__("hashlib").sha256(evil.read_bytes()).hexdigest()
    meta["attributes"]["sluice"]["model_source"] = {"script": str(evil), "sha256": digest}
    (store / "zarr.json").write_text(json.dumps(meta))
    reseal(store)  # a deliberate edit: its checksums recomputed, so only the hash refuses

    with pytest.raises(TypeError, match="needs the run's model"):
        sluice.resume(store)  # a store never names the code to run
    with pytest.raises(SystemExit):  # --model is required
        cli_main(["resume", str(store), "--quiet"])
    # naming the real model: refused (its hash is not the recorded one), nothing runs
    assert cli_main(["resume", str(store), "--model", str(SCRIPT), "--quiet"]) == 2
    assert not marker.exists()
    assert "sha256" in capsys.readouterr().err.lower()


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path, reference):
    store = tmp_path / "run.zarr"
    proc = _start_child(store, SLUICE_TEST_WRITE_DELAY="0.05")
    try:
        lock = store.with_name(store.name + ".lock")
        deadline = time.monotonic() + 120
        while not (store / COMMIT).exists():  # the first writer holds the lock and commits
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        assert str(proc.pid) in lock.read_text()
        with pytest.raises(StoreLockedError, match=rf"another process \(pid {proc.pid} "):
            sluice.resume(store, child.model(), stats=child.STATS, progress=False)
        with pytest.raises(StoreLockedError, match="being written by another process"):
            sluice.sample(child.model(), sink=ZarrSink(store, overwrite=True), progress=False,
                          **child.SETTINGS)  # fmt: skip
        assert (store / COMMIT).exists(), "the live store was not replaced"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert_same_run(store, reference)  # the dead writer's lock is gone: resume works


def test_a_layout_whose_writers_would_share_a_zarr_chunk_is_refused(tmp_path):
    store = tmp_path / "run.zarr"
    sink = ZarrSink(store)
    groups = {"posterior": {"x": ((), np.dtype(np.float32))}}
    created = Layout(80, 10, groups, local_chains=(0, 80), chains_per_process=40, chunk_size=10)
    sink.open(created, {})  # 80 chains: chunks of 40 chains
    sink.close()
    other = ZarrSink.open_existing(store)
    with pytest.raises(StoreError, match=r"chunks of 40 chains.*writes chains \[30, 60\)"):
        other.attach(Layout(80, 10, groups, local_chains=(30, 60), process_index=1))
    other.attach(Layout(80, 10, groups, local_chains=(40, 80), process_index=1))  # aligned


# -- damage is an error ------------------------------------------------------------------
def test_damaged_commit_records_are_refused_by_name(tmp_path):
    store = interrupted_store(tmp_path / "run.zarr")
    commit = store / COMMIT
    good = commit.read_text()
    record = json.loads(good)
    record["next_iteration"] += 10  # a bit flip in a digit: still valid JSON
    commit.write_text(json.dumps(record))
    for action in (
        lambda: sluice.open(store),
        lambda: sluice.resume(store, child.model(), stats=child.STATS, progress=False),
    ):
        with pytest.raises(StoreError, match=rf"{COMMIT} is damaged: checksum mismatch"):
            action()
    record = json.loads(good)
    del record["crc32"]  # a record of this format without its checksum is damaged
    commit.write_text(json.dumps(record))
    with pytest.raises(StoreError, match=rf"{COMMIT} is damaged: it has no checksum"):
        sluice.open(store)
    record = json.loads(good)
    del record["metadata"]  # without its manifest, even under a valid checksum
    write_commit_record(store, record)
    with pytest.raises(StoreError, match=rf"{COMMIT} is damaged: it has no manifest"):
        sluice.open(store)
    commit.write_text(good[: len(good) // 2])  # truncated
    with pytest.raises(StoreError, match=rf"{COMMIT} is damaged and cannot be read"):
        sluice.open(store)
    commit.unlink()  # missing, though later checkpoints exist
    with pytest.raises(StoreError, match=rf"{COMMIT} is missing"):
        sluice.open(store)


def test_damaged_checkpoints_are_refused_by_name(tmp_path):
    store = interrupted_store(tmp_path / "run.zarr")
    parity = json.loads((store / COMMIT).read_text())["parity"]
    name = f"sluice-checkpoint-p0-{parity}.ckpt"
    data = (store / name).read_bytes()
    (store / name).write_bytes(data[: len(data) - 100])
    with pytest.raises(StoreError, match=rf"{name} is damaged .*truncated"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x04
    (store / name).write_bytes(bytes(flipped))
    with pytest.raises(StoreError, match=rf"{name} is damaged .*checksum"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)


def test_the_summary_of_a_damaged_store_names_the_file(tmp_path, capsys):
    store = interrupted_store(tmp_path / "run.zarr")
    (store / COMMIT).write_text("{")
    assert cli_main(["summary", str(store)]) == 2
    err = capsys.readouterr().err
    assert COMMIT in err and "damaged" in err


# -- nothing lost ------------------------------------------------------------------------
@pytest.mark.parametrize("when", ["before", "after"])
def test_killed_at_the_commit_rename_resumes_exactly(tmp_path, reference, when):
    store = tmp_path / "run.zarr"
    proc = _start_child(store, SLUICE_TEST_KILL_AT_COMMIT=f"{when}:9")
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == -signal.SIGKILL, out
    done = ZarrSink.open_existing(store).draws_done()
    # the 9th commit is the 2nd of sampling (7 warmup chunks: every 10 iterations, and
    # one ending after iteration 53, where the warmup's only slow window ends); before
    # its rename the 1st is the committed one, after it the 2nd
    assert done == (10 if when == "before" else 20)
    assert_same_run(store, reference)


def test_a_power_cut_loses_nothing_committed(tmp_path, reference):
    """A disk that drops every write not followed by fsync (tests/helpers/power_cut.py):
    at cuts after commits and in the middle of a chunk's writes, the surviving store
    holds every committed draw and resumes to exactly the uninterrupted run."""
    store = tmp_path / "run.zarr"
    disk = Disk(store)
    cuts: list[tuple[int, int]] = []  # (snapshot, draws committed at that moment)

    class Watched(ZarrSink):
        def write(self, start, chunk):
            for group, names in chunk.items():
                for name, values in names.items():
                    super().write(start, {group: {name: values}})
                    if start in (20, 70) and name == "x":  # mid-chunk cuts
                        cuts.append((disk.snapshot(), self.draws_done()))

        def commit(self, checkpoint, parity, process_count):
            super().commit(checkpoint, parity, process_count)
            if checkpoint.sequence in (3, 8, 12):
                cuts.append((disk.snapshot(), self.draws_done()))

    with disk:
        sluice.sample(child.model(), sink=Watched(store), stats=child.STATS, progress=False,
                      **child.SETTINGS)  # fmt: skip
    assert len(cuts) == 5 and disk.syncs > 0
    for i, (snapshot, committed) in enumerate(cuts):
        survivor = disk.survivor(snapshot, tmp_path / f"cut-{i}")
        assert ZarrSink.open_existing(survivor).draws_done() == committed
        assert_same_run(survivor, reference)


def test_without_syncs_a_power_cut_would_lose_the_store(tmp_path):
    """The same disk with durability off (ZarrSink(durable=False)): the draws are not on
    disk at a cut, so the test above can fail."""
    store = tmp_path / "run.zarr"
    disk = Disk(store)
    with disk:
        sluice.sample(child.model(), sink=ZarrSink(store, durable=False), progress=False,
                      **child.SETTINGS)  # fmt: skip
        index = disk.snapshot()
    survivor = disk.survivor(index, tmp_path / "cut")
    # the chunks not synced are gone: the store says so (they would read as NaN)
    with pytest.raises(StoreError, match=r"/c/\S+ is missing: .*committed values, which are lost"):
        sluice.open(survivor).posterior["x"].values  # noqa: B018 (read)


# -- versions ------------------------------------------------------------------------------
def test_stores_record_sluice_and_jax_versions(tmp_path):
    store = interrupted_store(tmp_path / "run.zarr")
    recorded = json.loads((store / "zarr.json").read_text())["attributes"]["sluice"]["versions"]
    assert recorded == {"sluice": metadata.version("sluice"), "jax": metadata.version("jax")}


def test_a_checkpoint_of_another_sluice_version_is_refused(tmp_path):
    store = interrupted_store(tmp_path / "run.zarr")
    parity = json.loads((store / COMMIT).read_text())["parity"]
    path = store / f"sluice-checkpoint-p0-{parity}.ckpt"
    old = Checkpoint.from_file(path)
    old.sluice_version = "0.0.9"
    atomic_write(path, old.write_to)
    with pytest.raises(StoreError, match=r"written by sluice 0\.0\.9; this is sluice 0\.1\.0"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)


def test_a_program_traced_by_another_jax_is_refused_naming_both_versions(tmp_path, reference):
    """Another JAX may trace the same model into another program (a new fingerprint): the
    resume is refused, naming both JAX versions and the override, which continues it
    exactly; so is a store that records no fingerprint of its model."""
    store = interrupted_store(tmp_path / "run.zarr")
    meta_path = store / "zarr.json"
    meta = json.loads(meta_path.read_text())
    model = meta["attributes"]["sluice"]["description"]["model"]
    model["program"], model["jax"] = "traced by another JAX", "0.9.9"
    meta_path.write_text(json.dumps(meta))
    reseal(store)  # (the record lists the metadata's checksums)
    expected = rf"under JAX 0\.9\.9 and this is JAX {jax.__version__}.*allow_model_change=True"
    with pytest.raises(StoreError, match=expected):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)
    del model["program"]
    meta_path.write_text(json.dumps(meta))
    reseal(store)
    with pytest.raises(StoreError, match=r"records no fingerprint .*allow_model_change=True"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)
    assert_same_run(store, reference, allow_model_change=True)


FORMAT_1 = ROOT / "tests" / "data" / "format-1-store"


def test_reading_a_store_writes_nothing(tmp_path):
    store = interrupted_store(tmp_path / "run.zarr")
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store.rglob("*")}
    idata = sluice.open(store)
    assert idata.posterior["x"].shape == (3, 20, 2)
    assert ZarrSink.open_existing(store, writable=False)._root.store.read_only
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store.rglob("*")}
    assert before == after
    expected = idata.posterior["x"].values
    as_older_format(store, 2)  # a store of sluice's format 2: no checksums, read as it is
    np.testing.assert_array_equal(sluice.open(store).posterior["x"].values, expected)
    with pytest.raises(StoreError, match=r"format 2 .*continues format 3 only"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)


def test_a_store_of_format_1_is_read_and_not_resumed(tmp_path):
    """tests/data/format-1-store was written by sluice at commit 7a0251e^ (store format 1:
    .npz checkpoints, commit records without a checksum, no layout or versions record):
    2 chains, 20 warmup and 30 draws of x ~ N((1, 1), diag(1, 4)), seed 3, chunks of 10.
    Beside it, the draws that sluice's in-memory run of the same settings returned."""
    store = tmp_path / "old.zarr"
    shutil.copytree(FORMAT_1, store)
    assert json.loads((store / "zarr.json").read_text())["attributes"]["sluice"]["version"] == 1
    assert sorted(p.name for p in store.glob("sluice-checkpoint-*")) == [
        "sluice-checkpoint-p0-0.npz", "sluice-checkpoint-p0-1.npz",
    ]  # fmt: skip
    expected = json.loads((ROOT / "tests" / "data" / "format-1-store.draws.json").read_text())
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store.rglob("*")}
    draws = sluice.open(store).posterior["x"].values
    np.testing.assert_array_equal(draws, np.asarray(expected["x"], np.float32))
    with pytest.raises(StoreError, match=r"format 1 .*continues format 3 only"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)
    assert before == {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store.rglob("*")}
