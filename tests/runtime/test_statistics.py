"""A run's statistics on the host: start, background compiles, merge and finalize."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sluice import stats
from sluice._jax import compile as programs
from sluice.runtime import compiling
from sluice.runtime import session as session_module
from sluice.runtime import statistics as run_statistics


def _count_compiles(monkeypatch) -> list:
    calls = []
    real = jax.stages.Lowered.compile

    def counting(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    return calls


def test_lowered_and_filled_leave_nothing_to_compile(monkeypatch):
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    mean, variance = stats.mean(), stats.variance()
    statistic = stats.group({"mean": mean, "var": variance})
    slots = 3

    def start(position):
        state = statistic.init({"x": position})
        return jax.tree.map(lambda v: jnp.broadcast_to(v, (slots, *v.shape)), state)

    position = jax.ShapeDtypeStruct((2,), jnp.float32)
    starting = (("start", slots), start, (position,))
    run_statistics.fill(run_statistics.lowered({"mean": mean, "var": variance}, None, starting))
    calls = _count_compiles(monkeypatch)
    states = programs.call(("start", slots), start, np.array([1.0, 2.0], np.float32))
    one = jax.tree.map(lambda v: np.asarray(v[0]), states["mean"])
    merged = run_statistics.merge_chains(mean, [one, one])
    run_statistics.finalize(mean, merged)
    assert calls == [], "start, merge and finalize were compiled beforehand"


def test_a_failing_background_compile_is_raised_in_the_foreground(monkeypatch):
    def bad(x):
        return x["missing"]

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    lowered = run_statistics.lowered({"s": stats.mean()}, None, ("bad", bad, ({"a": np.zeros(2)},)))
    run_statistics.fill(lowered)  # swallowed there
    with pytest.raises(KeyError, match="missing"):
        programs.call("bad", bad, {"a": np.zeros(2)})


def test_a_run_compiles_its_summary_in_the_background(monkeypatch):
    import sluice

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(2), name="bg-normal")
    run = sluice.sample(model, chains=2, warmup=30, draws=40, progress=False)
    programs.wait()
    calls = _count_compiles(monkeypatch)
    table = run.summary()
    assert calls == [], "merge and finalize were ready when the summary was asked for"
    assert list(table.index) == ["x[0]", "x[1]"]
    assert np.all(np.isfinite(table["ess_bulk"]))


def test_chunk_program_compiled_beside_init_gives_the_same_run(monkeypatch):
    """The chunk program and the warmup's window-end program, compiled in threads while
    init compiles and runs (from the shapes of init's result), are the ones the run
    uses: same draws, no second compile."""
    import sluice

    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(3), name="beside-normal")
    kwargs = dict(
        chains=2,
        warmup=20,
        draws=30,
        chunk_size=10,
        progress=False,
        seed=4,
        devices=jax.devices()[:1],
    )  # fmt: skip  (several devices compile in turn)
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "0")
    plain = sluice.sample(model, **kwargs)
    programs.clear()
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    threads = []
    real = jax.stages.Lowered.compile

    def recording(self, *args, **kw):
        threads.append(__import__("threading").current_thread().name)
        return real(self, *args, **kw)

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    beside = sluice.sample(model, **kwargs)
    programs.wait()
    assert sorted(key[1] for key in programs.cached() if key[0] == "mcmc.chunk") == [
        "advance_donated",
        "init",
        "window_end_donated",
    ]
    assert sorted(threads) == ["MainThread", "sluice-compile", "sluice-compile-2"], threads
    np.testing.assert_array_equal(beside.draws["x"], plain.draws["x"])
    assert 0 < beside.info.compile_seconds < beside.info.total_seconds


@pytest.mark.parametrize("threshold, waits", [(0, True), (2**62, False)])
def test_large_runs_wait_for_the_statistics_compile_before_sampling(monkeypatch, threshold, waits):
    """A run whose sampling holds at least compiling.AWAIT_COMPILE_BYTES starts sampling
    only once the statistics' background compile is done (its transient heap would
    stack on the sampling buffers); a smaller one samples beside it."""
    import threading
    import time

    import sluice

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    monkeypatch.setattr(compiling, "AWAIT_COMPILE_BYTES", threshold)
    programs.clear()  # every statistics' program compiles in this run
    release = threading.Event()
    real = programs.fill

    def slow(pending, **kw):  # the background compile lasts until the test releases it
        if threading.current_thread().name == "sluice-precompile":
            release.wait(timeout=5.0)
        return real(pending, **kw)

    monkeypatch.setattr(programs, "fill", slow)
    seen = []
    advance = session_module.Session._advance

    def spy(self, carry, start, stop):
        if start >= self.config.warmup and not seen:  # the first sampling chunk
            threads = [t for t in threading.enumerate() if t.name == "sluice-precompile"]
            seen.append(any(t.is_alive() for t in threads))
            release.set()
        return advance(self, carry, start, stop)

    monkeypatch.setattr(session_module.Session, "_advance", spy)
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(2), name="await-normal")
    t0 = time.perf_counter()
    run = sluice.sample(model, chains=2, warmup=20, draws=20, sink=None, progress=False,
                        default_stats=False, stats={"m": stats.mean()})  # fmt: skip
    release.set()
    programs.wait()
    assert seen == [not waits]
    if waits:  # nothing released the compile: sampling began after its 5 s
        assert time.perf_counter() - t0 >= 5.0
    np.testing.assert_allclose(np.asarray(run.stats["m"]["x"]).shape, (2,))


def test_the_statistics_update_compiles_after_the_chunk_program(monkeypatch):
    """Warmup needs only the chunk program: the statistics' update program compiles in
    the statistics' background thread, not in the one warmup waits for."""
    import sluice

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    where = _compiled_where(monkeypatch)
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(3), name="update-later")
    run = sluice.sample(model, chains=2, warmup=20, draws=20, sink=None, progress=False,
                        devices=jax.devices()[:1])  # fmt: skip
    programs.wait()
    assert where["advance_donated"] == "sluice-compile"
    assert where["update_statistics_donated"] == "sluice-precompile-start"
    assert np.all(np.isfinite(run.summary()["mean"]))


