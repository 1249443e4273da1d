"""The ahead-of-time cache for statistics' start / merge / finalize (sluice._reduce)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sluice import _reduce, stats


def _count_compiles(monkeypatch) -> list:
    calls = []
    real = jax.stages.Lowered.compile

    def counting(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    return calls


def test_call_compiles_once_per_function_and_shapes(monkeypatch):
    calls = _count_compiles(monkeypatch)

    def double(x):
        return {"y": 2 * x["a"]}

    x = {"a": np.arange(3, dtype=np.float32)}
    assert np.array_equal(_reduce.call(double, x)["y"], [0, 2, 4])
    assert np.array_equal(_reduce.call(double, {"a": jnp.ones(3)})["y"], [2, 2, 2])
    assert len(calls) == 1, "numpy and jax arrays of one shape share the executable"
    _reduce.call(double, {"a": np.zeros(4, np.float32)})
    assert len(calls) == 2, "a new shape compiles once more"


def test_precompile_leaves_nothing_to_compile(monkeypatch):
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    mean, variance = stats.mean(), stats.variance()
    statistic = stats.group({"mean": mean, "var": variance})
    slots = 3

    def start(position):
        state = statistic.init({"x": position})
        return jax.tree.map(lambda v: jnp.broadcast_to(v, (slots, *v.shape)), state)

    position = jax.ShapeDtypeStruct((2,), jnp.float32)
    thread = _reduce.precompile({"mean": mean, "var": variance}, start, (position,))
    assert thread is not None
    thread.join()
    calls = _count_compiles(monkeypatch)
    states = _reduce.call(start, np.array([1.0, 2.0], np.float32))
    one = jax.tree.map(lambda v: np.asarray(v[0]), states["mean"])
    merged = _reduce.call(mean.merge, one, one)
    _reduce.call(mean.finalize, merged)
    assert calls == [], "start, merge and finalize were compiled in the background"


def test_a_failing_compile_raises_in_the_foreground(monkeypatch):
    def bad(x):
        return x["missing"]

    with pytest.raises(KeyError, match="missing"):
        _reduce.call(bad, {"a": np.zeros(2)})
    with pytest.raises(KeyError, match="missing"):  # not cached as a failure
        _reduce.call(bad, {"a": np.zeros(2)})
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    thread = _reduce.precompile({"s": stats.mean()}, bad, ({"a": np.zeros(2)},))
    thread.join()  # swallowed there
    with pytest.raises(KeyError, match="missing"):
        _reduce.call(bad, {"a": np.zeros(2)})


def test_a_run_compiles_its_summary_in_the_background(monkeypatch):
    import sluice

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(2), name="bg-normal")
    run = sluice.sample(model, chains=2, warmup=30, draws=40, progress=False)
    _reduce.wait()
    calls = _count_compiles(monkeypatch)
    table = run.summary()
    assert calls == [], "merge and finalize were ready when the summary was asked for"
    assert list(table.index) == ["x[0]", "x[1]"]
    assert np.all(np.isfinite(table["ess_bulk"]))


def test_chunk_program_compiled_beside_init_gives_the_same_run(monkeypatch):
    """The chunk program compiled in a thread while init compiles and runs (from the
    shapes of init's result) is the one the run uses: same draws, no second compile."""
    import sluice
    from sluice import engine

    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(3), name="beside-normal")
    kwargs = dict(chains=2, warmup=20, draws=30, chunk_size=10, progress=False, seed=4)
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "0")
    plain = sluice.sample(model, **kwargs)
    engine._PROGRAMS.clear()
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    lowered = []
    original = engine.ChunkProgram.compiled

    def counting(self, name, *args, timed=True):
        before = len(self._executables)
        out = original(self, name, *args, timed=timed)
        if len(self._executables) > before:
            lowered.append(name)
        return out

    monkeypatch.setattr(engine.ChunkProgram, "compiled", counting)
    beside = sluice.sample(model, **kwargs)
    _reduce.wait()
    assert sorted(lowered) == ["advance_donated", "init"], lowered
    np.testing.assert_array_equal(beside.draws["x"], plain.draws["x"])
    assert 0 < beside.info.compile_seconds < beside.info.total_seconds


