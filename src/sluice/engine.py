"""``sample()`` and ``resume()``: the host loop around the compiled chunk.

The host validates the arguments before anything compiles, starts the chains,
then calls the chunk function over and over: first through warmup, then
through the draws. Between chunks it moves this process's chains' draws to
the sink, writes a checkpoint (when the sink can resume), and advances the
progress bar. The next chunk is dispatched before the previous one's draws
are copied out, so the device keeps working while the host writes.

With several processes (``sluice.distributed.initialize``) every process runs
this same loop on its own block of chains; checkpoints are committed by
process 0 after a barrier, and totals and statistics are gathered at the end
so that every process reports the same merged results.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import math
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from sluice import _reduce
from sluice import stats as _stats
from sluice._checks import check_count, check_int
from sluice.adaptation import window_schedule
from sluice.chunk import ChunkProgram, RunKeys
from sluice.kernels import (
    HMC,
    NUTS,
    Kernel,
    choose_chain_method,
    get_kernel,
    kernel_from_config,
    kernel_to_config,
)
from sluice.model import FlatModel, Model, as_model, check_initial_values
from sluice.parallel import Topology
from sluice.progress import ChunkProgress
from sluice.run import Run, RunInfo
from sluice.sinks import Layout, MemorySink, resolve_sink
from sluice.stats.base import Statistic

__all__ = ["Plan", "resume", "sample"]

DEFAULT_CHUNK_BUDGET_BYTES = 256 * 2**20
CHAIN_METHODS = ("auto", "vectorized", "sequential")
DEFAULT_STATISTIC = "summary"


@functools.lru_cache(maxsize=32)
def default_summary_statistic(draws: int) -> Statistic:
    """The default statistics of a run of ``draws`` draws per chain.

    Cached, so that runs with the same number of draws share one Statistic
    object and hence one compiled program.
    """
    return _stats.summary_statistics(draws)


def sample(
    model: Model | Callable,
    *,
    init: Any = None,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 1000,
    chunk_size: int | str | None = None,
    num_chunks: int | None = None,
    kernel: str | Kernel = "nuts",
    target_accept: float | None = None,
    max_tree_depth: int | None = None,
    dense_mass: bool | None = None,
    chain_method: str = "auto",
    seed: int = 0,
    sink: Any = "memory",
    stats: dict[str, Statistic] | None = None,
    default_stats: bool | str = "auto",
    progress: bool = True,
    devices: list[jax.Device] | None = None,
) -> Run:
    """Sample a posterior with MCMC, in compiled chunks of draws.

    Parameters
    ----------
    model
        A :class:`sluice.Model`, or a log-density function of ONE parameter
        value (then ``init`` is required).
    init
        Where the chains start (one parameter value, or ``init(rng_key)``);
        overrides ``model.init``.
    chains, warmup, draws
        Number of chains, of warmup (adaptation) iterations, and of draws kept
        per chain.
    chunk_size
        Iterations per chain in one compiled chunk: device memory holds at
        most ``chunk_size`` draws per chain. ``None`` or ``"auto"`` picks it
        from a device-memory budget and so that progress shows about ten
        chunks. The draws do not depend on it.
    num_chunks
        Alternatively, how many chunks the draws are split into.
    kernel
        ``"nuts"`` (default), ``"hmc"``, or a kernel object such as
        ``sluice.nuts(max_tree_depth=8)``.
    target_accept, max_tree_depth, dense_mass
        Shortcuts that override the kernel's settings.
    chain_method
        ``"vectorized"`` (``vmap`` over the chains of a device),
        ``"sequential"`` (``lax.map``: one chain after another), or ``"auto"``:
        vectorized on accelerators; on CPU, whichever a cost model of the
        gradient's memory traffic favours (vectorized when the chains share
        data a batched gradient reads once, as in a regression; sequential
        when each chain's traffic is its own, as in a high-dimensional
        Gaussian). See :func:`sluice.kernels.choose_chain_method`.
    seed
        Root of every random stream (keys fold in the chain index and the
        absolute draw index, so draws depend on neither chunking nor devices).
    sink
        ``"memory"`` keeps all draws in host memory; ``None`` keeps none
        (statistics only); ``sluice.ZarrSink(path)`` streams them to disk and
        checkpoints after every chunk, so that :func:`resume` can finish an
        interrupted run.
    stats
        Extra streaming statistics ``{name: Statistic}``, updated on the
        device for every draw, in order; merged over chains in ``run.stats``,
        per chain in ``run.stats_per_chain``. See :mod:`sluice.stats`.
    default_stats
        Also compute ``sluice.stats.summary_statistics(draws)`` as
        ``run.stats["summary"]``: means, sd, intervals, MCSE, ESS and R-hat
        of every recorded quantity, streamed on the device; ``run.summary()``
        is then built from it, whatever the sink. ``"auto"`` (default): on
        unless the draws are kept in memory (``sink="memory"``), where
        ``run.summary()`` runs ArviZ on them instead: exact, and it saves the
        statistics' compile time (seconds: it dominates a small model's run).
        With ``sink=None`` the streaming statistics are the only summary
        there is.
    progress
        Show a progress bar per phase (only on a terminal, only on process 0).
    devices
        Devices to spread chains over. Default: every device of every process
        (in a single process, at most one device per chain).

    Returns
    -------
    Run
        Draws (if kept), sample statistics, streaming statistics, summary.

    Examples
    --------
    >>> import jax.numpy as jnp, sluice
    >>> run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(2),
    ...                     chains=2, warmup=100, draws=100, progress=False)
    >>> run.draws["x"].shape
    (2, 100, 2)
    """
    sink = resolve_sink(sink)
    if isinstance(default_stats, str) and default_stats == "auto":
        default_stats = not isinstance(sink, MemorySink)
    plan = Plan.build(
        model,
        init=init,
        chains=chains,
        warmup=warmup,
        draws=draws,
        chunk_size=chunk_size,
        num_chunks=num_chunks,
        kernel=kernel,
        target_accept=target_accept,
        max_tree_depth=max_tree_depth,
        dense_mass=dense_mass,
        chain_method=chain_method,
        seed=seed,
        stats=stats,
        default_stats=default_stats,
        devices=devices,
        record=sink.keeps_draws,
    )
    _open_sink(plan, sink)
    session = _Session(plan, sink, progress)
    session.start()
    return session.run()


def resume(
    path: Any,
    model: Model | Callable | None = None,
    *,
    progress: bool = True,
    stats: dict[str, Statistic] | None = None,
    devices: list[jax.Device] | None = None,
    **expected: Any,
) -> Run:
    """Continue an interrupted run from its store's last complete chunk.

    The resumed run ends with exactly the draws and statistics of an
    uninterrupted one, even on another device layout (bitwise where the
    per-device program is the same). A finished store is returned as it is;
    a store whose run stopped before its first checkpoint starts again.

    Parameters
    ----------
    path
        The store (a ``sluice.ZarrSink`` path) of the interrupted run.
    model
        The run's model. If omitted, the model is loaded from the script the
        store names (runs started with ``sluice sample FILE.py``).
    progress, stats, devices
        As in :func:`sample`; ``stats`` must be the statistics the run started
        with (they are part of its checkpoint).
    **expected
        Settings the caller expects the run to have (``draws=...``,
        ``seed=...``, ...): a mismatch is an error that names the setting.
    """
    from sluice.store import ZarrSink

    sink = ZarrSink.open_existing(path)
    config = sink.description()["config"]
    for name, value in expected.items():
        if name not in config:
            raise TypeError(f"resume() got an unknown setting {name}={value!r}")
        if _jsonable(value) != config[name]:
            raise ValueError(
                f"the run in {sink.path} has {name}={config[name]!r}, not {name}={value!r}"
            )
    if model is None:
        model = sink.load_model()
    plan = Plan.build(
        model,
        init=None,
        chains=config["chains"],
        warmup=config["warmup"],
        draws=config["draws"],
        chunk_size=config["chunk_size"],
        num_chunks=None,
        kernel=kernel_from_config(config["kernel"]),
        target_accept=None,
        max_tree_depth=None,
        dense_mass=None,
        chain_method=config["chain_method"],
        seed=config["seed"],
        stats=stats,
        default_stats=config.get("default_stats", False),
        devices=devices,
        record=sink.keeps_draws,
        check_init=False,
    )
    sink.check_compatible(plan.describe())
    checkpoint = sink.load_checkpoint()
    session = _Session(plan, sink, progress)
    if checkpoint is None:  # stopped before its first chunk ended: start again, same settings
        _open_sink(plan, sink)
        session.start()
    else:
        sink.attach(plan.layout)
        session.restore(checkpoint)
    return session.run()


def _open_sink(plan: Plan, sink: Any) -> None:
    """Process 0 creates shared stores before the other processes open them."""
    topology = plan.topology
    if topology.is_main:
        sink.open(plan.layout, plan.describe())
    topology.barrier("sink-open")
    if not topology.is_main:
        sink.open(plan.layout, plan.describe())


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """Everything fixed before sampling starts: settings, layout, placement, compiled program."""

    model: Model
    flat: FlatModel
    kernel: Kernel
    chains: int
    warmup: int
    draws: int
    chunk: int
    seed: int
    chain_method: str
    topology: Topology
    layout: Layout
    program: ChunkProgram
    keys: RunKeys
    statistics: dict[str, Statistic]  # every statistic of the run, defaults included
    default_stats: bool
    check_init: bool

    @classmethod
    def build(
        cls,
        model,
        *,
        init,
        chains,
        warmup,
        draws,
        chunk_size,
        num_chunks,
        kernel,
        target_accept,
        max_tree_depth,
        dense_mass,
        chain_method,
        seed,
        stats,
        devices,
        record,
        default_stats=True,
        check_init=True,
    ) -> Plan:
        check_count("chains", chains)
        check_count("draws", draws)
        check_count("warmup", warmup, allow_zero=True)
        check_int("seed", seed)
        if chain_method not in CHAIN_METHODS:
            raise ValueError(f"chain_method must be one of {CHAIN_METHODS}, got {chain_method!r}")
        if chunk_size is not None and num_chunks is not None:
            raise ValueError(
                f"give chunk_size or num_chunks, not both (got chunk_size={chunk_size!r}, "
                f"num_chunks={num_chunks!r})"
            )
        if num_chunks is not None:
            check_count("num_chunks", num_chunks)
        if chunk_size is not None and chunk_size != "auto":
            check_count("chunk_size", chunk_size)
        if stats is not None and not (
            isinstance(stats, dict) and all(isinstance(s, Statistic) for s in stats.values())
        ):
            raise TypeError(f"stats must be a dict of sluice.stats.Statistic, got {stats!r}")
        if not isinstance(default_stats, bool):
            raise TypeError(f"default_stats must be True, False or 'auto', got {default_stats!r}")
        statistics = dict(stats or {})
        if default_stats:
            if DEFAULT_STATISTIC in statistics:
                raise ValueError(
                    f"stats={{{DEFAULT_STATISTIC!r}: ...}} clashes with the default summary "
                    f"statistics; rename it or pass default_stats=False"
                )
            statistics = {DEFAULT_STATISTIC: default_summary_statistic(draws), **statistics}

        model = as_model(model, init)
        kernel = get_kernel(
            kernel,
            target_accept=target_accept,
            max_tree_depth=max_tree_depth,
            dense_mass=dense_mass,
        )
        flat = model.flatten()
        topology = Topology.build(chains, devices)
        if chain_method == "auto":
            chain_method = choose_chain_method(
                flat, kernel, topology.devices, topology.num_slots // len(topology.devices)
            )
        local = topology.local_chains
        layout = Layout(
            chains,
            draws,
            _layout_groups(flat, kernel, flat.draw_shapes()),
            dims=dict(model.dims or {}),
            coords=dict(model.coords or {}),
            constant_groups={"observed_data": dict(model.observed_data)}
            if model.observed_data
            else None,
            local_chains=(local.start, local.stop),
            chains_per_process=topology.slots_per_process,
            process_index=topology.process_index,
        )
        chunk = _resolve_chunk_size(
            chunk_size,
            num_chunks,
            draws,
            warmup,
            layout,
            topology.num_slots // len(topology.devices),
        )
        program = _program(flat, kernel, statistics, chunk, record, chain_method, topology)
        return cls(
            model,
            flat,
            kernel,
            chains,
            warmup,
            draws,
            chunk,
            seed,
            chain_method,
            topology,
            layout,
            program,
            RunKeys.from_seed(seed),
            statistics,
            default_stats,
            check_init,
        )

    def describe(self) -> dict[str, Any]:
        """The settings and model identity a resumed run must share (JSON-able)."""
        return {
            "config": {
                "chains": self.chains,
                "warmup": self.warmup,
                "draws": self.draws,
                "chunk_size": self.chunk,
                "seed": self.seed,
                "kernel": kernel_to_config(self.kernel),
                "chain_method": self.chain_method,
                "statistics": sorted(self.statistics),
                "default_stats": self.default_stats,
            },
            "model": {
                "name": self.model.name,
                "dim": self.flat.dim,
                "dtype": str(self.flat.dtype),
                "draws": {
                    k: [list(s), str(d)] for k, (s, d) in self.layout.groups["posterior"].items()
                },
                "program": self.flat.fingerprint,
                "data": self.flat.data_hash(),
            },
        }

    def local_positions(self) -> jax.Array:
        """Starting points of this process's chain slots, ``(slots_per_process, dim)``."""
        slots = self.topology.local_slots
        ids = np.arange(slots.start, slots.stop, dtype=np.int32)
        if not callable(self.model.init):  # one point for every chain: built on the host
            # (as ravel_pytree orders and casts leaves; JAX's eager ops would compile)
            leaves = jax.tree.leaves(self.model.example_point())
            flat = np.concatenate([np.asarray(x, self.flat.dtype).ravel() for x in leaves])
            return np.ascontiguousarray(np.broadcast_to(flat, (len(ids), flat.size)))
        points = self.model.initial_points(self.keys.points, ids)
        return jax.vmap(lambda p: ravel_pytree(p)[0])(points)