def test_compiled_says_whether_summarize_would_compile(monkeypatch):
    statistic = stats.streaming.summary(8)
    state = statistic.init({"x": jnp.asarray(np.random.default_rng(0).normal(size=(16, 5)))})
    one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), state)
    assert not run_statistics.compiled(statistic, one)
    draws = {"x": jnp.ones((8, 5))}
    states = [statistic.update_block(state, draws, 8) for _ in range(2)]
    run_statistics.summarize(statistic, states)
    assert run_statistics.compiled(statistic, one)
    calls = _count_compiles(monkeypatch)
    run_statistics.summarize(statistic, states)
    assert calls == []


@pytest.mark.parametrize(
    "spent, previous, elapsed, last, ready, due",
    [
        (0.0, None, 1.0, False, False, False),  # never waits for a compile
        (0.0, None, 1.0, True, False, True),  # but the last chunk shows the run's summary
        (0.0, None, 1.0, False, True, False),  # a first reading would take 10% of 1 s
        (0.0, None, 2.0, False, True, True),  # but only 5% of 2 s
        (0.03, 0.01, 1.0, False, True, True),  # this one too within the share
        (0.03, 0.03, 1.0, False, True, False),  # this one would pass it
        (0.06, 0.01, 1.0, True, True, True),  # the last chunk is read
    ],
)
def test_the_display_reads_the_statistics_within_its_share(monkeypatch, spent, previous, elapsed,
                                                            last, ready, due):  # fmt: skip
    """Readings, the next one included at the last one's cost, stay within 5% of the
    sampling phase's wall time."""
    readouts = session_module._Readouts()
    readouts.spent = spent
    if previous is not None:
        readouts.last = previous
    monkeypatch.setattr(session_module.time, "perf_counter", lambda: readouts.start + elapsed)
    assert session_module.READOUT_SHARE == 0.05
    assert session_module.FIRST_READOUT_SECONDS == 0.1
    assert readouts.due(last, ready) is due


