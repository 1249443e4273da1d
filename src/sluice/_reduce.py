"""Starting, merging and finalizing statistics: compiled once, early, off the main thread.

A statistic's ``merge`` and ``finalize`` run once per run, on small states,
but compiling them costs seconds (the default summary statistics: ~3 s and
~4.5 s on CPU). They depend only on the state's shapes, which are known
before the first chunk runs, so the engine calls :func:`precompile` when a
run starts: a background thread lowers and compiles them ahead of time (XLA
releases the GIL while compiling) while the main thread compiles the chunk
program, warms up and samples. Nothing is executed there, so the background
work costs no memory for states or temporaries.

:func:`call` runs a function through this cache: it waits for a compile in
progress, or compiles in the foreground if none was started. A failed
background compile is not cached; the foreground call compiles again and
raises the error where the user sees it.

Small states are compiled for a quick compile rather than a quick run
(:func:`compile_options`): on CPU, XLA's backend optimisation level 0 and its
older loop emitters compile the default statistics' merge and finalize in
2.0 s and 1.6 s instead of 3.3 s and 4.7 s, and run them in 137 ms and 190
ms instead of 41 ms and 75 ms, for 1,000 elements (``bench/stats_compile.py``).
The run cost grows with the state, the compile cost does not: above
``FAST_COMPILE_BYTES`` of arguments and results the default options are kept.

``SLUICE_FAST_COMPILE_BYTES`` in the environment sets that bound (``0``: never).
``SLUICE_BACKGROUND_COMPILE=0`` in the environment turns the background
thread off (everything then compiles on first use, in the foreground): it
costs CPU for runs whose summary is never read, such as a test suite's.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import jax
import numpy as np

from sluice import _memory

__all__ = ["call", "clear", "compile_options", "compiled", "precompile", "wait"]

# Arguments up to this size (bytes) compile with FAST_COMPILE_OPTIONS on CPU. At 1,000
# elements the default statistics' merge takes 19 MB of arguments: compiling fast saves
# ~4.7 s and costs ~1 s of running for 4 chains (3 merges, 5 finalizes); the two break
# even near 4,700 elements. 32 MiB (arguments and results counted) keeps the fast
# options below ~1,700 elements.
FAST_COMPILE_BYTES = int(os.environ.get("SLUICE_FAST_COMPILE_BYTES", 32 * 2**20))
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}

_MAX_EXECUTABLES = 64
_EXECUTABLES: OrderedDict[tuple, Future] = OrderedDict()
_LOCK = threading.Lock()
_THREADS: list[threading.Thread] = []


def _spec(x: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(x), np.dtype(x.dtype))


def _key(fn: Callable, args: tuple) -> tuple:
    leaves, treedef = jax.tree.flatten(args)
    return (fn, treedef, tuple((s.shape, s.dtype) for s in map(_spec, leaves)))


def compile_options(args: Any, outputs: Any = ()) -> dict[str, Any] | None:
    """XLA options for compiling a function from ``args`` to ``outputs`` (arrays or
    ``jax.ShapeDtypeStruct``): :data:`FAST_COMPILE_OPTIONS` when the default backend
    is the CPU and the two hold at most :data:`FAST_COMPILE_BYTES` together;
    otherwise ``None`` (XLA's defaults)."""
    if jax.default_backend() != "cpu":
        return None
    size = sum(
        int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize
        for s in map(_spec, jax.tree.leaves((args, outputs)))
    )
    return dict(FAST_COMPILE_OPTIONS) if size <= FAST_COMPILE_BYTES else None


def _claim(key: tuple) -> tuple[Future, bool]:
    """The cache's future for ``key``, and whether the caller must fill it (first asker)."""
    with _LOCK:
        future = _EXECUTABLES.get(key)
        owner = future is None
        if owner:
            future = Future()
            _EXECUTABLES[key] = future
            while len(_EXECUTABLES) > _MAX_EXECUTABLES:
                _EXECUTABLES.popitem(last=False)
        else:
            _EXECUTABLES.move_to_end(key)
    return future, owner


def _fail(key: tuple, future: Future, error: BaseException) -> None:
    """Forget ``key``'s future (the next asker retries) and hand it ``error``."""
    with _LOCK:
        if _EXECUTABLES.get(key) is future:
            del _EXECUTABLES[key]
    future.set_exception(error)


def _fill(key: tuple, future: Future, args: tuple, lowered: Any) -> None:
    """Compile ``lowered`` into ``future``; on failure forget it and raise."""
    try:
        options = compile_options(args, lowered.out_info)
        future.set_result(lowered.compile(compiler_options=options))
        _memory.release()  # the compile's freed heap
    except BaseException as error:
        _fail(key, future, error)
        raise


def _lower(fn: Callable, args: tuple, key: tuple, future: Future) -> Any:
    """``jit(fn)`` lowered for ``args``' shapes; on failure forget ``future`` and raise."""
    try:
        return jax.jit(fn).lower(*jax.tree.map(_spec, args))
    except BaseException as error:
        _fail(key, future, error)
        raise


def compiled(fn: Callable, args: tuple) -> Callable:
    """The executable of ``jit(fn)`` for arguments shaped like ``args`` (arrays or
    ``jax.ShapeDtypeStruct``), compiled once per function and shapes."""
    key = _key(fn, args)
    future, owner = _claim(key)
    if owner:
        _fill(key, future, args, _lower(fn, args, key, future))
    try:
        return future.result()
    except Exception:
        if owner:
            raise
        return compiled(fn, args)  # a background compile failed: compile here, and raise


def _merge_and_finalize(statistic: Any, one: Any) -> None:
    """Compile ``statistic``'s merge of two states shaped like ``one``, and its finalize.

    Both are lowered here, one after the other (tracing holds the GIL). Programs small
    enough for the fast options (:func:`compile_options`) then compile at the same
    time, merge in a second thread: on two cores, 2.4 s instead of 4.0 s for the
    default statistics, for ~80 MB more peak memory. Larger ones compile one after
    the other, as two compiles at once would stack their memory on a large run's.
    """
    key = _key(statistic.merge, (one, one))
    future, owner = _claim(key)
    side = None
    if owner:
        lowered = _lower(statistic.merge, (one, one), key, future)
        merged = lowered.out_info
        if compile_options((one, one), merged) is not None:

            def fill() -> None:
                try:
                    _fill(key, future, (one, one), lowered)
                except Exception:  # the foreground call compiles again and raises it
                    pass

            side = threading.Thread(target=fill, name="sluice-precompile-merge")
            side.start()
        else:
            _fill(key, future, (one, one), lowered)
    else:
        merged = future.result().out_info
    try:
        compiled(statistic.finalize, (merged,))
    finally:
        if side is not None:
            side.join()


def call(fn: Callable, *args: Any) -> Any:
    """``jit(fn)(*args)`` through the ahead-of-time cache."""
    return compiled(fn, args)(*args)


def precompile(
    statistics: dict[str, Any], start: Callable, start_args: tuple
) -> threading.Thread | None:
    """Compile a run's statistics' start, merge and finalize in a background thread.

    Parameters
    ----------
    statistics
        ``{name: Statistic}`` of the run.
    start, start_args
        The function that starts the statistics of every chain slot (returns
        ``{name: state}`` with a leading slot axis) and its arguments (arrays
        or ``jax.ShapeDtypeStruct``).

    Returns the (non-daemon) thread, or ``None`` when there is nothing to do.
    """
    if not statistics or os.environ.get("SLUICE_BACKGROUND_COMPILE", "1") == "0":
        return None

    def work() -> None:
        try:
            states = compiled(start, start_args).out_info  # shapes, without tracing again
        except Exception:  # the foreground call raises it properly
            return
        for name, statistic in statistics.items():
            try:
                one = jax.tree.map(
                    lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), states[name]
                )
                _merge_and_finalize(statistic, one)
            except Exception:  # likewise
                continue

    thread = threading.Thread(target=work, name="sluice-precompile")
    with _LOCK:
        _THREADS[:] = [t for t in _THREADS if t.is_alive()]
        _THREADS.append(thread)
    thread.start()
    return thread


def clear() -> None:
    """Forget every cached executable."""
    with _LOCK:
        _EXECUTABLES.clear()


def wait() -> None:
    """Wait for every background compile started so far (tests, benchmarks)."""
    with _LOCK:
        threads = list(_THREADS)
    for thread in threads:
        thread.join()
