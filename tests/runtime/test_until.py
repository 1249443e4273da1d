"""``until=sluice.converged(...)``: stop at the first chunk boundary where every element
meets every target; the draws kept are the prefix of the uninterrupted run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.io.arviz import import_arviz
from sluice.io.store import StoreError, ZarrSink

SETTINGS = dict(chains=2, warmup=100, draws=500, chunk_size=50, seed=5)
TARGET = sluice.converged(ess_bulk=300, r_hat=1.05)


def model() -> sluice.Model:
    scales = jnp.array([1.0, 3.0, 0.3])
    return sluice.Model(lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2), init={"x": jnp.zeros(3)})


@pytest.fixture(scope="module")
def full():
    """The same seed run to the end, without a target."""
    return sluice.sample(model(), progress=False, **SETTINGS)


@pytest.fixture(scope="module")
def stopped():
    return sluice.sample(model(), until=TARGET, progress=False, **SETTINGS)


def test_stops_at_a_chunk_boundary_with_the_prefix_of_the_full_run(full, stopped):
    n = stopped.info.draws
    assert n == stopped.info.converged_at
    assert 0 < n < SETTINGS["draws"] and n % SETTINGS["chunk_size"] == 0
    assert stopped.draws["x"].shape == (2, n, 3)
    np.testing.assert_array_equal(stopped.draws["x"], full.draws["x"][:, :n])
    assert full.info.converged_at is None and full.info.draws == SETTINGS["draws"]


def test_the_stop_is_where_arviz_says_the_targets_are_met(stopped, full):
    """ArviZ on the kept draws meets the targets (within the streamed ESS's accuracy,
    15%), and ArviZ on one chunk fewer does not exceed them by more than that."""
    az = import_arviz()
    n = stopped.info.draws

    def arviz(x, f, **kw):
        return [float(f(np.asarray(x)[..., i], **kw)) for i in range(x.shape[-1])]

    assert min(arviz(stopped.draws["x"], az.ess, method="bulk")) >= 0.85 * TARGET.ess_bulk
    assert max(arviz(stopped.draws["x"], az.rhat)) <= TARGET.r_hat
    before = full.draws["x"][:, : n - SETTINGS["chunk_size"]]
    assert min(arviz(before, az.ess, method="bulk")) <= 1.15 * TARGET.ess_bulk
    table = stopped.summary(round_to="none")
    assert (table["ess_bulk"] >= TARGET.ess_bulk).all()  # what the decision read


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("until") / "run.zarr"
    run = sluice.sample(model(), sink=ZarrSink(path), until=TARGET, progress=False, **SETTINGS)
    return path, run


def test_the_store_is_marked_stopped_and_reads_as_complete(store, stopped):
    path, run = store
    n = stopped.info.draws
    assert run.info.draws == n
    sink = ZarrSink.open_existing(path, writable=False)
    assert sink.stopped() == n
    idata = sluice.open(path, partial=False)  # complete: no "unfinished run" error
    assert idata.posterior.sizes["draw"] == n
    np.testing.assert_array_equal(idata.posterior["x"].values, stopped.draws["x"])
    with pytest.raises(FileExistsError):
        sluice.sample(model(), sink=ZarrSink(path), until=TARGET, progress=False, **SETTINGS)


def test_an_interrupted_run_resumes_to_the_same_stop(tmp_path, stopped):
    path = tmp_path / "run.zarr"

    class Crash(ZarrSink):
        writes = 0

        def write(self, start, chunk):
            Crash.writes += 1
            if Crash.writes == 3:
                raise KeyboardInterrupt
            super().write(start, chunk)

    with pytest.raises(KeyboardInterrupt):
        sluice.sample(model(), sink=Crash(path), until=TARGET, progress=False, **SETTINGS)
    assert ZarrSink.open_existing(path, writable=False).stopped() is None
    resumed = sluice.resume(path, model(), progress=False)
    assert resumed.info.converged_at == stopped.info.draws
    np.testing.assert_array_equal(resumed.draws["x"][...], stopped.draws["x"])
    assert ZarrSink.open_existing(path, writable=False).stopped() == stopped.info.draws


def test_a_crash_while_cutting_the_arrays_leaves_a_store_that_reads_the_same(
    tmp_path, stopped, monkeypatch
):
    """The commit record says where the run stopped before the arrays are cut; killed
    after cutting one array, the store passes its checks (each cut array's metadata is
    recorded as it was and as it is once cut), reading it says that resuming finishes
    the cut, and resuming does."""
    import zarr

    path, real, cut = tmp_path / "run.zarr", zarr.Array.resize, []

    def resize(self, shape):
        cut.append(self.path)
        if len(cut) == 2:
            raise KeyboardInterrupt
        return real(self, shape)

    monkeypatch.setattr(zarr.Array, "resize", resize)
    with pytest.raises(KeyboardInterrupt):
        sluice.sample(model(), sink=ZarrSink(path), until=TARGET, progress=False, **SETTINGS)
    monkeypatch.undo()
    assert ZarrSink.open_existing(path, writable=False).stopped() == stopped.info.draws
    with pytest.raises(StoreError, match=r"/zarr\.json still has .*finishes cutting"):
        sluice.open(path)
    sluice.resume(path, model(), progress=False)
    idata = sluice.open(path, partial=False)
    np.testing.assert_array_equal(idata.posterior["x"].values, stopped.draws["x"])


def test_until_needs_the_default_statistics():
    with pytest.raises(ValueError, match="until"):
        sluice.sample(model(), until=TARGET, default_stats=False, progress=False, **SETTINGS)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "at least one target"),
        ({"ess_bulk": -1}, ValueError, "ess_bulk must be a positive"),
        ({"r_hat": 1.0}, ValueError, "r_hat must be above 1"),
        ({"mcse_mean": "small"}, TypeError, "mcse_mean must be a number"),
    ],
)
def test_bad_targets_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        sluice.converged(**kwargs)


def test_until_must_be_converged():
    with pytest.raises(TypeError, match=r"until must be sluice\.converged"):
        sluice.sample(model(), until={"ess_bulk": 400}, progress=False, **SETTINGS)


def test_stopped_marker_refuses_a_wrong_count(store, stopped):
    path, _ = store
    sink = ZarrSink.open_existing(path)
    with pytest.raises(StoreError, match="cannot mark"):
        sink.stop(stopped.info.draws + SETTINGS["chunk_size"])
    sink.close()


def test_the_summary_read_at_the_last_chunk_is_the_runs(monkeypatch):
    """``until`` reads the convergence diagnostics alone at every chunk, and the whole
    summary once where the run stops: that reading is the run's summary (no second
    merge and finalize), and it covers every draw."""
    from sluice.runtime import statistics as run_statistics

    calls, copied = [], []
    real = run_statistics.summarize

    def counted(*args, diagnostics=False):
        calls.append(diagnostics)
        # each reading takes views of the device's states, not a host copy beside them
        buffers = [np.asarray(s.data) for a in jax.live_arrays() for s in a.addressable_shards]
        copied.extend(x.shape for x in jax.tree.leaves(args[1])
                      if x.ndim and not any(np.shares_memory(x, b) for b in buffers))  # fmt: skip
        return real(*args, diagnostics=diagnostics)

    monkeypatch.setattr(run_statistics, "summarize", counted)
    never = sluice.converged(ess_bulk=10**9)  # read at every chunk, never met
    run = sluice.sample(model(), until=never, progress=False, **SETTINGS)
    assert run.info.draws == SETTINGS["draws"]
    chunks = SETTINGS["draws"] // SETTINGS["chunk_size"]
    assert calls == [True] * chunks + [False]
    assert copied == []
    table = run.summary(round_to="none")
    assert len(calls) == chunks + 1
    x = run.draws["x"].reshape(-1, 3)
    np.testing.assert_allclose(table["mean"].to_numpy(), x.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(table["sd"].to_numpy(), x.std(axis=0, ddof=1), rtol=1e-4)


def test_readings_at_every_chunk_compile_for_speed_past_enough_elements():
    """``until`` reads the summary at every chunk: where its chunks times the
    posterior's elements reach ``REPEATED_READOUT_ELEMENTS`` the summary's programs
    compile for speed (``Plan.repeated_readout``); without ``until``, or with fewer
    readings, for a quick compile."""
    from sluice.io.sinks import MemorySink
    from sluice.runtime import plan
    from sluice.runtime.config import RunConfig

    wide = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(1000), name="wide")

    def repeated(until, draws: int, chunk: int) -> bool:
        config = RunConfig(chains=2, warmup=10, draws=draws, chunk_size=chunk, until=until)
        return plan.Plan.build(config, wide, sink=MemorySink()).repeated_readout

    limit = plan.REPEATED_READOUT_ELEMENTS
    assert repeated(TARGET, 100 * (limit // 1000), 100)  # limit // 1000 chunks of 1,000 elements
    assert not repeated(TARGET, 100 * (limit // 1000 - 1), 100)
    assert not repeated(None, 100 * (limit // 1000), 100)


def test_readings_compiled_for_speed_stop_where_quick_ones_do(monkeypatch, stopped):
    """With the summary's programs compiled for speed (programs of their own in the
    cache) the run stops at the same chunk and reports the same summary, up to
    float32 rounding, as with them compiled for a quick compile."""
    from sluice._jax import compile as programs
    from sluice.runtime import plan
    from sluice.runtime import statistics as run_statistics

    monkeypatch.setattr(plan, "REPEATED_READOUT_ELEMENTS", 1)
    seen = []
    real = run_statistics.summarize

    def spy(statistic, states, repeated=False, diagnostics=False):
        seen.append(repeated)
        return real(statistic, states, repeated, diagnostics)

    monkeypatch.setattr(run_statistics, "summarize", spy)
    run = sluice.sample(model(), until=TARGET, progress=False, **SETTINGS)
    assert seen and all(seen)
    assert any("repeated" in key[0] for key in programs._ENTRIES if isinstance(key[0], tuple))
    assert run.info.draws == stopped.info.draws
    np.testing.assert_array_equal(run.draws["x"], stopped.draws["x"])
    ours, quick = run.summary(round_to="none"), stopped.summary(round_to="none")
    np.testing.assert_allclose(ours.to_numpy(float), quick.to_numpy(float), rtol=1e-4, atol=1e-6)