def test_large_statistics_compile_where_they_are_used(monkeypatch):
    """Statistics whose states hold at least FOREGROUND_STATISTICS_BYTES start no
    background compile (it left the first sampling chunk holding a state more)."""
    import sluice

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    monkeypatch.setattr(compiling, "FOREGROUND_STATISTICS_BYTES", 0)
    started = []
    real = programs.in_background

    def spy(work, name="sluice-compile"):
        started.append(name)
        return real(work, name)

    monkeypatch.setattr(programs, "in_background", spy)
    where = _compiled_where(monkeypatch)
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(3), name="foreground-stats")
    run = sluice.sample(model, chains=2, warmup=100, draws=100, sink=None, progress=False,
                        seed=1, devices=jax.devices()[:1])  # fmt: skip
    assert "sluice-precompile" not in started
    assert where["update_statistics_donated"] == "MainThread"
    assert np.all(np.isfinite(run.summary()["ess_bulk"]))


def _compiled_where(monkeypatch) -> dict:
    """``{chunk program name: the thread that compiled it}``, filled as a run compiles
    (every compile of the cache goes through ``programs.fill``)."""
    import threading

    where = {}
    real = programs.fill

    def record(pending, **kw):
        key = pending.entry[0]
        if isinstance(key, tuple) and key and key[0] == "mcmc.chunk":
            where.setdefault(key[1], threading.current_thread().name)
        return real(pending, **kw)

    monkeypatch.setattr(programs, "fill", record)
    return where


def test_a_checkpointed_run_holds_one_copy_of_the_statistics(tmp_path):
    """With checkpoints, a chunk's statistics are saved while the next chunk samples;
    the next chunk's update waits for that save and then reuses the states' buffers.
    So every checkpoint sees one copy of the default statistics' histogram, not the
    saved chunk's and the next one's (two copies: twice the memory of the states,
    the largest part of a large model's run)."""
    import sluice

    seen, copied = [], []

    class Counting(sluice.ZarrSink):
        def save_checkpoint(self, checkpoint, process=0, parity=0):
            hists = [a for a in jax.live_arrays() if a.shape == (4, 3 * 288)]
            seen.append(len({id(a) for a in hists}))
            # and the file is written from views of the device arrays, not a host copy
            copied.extend(p.shape for leaf in checkpoint.carry for p in leaf.parts
                          if p.flags.owndata)  # fmt: skip
            super().save_checkpoint(checkpoint, process, parity)

    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(3), chains=4, warmup=20,
                        draws=80, chunk_size=20, sink=Counting(tmp_path / "run.zarr"),
                        progress=False, seed=2)  # fmt: skip
    assert run.info.draws == 80
    assert len(seen) >= 4 + 1 and seen[-4:] == [1, 1, 1, 1], seen  # the four sampling chunks'
    assert copied == []


@pytest.mark.parametrize(("sink", "most"), [(None, 0), ("memory", 2)])
def test_no_chunk_of_draws_outlives_its_use_while_the_run_samples(monkeypatch, sink, most):
    """Draws nobody keeps go to the statistics' update and nowhere else, and kept ones
    to the sink: the chunk being written and the next, dispatched beside it. No other
    chunk, the warmup's last one included, stays alive through the sampling phase (a
    million-element model's chunk of 50 draws is 0.75 GiB)."""
    import sluice
    from sluice.runtime import session

    seen = []
    real = session.Session._settle

    def settle(self, carry, through=None):
        seen.append(sum(a.shape == (4, 10, 7) for a in jax.live_arrays()))  # (chains, chunk, dim)
        return real(self, carry, through)

    monkeypatch.setattr(session.Session, "_settle", settle)
    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(7), chains=4, warmup=20,
                        draws=30, chunk_size=10, sink=sink, default_stats=True, progress=False,
                        seed=3)  # fmt: skip
    assert run.info.draws == 30 and run.stats["summary"]["mean"]["x"].shape == (7,)
    assert len(seen) == 2 * 3 and max(seen) == most, seen
