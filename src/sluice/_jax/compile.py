"""The one cache of compiled programs: ahead-of-time compiles keyed by settings.

Every program sluice compiles goes through :func:`compiled`, keyed by a
*program key* (a hashable description of what the program computes) and the
arguments' tree structure, shapes and dtypes, so equal settings built twice
share one program. docs/architecture.md ("The compile cache") describes the
keys, the background and quick compiles, and the environment variables.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

import jax
import numpy as np

from sluice._jax import memory

__all__ = [
    "FAST_COMPILE_BYTES",
    "FAST_COMPILE_OPTIONS",
    "background_enabled",
    "cached",
    "call",
    "clear",
    "clear_caches",
    "compile_options",
    "compiled",
    "eager",
    "fill",
    "in_background",
    "loop_options",
    "lower",
    "ready",
    "spec",
    "wait",
]

# Arguments and results up to this size (bytes) compile with FAST_COMPILE_OPTIONS on CPU:
# the default statistics' merge below ~1,700 elements (the two costs break even near 4,700).
FAST_COMPILE_BYTES = int(os.environ.get("SLUICE_FAST_COMPILE_BYTES", 32 * 2**20))
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}

# A run expected to move at most this many bytes through its gradients is compile-bound
# on CPU: chain_method="auto" runs its chains sequentially (sluice.runtime.plan).
SMALL_RUN_BYTES = int(os.environ.get("SLUICE_SMALL_RUN_BYTES", 8 * 2**30))
# Up to this many, its chunk program compiles with XLA:CPU's classic emitters
# (loop_options): 0.7-1.4 s sooner, the whole run 10-21% shorter (docs/architecture.md).
CLASSIC_EMITTER_RUN_BYTES = int(os.environ.get("SLUICE_CLASSIC_EMITTER_RUN_BYTES", 64 * 2**30))
CLASSIC_EMITTER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}

# a run holds 3-7 programs (init, the chunk program, the warmup's window ends, the
# statistics'): the last 15-30 runs' settings stay compiled
_MAX_ENTRIES = 96
_ENTRIES: OrderedDict[tuple, Future] = OrderedDict()
_LOCK = threading.Lock()
_THREADS: list[threading.Thread] = []


def spec(x: Any) -> Any:
    """``x``'s shape and dtype (a Python scalar as it is), as the cache keys programs."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(np.shape(x), np.dtype(x.dtype))
    return x  # a Python scalar: lowered by its type


def _entry_key(key: Hashable, args: tuple) -> tuple:
    """``key`` with the tree structure, shapes and dtypes of ``args`` (Python scalars by type)."""
    leaves, treedef = jax.tree.flatten(args)
    shapes = tuple(
        (tuple(np.shape(x)), np.dtype(x.dtype).str)
        if hasattr(x, "dtype")
        else ("python", type(x).__name__)
        for x in leaves
    )
    return key, (treedef, shapes)


def compile_options(args: Any, outputs: Any = ()) -> dict[str, Any] | None:
    """XLA options for a program from ``args`` to ``outputs`` (arrays or
    ``jax.ShapeDtypeStruct``) compiled with ``fast_if_small``:
    :data:`FAST_COMPILE_OPTIONS` when the default backend is the CPU and the two
    hold at most :data:`FAST_COMPILE_BYTES` together; otherwise ``None`` (XLA's
    defaults)."""
    if jax.default_backend() != "cpu":
        return None
    size = sum(
        int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize
        for x in jax.tree.leaves((args, outputs))
        if hasattr(x, "dtype")
    )
    return dict(FAST_COMPILE_OPTIONS) if size <= FAST_COMPILE_BYTES else None


def loop_options(traffic: float, bound: float | None = None) -> dict[str, Any] | None:
    """XLA options for a program that loops over a run: XLA:CPU's classic emitters
    (:data:`CLASSIC_EMITTER_OPTIONS`) when the default backend is the CPU and the
    run's expected memory traffic, ``traffic`` bytes, is at most ``bound`` (default
    :data:`CLASSIC_EMITTER_RUN_BYTES`); otherwise ``None`` (XLA's defaults). They
    compile sooner and, past the bound, can run slower than the compile saves. The
    options change the program's floating-point results, so they depend only on
    what fixes the draws, never on the devices (docs/architecture.md).
    """
    bound = CLASSIC_EMITTER_RUN_BYTES if bound is None else bound
    if jax.default_backend() != "cpu" or traffic > bound:
        return None
    return dict(CLASSIC_EMITTER_OPTIONS)


def _claim(entry: tuple) -> tuple[Future, bool]:
    """The cache's future for ``entry``, and whether the caller must fill it."""
    with _LOCK:
        future = _ENTRIES.get(entry)
        owner = future is None
        if owner:
            future = Future()
            _ENTRIES[entry] = future
            while len(_ENTRIES) > _MAX_ENTRIES:
                _ENTRIES.popitem(last=False)
        else:
            _ENTRIES.move_to_end(entry)
    return future, owner


def _fail(entry: tuple, future: Future, error: BaseException) -> None:
    """Forget ``entry`` (the next asker compiles again) and hand ``future`` the error."""
    with _LOCK:
        if _ENTRIES.get(entry) is future:
            del _ENTRIES[entry]
    future.set_exception(error)


class Pending:
    """A claimed cache entry and its lowered program, waiting for :func:`fill`."""

    def __init__(self, entry: tuple, future: Future, lowered: Any, args: tuple) -> None:
        self.entry, self.future, self.lowered, self.args = entry, future, lowered, args

    @property
    def out_info(self) -> Any:
        """The program's output shapes (known once lowered)."""
        return self.lowered.out_info