class _Session:
    """The host loop of one run (this process's share), from any chunk boundary to the end."""

    def __init__(self, plan: Plan, sink: Any, progress: bool) -> None:
        self.plan = plan
        self.topology = plan.topology
        self.sink = sink
        self.progress = progress and plan.topology.is_main
        self.checkpointing = bool(getattr(sink, "supports_resume", False))
        p = plan
        self.info = RunInfo(
            chains=p.chains,
            warmup=p.warmup,
            draws=p.draws,
            chunk_size=p.chunk,
            seed=p.seed,
            kernel=p.kernel,
            chain_method=p.chain_method,
            num_devices=len(p.topology.devices),
        )
        slots = self.topology.local_slots
        self.chain_ids = self.topology.put_local(np.arange(slots.start, slots.stop, dtype=np.int32))
        self.schedule = window_schedule(p.warmup)
        self.carry: Any = None
        self.iteration = 0  # next absolute iteration (warmup + draws) of every chain
        self.stats_ready = False
        self.checkpoints_written = 0
        self._precompiling = False
        self._precompile_thread: threading.Thread | None = None

    def _stats_start(self) -> Callable:
        program = self.plan.program
        return _statistics_start(
            program.flat_model.draws_fn, program.statistic, self.topology.slots_per_process
        )

    def _precompile_statistics(self) -> None:
        """Compile the statistics' start, merge and finalize in a background thread
        (see :mod:`sluice._reduce`) while this one samples.

        Started once the chunk program is compiled, never beside it: two XLA
        compiles at once raised peak memory by 0.6-0.8 GB (measured on 100- to
        50,000-dim Gaussians) and, since one compile already keeps ~1.6 cores
        busy, saved only ~15% of the time on two cores.
        """
        p = self.plan
        if self._precompiling or not p.statistics:
            return
        self._precompiling = True
        position = jax.ShapeDtypeStruct((p.flat.dim,), p.flat.dtype)
        self._precompile_thread = _reduce.precompile(
            p.statistics, self._stats_start(), (p.flat.consts, position)
        )

    def _await_precompile(self) -> None:
        """Let the statistics' background compile finish before a large run samples.

        Its transient heap (~0.45 GB for the default statistics) came on top of
        the sampling phase's buffers (carries, output chunks in flight, their
        host copies, checkpoints): on the 50,000-dim Zarr run that overlap set
        the peak RSS. It normally ends during warmup; when it has not, a run
        whose sampling phase holds at least :data:`_AWAIT_COMPILE_BYTES` waits
        for it (a few seconds of a long phase), and a smaller run samples beside
        it (its memory is small, and the wait would be a large share of its
        wall time: 19.4 against 18.2 s to a summary on a 1000-dim Gaussian,
        5000 draws). The wait counts as compile time.
        """
        thread, self._precompile_thread = self._precompile_thread, None
        if thread is None or not thread.is_alive():
            return
        p = self.plan
        held = sum(x.nbytes for x in jax.tree.leaves(self.topology.local(self.carry)))
        if p.program.record:
            slots = self.topology.local_slots
            held += 2 * p.chunk * (slots.stop - slots.start) * _bytes_per_draw(p.layout)
        if held >= _AWAIT_COMPILE_BYTES:
            t0 = time.perf_counter()
            thread.join()
            self.plan.program.add_compile_seconds(time.perf_counter() - t0)

    def _init_args(self, positions: Any) -> tuple:
        p = self.plan
        example = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), p.flat.draw_shapes())
        return (p.flat.consts, positions, self.chain_ids, p.keys, example)

    def _timed(self, phase: str, t0: float, compile_before: float) -> None:
        """Book the time since ``t0`` to ``phase``, apart from compilation."""
        compiling = self.plan.program.compile_seconds - compile_before
        self.info.compile_seconds += compiling
        elapsed = time.perf_counter() - t0 - compiling
        setattr(self.info, phase, getattr(self.info, phase) + elapsed)

    def _compile_chunk_beside(self, init_args: tuple) -> concurrent.futures.Future | None:
        """Start compiling the chunk program in a thread, from the shapes of the carry
        that ``init`` will return, while this thread compiles and runs ``init``.

        Small models wait mostly for these two compiles (on the 10-dim logistic
        regression the chunk program takes ~1.3 s to compile after ~0.3 s of tracing,
        init ~0.4 s); XLA releases the GIL while compiling. One device in one process only (the shapes carry no sharding);
        ``SLUICE_BACKGROUND_COMPILE=0`` turns it off.
        """
        p, t = self.plan, self.topology
        if (
            os.environ.get("SLUICE_BACKGROUND_COMPILE", "1") == "0"
            or t.process_count > 1
            or len(t.devices) > 1
        ):
            return None
        carry, _ = jax.eval_shape(p.program.init, *init_args)
        # start and stop are Python ints, traced by value type only: any will do
        args = (p.flat.consts, carry, self.chain_ids, 0, p.warmup + p.draws, p.warmup,
                self.schedule, p.keys)  # fmt: skip
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sluice-compile")
        future = pool.submit(p.program.compiled, self._advance_name, *args, timed=False)
        pool.shutdown(wait=False)
        return future

    def start(self) -> None:
        t0, c0 = time.perf_counter(), self.plan.program.compile_seconds
        positions = self.topology.put_local(self.plan.local_positions())
        args = self._init_args(positions)
        chunk = self._compile_chunk_beside(args)
        self.carry, grads = self.plan.program.compiled("init", *args)(*args)
        real = self.topology.local_chains
        if self.plan.check_init:  # from the init program's values: no program of its own
            kernel = self.carry.kernel
            n = real.stop - real.start
            check_initial_values(
                self.plan.flat,
                self.topology.local(kernel.logdensity)[:n],
                self.topology.local(kernel.logdensity_grad)[:n],
            )
        if chunk is not None:  # the wait counts as compile time
            t1 = time.perf_counter()
            chunk.result()
            self.plan.program.add_compile_seconds(time.perf_counter() - t1)
        local_grads = self.topology.local(grads)[: real.stop - real.start]
        self.info.num_gradients_warmup += int(np.sum(local_grads, dtype=np.int64))
        self._timed("warmup_seconds", t0, c0)

    def restore(self, checkpoint: Any) -> None:
        """Continue from a checkpoint, possibly written on another device layout."""
        t = self.topology
        positions = jax.ShapeDtypeStruct((t.num_slots, self.plan.flat.dim), self.plan.flat.dtype)
        template, _ = jax.eval_shape(self.plan.program.init, *self._init_args(positions))
        leaves, treedef = jax.tree.flatten(template)
        fits = len(leaves) == len(checkpoint.carry) and all(
            tuple(a.shape[1:]) == tuple(b.shape[1:])
            and np.dtype(a.dtype) == b.dtype
            and b.shape[0] >= t.num_chains
            for a, b in zip(leaves, checkpoint.carry, strict=True)
        )
        if not fits:
            raise ValueError(
                f"the checkpoint in {self.sink.path} does not fit this run's state "
                "(different statistics, kernel or model shapes)"
            )
        # Real chains keep their state; padded slots (whose output is dropped) copy chain 0.
        slots = t.local_slots
        rows = np.minimum(np.arange(slots.start, slots.stop), t.num_chains - 1)
        rows = np.where(np.arange(slots.start, slots.stop) < t.num_chains, rows, 0)
        local = [leaf[rows] for leaf in checkpoint.carry]
        self.carry = t.put_local(jax.tree.unflatten(treedef, local))
        self.iteration = checkpoint.next_iteration
        self.stats_ready = checkpoint.stats_ready
        if t.is_main:  # totals of the interrupted run are carried by process 0
            self.info.restore(checkpoint.totals)
        self.checkpoints_written = checkpoint.sequence + 1

    def _save(self, carry: Any, iteration: int) -> None:
        if not self.checkpointing:
            return
        from sluice.store import Checkpoint

        local = [np.asarray(x) for x in jax.tree.leaves(self.topology.local(carry))]
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

    @property
    def _advance_name(self) -> str:
        """Without checkpoints nothing reads a carry once the next chunk is dispatched:
        the chunk program may reuse its buffers."""
        return "advance" if self.checkpointing else "advance_donated"

    def _advance(self, carry: Any, start: int, stop: int) -> Any:
        p = self.plan
        args = (p.flat.consts, carry, self.chain_ids, start, stop, p.warmup, self.schedule, p.keys)
        executable = p.program.compiled(self._advance_name, *args)
        self._precompile_statistics()
        return executable(*args)

    def _local_real(self, tree: Any) -> Any:
        """This process's real chains of a chain-sharded pytree, as NumPy."""
        real = self.topology.local_chains
        return jax.tree.map(lambda x: x[: real.stop - real.start], self.topology.local(tree))

    def run(self) -> Run:
        p = self.plan
        chains, chunk, warmup, end = p.chains, p.chunk, p.warmup, p.warmup + p.draws

        # Warmup: nothing is written, so each chunk is simply checkpointed.
        if self.iteration < warmup:
            t0, c0 = time.perf_counter(), p.program.compile_seconds
            with ChunkProgress(
                "warmup", warmup, chunk, chains, self.progress, initial=self.iteration
            ) as bar:
                for start in range(self.iteration, warmup, chunk):
                    self.carry, counters, _ = self._advance(self.carry, start, warmup)
                    stop = min(start + chunk, warmup)
                    self.info.num_gradients_warmup += int(
                        np.sum(self._local_real(counters.num_gradients), dtype=np.int64)
                    )
                    self.iteration = stop
                    self._save(self.carry, stop)
                    bar.advance(stop - start)
            self._timed("warmup_seconds", t0, c0)

        if not self.stats_ready:
            self._start_statistics()
        self._await_precompile()

        # Sampling: chunk k+1 is dispatched before chunk k is copied out and written.
        t0, c0 = time.perf_counter(), p.program.compile_seconds
        with ChunkProgress(
            "sampling", p.draws, chunk, chains, self.progress, initial=self.iteration - warmup
        ) as bar:
            pending = None
            starts = list(range(self.iteration, end, chunk))
            for k in range(len(starts) + 1):
                current = None
                if k < len(starts):
                    carry, counters, outputs = self._advance(self.carry, starts[k], end)
                    current = (starts[k], carry, counters, outputs)
                    self.carry = carry
                if pending is not None:
                    start, carry, counters, outputs = pending
                    stop = min(start + chunk, end)
                    self.info.add_counters(self._local_real(counters))
                    if outputs is not None:
                        host = self._local_real(outputs)
                        self.sink.write(start - warmup, _trim(host, stop - start))
                    self.iteration = stop
                    self._save(carry, stop)
                    bar.advance(stop - start)
                pending = current
        jax.block_until_ready(self.carry)
        self._timed("sampling_seconds", t0, c0)
        self.sink.close()
        return self._finish()

    def _start_statistics(self) -> None:
        """Initialise the statistics from the final warmup draw of chain 0 (same on all chains)."""
        p, t = self.plan, self.topology
        position = t.broadcast_from_main(self.topology.local(self.carry.kernel.position)[0])
        states = _reduce.call(self._stats_start(), p.flat.consts, np.asarray(position))
        self.carry = self.carry._replace(stats=t.put_local(jax.device_get(states)))
        self.stats_ready = True

    def _finish(self) -> Run:
        p, t, info = self.plan, self.topology, self.info
        info.merge_totals(t.sum_over_processes(info.totals()))
        params = t.allgather(t.local(self.carry.params))
        info.step_size = np.asarray(params.step_size)[: p.chains]
        info.inverse_mass_matrix = np.asarray(params.inverse_mass_matrix)[: p.chains]
        info.total_seconds = info.compile_seconds + info.warmup_seconds + info.sampling_seconds
        stats_states = jax.tree.map(lambda x: x[: p.chains], t.allgather(t.local(self.carry.stats)))
        if info.num_divergent and t.is_main:
            warnings.warn(
                f"{info.num_divergent} divergent transitions after warmup "
                f"({info.num_divergent / (p.chains * p.draws):.1%} of draws); consider a larger "
                "target_accept or reparameterising the model",
                stacklevel=3,
            )
        return Run(
            model=p.model,
            sink=self.sink,
            info=info,
            statistics=p.statistics,
            stats_states=stats_states,
            local_chains=t.local_chains,
            summary_key=DEFAULT_STATISTIC if p.default_stats else None,
        )


