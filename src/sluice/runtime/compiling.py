"""A run's compiles: which programs compile when, with which XLA options, at what cost.

Each program's XLA options and cache key, the background compiles, whether
sampling waits for them (:data:`AWAIT_COMPILE_BYTES`), and the time compiling
takes (:attr:`Compiler.seconds`); docs/architecture.md ("The host loop").
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from sluice._jax import compile as programs
from sluice.runtime import statistics as run_statistics
from sluice.runtime.plan import Plan, bytes_per_draw

__all__ = ["AWAIT_COMPILE_BYTES", "FOREGROUND_STATISTICS_BYTES", "Compiler"]

# Sampling phases holding at least this much (carries and two chunks of outputs)
# wait for the statistics' background compile before they start.
AWAIT_COMPILE_BYTES = 128 * 2**20
# Statistics whose states hold at least this much compile in the foreground
# (Compiler.precompile_statistics).
FOREGROUND_STATISTICS_BYTES = 128 * 2**20


class Compiler:
    """The compiles of one run (this process's share of it) and the time they took.

    ``checkpointing``: whether a checkpoint reads each chunk's carry after the next
    chunk is dispatched; without checkpoints the chunk program and the statistics'
    program may reuse (donate) their arguments' buffers.
    """

    def __init__(self, plan: Plan, checkpointing: bool) -> None:
        self.plan = plan
        self.checkpointing = checkpointing
        self.seconds = 0.0  # spent compiling (or waiting for a compile)
        self._precompiling = False
        self._precompile_thread: threading.Thread | None = None  # until sampling starts
        self._statistics_thread: threading.Thread | None = None
        self._statistics_args: tuple | None = None  # their own program's, see compile_beside
        self._foreground = False  # the statistics compile in the foreground

    # -- which program, with which options -------------------------------------------
    @property
    def advance_name(self) -> str:
        """Without checkpoints nothing reads a carry once the next chunk is dispatched:
        the chunk program may reuse its buffers."""
        return "advance" if self.checkpointing else "advance_donated"

    @property
    def window_end_name(self) -> str:
        """The warmup's window-end program (the adaptation states reused without
        checkpoints)."""
        return "window_end" if self.checkpointing else "window_end_donated"

    @staticmethod
    def window_end_args(session_args: tuple, carry: Any, t: int) -> tuple:
        """The window-end program's arguments from the chunk program's (``consts, carry,
        chain_ids, start, stop, num_warmup, schedule, keys``), its carry and ``t``."""
        consts, _, chain_ids, _, _, num_warmup, schedule, keys = session_args
        return (consts, carry.kernel, carry.adaptation, chain_ids, t, num_warmup, schedule, keys)

    @property
    def statistics_name(self) -> str:
        """The statistics' update reuses their states' buffers: with checkpoints, the
        session updates them only once the chunk before is checkpointed
        (``Session._settle``)."""
        return "update_statistics_donated"

    def split_statistics(self, carry: Any) -> tuple[Any, Any]:
        """``(stats, carry without them)`` when the statistics have a program of their own
        (:attr:`~sluice.mcmc.chunk.ChunkProgram.separate_statistics`), else
        ``(None, carry)``."""
        if not (self.plan.program.separate_statistics and self.plan.statistics):
            return None, carry
        return carry.stats, carry._replace(stats=None)

    def statistics_states(self) -> Any:
        """The shapes of the states of statistics with a program of their own, placed as
        the start program places them (the carry holds none before the warmup ends), or
        ``None``."""
        p = self.plan
        if not (p.program.separate_statistics and p.statistics):
            return None
        return _placed(p.statistics_shapes, p.topology.sharding)

    @staticmethod
    def statistics_args(stats: Any, draws: Any, count: int) -> tuple:
        return (stats, draws, np.int32(count))

    def xla_options(self, name: str) -> dict[str, Any] | None:
        """XLA's options of the chunk program ``name`` (the plan's: ``init`` aside)."""
        if name.startswith("update_statistics"):
            return self.plan.statistics_options
        return self.plan.compile_options

    def compile_options(self, name: str, args: tuple) -> dict[str, Any]:
        """The init program runs once per run and the window-end program once per
        adaptation window: compiled for a quick compile while the model's data and one
        draw are small (sizes without the chains' layout, so that every layout of a run
        compiles them alike and its draws stay bit-identical)."""
        if name.startswith("window_end"):
            consts, flat = args[0], self.plan.flat
            example = jax.ShapeDtypeStruct((flat.dim,), flat.dtype)  # one chain's position
            return {"fast_if_small": True, "fast_by": (consts, example)}
        if name != "init":
            return {"options": self.xla_options(name)}
        consts, _positions, _chain_ids, _keys, example = args  # the session's init arguments
        return {"fast_if_small": True, "fast_by": (consts, example)}

    def program_key(self, name: str) -> Any:
        """The cache key of the chunk program ``name``, with its XLA options where they
        are not the defaults."""
        key = self.plan.program.key(name)
        options = self.xla_options(name)
        if name == "init" or name.startswith("window_end") or not options:
            return key
        return (*key, ("xla", tuple(sorted(options.items()))))

    def executable(self, name: str, args: tuple) -> Any:
        """The chunk program ``name`` for ``args``, through the compile cache (timed)."""
        key = self.program_key(name)
        executable = programs.ready(key, args)
        if executable is None:
            t0 = time.perf_counter()
            executable = programs.compiled(
                key, self.plan.program.jitted(name), args, **self.compile_options(name, args)
            )
            self.seconds += time.perf_counter() - t0
        return executable

    def statistics_start(self) -> tuple[tuple, Any]:
        """The statistics' start program: its cache key and function."""
        p, t = self.plan, self.plan.topology
        return run_statistics.start_program(
            p.flat, p.program.statistic, t.slots_per_process,
            None if t.multiprocess else t.sharding,
        )  # fmt: skip

    # -- when ------------------------------------------------------------------------
    def join(self, thread: threading.Thread) -> None:
        """Wait for a background compile; the wait counts as compile time."""
        t0 = time.perf_counter()
        thread.join()
        self.seconds += time.perf_counter() - t0

    def compile_beside(
        self, init_args: tuple, advance_args: Callable[[Any, int, int], tuple]
    ) -> threading.Thread | None:
        """Start compiling the chunk program in a thread, from the shapes of the carry
        that ``init`` will return, while this thread computes the starting points and
        compiles and runs ``init``; ``advance_args(carry, start, stop)`` are the chunk
        program's arguments (XLA releases the GIL while compiling). One process only:
        another process's compile could not be waited on here.
        """
        p, t = self.plan, self.plan.topology
        if not programs.background_enabled() or t.process_count > 1:
            return None
        carry, _ = _placed(jax.eval_shape(p.program.jitted("init"), *init_args), t.sharding)
        _, carry = self.split_statistics(carry)
        # start and stop are Python ints, traced by value type only: any will do
        args = advance_args(carry, 0, p.config.warmup + p.config.draws)
        stats = self.statistics_states()  # (the start program's, after the warmup)
        if stats is not None and p.config.draws > 0:  # the statistics' own program: later
            draws = p.program.draws_shapes(p.flat.consts, t.slots_per_process, t.sharding)
            self._statistics_args = self.statistics_args(stats, draws, 1)
        if p.window_ends:  # the warmup's window ends: their program compiles beside it
            end_args = self.window_end_args(args, carry, 0)
            programs.in_background(self._job(self.window_end_name, end_args), "sluice-compile-2")
        return programs.in_background(self._job(self.advance_name, args), "sluice-compile")

    def _job(self, name: str, args: tuple) -> Callable[[], None]:
        """Compile the chunk program ``name`` for ``args`` (failures are left for the
        foreground call, which compiles again and raises)."""
        key, fn = self.program_key(name), self.plan.program.jitted(name)
        how = self.compile_options(name, args)

        def work() -> None:
            with contextlib.suppress(Exception):
                programs.compiled(key, fn, args, **how)

        return work

    def precompile_statistics(self, beside: threading.Thread | None = None) -> None:
        """Compile the statistics' programs in background threads: traced at once (beside
        ``beside``, the chunk program's compile, while the main thread waits), compiled
        once ``beside`` is done, the update and start programs first (docs/architecture.md,
        "The host loop"). Statistics whose states hold at least
        :data:`FOREGROUND_STATISTICS_BYTES` compile where they are first used instead."""
        p = self.plan
        if self._precompiling or not p.statistics:
            return
        self._precompiling = True
        key, start = self.statistics_start()
        example = run_statistics.start_example(p.flat, p.program.statistic, p.config.chains)
        states = p.statistics_shapes
        self._foreground = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(states)) >= (
            FOREGROUND_STATISTICS_BYTES
        )  # fmt: skip
        if self._foreground or not programs.background_enabled():
            return
        name, args = self.statistics_name, self._statistics_args
        self._statistics_args = None

        def first() -> None:  # the update and start programs
            update = None
            if args is not None:  # (a failure is left for the foreground call, which raises)
                with contextlib.suppress(Exception):
                    _, update = programs.lower(self.program_key(name), p.program.jitted(name), args)
            starting = run_statistics.lowered({}, None, (key, start, (p.flat.consts, example)))
            if beside is not None:
                beside.join()
            run_statistics.fill(starting)
            if update is not None:
                with contextlib.suppress(Exception):
                    programs.fill(update, options=self.xla_options(name))

        starting = programs.in_background(first, "sluice-precompile-start")

        def then() -> None:  # the merge and finalize
            repeated = p.repeated_readout
            readout = run_statistics.lowered(
                p.statistics, states, repeated=repeated, diagnostics=p.config.until is not None
            )
            starting.join()
            run_statistics.fill(readout)

        thread = programs.in_background(then, "sluice-precompile")
        self._precompile_thread = self._statistics_thread = thread

    def await_statistics(self) -> None:
        """Wait for the statistics' background compile, if any is still running (the
        wait counts as compile time)."""
        thread = self._statistics_thread
        if thread is not None and thread.is_alive():
            self.join(thread)

    def compile_statistics_update(self) -> None:
        """Compile the statistics' update program now, where they compile in the
        foreground (:meth:`precompile_statistics`), at the run's lowest memory."""
        args, self._statistics_args = self._statistics_args, None
        if args is not None and self._foreground:
            t0 = time.perf_counter()
            self._job(self.statistics_name, args)()
            self.seconds += time.perf_counter() - t0

    def await_precompile(self, carry: Any) -> None:
        """Let the statistics' background compile finish before a run whose sampling
        phase holds at least :data:`AWAIT_COMPILE_BYTES` samples, so that its transient
        heap does not stack on the phase's buffers (the wait counts as compile time)."""
        thread, self._precompile_thread = self._precompile_thread, None
        if thread is None or not thread.is_alive():
            return
        p, t = self.plan, self.plan.topology
        # from the shapes (this process's share of the slots): no copy to the host
        held = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(carry)) // t.process_count
        if p.program.record:
            slots = t.local_slots
            held += 2 * p.config.chunk_size * (slots.stop - slots.start) * bytes_per_draw(p.layout)
        if held >= AWAIT_COMPILE_BYTES:
            self.join(thread)


def _placed(shapes: Any, sharding: Any) -> Any:
    """``shapes`` (``jax.ShapeDtypeStruct``) with ``sharding``, where there is one."""
    if sharding is None:
        return shapes
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes)
