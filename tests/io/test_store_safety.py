"""One store, one lock, whatever its name; no write outside a store; what dead writers
leave is recoverable; the model resumed is exactly the one that started
(docs/reliability.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.helpers import store_child as child
from tests.helpers.store_checks import assert_same_run, interrupted_store, reseal

import sluice
from sluice.apps.cli import main as cli_main
from sluice.io.lock import StoreLock
from sluice.io.store import COMMIT, StoreError, StoreLockedError, ZarrSink

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "helpers" / "cli_model.py"


def _resume(store: Path, model=None, **options):
    return sluice.resume(store, model or child.model(), stats=child.STATS, progress=False,
                         **options)  # fmt: skip


def _child(store: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **env}
    return subprocess.run(
        [sys.executable, "-m", "tests.helpers.store_child", str(store)],
        cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
    )  # fmt: skip


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -- one store, one lock -------------------------------------------------------------------
def test_a_second_writer_through_a_symlinked_alias_is_refused(tmp_path, reference):
    """While a run writes run.zarr, writers that reach it as another name (a symbolic
    link to the store, or to a folder above it) are refused: they take the same lock."""
    (tmp_path / "runs").mkdir()
    store = tmp_path / "runs" / "run.zarr"
    aliases = [tmp_path / "alias.zarr", tmp_path / "linked" / "run.zarr"]
    aliases[0].symlink_to(store, target_is_directory=True)
    (tmp_path / "linked").symlink_to(tmp_path / "runs", target_is_directory=True)
    refused = []

    class SecondWriters(ZarrSink):
        def write(self, start, chunk):
            super().write(start, chunk)
            if start == 20:  # the first writer holds the lock and has committed
                for alias in aliases:
                    with pytest.raises(StoreLockedError, match=rf"pid {os.getpid()} "):
                        _resume(alias)
                    with pytest.raises(StoreLockedError, match="another process"):
                        sluice.sample(child.model(), sink=ZarrSink(alias, overwrite=True),
                                      progress=False, **child.SETTINGS)  # fmt: skip
                    refused.append(alias)

    sluice.sample(child.model(), sink=SecondWriters(store), stats=child.STATS, progress=False,
                  **child.SETTINGS)  # fmt: skip
    assert refused == aliases
    assert_same_run(store, reference)  # the store is the first writer's, intact


def test_a_planted_lock_file_link_is_refused_and_its_target_untouched(tmp_path, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    store = tmp_path / "run.zarr"
    lock = tmp_path / "run.zarr.lock"
    lock.symlink_to(precious)
    with pytest.raises(StoreError, match=r"run\.zarr\.lock is a symbolic link"):
        sluice.sample(child.model(), sink=ZarrSink(store), progress=False, **child.SETTINGS)
    # the command line says so in one line, no traceback
    args = ["sample", str(SCRIPT), "--draws", "20", "--warmup", "20", "--out", str(store)]
    assert cli_main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a symbolic link" in err and "Traceback" not in err
    lock.unlink()
    os.link(precious, lock)  # a hard link: truncating it would truncate the other name
    with pytest.raises(StoreError, match=r"run\.zarr\.lock is a hard link"):
        sluice.sample(child.model(), sink=ZarrSink(store), progress=False, **child.SETTINGS)
    assert precious.read_text() == "keep me"
    assert not store.exists()


def test_a_store_holding_a_symlinked_chunk_folder_is_refused_and_nothing_written_outside(
    tmp_path,
):
    store = interrupted_store(tmp_path / "run.zarr")
    outside = tmp_path / "outside"
    chunks = store / "posterior" / "x" / "c"
    chunks.rename(outside)
    chunks.symlink_to(outside, target_is_directory=True)
    before = _tree(outside)
    with pytest.raises(StoreError, match=r"holds symbolic links \(posterior/x/c\)"):
        _resume(store)
    assert _tree(outside) == before
    assert not [p for p in tmp_path.iterdir() if p.name not in ("run.zarr", "run.zarr.lock",
                                                                "outside")]  # fmt: skip


# -- what dead writers leave ---------------------------------------------------------------
def test_a_kill_before_the_new_store_is_in_place_leaves_nothing_to_remove_by_hand(
    tmp_path, reference
):
    store = tmp_path / "run.zarr"
    killed = _child(store, SLUICE_TEST_KILL_AT_CREATE="1")
    assert killed.returncode == -signal.SIGKILL, killed.stdout.decode()
    assert not store.exists()
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".run.zarr.creating-")]
    with pytest.raises(
        FileNotFoundError, match=rf"killed before it was complete \(it left {left.name}"
    ):
        _resume(store)
    # a folder of the same pattern that is not recognisably sluice's is never removed
    foreign = tmp_path / ".run.zarr.creating-0123456789ab"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    sluice.sample(child.model(), sink=ZarrSink(store), stats=child.STATS, progress=False,
                  **child.SETTINGS)  # fmt: skip
    assert not left.exists() and (foreign / "keep.txt").read_text() == "mine"
    assert_same_run(store, reference)


def test_a_half_created_store_of_an_older_sluice_is_explained_and_overwritten(tmp_path):
    """A run killed before its root metadata's rename (an older sluice created stores in
    place) leaves a folder holding Zarr's temporary root metadata only."""
    made = interrupted_store(tmp_path / "made.zarr")
    store = tmp_path / "run.zarr"
    store.mkdir()
    (store / f"zarr.{'a' * 32}.partial").write_bytes((made / "zarr.json").read_bytes())
    with pytest.raises(StoreError, match="creation was interrupted"):
        _resume(store)
    with pytest.raises(FileExistsError, match=r"creation was interrupted.*overwrite=True"):
        sluice.sample(child.model(), sink=ZarrSink(store), progress=False, **child.SETTINGS)
    sluice.sample(child.model(), sink=ZarrSink(store, overwrite=True), progress=False,
                  **child.SETTINGS)  # fmt: skip
    assert ZarrSink.open_existing(store).draws_done() == child.SETTINGS["draws"]


