"""Chains over several processes (hosts stand-ins) on 127.0.0.1."""

import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from tests.helpers import mp_worker

import sluice
from sluice.io.store import ZarrSink
from sluice.runtime.launch import launch

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "JAX_PLATFORMS": "cpu"}

pytestmark = pytest.mark.multiprocess


def run_workers(mode: str, out: Path, *, processes: int = 2, devices: int = 2, **kwargs):
    command = [sys.executable, "-m", "tests.helpers.mp_worker", mode, str(out)]
    return launch(
        command,
        processes,
        devices_per_process=devices,
        env=ENV,
        echo=None,
        timeout=kwargs.pop("timeout", 240),
        **kwargs,
    )


def assert_all_dead(pids):
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.fixture(scope="module")
def reference():
    """The same run in this process on one device."""
    return sluice.sample(
        mp_worker.model(), progress=False, devices=jax.devices()[:1], **mp_worker.SETTINGS
    )


def test_two_processes_of_two_devices_give_the_draws_of_one_device(tmp_path, reference):
    result = run_workers("draws", tmp_path)
    assert result.ok, result.outputs
    parts = [np.load(tmp_path / f"p{i}.npz") for i in range(2)]
    table = reference.summary(round_to="none").to_numpy()
    for part in parts:  # every process reports every chain, its summary and its totals
        np.testing.assert_array_equal(part["x"], reference.draws["x"])
        np.testing.assert_array_equal(part["summary"], parts[0]["summary"])
        # ArviZ in this process (numba off, see conftest.py) rounds differently
        np.testing.assert_allclose(part["summary"], table, rtol=1e-12)
        assert int(part["num_gradients"]) == reference.info.num_gradients
    assert_all_dead(result.pids)


def test_a_killed_worker_stops_everyone_quickly_and_the_store_resumes(tmp_path, reference):
    store = tmp_path / "run.zarr"
    t0 = time.perf_counter()
    result = run_workers("store", store, grace=30)
    elapsed = time.perf_counter() - t0
    assert result.returncodes[1] == -9, result.outputs
    assert result.returncodes[0] != 0, result.outputs  # aborted by JAX once heartbeats stop
    assert elapsed < 60, f"took {elapsed:.0f} s to stop"
    assert "process 1 was killed by SIGKILL" in result.describe_failure()
    assert_all_dead(result.pids)
    done = ZarrSink.open_existing(store).draws_done()
    assert done < mp_worker.SETTINGS["draws"]

    resumed = run_workers("resume", store)
    assert resumed.ok, resumed.outputs
    sink = ZarrSink.open_existing(store)
    assert sink.draws_done() == mp_worker.SETTINGS["draws"]
    np.testing.assert_array_equal(sink.kept()["posterior"]["x"][...], reference.draws["x"])
    np.testing.assert_array_equal(
        sink.kept()["log_likelihood"]["obs"][...], reference.log_likelihood["obs"]
    )
    finished = sluice.resume(store, mp_worker.model(), progress=False)  # complete: returned as is
    assert finished.info.num_gradients == reference.info.num_gradients


def test_a_run_of_two_processes_resumes_on_one(tmp_path, reference):
    """Killed with 2 processes x 2 devices, finished by this one process on one device:
    exactly the draws of an uninterrupted run."""
    store = tmp_path / "run.zarr"
    result = run_workers("store", store, grace=30)
    assert result.returncodes[1] == -9, result.outputs
    assert ZarrSink.open_existing(store).draws_done() < mp_worker.SETTINGS["draws"]
    run = sluice.resume(store, mp_worker.model(), progress=False, devices=jax.devices()[:1])
    np.testing.assert_array_equal(run.draws["x"][...], reference.draws["x"])
    assert run.info.num_gradients == reference.info.num_gradients


def test_a_run_of_one_process_resumes_on_two(tmp_path, reference):
    """Interrupted in this one process, finished by 2 processes x 2 devices: exactly the
    draws of an uninterrupted run (a Zarr chunk holds one chain: no write collides)."""
    store = tmp_path / "run.zarr"

    class Interrupted(Exception):
        pass

    class StopsAfterTwoWrites(ZarrSink):
        writes = 0

        def write(self, start, chunk):
            super().write(start, chunk)
            StopsAfterTwoWrites.writes += 1
            if StopsAfterTwoWrites.writes == 2:
                raise Interrupted

    with pytest.raises(Interrupted):
        sluice.sample(
            mp_worker.model(), sink=StopsAfterTwoWrites(store), progress=False,
            devices=jax.devices()[:1], **mp_worker.SETTINGS,
        )  # fmt: skip
    assert 0 < ZarrSink.open_existing(store).draws_done() < mp_worker.SETTINGS["draws"]
    resumed = run_workers("resume", store)
    assert resumed.ok, resumed.outputs
    sink = ZarrSink.open_existing(store)
    assert sink.draws_done() == mp_worker.SETTINGS["draws"]
    np.testing.assert_array_equal(sink.kept()["posterior"]["x"][...], reference.draws["x"])


def test_until_stops_every_process_at_the_chunk_one_process_stops_at(tmp_path):
    one = sluice.sample(
        mp_worker.model(), progress=False, devices=jax.devices()[:1], **mp_worker.UNTIL
    )
    assert one.info.converged_at < mp_worker.UNTIL["draws"]
    result = run_workers("until", tmp_path)
    assert result.ok, result.outputs
    for i in range(2):
        part = np.load(tmp_path / f"p{i}.npz")
        assert int(part["converged_at"]) == one.info.converged_at
        np.testing.assert_array_equal(part["x"], one.draws["x"])
    sink = ZarrSink.open_existing(tmp_path / "run.zarr", writable=False)
    assert sink.stopped() == one.info.converged_at
    np.testing.assert_array_equal(sink.kept()["posterior"]["x"][...], one.draws["x"])
    assert_all_dead(result.pids)


def test_a_warmup_across_chains_reduces_over_every_process(tmp_path):
    result = run_workers("chees", tmp_path)
    assert result.ok, result.outputs
    parts = [np.load(tmp_path / f"p{i}.npz") for i in range(2)]
    for name in ("step_size", "inverse_mass_matrix", "steps"):
        values = np.stack([part[name] for part in parts])  # (process, chain, ...)
        assert np.all(values == values[:1, :1]), name  # one state: every chain, both processes
    np.testing.assert_array_equal(parts[0]["x"], parts[1]["x"])  # both report every chain
