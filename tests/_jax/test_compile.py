"""The one compile cache (sluice._jax.compile): keys, background compiles, options."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sluice import stats
from sluice._jax import compile as programs


def _count_compiles(monkeypatch) -> list:
    calls = []
    real = jax.stages.Lowered.compile

    def counting(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    return calls


def _record_options(monkeypatch) -> list:
    """The XLA options of every compile from now on, in order."""
    seen = []
    real = jax.stages.Lowered.compile

    def recording(self, compiler_options=None, **kwargs):
        seen.append(compiler_options)
        return real(self, compiler_options=compiler_options, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    return seen


def test_call_compiles_once_per_key_and_shapes(monkeypatch):
    calls = _count_compiles(monkeypatch)

    def double(x):
        return {"y": 2 * x["a"]}

    x = {"a": np.arange(3, dtype=np.float32)}
    assert np.array_equal(programs.call("double", double, x)["y"], [0, 2, 4])
    assert np.array_equal(programs.call("double", double, {"a": jnp.ones(3)})["y"], [2, 2, 2])
    assert len(calls) == 1, "numpy and jax arrays of one shape share the executable"
    programs.call("double", double, {"a": np.zeros(4, np.float32)})
    assert len(calls) == 2, "a new shape compiles once more"


def test_a_statistics_merge_and_finalize_on_concrete_states_compile_once(monkeypatch):
    """Called on arrays, the default statistics' merge and finalize compile once each
    (the program cache, fast options: small) and give what one jitted program gives
    (to rounding); traced under an outer ``jit`` they are inlined (no cache entry)."""
    programs.clear()
    s = stats.streaming.summary(40)
    draws = jax.random.normal(jax.random.key(3), (2, 40, 3))
    states = [s.update_block(s.init(draws[:, :8].reshape(-1, 3)), c, 40) for c in draws]
    reference = jax.jit(lambda a, b: s.finalize(s.merge(a, b)))(*states)
    assert not any("merge" in str(k) for k in programs.cached()), "inlined under jit"
    options = _record_options(monkeypatch)
    out = s.finalize(s.merge(*states))
    again = s.finalize(s.merge(*states))
    assert len(options) == 2 and all(o == programs.FAST_COMPILE_OPTIONS for o in options)
    for key in ("mean", "sd", "ess_bulk", "r_hat"):
        np.testing.assert_allclose(out[key], reference[key], rtol=1e-4)
        np.testing.assert_array_equal(out[key], again[key])


def test_equal_settings_share_a_program_without_memoised_factories(monkeypatch):
    """Two statistics built alike have equal keys: the second compiles nothing."""
    calls = _count_compiles(monkeypatch)
    state = {"x": np.zeros(3, np.float32)}
    for _ in range(2):
        statistic = stats.variance(ddof=1)
        assert statistic.cache_key == ("variance", 1)
        st = statistic.init(state)
        programs.call(("statistic.finalize", statistic.cache_key), statistic.finalize, st)
    assert len(calls) == 1
    other = stats.variance(ddof=0)
    programs.call(("statistic.finalize", other.cache_key), other.finalize, other.init(state))
    assert len(calls) == 2, "a different setting is a different program"


def test_a_failing_compile_raises_in_the_foreground_and_is_not_cached():
    def bad(x):
        return x["missing"]

    with pytest.raises(KeyError, match="missing"):
        programs.call("bad", bad, {"a": np.zeros(2)})
    with pytest.raises(KeyError, match="missing"):  # not cached as a failure
        programs.call("bad", bad, {"a": np.zeros(2)})
    assert "bad" not in programs.cached()


def test_a_background_compile_is_waited_for_not_repeated(monkeypatch):
    release = threading.Event()
    real = jax.stages.Lowered.compile
    calls = []

    def slow(self, *args, **kwargs):
        calls.append(threading.current_thread().name)
        release.wait(timeout=10)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", slow)
    spec = (jax.ShapeDtypeStruct((3,), jnp.float32),)
    thread = programs.in_background(
        lambda: programs.compiled("triple", lambda x: 3 * x, spec), "test-compile"
    )
    while "triple" not in programs.cached():  # claimed by the background thread
        pass
    release.set()
    out = programs.compiled("triple", lambda x: 3 * x, spec)(np.ones(3, np.float32))
    thread.join()
    np.testing.assert_array_equal(out, [3, 3, 3])
    assert calls == ["test-compile"], "the foreground waited for the background compile"


def test_clear_caches_forgets_everything():
    programs.call("one", lambda x: x + 1, np.zeros(2, np.float32))
    assert "one" in programs.cached()
    programs.clear_caches()
    assert programs.cached() == []


def test_small_programs_compile_fast_and_large_ones_with_xla_defaults(monkeypatch):
    seen = _record_options(monkeypatch)
    statistic = stats.streaming.summary(60)  # (a finalize of ~2,000 operations)
    xs = jax.random.normal(jax.random.key(3), (76, 5))

    def fill(xs):  # 16 pilot rows, 60 draws
        return statistic.update_block(statistic.init({"a": xs[:16]}), {"a": xs[16:]}, 60)

    state = jax.jit(fill)(xs)
    reference = jax.jit(statistic.finalize)(state)  # XLA's default options
    seen.clear()
    fast = programs.call("finalize", statistic.finalize, state)
    assert seen == [programs.FAST_COMPILE_OPTIONS], "a small state compiles with the fast options"
    for key in ("mean", "sd", "ess_bulk", "ess_tail", "r_hat", "quantiles", "mcse_sd"):
        np.testing.assert_allclose(fast[key]["a"], reference[key]["a"], rtol=1e-3, err_msg=key)
    # above the bound (here: any state), the default options
    monkeypatch.setattr(programs, "FAST_COMPILE_BYTES", 0)
    programs.clear()
    seen.clear()
    slow = programs.call("finalize", statistic.finalize, state)
    assert seen == [None]
    np.testing.assert_allclose(slow["ess_bulk"]["a"], reference["ess_bulk"]["a"], rtol=1e-6)


def test_compile_options_count_arguments_and_results():
    n = programs.FAST_COMPILE_BYTES // 4
    small, large = (
        jax.ShapeDtypeStruct((n // 2,), jnp.float32),
        jax.ShapeDtypeStruct((n,), jnp.float32),
    )
    assert programs.compile_options((small,)) == programs.FAST_COMPILE_OPTIONS
    assert programs.compile_options((small,), (small,)) == programs.FAST_COMPILE_OPTIONS
    assert programs.compile_options((small,), (large,)) is None
    assert programs.compile_options((large, small)) is None


def test_fast_by_decides_the_options_instead_of_the_arguments(monkeypatch):
    seen = _record_options(monkeypatch)
    monkeypatch.setattr(programs, "FAST_COMPILE_BYTES", 64)
    big, tiny = np.zeros(1000, np.float32), np.zeros(2, np.float32)
    programs.compiled("by-args", lambda v: v + 1, (big,), fast_if_small=True)
    programs.compiled("by-tiny", lambda v: v + 1, (big,), fast_if_small=True, fast_by=(tiny,))
    programs.compiled("by-big", lambda v: v + 1, (tiny,), fast_if_small=True, fast_by=(big,))
    assert seen == [None, programs.FAST_COMPILE_OPTIONS, None]


def test_a_run_compiles_its_init_program_fast_and_its_chunk_program_by_its_traffic(
    monkeypatch,
):
    """The init program runs once and the window-end program once per window: quick
    options while the data and a draw are small. The chunk program of a short run
    takes the classic emitters; with the bound at zero, XLA's defaults, compiled anew
    rather than found in the cache."""
    import sluice
    from sluice.runtime.compiling import Compiler

    decided = []
    real = Compiler.compile_options

    def recording(self, name, args):
        options = real(self, name, args)
        decided.append((name, options.get("fast_if_small", False), options.get("options")))
        return options

    monkeypatch.setattr(Compiler, "compile_options", recording)
    model = sluice.Model(lambda p: -0.5 * jnp.sum(p["x"] ** 2), init={"x": jnp.zeros(3)})
    programs.clear()
    first = sluice.sample(model, draws=30, warmup=30, chains=2, seed=3, progress=False)
    assert ("init", True, None) in decided
    assert ("window_end_donated", True, None) in decided
    quick = ("init", "window_end_donated")
    chunk = [options for name, fast, options in decided if name not in quick]
    assert chunk and all(o == programs.CLASSIC_EMITTER_OPTIONS for o in chunk), decided

    seen = _record_options(monkeypatch)
    monkeypatch.setattr(programs, "CLASSIC_EMITTER_RUN_BYTES", 0)
    decided.clear()
    second = sluice.sample(model, draws=30, warmup=30, chains=2, seed=3, progress=False)
    chunk = [options for name, fast, options in decided if name not in quick]
    assert chunk and all(o is None for o in chunk), decided
    assert None in seen, "the chunk program compiled again with XLA's defaults"
    assert second.draws["x"].shape == first.draws["x"].shape


def test_loop_options_follow_the_traffic_on_cpu_only(monkeypatch):
    bound = programs.CLASSIC_EMITTER_RUN_BYTES
    assert bound > programs.SMALL_RUN_BYTES  # past sequential chains' bound
    assert programs.loop_options(bound) == programs.CLASSIC_EMITTER_OPTIONS
    assert programs.loop_options(bound + 1) is None
    assert programs.loop_options(bound, programs.SMALL_RUN_BYTES) is None
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert programs.loop_options(0) is None


def test_the_chunk_programs_options_do_not_depend_on_the_devices():
    """The options change floating-point results: the same run on one device or
    two must choose the same (and a longer run of a larger model, the defaults)."""
    import sluice
    from sluice.io.sinks import MemorySink
    from sluice.runtime.config import RunConfig
    from sluice.runtime.plan import Plan

    model = sluice.Model(lambda p: -0.5 * jnp.sum(p["x"] ** 2), init={"x": jnp.zeros(3)})
    config = RunConfig(chains=4, warmup=50, draws=50)
    options = [
        Plan.build(config, model, sink=MemorySink(), devices=jax.devices()[:n]).compile_options
        for n in (1, 2)
    ]
    assert options == [programs.CLASSIC_EMITTER_OPTIONS] * 2
    big = sluice.Model(lambda p: -0.5 * jnp.sum(p["x"] ** 2), init={"x": jnp.zeros(1000)})
    long = RunConfig(chains=4, warmup=1000, draws=100_000)
    assert Plan.build(long, big, sink=MemorySink()).compile_options is None
