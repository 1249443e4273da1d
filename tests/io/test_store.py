"""The Zarr sink: draws on disk, exact resume after crashes, clear errors."""

import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.helpers import store_child as child
from tests.helpers.store_checks import assert_same_run, reseal

import sluice
from sluice.io.store import COMMIT, StoreError, StoreWriteError, ZarrSink

ROOT = Path(__file__).resolve().parents[2]


def test_store_round_trip_and_lazy_inference_data(tmp_path, reference):
    path = tmp_path / "run.zarr"
    run = sluice.sample(
        child.model(), sink=ZarrSink(path), stats=child.STATS, progress=False, **child.SETTINGS
    )
    for name, values in reference.draws.items():
        np.testing.assert_array_equal(run.draws[name][...], values)
    idata = sluice.open(path)
    assert set(idata.groups()) == {"posterior", "sample_stats", "log_likelihood", "observed_data"}
    assert idata.posterior["x"].shape == (3, 150, 2)
    assert not isinstance(idata.posterior["x"].variable._data, np.ndarray)  # not read yet
    np.testing.assert_array_equal(idata.posterior["x"].values, reference.draws["x"])
    assert run.summary().shape[0] == 3  # x[0], x[1], ez


def _crash_at_write(n: int) -> type[ZarrSink]:
    """A ``ZarrSink`` that stops its run (``KeyboardInterrupt``) at its ``n``-th chunk write."""

    class Crash(ZarrSink):
        writes = 0

        def write(self, start, chunk):
            Crash.writes += 1
            if Crash.writes == n:
                raise KeyboardInterrupt
            super().write(start, chunk)

    return Crash


def _interrupt_at_fourth_write(path):
    """Sample the child model into ``path`` and stop it at its fourth chunk write."""
    with pytest.raises(KeyboardInterrupt):
        sluice.sample(child.model(), sink=_crash_at_write(4)(path), stats=child.STATS,
                      progress=False, **child.SETTINGS)  # fmt: skip


def test_interrupted_run_resumes_exactly(tmp_path, reference):
    path = tmp_path / "run.zarr"

    _interrupt_at_fourth_write(path)
    assert ZarrSink.open_existing(path).draws_done() == 30
    partial = sluice.open(path)
    assert partial.posterior.sizes["draw"] == 30
    with pytest.raises(StoreError, match="unfinished run"):
        sluice.open(path, partial=False)
    with pytest.raises(
        FileExistsError, match=r"already holds a sluice run \(30 of 150 draws per chain so far\)"
    ):
        sluice.sample(child.model(), sink=ZarrSink(path), progress=False, **child.SETTINGS)
    assert_same_run(path, reference)


def test_a_store_without_its_layout_record_reads_and_resumes_from_its_config(tmp_path, reference):
    """The store records the draws it was created for and the warmup before them (its
    Layout's); a store without that record reads both from its run's recorded config."""
    import json

    path = tmp_path / "run.zarr"

    _interrupt_at_fourth_write(path)
    meta = json.loads((path / "zarr.json").read_text())
    sluice_meta = meta["attributes"]["sluice"]
    assert sluice_meta["layout"] == {"draws": 150, "warmup": 60}
    assert ZarrSink.open_existing(path).kept()["posterior"]["x"].chunks == (1, 10, 2)
    del sluice_meta["layout"]
    (path / "zarr.json").write_text(json.dumps(meta))
    reseal(path)  # (the commit record lists the metadata's checksums)
    assert ZarrSink.open_existing(path).draws_done() == 30
    assert sluice.open(path).posterior.sizes["draw"] == 30
    with pytest.raises(FileExistsError, match=r"\(30 of 150 draws per chain so far\)"):
        sluice.sample(child.model(), sink=ZarrSink(path), progress=False, **child.SETTINGS)
    assert_same_run(path, reference)


