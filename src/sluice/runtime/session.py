"""The host loop of one run (this process's share), from any chunk boundary to the end.

The session starts or restores the chains, runs the compiled chunk through
warmup and the draws, and between chunks writes the draws, checkpoints and
advances the progress bar while the next chunk runs. docs/architecture.md ("The
host loop") describes each step.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax
import numpy as np

from sluice._jax import compile as programs
from sluice.io.checkpoint import Checkpoint
from sluice.io.sinks import MemorySink, ResumableSink, Sink
from sluice.model import check_initial_values
from sluice.runtime import statistics as run_statistics
from sluice.runtime.compiling import Compiler
from sluice.runtime.diagnostics import (
    Diagnosis,
    DiagnosticWarning,
    raised_target,
    sampler_problems,
)
from sluice.runtime.loop import pipelined
from sluice.runtime.plan import Plan
from sluice.runtime.progress import ChunkProgress
from sluice.runtime.run import Run, RunInfo
from sluice.runtime.until import worst as worst_values

__all__ = ["Session", "open_sink"]


def _until_fields(worst: dict[str, float] | None) -> dict[str, float]:
    """The progress line's fields for the worst values of ``until``'s quantities."""
    worst = worst or {}
    ess = [worst[k] for k in ("ess_bulk", "ess_tail") if k in worst]
    fields = {"max_r_hat": worst.get("r_hat"), "max_mcse": worst.get("mcse_mean")}
    fields["min_ess"] = min(ess) if ess else None
    return {k: v for k, v in fields.items() if v is not None}


# Runs with at most this many elements x chains show live diagnostics (see _watched).
WATCH_ELEMENTS = 2**16
# The share of the sampling phase's wall time that live diagnostics may take (see _Readouts).
READOUT_SHARE = 0.05
# A first reading's expected cost (4 chains of 1,000 elements: 0.08-0.14 s on two cores).
FIRST_READOUT_SECONDS = 0.1


class _Readouts:
    """When the progress display reads the statistics without ``until``: while the
    readings, this one included (expected to take as long as the last, or
    :data:`FIRST_READOUT_SECONDS`), stay within :data:`READOUT_SHARE` of the phase's
    wall time (docs/architecture.md, "The host loop")."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.spent = 0.0
        self.last = FIRST_READOUT_SECONDS

    def due(self, last: bool, ready: bool) -> bool:
        if last:
            return True
        budget = READOUT_SHARE * (time.perf_counter() - self.start)
        return ready and self.spent + self.last <= budget

    def read(self, fn: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.last = time.perf_counter() - t0
            self.spent += self.last


def open_sink(plan: Plan, sink: Sink) -> None:
    """Process 0 creates shared stores before the other processes open them."""
    topology = plan.topology
    if topology.is_main:
        sink.open(plan.layout, plan.describe())
    topology.barrier("sink-open")
    if not topology.is_main:
        sink.open(plan.layout, plan.describe())


class Session:
    """The host loop of one run (this process's share)."""

    def __init__(self, plan: Plan, sink: Sink, progress: bool) -> None:
        self.plan = plan
        self.config = plan.config
        self.topology = plan.topology
        self.sink = sink
        self.progress = progress and plan.topology.is_main
        self.checkpointing = isinstance(sink, ResumableSink)
        self.info = RunInfo(plan.config, num_devices=len(plan.topology.devices))
        self.worst: dict[str, float] | None = None  # `until`'s quantities at the last chunk
        # the default summary as the last reading computed it, and the iteration read:
        # the run's summary when no chunk came after (a second merge and finalize saved)
        self.read_summary: tuple[int, Any] | None = None
        # with checkpoints, statistics updated by their own program (not inside the
        # chunk's) wait for the chunk before to be saved (_settle): the sampling chunks
        # whose update waits, (start, draws, count), in order
        self._updates_wait = self.checkpointing and plan.program.separate_statistics
        self._updates: list[tuple[int, Any, int]] = []
        slots = self.topology.local_slots
        self.chain_ids = self.topology.put_local(np.arange(slots.start, slots.stop, dtype=np.int32))
        self.schedule = plan.config.kernel.warmup().schedule(plan.config.warmup)
        self.carry: Any = None
        self.iteration = 0  # next absolute iteration (warmup + draws) of every chain
        self.stats_ready = False
        self.checkpoints_written = 0
        self.compiler = Compiler(plan, self.checkpointing)

    # -- starting --------------------------------------------------------------------
    def _init_args(self, positions: Any) -> tuple:
        p = self.plan
        example = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), p.flat.draw_shapes())
        return (p.flat.consts, positions, self.chain_ids, p.keys, example)

    def _timed(self, phase: str, t0: float, compile_before: float) -> None:
        """Book the time since ``t0`` to ``phase``, apart from compilation."""
        compiling = self.compiler.seconds - compile_before
        self.info.compile_seconds += compiling
        elapsed = time.perf_counter() - t0 - compiling
        setattr(self.info, phase, getattr(self.info, phase) + elapsed)

    def start(self) -> None:
        """Start every chain of this process from its initial point."""
        t0, c0 = time.perf_counter(), self.compiler.seconds
        p, t = self.plan, self.topology
        # the chunk program compiles from shapes: it starts before the chains' starting
        # points are computed (a function init may be a program to compile itself)
        spec = jax.ShapeDtypeStruct((t.slots_per_process, p.flat.dim), p.flat.dtype)
        beside = self.compiler.compile_beside(self._init_args(spec), self._advance_args)
        t1 = time.perf_counter()
        positions = t.put_local(p.local_positions())
        if callable(p.model.init):  # mostly a compile (the PyMC adapter's jittered start)
            self.compiler.seconds += time.perf_counter() - t1
        args = self._init_args(positions)
        self.carry, grads = self.compiler.executable("init", args)(*args)
        if self.plan.check_init:  # from the init program's values: no program of its own
            kernel = self.carry.kernel
            values = (kernel.logdensity, kernel.logdensity_grad, kernel.position)
            check_initial_values(self.plan.flat, *self._local_real(values))
        if beside is not None:
            self.compiler.precompile_statistics(beside)  # traced while the chunk program compiles
            self.compiler.join(beside)
        self.info.num_gradients_warmup += int(np.sum(self._local_real(grads), dtype=np.int64))
        self._timed("warmup_seconds", t0, c0)

    def restore(self, checkpoint: Checkpoint) -> None:
        """Continue from a checkpoint, possibly written on another device layout."""
        t = self.topology
        positions = jax.ShapeDtypeStruct((t.num_slots, self.plan.flat.dim), self.plan.flat.dtype)
        init = self.plan.program.jitted("init")
        template, _ = jax.eval_shape(init, *self._init_args(positions))
        carry = checkpoint.carry
        stats = self.compiler.statistics_states()  # started after the warmup (their program)
        if stats is not None and checkpoint.stats_ready:
            template = template._replace(stats=stats)
        leaves, treedef = jax.tree.flatten(template)
        fits = len(leaves) == len(carry) and all(
            tuple(a.shape[1:]) == tuple(b.shape[1:])
            and np.dtype(a.dtype) == b.dtype
            and b.shape[0] >= t.num_chains
            for a, b in zip(leaves, carry, strict=True)
        )
        if not fits:
            raise ValueError(
                f"the checkpoint in {self.sink.path} does not fit this run's state "
                "(different statistics, kernel or model shapes, or the state of an older "
                "sluice, whose run cannot be resumed by this one)"
            )
        # Real chains keep their state; padded slots (whose output is dropped) copy chain 0.
        slots = np.arange(t.local_slots.start, t.local_slots.stop)
        rows = np.where(slots < t.num_chains, slots, 0)
        local = [leaf[rows] for leaf in carry]
        self.carry = t.put_local(jax.tree.unflatten(treedef, local))
        self.iteration = checkpoint.next_iteration
        self.stats_ready = checkpoint.stats_ready
        # totals of the interrupted run are carried by process 0, each chain's by its owner
        self.info.restore(checkpoint.totals, t.local_chains, t.is_main)
        self.checkpoints_written = checkpoint.sequence + 1

    # -- chunks -------------------------------------------------------------------------
    def _save(self, carry: Any, iteration: int) -> None:
        if not self.checkpointing:
            return
        local = self.topology.views(carry)  # no host copy of the states (Topology.views)
        parity = self.checkpoints_written % 2
        checkpoint = Checkpoint(
            config=self.plan.describe()["config"],
            next_iteration=iteration,
            stats_ready=self.stats_ready,
            carry=local,
            totals=self.info.to_dict(),
            sequence=self.checkpoints_written,
        )
        self.sink.save_checkpoint(checkpoint, self.topology.process_index, parity)
        self.topology.barrier("checkpoint")
        if self.topology.is_main:
            self.sink.commit(checkpoint, parity, self.topology.process_count)
        self.checkpoints_written += 1

    def _advance_args(self, carry: Any, start: int, stop: int) -> tuple:
        p = self.plan
        return (p.flat.consts, carry, self.chain_ids, start, stop, p.config.warmup,
                self.schedule, p.keys)  # fmt: skip

    def _advance(self, carry: Any, start: int, stop: int) -> Any:
        """One chunk from ``carry``: the chunk program, then the statistics' own program
        on its draws (sampling chunks; during warmup the statistics wait)."""
        compiler = self.compiler
        stats, carry = compiler.split_statistics(carry)
        args = self._advance_args(carry, start, stop)
        executable = compiler.executable(compiler.advance_name, args)
        compiler.precompile_statistics()
        carry, counters, outputs = executable(*args)
        kept = outputs if self.plan.program.record else None  # (else no caller holds them)
        if stats is None:
            return carry, counters, kept
        if start >= self.config.warmup:
            count = min(start + self.config.chunk_size, stop) - start
            draws = {"posterior": outputs["posterior"]}  # (a kept chunk holds more)
            if self._updates_wait:  # once the chunk before is checkpointed (_settle)
                self._updates.append((start, draws, count))
            else:
                stats = self._update_statistics(stats, draws, count)
        return carry._replace(stats=stats), counters, kept

    def _update_statistics(self, stats: Any, draws: Any, count: int) -> Any:
        """``stats`` updated with a chunk's first ``count`` ``draws``, in place."""
        compiler = self.compiler
        args = compiler.statistics_args(stats, draws, count)
        return compiler.executable(compiler.statistics_name, args)(*args)

    def _settle(self, carry: Any, through: int | None = None) -> Any:
        """With checkpoints: the session's statistics updated, in order, with the pending
        chunks that start at most at ``through`` (every one: ``None``), and ``carry``
        given them.

        A chunk's update waits until the chunk before it is checkpointed (``_save``
        reads those states while the next chunk samples): the states are then updated
        in place, and a run holds one copy of them rather than the checkpointed one
        and the next chunk's."""
        if not self._updates_wait:
            return carry
        stats = self.carry.stats
        while self._updates and (through is None or self._updates[0][0] <= through):
            _, draws, count = self._updates.pop(0)
            stats = self._update_statistics(stats, draws, count)
        self.carry = self.carry._replace(stats=stats)
        return carry._replace(stats=stats)

    def _window_end(self, carry: Any, t: int) -> tuple[Any, Any]:
        """The warmup's window-end program after iteration ``t``: the carry with the new
        adaptation states and parameters, and the gradients it took per chain."""
        compiler = self.compiler
        args = compiler.window_end_args(self._advance_args(carry, t, t + 1), carry, t)
        executable = compiler.executable(compiler.window_end_name, args)
        adaptation, params, grads = executable(*args)
        return carry._replace(adaptation=adaptation, params=params), grads

    def _fields(self, counters: Any, carry: Any, n: int) -> dict[str, Any]:
        """What a progress update shows of a chunk: gradients per draw, the mean step
        size (kernels with a step size), over this process's chains."""
        fields: dict[str, Any] = {}
        if counters is not None:
            grads = np.asarray(self._local_real(counters.num_gradients), np.float64)
            fields["grads_per_draw"] = float(grads.mean()) / max(n, 1)
        if carry is not None:
            step_size = _param(self._local_real(carry.params), "step_size")
            if step_size is not None:
                fields["step_size"] = float(np.mean(step_size))
            target = getattr(carry.adaptation, "target_accept", None)
            if target is not None:  # shown once the warmup raised it
                fields["target_accept"] = raised_target(
                    self._local_real(target), getattr(self.config.kernel, "target_accept", None)
                )
        return fields

    def _local_real(self, tree: Any) -> Any:
        """This process's real chains of a chain-sharded pytree, as NumPy."""
        real = self.topology.local_chains
        return jax.tree.map(lambda x: x[: real.stop - real.start], self.topology.local(tree))

    def _all_real(self, local_tree: Any) -> Any:
        """Every process's real chains of a pytree of local blocks, on every process."""
        return jax.tree.map(lambda x: x[: self.config.chains], self.topology.allgather(local_tree))

    def run(self) -> Run:
        c = self.config
        chunk, warmup, end = c.chunk_size, c.warmup, c.warmup + c.draws

        # Warmup: nothing is written, so each chunk is simply checkpointed. A chunk ends
        # every `chunk` iterations and at each adaptation window's end, where the
        # window-end program runs.
        if self.iteration < warmup:
            t0, c0 = time.perf_counter(), self.compiler.seconds
            ends = self.plan.window_ends
            bounds = sorted({*range(chunk, warmup, chunk), *(e + 1 for e in ends), warmup})
            with ChunkProgress(
                "warmup", warmup, chunk, c.chains, self.progress, initial=self.iteration,
                bounds=bounds,
            ) as bar:  # fmt: skip
                start = self.iteration
                while start < warmup:
                    stop = min(b for b in bounds if b > start)
                    self.carry, counters = self._advance(self.carry, start, stop)[:2]  # (no draws)
                    grads = np.sum(self._local_real(counters.num_gradients), dtype=np.int64)
                    if stop - 1 in ends:
                        self.carry, more = self._window_end(self.carry, stop - 1)
                        grads += np.sum(self._local_real(more), dtype=np.int64)
                    self.info.num_gradients_warmup += int(grads)
                    self.iteration = stop
                    self._save(self.carry, stop)
                    fields = self._fields(counters, self.carry, stop - start) if bar.enabled else {}
                    bar.advance(stop - start, **fields)
                    start = stop
            self._timed("warmup_seconds", t0, c0)

        if not self.stats_ready:
            self._start_statistics()
        self.compiler.await_precompile(self.carry)

        t0, c0 = time.perf_counter(), self.compiler.seconds
        step = self._fields(None, self.carry, 1) if self.progress else {}  # fixed while sampling
        with ChunkProgress(
            "sampling", c.draws, chunk, c.chains, self.progress, initial=self.iteration - warmup
        ) as bar:

            def dispatch(start: int) -> tuple:
                self.carry, counters, outputs = self._advance(self.carry, start, end)
                return self.carry, counters, outputs

            # the worst values are read at every chunk when `until` needs them, and for the
            # display when it is on and statistics stream, as often as _Readouts allows
            watch = c.until is not None or (bar.enabled and self._watched())
            readouts = _Readouts() if c.until is None else None

            def finish(start: int, result: tuple) -> None:
                carry, counters, outputs = result
                carry = self._settle(carry, through=start)  # this chunk's statistics
                stop = min(start + chunk, end)
                self.info.add_counters(
                    self._local_real(counters), self.topology.local_chains, stop - start
                )
                if outputs is not None:
                    host = self._local_real(outputs)
                    self.sink.write(start - warmup, _trim(host, stop - start))
                self.iteration = stop
                self._save(carry, stop)
                self._settle(carry)  # the next chunk's, in place once this one is saved
                if readouts is None:  # `until`: its diagnostics alone
                    self.worst = self._convergence(full=False)
                elif watch and readouts.due(stop >= end, self._readable()):
                    self.compiler.await_statistics()  # (the last chunk's reading waits)
                    self.worst = readouts.read(self._convergence)
                fields = {}
                if bar.enabled:  # (the chunk's carry may be donated: params read before)
                    fields = {**self._fields(counters, None, stop - start), **step}
                    fields.update(_until_fields(self.worst))
                    fields.update(
                        divergent=self.info.num_divergent, saturated=self.info.num_saturated
                    )
                bar.advance(stop - start, **fields)

            if c.until is None:  # a display's readings are of the latest dispatched chunk
                pipelined(range(self.iteration, end, chunk), dispatch, finish)
            else:  # one chunk at a time: the statistics decide before the next is drawn
                until = c.until
                if until is not None and self.iteration > warmup:  # resumed: decide now
                    self.worst = self._convergence(full=False)
                while self.iteration < end and not (
                    until is not None and self.worst and until.met(self.worst)
                ):
                    finish(self.iteration, dispatch(self.iteration))
                self._stop_early(end)
                if self.iteration > warmup:  # the run's summary, with the programs compiled
                    self._convergence()  # for its readings (kept: see _finish)
        jax.block_until_ready(self.carry)
        self._timed("sampling_seconds", t0, c0)
        return self._finish()

    def _watched(self) -> bool:
        """Whether the progress display shows the worst R-hat and lowest ESS without
        ``until``: in one process (the display is process 0's, and reading the statistics
        is collective), for up to :data:`WATCH_ELEMENTS` elements over all chains (the
        loop then runs a chunk at a time, and each chunk finalizes the statistics)."""
        p = self.plan
        return (
            p.summary_key is not None
            and not self.topology.multiprocess
            and p.flat.dim * self.config.chains <= WATCH_ELEMENTS
        )

    def _readable(self) -> bool:
        """Whether the statistics' merge and finalize are compiled (the display does not
        wait for their background compile)."""
        name = self.plan.summary_key
        one = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), self.carry.stats[name]
        )
        return run_statistics.compiled(self.plan.statistics[name], one, self.plan.repeated_readout)

    def _convergence(self, full: bool = True) -> dict[str, float]:
        """The worst value of each ``until`` target over all elements, from the default
        statistics merged over every chain (the same on every process: process 0's
        decision is the one every process takes). ``full``: from the whole summary, kept
        as the run's while no chunk comes after; else from the convergence diagnostics
        alone (``until``'s readings: the quantiles and HDI are most of a reading's cost)."""
        p, t = self.plan, self.topology
        name = p.summary_key
        per_chain = self._chain_states(self.carry.stats[name])
        summary = run_statistics.summarize(
            p.statistics[name], per_chain, p.repeated_readout, diagnostics=not full
        )
        if full:
            self.read_summary = (self.iteration, summary)
        until = self.config.until
        worst = until.progress(summary) if until is not None else worst_values(summary)
        if t.multiprocess:
            keys = sorted(worst)
            values = t.broadcast_from_main(np.asarray([worst[k] for k in keys], np.float64))
            worst = dict(zip(keys, (float(v) for v in np.asarray(values)), strict=True))
        return worst

    def _chain_states(self, tree: Any) -> list[Any]:
        """Every real chain's part of a chain-sharded pytree, on every process: host views
        of the device arrays in a single process (no copy of a large model's states beside
        them, Topology.views), gathered across processes."""
        t, chains = self.topology, self.config.chains
        if t.multiprocess:
            states = self._all_real(t.local(tree))
            return [jax.tree.map(lambda x, i=i: x[i], states) for i in range(chains)]
        leaves, treedef = jax.tree.flatten(tree)
        views = t.views(leaves)
        return [jax.tree.unflatten(treedef, [v.row(i) for v in views]) for i in range(chains)]

    def _stop_early(self, end: int) -> None:
        """Record where ``until`` stopped the run (the sink keeps that many draws)."""
        if self.iteration >= end:
            return
        done = self.iteration - self.config.warmup
        self.info.converged_at = done
        t = self.topology
        if isinstance(self.sink, ResumableSink):  # a shared store: process 0 cuts it first
            if t.is_main:
                self.sink.stop(done, 0)
            t.barrier("stopped")
            if not t.is_main:
                self.sink.stop(done, t.process_index)
        else:  # (``stop`` is optional for a plain sink)
            stop = getattr(self.sink, "stop", None)
            if stop is not None:
                stop(done)
            t.barrier("stopped")

    def _start_statistics(self) -> None:
        """Initialise the statistics from the final warmup draw of chain 0 (same on all chains)."""
        p, t = self.plan, self.topology
        if not p.statistics:  # nothing to start (the carry's statistics are an empty dict)
            self.stats_ready = True
            return
        key, start = self.compiler.statistics_start()
        if p.program.statistic.pilot:  # every real chain's last warmup draws, pooled
            rows = self._all_real(t.local(self.carry.pilot))
            example = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), rows)
        else:
            example = np.asarray(t.broadcast_from_main(t.local(self.carry.kernel.position)[0]))
        # the carry's initial statistics states are dropped before the new ones exist:
        # a million-element model's states are gigabytes
        self.carry = self.carry._replace(stats=jax.tree.map(lambda x: None, self.carry.stats))
        self.compiler.compile_statistics_update()
        states = programs.call(key, start, p.flat.consts, example)
        if t.multiprocess:
            states = t.put_local(jax.device_get(states))
        elif t.sharding is None:  # one device: placed without a trip through the host
            states = t.put(states)
        self.carry = self.carry._replace(stats=states)
        self.stats_ready = True

    def _finish(self) -> Run:
        p, t, info, chains = self.plan, self.topology, self.info, self.config.chains
        info.merge_totals(t.sum_over_processes(info.totals()))
        info.params = params = self._all_real(t.local(self.carry.params))
        info.step_size = _param(params, "step_size")
        info.inverse_mass_matrix = _param(params, "inverse_mass_matrix")
        target = getattr(self.carry.adaptation, "target_accept", None)
        if target is not None:
            info.target_accept = np.asarray(self._all_real(t.local(target)))
        info.total_seconds = info.compile_seconds + info.warmup_seconds + info.sampling_seconds
        # the run's device state goes, and the statistics' device copy goes as the host's
        # comes, a shard at a time: a million-element model's states are gigabytes, and
        # the rest of the carry (the sampler's, the pilot's ring) was beside them at this
        # peak. The list is the states' only holder (move_local empties it), so that each
        # shard's buffer is freed once copied
        leaves, treedef = jax.tree.flatten(self.carry.stats)
        self.carry = None
        stats_states = self._all_real(jax.tree.unflatten(treedef, t.move_local(leaves)))
        local_chains = t.local_chains
        if t.multiprocess and isinstance(self.sink, MemorySink):
            self._gather_kept_draws()
            local_chains = slice(0, chains)
        problems = sampler_problems(info)
        if problems and t.is_main:
            warnings.warn(
                "the sampler's diagnostics found problems:\n" + str(Diagnosis(tuple(problems))),
                DiagnosticWarning,
                stacklevel=4,
            )
        read = self.read_summary  # the last reading, if no chunk came after it
        finalized = {p.summary_key: read[1]} if read and read[0] == self.iteration else None
        run = Run(
            model=p.model,
            sink=self.sink,
            info=info,
            statistics=p.statistics,
            stats_states=stats_states,
            local_chains=local_chains,
            summary_key=p.summary_key,
            finalized=finalized,
        )
        keep_summary = getattr(self.sink, "keep_summary", None)  # optional (Sink)
        if keep_summary is not None and p.summary_key is not None and t.is_main:
            keep_summary(run._finalize(p.summary_key), info.draws)
        return run

    def _gather_kept_draws(self) -> None:
        """Every process's chains into every process's memory sink, so that every
        process's ``run.draws`` and ``run.summary()`` cover all chains (byte-exact)."""
        t = self.topology
        real = t.local_chains
        rows = t.slots_per_process

        def pad(x: np.ndarray) -> np.ndarray:
            out = np.zeros((rows, *x.shape[1:]), x.dtype)
            out[: real.stop - real.start] = x
            return out

        local = jax.tree.map(pad, self.sink.kept())
        self.sink.data = self._all_real(local)


def _trim(host: dict, n: int) -> dict:
    """The first ``n`` draws of a chunk's outputs (a short last chunk is masked)."""
    return {
        group: {name: np.asarray(v)[:, :n] for name, v in names.items()}
        for group, names in host.items()
    }


def _param(params: Any, name: str) -> Any:
    """The tuned parameter ``name`` (sluice's ``KernelParams``, a BlackJAX kernel's
    dict), or ``None`` when the kernel has none."""
    return params.get(name) if isinstance(params, dict) else getattr(params, name, None)