# -- helpers ------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def _statistics_start(draws_fn: Callable, statistic: Statistic, slots: int) -> Callable:
    """``(consts, position) -> every slot's initial statistics state`` (run it through
    :func:`sluice._reduce.call`): all slots start from the same example draw, the
    constrained ``position``. Cached, so that runs sharing a program share its compile."""

    def start(consts: Any, position: jax.Array) -> Any:
        state = statistic.init(draws_fn(consts, position))
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (slots, *x.shape)), state)

    return start


_PROGRAMS: OrderedDict[tuple, ChunkProgram] = OrderedDict()

# Sampling phases holding at least this much (carries and two chunks of outputs)
# wait for the statistics' background compile before they start.
_AWAIT_COMPILE_BYTES = 128 * 2**20


def _program(flat, kernel, statistics, chunk, record, chain_method, topology) -> ChunkProgram:
    """Reuse compiled programs across runs of the same model structure and settings.

    Two models with the same fingerprint differ only in their data values,
    which the program takes as arguments; statistics are matched by identity.
    """
    key = (
        flat.fingerprint,
        kernel,
        tuple((n, id(s)) for n, s in statistics.items()),
        chunk,
        record,
        chain_method,
        tuple(d.id for d in topology.devices),
    )
    program = _PROGRAMS.get(key)
    if program is None:
        program = ChunkProgram(
            flat, kernel, _stats.group(statistics), chunk, record, chain_method, topology.mesh
        )
        _PROGRAMS[key] = program
        while len(_PROGRAMS) > 8:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return program


