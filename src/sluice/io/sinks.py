"""Where draws go between chunks: the sink protocols, host memory, or nowhere.

A :class:`Sink` is opened once with the run's :class:`Layout` and a JSON-able
description of its settings and model, then receives, after every chunk,
``{group: {name: ndarray (chains, n, ...)}}`` for the chunk's ``n`` valid draws
from draw ``start`` (groups: ArviZ's ``posterior``, ``sample_stats``,
``log_likelihood``). A :class:`ResumableSink` also checkpoints after every chunk.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Layout", "MemorySink", "NullSink", "ResumableSink", "Sink", "resolve_sink"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a run will write: chain count, draw count, and per-group shapes and dtypes."""

    chains: int
    num_draws: int
    groups: dict[str, dict[str, tuple[tuple[int, ...], np.dtype]]]
    dims: dict[str, list[str]] | None = None  # ArviZ dims of named quantities
    coords: dict[str, Any] | None = None  # ArviZ coords: values along named dims
    constant_groups: dict[str, dict[str, Any]] | None = None  # e.g. observed_data
    local_chains: tuple[int, int] | None = None  # [start, stop) of this process's chains
    chains_per_process: int | None = None  # chain slots per process (a store's chunk along chains)
    process_index: int = 0  # process 0 creates shared stores; the others attach to them
    chunk_size: int | None = None  # draws per write (a store's chunk along draws); None: all
    warmup: int = 0  # iterations before the first draw (a checkpoint's next_iteration counts them)

    @property
    def local_range(self) -> tuple[int, int]:
        return self.local_chains if self.local_chains is not None else (0, self.chains)


@runtime_checkable
class Sink(Protocol):
    """Where a run's draws go (``keeps_draws``: whether it keeps them at all)."""

    keeps_draws: bool

    def open(self, layout: Layout, description: dict[str, Any]) -> None: ...

    def write(self, start: int, chunk: dict[str, dict[str, np.ndarray]]) -> None: ...

    def close(self) -> None: ...

    # Optional: ``stop(draws)``, called when ``until`` ends the run after ``draws`` draws
    # per chain (fewer than the layout's), before ``close``.
    # Optional: ``keep_summary(result, draws)``, called by process 0 at the end of a run
    # with the finalized default summary of ``draws`` draws per chain, for a sink that
    # keeps it beside the draws (a store: ``sluice summary`` then reads no draws).

    def kept(self) -> dict[str, dict[str, Any]] | None:
        """``{group: {name: array (chain, draw, ...)}}`` of the kept draws (arrays or
        lazily read ones that index like NumPy), or ``None`` if it keeps none."""
        ...


@runtime_checkable
class ResumableSink(Sink, Protocol):
    """A sink on disk that checkpoints after every chunk, so an interrupted run resumes."""

    path: Path

    def attach(self, layout: Layout) -> None:
        """Write this process's chains (``layout.local_chains``) of an existing store."""
        ...

    def description(self) -> dict[str, Any]:
        """The description the store was opened with (settings and model identity)."""
        ...

    def check_compatible(
        self, description: dict[str, Any], *, allow_model_change: bool = False
    ) -> None:
        """Raise naming the first setting or model property that differs (the model's
        program or data only without ``allow_model_change``)."""
        ...

    def save_checkpoint(self, checkpoint: Any, process: int, parity: int) -> None: ...

    def commit(self, checkpoint: Any, parity: int, process_count: int) -> None: ...

    def load_checkpoint(self) -> Any | None:
        """The last committed checkpoint (all processes' chains), or ``None``."""
        ...

    def stop(self, draws: int, process: int = 0) -> None:
        """``until`` ended the run after ``draws`` draws per chain: process 0 records it
        and cuts the store to them; then every other process sees the cut store."""
        ...


class NullSink:
    """Keep no draws (``sink=None``): the run reports streaming statistics only."""

    keeps_draws = False

    def open(self, layout: Layout, description: dict[str, Any]) -> None:
        del layout, description

    def write(self, start: int, chunk: dict[str, dict[str, np.ndarray]]) -> None:
        del start, chunk

    def close(self) -> None:
        pass

    def kept(self) -> None:
        return None


class MemorySink:
    """Keep every draw in host memory, preallocated once (``sink="memory"``).

    Host memory is exactly the draws' bytes: each chunk is copied into place.
    With several processes, each keeps its own chains (``run.local_chains``).
    """

    keeps_draws = True

    def __init__(self) -> None:
        self.data: dict[str, dict[str, np.ndarray]] = {}

    def open(self, layout: Layout, description: dict[str, Any]) -> None:
        del description
        start, stop = layout.local_range
        self.data = {
            group: {
                name: np.empty((stop - start, layout.num_draws, *shape), dtype)
                for name, (shape, dtype) in names.items()
            }
            for group, names in layout.groups.items()
        }

    def write(self, start: int, chunk: dict[str, dict[str, np.ndarray]]) -> None:
        for group, names in chunk.items():
            for name, values in names.items():
                self.data[group][name][:, start : start + values.shape[1]] = values

    def stop(self, draws: int) -> None:
        """The run ended after ``draws`` draws per chain (``until``): keep those."""
        self.data = {
            g: {k: v[:, :draws] for k, v in names.items()} for g, names in self.data.items()
        }

    def close(self) -> None:
        pass

    def kept(self) -> dict[str, dict[str, np.ndarray]]:
        return self.data


def resolve_sink(sink: Any) -> Any:
    """``"memory"`` -> :class:`MemorySink`, ``None`` -> :class:`NullSink`, or a sink object."""
    if sink is None:
        return NullSink()
    if isinstance(sink, str):
        if sink == "memory":
            return MemorySink()
        raise ValueError(f"sink must be 'memory', None or a sink object, got {sink!r}")
    if not isinstance(sink, Sink):
        raise TypeError(
            f"sink must be 'memory', None or a sink object (keeps_draws, open, write, close, "
            f"kept: see sluice.io.sinks.Sink), got {sink!r}"
        )
    return sink