def lower(key: Hashable, fn: Callable, args: tuple) -> tuple[Future, Pending | None]:
    """Claim the entry of ``fn`` at ``args`` under ``key`` and lower it.

    Returns the entry's future and, when this caller claimed it, a
    :class:`Pending` to compile with :func:`fill` (``None`` when another
    caller did: wait on the future). Lowering holds the GIL; compiling does
    not, so a caller may lower several programs and compile them in threads.
    """
    entry = _entry_key(key, args)
    future, owner = _claim(entry)
    if not owner:
        return future, None
    try:
        lowered = (fn if hasattr(fn, "lower") else jax.jit(fn)).lower(*args)
    except BaseException as error:
        _fail(entry, future, error)
        raise
    return future, Pending(entry, future, lowered, args)


def fill(
    pending: Pending,
    *,
    fast_if_small: bool = False,
    fast_by: Any = None,
    options: dict[str, Any] | None = None,
    small: dict[str, Any] | None = None,
) -> Any:
    """Compile a :class:`Pending` into its cache entry and return the executable.

    With ``fast_if_small``, the size that decides is that of ``fast_by`` when
    given, else that of the program's arguments and results, and a small program
    compiles with ``small`` in place of :data:`FAST_COMPILE_OPTIONS` when given;
    otherwise XLA's ``options`` (``None``: its defaults)."""
    try:
        if fast_if_small:
            sized = (pending.args, pending.out_info) if fast_by is None else (fast_by, ())
            options = compile_options(*sized)
            if options is not None and small is not None:
                options = dict(small)
        executable = pending.lowered.compile(compiler_options=options)
        memory.release()  # the compile's freed heap (see sluice._jax.memory)
    except BaseException as error:
        _fail(pending.entry, pending.future, error)
        raise
    pending.future.set_result(executable)
    return executable


def ready(key: Hashable, args: tuple) -> Any | None:
    """The finished executable of ``key`` for arguments shaped like ``args``, or ``None``
    (not compiled yet, or still compiling)."""
    with _LOCK:
        future = _ENTRIES.get(_entry_key(key, args))
    if future is None or not future.done() or future.exception() is not None:
        return None
    return future.result()


def compiled(
    key: Hashable,
    fn: Callable,
    args: tuple,
    *,
    fast_if_small: bool = False,
    fast_by: Any = None,
    options: dict[str, Any] | None = None,
    small: dict[str, Any] | None = None,
) -> Any:
    """The executable of ``jit(fn)`` for arguments shaped like ``args``.

    ``key`` describes the program (everything ``fn`` computes but its arguments);
    ``fn`` (a function or a ``jax.jit`` object) is traced only when the cache has no
    entry for ``key`` and the arguments' shapes. Waits for a compile of the same
    entry in progress.
    ``fast_if_small``, ``fast_by``, ``options`` and ``small``: see :func:`fill`; the
    options that may differ for the same program belong in ``key``.
    """
    how = {"fast_if_small": fast_if_small, "fast_by": fast_by, "options": options, "small": small}
    future, pending = lower(key, fn, args)
    if pending is not None:
        return fill(pending, **how)
    try:
        return future.result()
    except Exception:  # a background compile failed: compile here, and raise
        return compiled(key, fn, args, **how)


def call(key: Hashable, fn: Callable, *args: Any, small: dict[str, Any] | None = None) -> Any:
    """``jit(fn)(*args)`` through the cache, compiled with ``fast_if_small`` (and
    ``small``: see :func:`fill`; it belongs in ``key``)."""
    specs = jax.tree.map(spec, tuple(args))  # lowered from shapes: no device placement
    return compiled(key, fn, specs, fast_if_small=True, small=small)(*args)


def eager(key: Hashable, fn: Callable, *args: Any) -> Any:
    """``fn(*args)``: traced inline under an outer transformation (its arguments hold a
    tracer), else :func:`call`: compiled once per ``key`` and shapes, with the fast
    options when small (for a statistic's ``merge`` and ``finalize`` called on
    concrete states)."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args)):
        return fn(*args)
    return call(key, fn, *args)


def background_enabled() -> bool:
    """False when ``SLUICE_BACKGROUND_COMPILE=0``."""
    return os.environ.get("SLUICE_BACKGROUND_COMPILE", "1") != "0"


def in_background(work: Callable[[], None], name: str = "sluice-compile") -> threading.Thread:
    """Run ``work`` in a (non-daemon) thread that :func:`wait` joins."""
    thread = threading.Thread(target=work, name=name)
    with _LOCK:
        _THREADS[:] = [t for t in _THREADS if t.is_alive()]
        _THREADS.append(thread)
    thread.start()
    return thread


def cached() -> list[Hashable]:
    """The program keys of every compiled (or compiling) entry, oldest first."""
    with _LOCK:
        return [key for key, _ in _ENTRIES]


def clear() -> None:
    """Forget every cached executable."""
    with _LOCK:
        _ENTRIES.clear()


def clear_caches() -> None:
    """Forget every compiled program: sluice's cache and JAX's own."""
    wait()
    clear()
    jax.clear_caches()


def wait() -> None:
    """Wait for every background compile started so far (tests, benchmarks)."""
    with _LOCK:
        threads = list(_THREADS)
    for thread in threads:
        thread.join()
