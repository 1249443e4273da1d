"""Everything fixed before a run samples: :class:`Plan`.

The plan resolves a :class:`~sluice.runtime.config.RunConfig` against the model,
the devices and the sink: chain method, chunk size, default statistics, the
recorded layout and the chunk program (docs/architecture.md, "The host loop").
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from sluice import stats as _stats
from sluice._jax import compile as programs
from sluice._jax.memory import free_bytes
from sluice.io.sinks import Layout, MemorySink, ResumableSink
from sluice.mcmc.chain_method import choose_chain_method, step_bytes
from sluice.mcmc.chunk import ChunkProgram, RunKeys, sample_stats_shapes
from sluice.model import FlatModel, Model, as_model
from sluice.runtime import statistics as run_statistics
from sluice.runtime.config import RunConfig
from sluice.runtime.parallel import Topology
from sluice.stats.base import Statistic

__all__ = ["DEFAULT_STATISTIC", "Plan", "bytes_per_draw"]

DEFAULT_CHUNK_BUDGET_BYTES = 256 * 2**20
DEFAULT_STATISTIC = "summary"


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """A resolved config with its model, placement, layout and chunk program."""

    config: RunConfig  # resolved: chunk_size an int, chain_method and default_stats chosen
    model: Model
    flat: FlatModel
    topology: Topology
    layout: Layout
    program: ChunkProgram
    keys: RunKeys
    statistics: dict[str, Statistic]  # every statistic of the run, defaults included
    check_init: bool
    resumable: bool  # the sink checkpoints (describe() then identifies the model fully)
    compile_options: dict[str, Any] | None = None  # XLA's, for the chunk program
    statistics_options: dict[str, Any] | None = None  # XLA's, for update_statistics
    statistics_shapes: Any = None  # {name: state}, this process's slots (ShapeDtypeStructs)

    @classmethod
    def build(
        cls,
        config: RunConfig,
        model: Model | Any,
        *,
        sink: Any,
        init: Any = None,
        stats: dict[str, Statistic] | None = None,
        devices: list[jax.Device] | None = None,
        check_init: bool = True,
    ) -> Plan:
        if stats is not None and not (
            isinstance(stats, dict) and all(isinstance(s, Statistic) for s in stats.values())
        ):
            raise TypeError(f"stats must be a dict of sluice.stats.Statistic, got {stats!r}")
        default_stats = config.default_stats
        if default_stats == "auto":
            default_stats = config.until is not None or not isinstance(sink, MemorySink)
        if config.until is not None and not default_stats:
            raise ValueError(
                "until=sluice.converged(...) reads the default summary statistics: "
                "pass default_stats=True (or leave it 'auto')"
            )
        statistics = dict(stats or {})
        if default_stats and DEFAULT_STATISTIC in statistics:
            raise ValueError(
                f"stats={{{DEFAULT_STATISTIC!r}: ...}} clashes with the default summary "
                f"statistics; rename it or pass default_stats=False"
            )

        model = as_model(model, init)
        flat = model.flatten()
        topology = Topology.build(config.chains, devices)
        chains_per_device = topology.num_slots // len(topology.devices)
        chain_method = config.chain_method
        across_chains = config.kernel.warmup().across_chains
        if across_chains and chain_method == "sequential":
            raise ValueError(
                f"the kernel {config.kernel.to_config()['name']!r} warms up across chains, "
                "which needs vectorized chains: chain_method='vectorized' or 'auto', "
                "not 'sequential'"
            )
        traffic = _run_traffic(config, flat, topology)
        kernel = _resolve_mass_matrix(config.kernel, traffic)
        if chain_method == "auto":
            if across_chains:
                chain_method = "vectorized"
            elif traffic is not None and traffic <= programs.SMALL_RUN_BYTES:
                chain_method = "sequential"  # a compile-bound run: the quicker compile
            else:
                chain_method = choose_chain_method(
                    flat, config.kernel, topology.devices, chains_per_device
                )
        local = topology.local_chains
        layout = Layout(
            config.chains,
            config.draws,
            _layout_groups(flat, config.kernel),
            dims=dict(model.dims or {}),
            coords=dict(model.coords or {}),
            constant_groups={"observed_data": dict(model.observed_data)}
            if model.observed_data
            else None,
            local_chains=(local.start, local.stop),
            chains_per_process=topology.slots_per_process,
            process_index=topology.process_index,
            warmup=config.warmup,
        )
        chunk = _resolve_chunk_size(
            config, layout, chains_per_device, _default_state_bytes(config, layout)
            if default_stats else None
        )  # fmt: skip
        layout = dataclasses.replace(layout, chunk_size=chunk)
        if default_stats:
            statistics = {
                DEFAULT_STATISTIC: default_statistic(config, flat.dim, chunk),
                **statistics,
            }
        config = config.replace(
            kernel=kernel,
            chunk_size=chunk,
            num_chunks=None,
            chain_method=chain_method,
            default_stats=bool(default_stats),
            statistics=tuple(sorted(statistics)),
        )
        program = ChunkProgram(
            flat,
            config.kernel,
            _stats.group(statistics),
            chunk,
            sink.keeps_draws,
            chain_method,
            topology.mesh,
            config.chains if across_chains else None,
        )
        shapes = None
        if statistics:  # from the start program's shapes (the memory check, the precompile)
            _, start = run_statistics.start_program(
                flat, program.statistic, topology.slots_per_process
            )
            example = run_statistics.start_example(flat, program.statistic, config.chains)
            shapes = jax.eval_shape(start, flat.consts, example)
            _check_statistics_memory(statistics, shapes, layout, topology)
        return cls(
            config,
            model,
            flat,
            topology,
            layout,
            program,
            RunKeys.from_seed(config.seed),
            statistics,
            check_init,
            isinstance(sink, ResumableSink),
            *_compile_options(traffic, config, layout, statistics, program.separate_statistics),
            statistics_shapes=shapes,
        )

    @functools.cached_property
    def window_ends(self) -> tuple[int, ...]:
        """The warmup iterations after which its ``window_end`` program runs (a chunk
        ends at each; :class:`~sluice.mcmc.protocol.Warmup`); none for a warmup
        without one."""
        warmup, num_warmup = self.config.kernel.warmup(), self.config.warmup
        if warmup.window_end is None:
            return ()
        ends = np.asarray(warmup.schedule(num_warmup).window_ends)
        return tuple(int(e) for e in ends if 0 <= e < num_warmup)

    @property
    def repeated_readout(self) -> bool:
        """Whether the run's summary programs compile for speed rather than for a quick
        compile (``run_statistics.summarize``'s ``repeated``): ``until`` reads the
        summary at every sampling chunk, and where the chunks times the posterior's
        elements reach :data:`REPEATED_READOUT_ELEMENTS` the readings saved outweigh the
        longer compile. Decided from the settings alone, so every process agrees."""
        c = self.config
        if c.until is None or self.summary_key is None:
            return False
        chunks = -(-c.draws // c.chunk_size)
        return chunks * _posterior_elements(self.layout) >= REPEATED_READOUT_ELEMENTS

    @property
    def summary_key(self) -> str | None:
        """The name of the default summary statistics, if the run computes them."""
        return DEFAULT_STATISTIC if self.config.default_stats else None

    def describe(self) -> dict[str, Any]:
        """The settings and model identity a resumed run must share (JSON-able): its
        programs' fingerprint, its data's hash and, for stores, the JAX version."""
        return self._description

    @functools.cached_property
    def _description(self) -> dict[str, Any]:
        traced_by = {"jax": jax.__version__} if self.resumable else {}
        return {
            "config": self.config.to_json(),
            "model": {
                **traced_by,
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
        if self.config.superchains is not None:  # the chains of a superchain share a start
            ids = ids // (self.config.chains // self.config.superchains)
        points = jax.tree.leaves(self.model.initial_points(self.keys.points, ids))
        return np.concatenate(  # ravel_pytree's order and cast, per chain, on the host
            [np.asarray(x, self.flat.dtype).reshape(len(ids), -1) for x in points], axis=1
        )


# mass_matrix="auto" takes the diagonal metric for a CPU run expected to move fewer bytes
# than this through its gradients (SLUICE_LOW_RANK_MIN_RUN_BYTES sets it; 0: the
# dimension alone decides).
LOW_RANK_MIN_RUN_BYTES = int(os.environ.get("SLUICE_LOW_RANK_MIN_RUN_BYTES", 2 * 2**30))


def _resolve_mass_matrix(kernel: Any, traffic: float | None) -> Any:
    """``kernel`` with ``mass_matrix="auto"`` made ``"diag"`` for a CPU run whose
    expected traffic is under :data:`LOW_RANK_MIN_RUN_BYTES`, too short to repay the
    low-rank metric's fixed compile (docs/architecture.md)."""
    if getattr(kernel, "mass_matrix", None) != "auto" or not dataclasses.is_dataclass(kernel):
        return kernel
    if traffic is None or traffic >= LOW_RANK_MIN_RUN_BYTES:
        return kernel
    return dataclasses.replace(kernel, mass_matrix="diag")


def _run_traffic(config: RunConfig, flat: FlatModel, topology: Topology) -> float | None:
    """On CPU, the run's expected memory traffic in bytes: every chain's iterations at
    one step's cost each (:func:`sluice.mcmc.chain_method.step_bytes`); ``None``
    elsewhere. Independent of the devices, so every layout of a run decides alike."""
    if topology.devices[0].platform != "cpu":
        return None
    return config.chains * (config.warmup + config.draws) * step_bytes(flat, config.kernel)


# Streaming statistics over more elements than this compile with XLA's default emitters,
# which run them faster there, unless they see at most CLASSIC_STATISTICS_ELEMENT_DRAWS
# element-draws (chains x draws x elements), where the quicker compile wins (docs/architecture.md).
CLASSIC_STATISTICS_ELEMENTS = 100
CLASSIC_STATISTICS_ELEMENT_DRAWS = 20_000_000
# A run whose `until` reads its summary at every chunk compiles the summary's merge and
# finalize for speed (Plan.repeated_readout) from this many chunks times elements: on the
# CPU a reading of 4 chains then takes 33-54 us per element less (1,000-10,000 elements)
# for 1.2-1.3 s more compile, in the background during warmup; 22,000-40,000
# element-readings repay it (docs/architecture.md, "The compile cache").
REPEATED_READOUT_ELEMENTS = 25_000
# A run whose statistics see at most this many element-draws (chains x draws x elements)
# compiles their program with the fast options: a quicker compile outweighs the slower
# update.
FAST_STATISTICS_ELEMENT_DRAWS = 100_000


def _compile_options(
    traffic: float | None, config: RunConfig, layout: Layout, statistics: dict[str, Statistic],
    separate: bool,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:  # fmt: skip
    """XLA's options for the chunk program and for the statistics' own program
    (``separate``), from the run's settings only, never its devices: the statistics'
    program takes the classic emitters over at most ``CLASSIC_STATISTICS_ELEMENTS``
    elements in a run of at most ``SMALL_RUN_BYTES``, and over more elements in a run
    of at most ``CLASSIC_STATISTICS_ELEMENT_DRAWS`` element-draws."""
    if traffic is None:
        return None, None
    options = programs.loop_options(traffic)
    if not statistics:
        return options, None
    elements = _posterior_elements(layout)
    small = elements <= CLASSIC_STATISTICS_ELEMENTS
    if not separate:
        return options if small else None, None
    seen = config.chains * config.draws * elements
    if seen <= FAST_STATISTICS_ELEMENT_DRAWS:
        return options, dict(programs.FAST_COMPILE_OPTIONS)
    if small:
        return options, programs.loop_options(traffic, programs.SMALL_RUN_BYTES)
    if seen <= CLASSIC_STATISTICS_ELEMENT_DRAWS:  # (on the CPU: traffic is None elsewhere)
        return options, dict(programs.CLASSIC_EMITTER_OPTIONS)
    return options, None


def _check_statistics_memory(
    statistics: dict[str, Statistic], shapes: Any, layout: Layout, topology: Topology
) -> None:
    """Raise, before anything compiles or a store is written, when this process's
    statistics' states (``shapes``) alone exceed the memory free on its devices (the run
    would fail when they are allocated, after its warmup)."""
    free = free_bytes([d for d in topology.devices if d.process_index == topology.process_index])
    need = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    if free is None or need <= free:
        return
    slots, elements = topology.slots_per_process, max(_posterior_elements(layout), 1)
    raise ValueError(
        f"the statistics ({', '.join(map(repr, sorted(statistics)))}) need "
        f"{need / 2**30:.1f} GiB for this process's {slots:,} chains of {elements:,} "
        f"elements ({need / (slots * elements):,.0f} bytes per element and chain), more "
        f"than the {free / 2**30:.1f} GiB free on its devices; sample fewer chains, "
        "spread them over more devices or hosts"
        + (", or pass default_stats=False (a sink keeps the draws for ArviZ)"
           if DEFAULT_STATISTIC in statistics else "")
    )  # fmt: skip


def _layout_groups(flat: FlatModel, kernel: Any) -> dict:
    groups = {"posterior": flat.draw_shapes(), "sample_stats": sample_stats_shapes(flat, kernel)}
    ll = flat.log_likelihood_shapes()
    if ll:
        groups["log_likelihood"] = ll
    return {g: {k: (v.shape, np.dtype(v.dtype)) for k, v in s.items()} for g, s in groups.items()}


def _posterior_elements(layout: Layout) -> int:
    return sum(math.prod(shape) for shape, _ in layout.groups["posterior"].values())


def _resolve_chunk_size(
    config: RunConfig,
    layout: Layout,
    chains_per_device: int,
    state_bytes: Callable[[int], int] | None = None,
) -> int:
    """The chunk size: the user's, or the smaller of what the device-memory budget holds
    and a tenth of the draws. ``state_bytes(chunk)``: the part of a chain's statistics
    state that grows as chunks shrink, which a chunk cut by the budget also keeps small."""
    draws, warmup = config.draws, config.warmup
    if isinstance(config.chunk_size, int):
        return min(config.chunk_size, max(draws, warmup))
    if config.num_chunks is not None:
        return math.ceil(draws / config.num_chunks)
    budget = _device_budget_bytes()
    per_draw = bytes_per_draw(layout)
    by_memory = max(1, budget // max(1, chains_per_device * per_draw))
    by_progress = max(1, math.ceil(draws / 10))
    if state_bytes is None or by_memory >= by_progress:
        return int(min(by_memory, by_progress))
    return min(range(by_memory, by_progress + 1), key=lambda c: c * per_draw + state_bytes(c))


def _default_state_bytes(config: RunConfig, layout: Layout) -> Callable[[int], int]:
    """The default statistics' chunk-dependent state of one chain, per chunk size (its
    elements are the posterior's)."""
    from sluice.stats import streaming

    elements = _posterior_elements(layout)
    itemsize = np.dtype(jax.numpy.result_type(float)).itemsize
    return lambda chunk: streaming.chunk_state_bytes(config.draws, chunk, elements, itemsize)


PILOT_BUDGET_BYTES = 256 * 2**20  # the pooled pilot draws of the default statistics, at most


def default_statistic(config: RunConfig, dim: int, chunk: int) -> Statistic:
    """The default summary statistics of a run: :func:`sluice.stats.streaming.summary`
    with the run's chunk geometry and a pilot of up to 128 final warmup draws per chain
    (fewer for a model so large that they would pass :data:`PILOT_BUDGET_BYTES`)."""
    from sluice.stats import streaming

    by_memory = PILOT_BUDGET_BYTES // max(1, 4 * config.chains * dim)
    pilot = int(max(1, min(128, config.warmup, max(16, by_memory))))
    return streaming.summary(config.draws, chunk_size=chunk, pilot=pilot)


def bytes_per_draw(layout: Layout) -> int:
    """Bytes of one chain's recorded draw: posterior, sample stats, log-likelihood."""
    return sum(
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        for names in layout.groups.values()
        for shape, dtype in names.values()
    )


def _device_budget_bytes() -> int:
    """A quarter of the device's free memory where JAX reports it, else 256 MiB
    (``SLUICE_CHUNK_BUDGET_BYTES`` in the environment overrides both)."""
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