def test_temporary_files_of_dead_writers_are_removed_by_the_next_writer(tmp_path, reference):
    store = interrupted_store(tmp_path / "run.zarr")
    dead = [
        store / f".{COMMIT}.0123456789ab.tmp",
        store / ".sluice-checkpoint-p0-1.ckpt.ba9876543210.tmp",
        store / "posterior" / "x" / "c" / "0" / f"0.{'b' * 32}.partial",
    ]
    for path in dead:
        path.write_bytes(b"left by a killed writer")
    mine = store / "notes.tmp", store / "posterior" / "x" / f"0.{'c' * 31}.partial"
    for path in mine:
        path.write_text("not a temporary file of sluice's")
    holder = StoreLock(store)
    holder.acquire()  # a live writer: the refused one removes nothing
    try:
        with pytest.raises(StoreLockedError):
            _resume(store)
        assert all(p.exists() for p in dead)
    finally:
        holder.release()
    assert_same_run(store, reference)
    assert not any(p.exists() for p in dead)
    assert all(p.read_text() == "not a temporary file of sluice's" for p in mine)


# -- the model's identity ------------------------------------------------------------------
def _variant(log_density) -> sluice.Model:
    base = child.model()
    return sluice.Model(log_density, base.init, base.transform, base.log_likelihood,
                        base.observed_data)  # fmt: skip


def _log_density(p, scales=(1.0, 2.0), offset=1.0):
    return -0.5 * jnp.sum(((p["x"] - offset) / jnp.array(scales)) ** 2) - 0.5 * p["z"] ** 2


def test_a_model_that_differs_slightly_is_refused_naming_what_differs(tmp_path, reference):
    """Changes that agree with the model to 1e-5 wherever it is evaluated at a few points
    are refused all the same, naming the program or the data."""
    store = interrupted_store(tmp_path / "run.zarr")
    program = "its program"
    data = "its data"
    variants = {
        "scaled by 1.000004": (lambda p: 1.000004 * _log_density(p), program),
        "truncated at |z| > 2.5": (
            lambda p: jnp.where(jnp.abs(p["z"]) > 2.5, -jnp.inf, _log_density(p)), program,
        ),
        "a literal moved by 1e-6": (lambda p: _log_density(p, offset=1.000001), program),
        "an array moved by 1e-6": (lambda p: _log_density(p, scales=(1.0, 2.000001)), data),
    }  # fmt: skip
    for name, (log_density, what) in variants.items():
        with pytest.raises(StoreError, match=rf"model differs .*: {what} .*allow_model_change"):
            _resume(store, _variant(log_density))
        assert ZarrSink.open_existing(store).draws_done() == 20, name
    assert_same_run(store, reference)  # the refusals wrote nothing; the same model resumes


def test_an_intended_model_change_is_allowed_by_name(tmp_path):
    store = interrupted_store(tmp_path / "run.zarr")
    changed = _variant(lambda p: 1.5 * _log_density(p))
    run = _resume(store, changed, allow_model_change=True)
    assert run.info.draws == child.SETTINGS["draws"]
    with pytest.raises(TypeError, match="allow_model_change must be True or False"):
        _resume(store, allow_model_change="yes")


def test_the_same_model_rebuilt_in_another_process_on_another_layout_is_accepted(
    tmp_path, reference
):
    """Interrupted here on 3 devices; resumed by a fresh process of 1 device that builds
    the model again from the same code and data: its fingerprint and data hash are the
    store's (no ids, addresses or device layout in them)."""
    store = interrupted_store(tmp_path / "run.zarr", devices=jax.devices()[:3])
    resumed = _child(store, JAX_NUM_CPU_DEVICES="1")
    assert resumed.returncode == 0 and b"DONE" in resumed.stdout, resumed.stdout.decode()
    assert_same_run(store, reference)


def test_cli_resume_names_a_changed_program_in_one_line_and_allows_it_by_flag(tmp_path, capsys):
    store = tmp_path / "run.zarr"
    args = ["sample", str(SCRIPT), "--draws", "20", "--warmup", "20", "--chunk-size", "10"]
    assert cli_main([*args, "--out", str(store), "--quiet"]) == 0
    meta = json.loads((store / "zarr.json").read_text())
    meta["attributes"]["sluice"]["description"]["model"]["program"] = "another program"
    (store / "zarr.json").write_text(json.dumps(meta))
    reseal(store)  # (the commit record lists the metadata's checksums)
    capsys.readouterr()
    resume = ["resume", str(store), "--model", str(SCRIPT), "--quiet"]
    assert cli_main(resume) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "its program" in err and "--allow-model-change" in err
    assert cli_main([*resume, "--allow-model-change"]) == 0
    draws = sluice.open(store).posterior["mu"].values
    assert draws.shape[1] == 20 and np.isfinite(draws).all()