def test_write_failure_stops_with_a_clear_error_and_stays_resumable(
    tmp_path, reference, monkeypatch
):
    import zarr

    path = tmp_path / "run.zarr"
    real_setitem = zarr.Array.__setitem__
    writes = {"n": 0}

    def disk_full_at_the_fifth_chunk(self, key, value):
        if self.name == "/posterior/x":
            writes["n"] += 1
            if writes["n"] == 5:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_setitem(self, key, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", disk_full_at_the_fifth_chunk)
    with pytest.raises(
        StoreWriteError, match=r"could not write draws 40\.\.49 .* No space left"
    ) as info:
        sluice.sample(
            child.model(), sink=ZarrSink(path), stats=child.STATS, progress=False, **child.SETTINGS
        )
    assert "sluice.resume(" in str(info.value)
    monkeypatch.setattr(zarr.Array, "__setitem__", real_setitem)
    assert ZarrSink.open_existing(path).draws_done() == 40
    assert_same_run(path, reference)


def test_mismatched_resume_names_what_differs(tmp_path):
    path = tmp_path / "run.zarr"
    sluice.sample(child.model(), sink=ZarrSink(path), progress=False, **child.SETTINGS)
    with pytest.raises(ValueError, match=r"has draws=150, not draws=200"):
        sluice.resume(path, child.model(), draws=200)
    other = sluice.Model(lambda p: -0.5 * p["x"] @ p["x"], {"x": np.zeros(2, np.float32)})
    with pytest.raises(StoreError, match=r"number of parameters differs .* \(stored 3, now 2\)"):
        sluice.resume(path, other)
    with pytest.raises(TypeError, match=r"needs the run's model"):
        sluice.resume(path)


def test_foreign_and_damaged_stores(tmp_path):
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="is not a sluice store; refusing to overwrite"):
        sluice.sample(
            child.model(), sink=ZarrSink(foreign, overwrite=True), progress=False, **child.SETTINGS
        )
    assert (foreign / "keep.txt").read_text() == "precious"
    with pytest.raises(StoreError, match="is not a sluice store"):
        sluice.resume(foreign, child.model())
    with pytest.raises(FileNotFoundError, match="no store at"):
        sluice.resume(tmp_path / "missing.zarr", child.model())

    path = tmp_path / "run.zarr"
    sluice.sample(child.model(), sink=ZarrSink(path), progress=False, **child.SETTINGS)
    committed = sorted(path.glob("sluice-checkpoint-p0-*.ckpt"))
    assert committed, "the run left checkpoint files"
    for checkpoint in committed:
        checkpoint.write_bytes(b"garbage")
    with pytest.raises(StoreError, match=r"checkpoint .* is damaged"):
        sluice.resume(path, child.model())
    (path / COMMIT).write_text("{not json")
    with pytest.raises(StoreError, match=r"commit record .* is damaged"):
        sluice.resume(path, child.model())