def _trim(host: dict, n: int) -> dict:
    """The first ``n`` draws of a chunk's outputs (a short last chunk is masked)."""
    return {
        group: {name: np.asarray(v)[:, :n] for name, v in names.items()}
        for group, names in host.items()
    }


def _layout_groups(flat, kernel, draw_shapes) -> dict:
    groups = {"posterior": {k: (v.shape, np.dtype(v.dtype)) for k, v in draw_shapes.items()}}
    x = jax.ShapeDtypeStruct((flat.dim,), flat.dtype)
    value = jax.eval_shape(flat.logdensity_fn, flat.consts, x)
    if value.dtype == flat.dtype:  # the kernel knows its statistics' shapes
        stat_shapes = kernel.stats_shapes(flat.dtype)
    else:  # mixed precision: trace a transition to see what it returns
        from sluice.kernels import KernelParams, KernelState

        state = KernelState(x, value, x)
        imm = (flat.dim, flat.dim) if getattr(kernel, "dense_mass", False) else (flat.dim,)
        params = KernelParams(
            jax.ShapeDtypeStruct((), flat.dtype), jax.ShapeDtypeStruct(imm, flat.dtype)
        )
        stat_shapes = jax.eval_shape(
            lambda s, p: kernel.step(
                jax.random.PRNGKey(0), s, lambda z: flat.logdensity_fn(flat.consts, z), p
            )[1],
            state,
            params,
        )
    groups["sample_stats"] = {k: (v.shape, np.dtype(v.dtype)) for k, v in stat_shapes.items()}
    ll = flat.log_likelihood_shapes()
    if ll:
        groups["log_likelihood"] = {k: (v.shape, np.dtype(v.dtype)) for k, v in ll.items()}
    return groups