@pytest.mark.parametrize("threshold, waits", [(0, True), (2**62, False)])
def test_large_runs_wait_for_the_statistics_compile_before_sampling(monkeypatch, threshold, waits):
    """A run whose sampling holds at least engine._AWAIT_COMPILE_BYTES starts sampling
    only once the statistics' background compile is done (its transient heap would
    stack on the sampling buffers); a smaller one samples beside it."""
    import threading
    import time

    import sluice
    from sluice import engine

    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    monkeypatch.setattr(engine, "_AWAIT_COMPILE_BYTES", threshold)
    release = threading.Event()
    real = _reduce.compiled

    def slow(fn, args):  # the background compile lasts until the test releases it
        if threading.current_thread().name == "sluice-precompile":
            release.wait(timeout=5.0)
        return real(fn, args)

    monkeypatch.setattr(_reduce, "compiled", slow)
    seen = []
    advance = engine._Session._advance

    def spy(self, carry, start, stop):
        if start >= self.plan.warmup and not seen:  # the first sampling chunk
            threads = [t for t in threading.enumerate() if t.name == "sluice-precompile"]
            seen.append(any(t.is_alive() for t in threads))
            release.set()
        return advance(self, carry, start, stop)

    monkeypatch.setattr(engine._Session, "_advance", spy)
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(2), name="await-normal")
    t0 = time.perf_counter()
    run = sluice.sample(model, chains=2, warmup=20, draws=20, sink=None, progress=False,
                        default_stats=False, stats={"m": stats.mean()})  # fmt: skip
    release.set()
    _reduce.wait()
    assert seen == [not waits]
    if waits:  # nothing released the compile: sampling began after its 5 s
        assert time.perf_counter() - t0 >= 5.0
    np.testing.assert_allclose(np.asarray(run.stats["m"]["x"]).shape, (2,))


def test_small_programs_compile_fast_and_large_ones_with_xla_defaults(monkeypatch):
    seen = []
    real = jax.stages.Lowered.compile

    def recording(self, compiler_options=None, **kwargs):
        seen.append(compiler_options)
        return real(self, compiler_options=compiler_options, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    statistic = stats.summary_statistics(60)
    xs = jax.random.normal(jax.random.key(3), (60, 5))

    def fill(xs):
        body = lambda s, x: (statistic.update(s, {"a": x}), None)  # noqa: E731
        return jax.lax.scan(body, statistic.init({"a": xs[0]}), xs)[0]

    state = jax.jit(fill)(xs)
    reference = jax.jit(statistic.finalize)(state)  # XLA's default options
    seen.clear()
    fast = _reduce.call(statistic.finalize, state)
    assert seen == [_reduce.FAST_COMPILE_OPTIONS], "a small state compiles with the fast options"
    for key in ("mean", "sd", "ess_bulk", "ess_tail", "r_hat", "quantiles", "mcse_sd"):
        np.testing.assert_allclose(fast[key]["a"], reference[key]["a"], rtol=1e-3, err_msg=key)
    # above the bound (here: any state), the default options
    monkeypatch.setattr(_reduce, "FAST_COMPILE_BYTES", 0)
    _reduce.clear()
    seen.clear()
    slow = _reduce.call(statistic.finalize, state)
    assert seen == [None]
    np.testing.assert_allclose(slow["ess_bulk"]["a"], reference["ess_bulk"]["a"], rtol=1e-6)


def test_compile_options_count_arguments_and_results():
    n = _reduce.FAST_COMPILE_BYTES // 4
    small, large = (
        jax.ShapeDtypeStruct((n // 2,), jnp.float32),
        jax.ShapeDtypeStruct((n,), jnp.float32),
    )
    assert _reduce.compile_options((small,)) == _reduce.FAST_COMPILE_OPTIONS
    assert _reduce.compile_options((small,), (small,)) == _reduce.FAST_COMPILE_OPTIONS
    assert _reduce.compile_options((small,), (large,)) is None
    assert _reduce.compile_options((large, small)) is None