def _start_child(store: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.store_child", str(store), str(cache)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.slow
def test_killed_at_random_moments_then_resumed_gives_identical_draws(tmp_path, reference):
    """SIGKILL a run at 12 random moments (between chunks and mid-write); resume each time.

    A kill before the first commit only tests a fresh start: the test goes on (at most
    12 more kills, each once the store has a commit) until a kill lands after one."""
    rng = random.Random(20261130)
    cache = tmp_path / "jax-cache"
    kills, after_commit, cycles = 0, 0, 0

    def more_kills() -> bool:
        return kills < 12 or (after_commit == 0 and kills < 24)

    while more_kills():
        store = tmp_path / f"run-{cycles}.zarr"
        cycles += 1
        while True:
            proc = _start_child(store, cache)
            if more_kills():
                if kills >= 12:  # still none after a commit: wait for one
                    deadline = time.monotonic() + 120
                    while not (store / COMMIT).exists() and proc.poll() is None:
                        assert time.monotonic() < deadline
                        time.sleep(0.05)
                time.sleep(rng.uniform(1.0, 5.0) if kills < 12 else rng.uniform(0.0, 0.5))
                if proc.poll() is None:
                    committed = (store / COMMIT).exists()
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    after_commit += committed
                    continue
            out = proc.communicate(timeout=300)[0].decode()
            assert proc.returncode == 0 and "DONE" in out, out
            break
        assert_same_run(store, reference)
    assert after_commit >= 1, f"none of {kills} kills landed after the first commit"


def test_cli_sample_resume_summary_plot(tmp_path, capsys):
    from sluice.apps.cli import main

    script = str(ROOT / "tests" / "helpers" / "cli_model.py")
    store = str(tmp_path / "run.zarr")
    args = [
        "sample",
        script,
        "--draws",
        "60",
        "--warmup",
        "80",
        "--chunk-size",
        "20",
        "--out",
        store,
    ]
    assert main([*args, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "sigma" in out and "3 chunks of 20" in out
    assert main([*args, "--quiet"]) == 2
    assert "already holds a sluice run (complete)" in capsys.readouterr().err
    # a store runs no code: resume needs the model named
    with pytest.raises(TypeError, match="needs the run's model"):
        sluice.resume(store, progress=False)
    assert main(["resume", store, "--model", script, "--quiet"]) == 0
    assert main(["summary", store, "--var", "mu", "--arviz"]) == 0
    out = capsys.readouterr().out
    assert "mu" in out and "r_hat" in out
    out = tmp_path / "plots" / "run.png"
    assert main(["plot", store, "--out", str(out), "--trace"]) == 0
    for name in ("run.png", "run-trace.png", "run-rank.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    assert main(["resume", str(tmp_path / "nothing.zarr"), "--model", script]) == 2
    assert "no store at" in capsys.readouterr().err


def test_resume_on_another_device_layout(tmp_path, reference):
    """Interrupted on 3 devices, finished on 1: the same draws (chains carry their state)."""

    path = tmp_path / "run.zarr"

    class Crash(ZarrSink):
        writes = 0

        def write(self, start, chunk):
            Crash.writes += 1
            if Crash.writes == 6:
                raise KeyboardInterrupt
            super().write(start, chunk)

    with pytest.raises(KeyboardInterrupt):
        sluice.sample(
            child.model(),
            sink=Crash(path),
            stats=child.STATS,
            progress=False,
            devices=jax.devices()[:3],
            **child.SETTINGS,
        )
    run = sluice.resume(
        path, child.model(), stats=child.STATS, progress=False, devices=jax.devices()[:1]
    )
    for name, values in reference.draws.items():
        np.testing.assert_array_equal(run.draws[name][...], values)


def test_dims_and_coords_reach_memory_and_store(tmp_path):
    import jax.numpy as jnp

    model = sluice.Model(
        lambda p: -0.5 * jnp.sum(p["theta"] ** 2),
        {"theta": jnp.zeros(2)},
        log_likelihood=lambda p: {"y": -0.5 * (p["theta"] - 1.0) ** 2},
        observed_data={"y": np.ones(2)},
        dims={"theta": ["school"], "y": ["school"]},
        coords={"school": ["Choate", "Deerfield"]},
    )
    settings = dict(chains=2, warmup=30, draws=20, progress=False)
    in_memory = sluice.sample(model, **settings).to_arviz()
    sluice.sample(model, sink=ZarrSink(tmp_path / "run.zarr"), **settings)
    on_disk = sluice.open(tmp_path / "run.zarr")
    for idata in (in_memory, on_disk):
        for group in ("posterior", "log_likelihood", "observed_data"):
            assert idata[group]["school"].values.tolist() == ["Choate", "Deerfield"], group
        assert idata.observed_data["y"].dims == ("school",)


def test_statistics_updated_inside_the_chunk_resume_exactly(tmp_path):
    """Statistics without an update of their own (``update`` per draw, inside the chunk
    program) are checkpointed with the chunk that updated them, whichever chunk samples
    meanwhile: resumed after a crash they equal the uninterrupted run's."""
    from sluice import stats

    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(3), name="three")
    settings = dict(chains=4, warmup=20, draws=80, chunk_size=20, progress=False, seed=3,
                    default_stats=False)  # fmt: skip
    reference = sluice.sample(model, sink="memory", stats={"m": stats.mean()}, **settings)

    path = tmp_path / "run.zarr"
    with pytest.raises(KeyboardInterrupt):
        sluice.sample(model, sink=_crash_at_write(3)(path), stats={"m": stats.mean()}, **settings)
    resumed = sluice.resume(path, model, stats={"m": stats.mean()}, progress=False)
    np.testing.assert_array_equal(resumed.stats["m"]["x"], reference.stats["m"]["x"])


def test_a_run_interrupted_in_its_warmup_checkpoints_no_statistics_and_resumes_exactly(
    tmp_path, reference
):
    """Statistics with a program of their own (the default summary; the user's ``sums``
    joins it) start from the warmup's last draws: a warmup checkpoint holds no states
    of theirs (gigabytes of a large model's zeros before), and the resumed run equals
    the uninterrupted one, statistics included."""
    path = tmp_path / "run.zarr"

    def recording(seen: list, crash_at: int | None = None) -> type[ZarrSink]:
        """A sink that records each checkpoint's ``(stats_ready, leaves)``, and stops the
        run at the ``crash_at``-th."""

        class Recording(ZarrSink):
            def save_checkpoint(self, checkpoint, process=0, parity=0):
                seen.append((checkpoint.stats_ready, len(checkpoint.carry)))
                if len(seen) == crash_at:
                    raise KeyboardInterrupt
                super().save_checkpoint(checkpoint, process, parity)

        return Recording

    saved = []
    with pytest.raises(KeyboardInterrupt):  # in the warmup's 60 iterations, in chunks of 10
        sluice.sample(child.model(), sink=recording(saved, crash_at=3)(path), stats=child.STATS,
                      progress=False, **child.SETTINGS)  # fmt: skip
    assert [ready for ready, _ in saved] == [False] * 3
    assert ZarrSink.open_existing(path).load_checkpoint().next_iteration == 20
    warmup_leaves = {n for _, n in saved}
    sampling = []
    run = sluice.sample(child.model(), sink=recording(sampling)(tmp_path / "whole.zarr"),
                        stats=child.STATS, progress=False, **child.SETTINGS)  # fmt: skip
    # the states join the carry when the warmup ends: its checkpoints have more leaves
    assert {n for ready, n in sampling if not ready} == warmup_leaves
    started = {n for ready, n in sampling if ready}
    assert len(started) == 1 and started.pop() > warmup_leaves.pop()
    assert run.info.draws == child.SETTINGS["draws"]
    assert_same_run(path, reference)
