"""Where chains live: a 1-D mesh over every device of every process.

Chain slots (the chain count rounded up to a multiple of the device count) lie
along the mesh axis ``"chains"`` in device order, so each process owns one
contiguous block; :meth:`Topology.local` reads this process's block,
:meth:`Topology.allgather` the whole array on every process.
docs/architecture.md ("Placement") describes the layout.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sluice._jax import cores

__all__ = ["HostLeaf", "Topology"]

BARRIER_TIMEOUT_SECONDS = 7 * 24 * 3600.0


class HostLeaf(NamedTuple):
    """This process's rows of a chain-sharded leaf as host views of its shards, in row
    order: the leaf's bytes in C order without assembling them (:meth:`Topology.views`)."""

    dtype: np.dtype
    shape: tuple[int, ...]
    parts: tuple[np.ndarray, ...]

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` (a view)."""
        for part in self.parts:
            if i < len(part):
                return part[i]
            i -= len(part)
        raise IndexError(f"row {i} past the leaf's {self.shape[0]} rows")

    def whole(self) -> np.ndarray:
        """The rows as one array: a view where there is one part, else a copy (the
        caller's alone: it goes when the caller drops it)."""
        return self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts)


@dataclasses.dataclass(frozen=True, eq=False)
class Topology:
    """Chain slots over devices and processes."""

    devices: tuple[jax.Device, ...]
    num_chains: int
    num_slots: int
    process_index: int
    process_count: int
    mesh: Mesh | None

    @classmethod
    def build(cls, num_chains: int, devices: list[jax.Device] | tuple | None = None) -> Topology:
        """Lay ``num_chains`` chains over ``devices`` (default: every device of every process;
        in a single process, no more devices than chains; on CPU ``import sluice`` gave
        JAX one device per core, see :mod:`sluice._jax.cores`)."""
        process_count = jax.process_count()
        if devices is None:
            devices = jax.devices()
            if process_count == 1:
                devices = devices[: max(1, min(len(devices), num_chains))]
                cores.note_single_core(num_chains, devices)
        devices = tuple(devices)
        if not devices:
            raise ValueError("devices must name at least one device, got an empty list")
        processes = sorted({d.process_index for d in devices})
        if process_count > 1 and processes != list(range(process_count)):
            raise ValueError(
                f"with {process_count} processes the devices must include every process's devices, "
                f"got devices of processes {processes}"
            )
        per_process = {p: sum(d.process_index == p for d in devices) for p in processes}
        if len(set(per_process.values())) > 1:
            raise ValueError(
                f"every process must bring the same number of devices, got {per_process}"
            )
        num_slots = math.ceil(num_chains / len(devices)) * len(devices)
        mesh = Mesh(np.array(devices), ("chains",)) if len(devices) > 1 else None
        return cls(devices, num_chains, num_slots, jax.process_index(), process_count, mesh)

    # -- layout ------------------------------------------------------------------
    @property
    def multiprocess(self) -> bool:
        return self.process_count > 1

    @property
    def is_main(self) -> bool:
        """Process 0 shows progress and creates shared files."""
        return self.process_index == 0

    @property
    def slots_per_process(self) -> int:
        return self.num_slots // (self.process_count if self.multiprocess else 1)

    @property
    def local_slots(self) -> slice:
        """This process's block of chain slots."""
        if not self.multiprocess:
            return slice(0, self.num_slots)
        start = self.process_index * self.slots_per_process
        return slice(start, start + self.slots_per_process)

    @property
    def local_chains(self) -> slice:
        """This process's real chains (its slots minus padding)."""
        s = self.local_slots
        return slice(min(s.start, self.num_chains), min(s.stop, self.num_chains))

    @property
    def sharding(self) -> NamedSharding | None:
        return None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec("chains"))

    # -- moving data ------------------------------------------------------------------
    def put(self, tree: Any) -> Any:
        """Place a pytree with a leading ``num_slots`` axis (the same on every process)."""
        sharding = self.sharding
        if sharding is None:
            return jax.device_put(tree, self.devices[0])
        if not self.multiprocess:
            return jax.device_put(tree, sharding)

        def one(x: Any) -> jax.Array:
            x = np.asarray(x)
            return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

        return jax.tree.map(one, tree)

    def put_local(self, tree: Any) -> Any:
        """Place a pytree holding only this process's slots (leading ``slots_per_process``)."""
        if not self.multiprocess:
            return self.put(tree)
        sharding = self.sharding

        def one(x: Any) -> jax.Array:
            x = np.asarray(x)
            return jax.make_array_from_process_local_data(
                sharding, x, (self.num_slots, *x.shape[1:])
            )

        return jax.tree.map(one, tree)

    def local(self, tree: Any) -> Any:
        """This process's slots of a chain-sharded pytree, as NumPy (leading ``slots_per_process``)."""
        if not self.multiprocess:  # not device_get: JAX keeps the copy it makes (views)
            leaves, treedef = jax.tree.flatten(tree)
            return jax.tree.unflatten(treedef, [h.whole() for h in self.views(leaves)])

        def one(x: jax.Array) -> np.ndarray:
            out = np.empty((self.slots_per_process, *x.shape[1:]), x.dtype)
            for shard in x.addressable_shards:
                self._copy_shard(out, shard.index, shard.data)
            return out

        return jax.tree.map(one, tree)

    def views(self, tree: Any) -> list[HostLeaf]:
        """Each leaf of a chain-sharded pytree as :class:`HostLeaf`: this process's slots,
        read through views of its shards, no copy (a checkpoint writes them in turn).

        On the CPU a shard is host memory and a view of it costs nothing, while
        :meth:`local` of a leaf sharded over several devices assembles a copy, which JAX
        also keeps with the device array as long as that lives: for a large model's
        statistics, a second copy of the states for the whole of the next chunk."""
        lo, hi = (self.local_slots.start, self.local_slots.stop) if self.multiprocess else (0, None)
        return [self._views(x, lo, hi) for x in jax.tree.leaves(tree)]

    def _views(self, x: Any, lo: int, hi: int | None) -> HostLeaf:
        if not isinstance(x, jax.Array) or x.ndim == 0:
            x = np.asarray(x)
            return HostLeaf(x.dtype, x.shape, (x,))
        hi = x.shape[0] if hi is None else hi
        rows: dict[tuple[int, int], jax.Array] = {}
        for shard in x.addressable_shards:
            first, *rest = shard.index
            if any(r != slice(None) and (r.start, r.stop) != (0, n)
                   for r, n in zip(rest, x.shape[1:], strict=True)):  # fmt: skip
                return self._copied(x)  # not split by rows alone
            start, stop, _ = first.indices(x.shape[0])
            rows.setdefault((start, stop), shard.data)
        parts, at = [], lo
        for (start, stop), data in sorted(rows.items()):
            if stop <= at or start >= hi:
                continue
            if start > at:
                return self._copied(x)  # a gap: not this process's rows in order
            parts.append(np.asarray(data)[at - start : min(stop, hi) - start])
            at = min(stop, hi)
        if at != hi:
            return self._copied(x)
        return HostLeaf(np.dtype(x.dtype), (hi - lo, *x.shape[1:]), tuple(parts))

    def _copied(self, x: jax.Array) -> HostLeaf:
        (out,) = self.move_local([x])
        return HostLeaf(out.dtype, out.shape, (out,))

    def _copy_shard(self, out: np.ndarray, index: tuple, data: jax.Array) -> None:
        """Copy one shard's ``data`` to its place ``index`` in ``out``, this process's
        block (in a multi-process run its rows start at this process's first slot)."""
        if self.multiprocess:
            rows, start = index[0], self.local_slots.start
            index = (slice(rows.start - start, rows.stop - start), *index[1:])
        out[index] = np.asarray(data)

    def move_local(self, leaves: list[jax.Array]) -> list[np.ndarray]:
        """:meth:`local` of each leaf, taking the leaves out of ``leaves`` (which ends
        empty) and freeing each device array as it is copied, so that a pytree of
        gigabytes (a million-element model's statistics) is never held twice.

        A leaf moves a shard at a time: its shards' arrays are taken, the whole array is
        dropped (the caller must hold no other reference to it), and each shard's rows
        are copied into the output before that shard's array, the last holder of its
        buffer, is dropped. On the CPU the device is this machine's memory, and copying
        the whole array before deleting it held the leaf twice; this way the extra is one
        device's share (half of it on two devices). Elsewhere it frees device memory
        shard by shard.
        """
        moved = []
        while leaves:
            x = leaves.pop(0)
            shape = (self.slots_per_process, *x.shape[1:]) if self.multiprocess else x.shape
            out = np.empty(shape, x.dtype)
            shards = [(s.index, s.data) for s in x.addressable_shards]
            del x
            while shards:
                index, data = shards.pop()
                self._copy_shard(out, index, data)
                del data
            moved.append(out)
        return moved

    def allgather(self, local_tree: Any) -> Any:
        """Concatenate every process's local block (NumPy, leading ``slots_per_process``)."""
        if not self.multiprocess:
            return local_tree
        self.barrier("before-allgather")
        return jax.tree.map(_allgather_exact, local_tree)

    def broadcast_from_main(self, tree: Any) -> Any:
        """Process 0's value of a NumPy pytree, on every process."""
        if not self.multiprocess:
            return tree
        self.barrier("before-broadcast")
        return jax.tree.map(lambda x: _allgather_exact(np.asarray(x)[None])[0], tree)

    def sum_over_processes(self, values: dict[str, Any]) -> dict[str, Any]:
        """Sum host-side totals (gradient counts, divergences; scalars or arrays) over
        processes."""
        if not self.multiprocess:
            return values
        names = sorted(values)
        parts = [np.asarray(values[n], np.float64).reshape(-1) for n in names]
        self.barrier("before-sum")
        total = _allgather_exact(np.concatenate(parts)[None]).sum(axis=0)
        out, at = {}, 0
        for name, part in zip(names, parts, strict=True):
            value = total[at : at + part.size]
            at += part.size
            if np.ndim(values[name]):
                out[name] = value.reshape(np.shape(values[name]))
            else:
                out[name] = type(values[name])(value[0])
        return out

    def barrier(self, name: str, timeout_seconds: float = BARRIER_TIMEOUT_SECONDS) -> None:
        """Wait until every process reaches ``name`` (no-op in one process).

        Device collectives meet at one first (``before-...``): their gloo rendezvous has
        a fixed 30 s deadline. The timeout is long on purpose: a dead peer already ends
        the wait within JAX's heartbeat timeout.
        """
        if not self.multiprocess:
            return
        from sluice.runtime.distributed import barrier

        barrier(name, timeout_seconds)


def _allgather_exact(x: np.ndarray) -> np.ndarray:
    """``process_allgather`` along axis 0, bit-exact for any dtype.

    Arrays travel as bytes: without ``jax_enable_x64`` JAX would turn int64
    and float64 host arrays into 32-bit ones on the way.
    """
    from jax.experimental import multihost_utils

    x = np.ascontiguousarray(x)
    rows = x.shape[0]
    as_bytes = x.view(np.uint8).reshape(rows, -1) if x.size else np.zeros((rows, 0), np.uint8)
    gathered = np.asarray(multihost_utils.process_allgather(as_bytes, tiled=True))
    return gathered.reshape(-1).view(x.dtype).reshape(gathered.shape[0], *x.shape[1:])