def _resolve_chunk_size(chunk_size, num_chunks, draws, warmup, layout, chains_per_device) -> int:
    if isinstance(chunk_size, int):
        return min(chunk_size, max(draws, warmup))
    if num_chunks is not None:
        return math.ceil(draws / num_chunks)
    budget = _device_budget_bytes()
    by_memory = max(1, budget // max(1, chains_per_device * _bytes_per_draw(layout)))
    by_progress = max(1, math.ceil(draws / 10))
    return int(min(by_memory, by_progress))


def _bytes_per_draw(layout: Layout) -> int:
    """Bytes of one chain's recorded draw: posterior, sample stats, log-likelihood."""
    return sum(
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        for names in layout.groups.values()
        for shape, dtype in names.values()
    )


def _device_budget_bytes() -> int:
    """A quarter of the device's free memory where JAX reports it, else 256 MiB."""
    env = os.environ.get("SLUICE_CHUNK_BUDGET_BYTES")
    if env:
        return int(env)
    try:
        mem = jax.devices()[0].memory_stats() or {}
    except Exception:  # some backends do not implement memory_stats
        mem = {}
    if "bytes_limit" in mem:
        return max(
            DEFAULT_CHUNK_BUDGET_BYTES // 16, (mem["bytes_limit"] - mem.get("bytes_in_use", 0)) // 4
        )
    return DEFAULT_CHUNK_BUDGET_BYTES


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists, kernels dicts)."""
    if isinstance(value, NUTS | HMC):
        return kernel_to_config(value)
    return json.loads(json.dumps(value))
