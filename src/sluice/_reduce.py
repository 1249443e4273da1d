"""Merging chains' statistic states and finalizing them, compiled once and early.

A statistic's ``merge`` and ``finalize`` run once per run, on small states,
but compiling them costs seconds (the default summary statistics: ~3 s and
~4.5 s on CPU). Nothing about them depends on the draws' values, only on the
state's shapes, which are known before the first chunk runs. So the engine
calls :func:`precompile` when a run starts: a background thread compiles
them (through the same cached ``jit`` wrappers that :class:`sluice.Run` later
calls) while the main thread compiles the chunk program, warms up and
samples. By the time ``run.summary()`` asks, the executables are in JAX's
cache.

A failure in the background thread is swallowed: the same call made later in
the foreground raises it where the user can see it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import jax
import numpy as np

from sluice.stats import Statistic

__all__ = ["finalize_fn", "merge_fn", "precompile", "wait"]

_THREADS: list[threading.Thread] = []
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=128)
def merge_fn(statistic: Statistic) -> Callable:
    """``jit(statistic.merge)``, one wrapper per statistic (so its compiles are shared)."""
    return jax.jit(statistic.merge)


@functools.lru_cache(maxsize=128)
def finalize_fn(statistic: Statistic) -> Callable:
    """``jit(statistic.finalize)``, one wrapper per statistic."""
    return jax.jit(statistic.finalize)


def precompile(
    statistics: dict[str, Statistic], start: Callable, start_args: tuple
) -> threading.Thread | None:
    """Compile, in a background thread, what a run's statistics need outside the chunk.

    Parameters
    ----------
    statistics
        ``{name: Statistic}`` of the run.
    start, start_args
        The run's jitted function that starts the statistics of every chain
        slot (``{name: state}`` with a leading slot axis), and arguments of
        the right shapes for it.

    Returns the (non-daemon) thread, or ``None`` when there is nothing to do.
    The calls run on placeholder values: their results are discarded, their
    compiled executables stay in the ``jit`` caches.
    """
    if not statistics:
        return None

    def work() -> None:
        try:
            states = jax.device_get(start(*start_args))
        except Exception:  # the foreground call raises it properly
            return
        for name, statistic in statistics.items():
            try:
                one = jax.tree.map(lambda x: np.asarray(x[0]), states[name])
                merged = merge_fn(statistic)(one, one)
                jax.block_until_ready(finalize_fn(statistic)(merged))
            except Exception:  # likewise
                continue

    thread = threading.Thread(target=work, name="sluice-precompile")
    with _LOCK:
        _THREADS[:] = [t for t in _THREADS if t.is_alive()]
        _THREADS.append(thread)
    thread.start()
    return thread


def wait() -> None:
    """Wait for every background compile started so far (tests, benchmarks)."""
    with _LOCK:
        threads = list(_THREADS)
    for thread in threads:
        thread.join()
