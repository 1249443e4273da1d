"""Checkpoints: a run's chain states, totals and position, in one checked file.

A checkpoint is written per process after every chunk, straight from the arrays
(no archive, no in-memory copy); docs/architecture.md ("Sinks, stores and
checkpoints") gives its file format and the protocol around it.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from sluice._version import __version__

__all__ = ["FORMAT", "VERSION", "Checkpoint", "StoreError", "read_record", "write_record"]

FORMAT = "sluice-store"
VERSION = 3  # of the store format; 2: checkpoints in this raw format instead of .npz;
# 3: every chunk and metadata document checked (sluice.io.integrity)


class StoreError(ValueError):
    """A store that is not a sluice store, is damaged, or does not match the run."""


@dataclasses.dataclass
class Checkpoint:
    """What a run needs to continue: settings, next iteration, chain states, totals.

    Written per process with that process's block of chain slots in ``carry``;
    :meth:`ZarrSink.load_checkpoint` returns all blocks concatenated.
    """

    config: dict[str, Any]
    next_iteration: int
    stats_ready: bool
    # leaves of the chain carry, leading axis = chain slots: arrays, or (written, not read)
    # leaves given as their parts in row order (sluice.runtime.parallel.HostLeaf)
    carry: list[Any]
    totals: dict[str, Any]  # running totals (gradients, divergences, seconds)
    sequence: int  # how many checkpoints the run wrote before this one
    sluice_version: str | None = __version__  # the sluice that wrote it (None: before 0.1.0)

    def write_to(self, file: Any) -> None:
        """Write the checkpoint to an open binary file (the module's layout), without
        copying the leaves."""
        meta = {"format": FORMAT, "version": VERSION, "sluice_version": self.sluice_version}
        meta.update((k, getattr(self, k)) for k in _FIELDS if k != "carry")  # as from_file reads
        write_record(file, meta, self.carry)

    @classmethod
    def from_file(cls, path: Path) -> Checkpoint:
        try:
            meta, carry = read_record(path)
        except Exception as error:  # OS, JSON, length or checksum errors: all mean "damaged"
            raise StoreError(
                f"the checkpoint {path} is damaged and cannot be read: {error}; the draws "
                "committed so far can still be read (sluice.open), but the run cannot "
                "continue from it"
            ) from error
        if meta.get("format") != FORMAT:
            raise StoreError(f"{path} is not a sluice checkpoint")
        missing = [k for k in _FIELDS if k != "carry" and k not in meta]
        if missing:
            raise StoreError(f"the checkpoint {path} is damaged: its header lacks {missing}")
        return cls(
            *(meta[k] if k != "carry" else carry for k in _FIELDS), meta.get("sluice_version")
        )


def write_record(file: Any, meta: dict[str, Any], leaves: list[Any]) -> None:
    """Write ``meta`` (JSON, with the leaves' dtypes and shapes added) and ``leaves`` to
    an open binary file in the checked layout of a checkpoint; :func:`read_record`
    reads it back."""
    meta = {**meta, "leaves": [[np.dtype(x.dtype).str, list(x.shape)] for x in leaves]}
    header = json.dumps(meta).encode()
    crc = 0
    file.write(_MAGIC)
    for part in (len(header).to_bytes(8, "little"), header):
        file.write(part)
        crc = zlib.crc32(part, crc)
    for leaf in leaves:
        for part in getattr(leaf, "parts", (leaf,)):  # a leaf given in parts: each in turn
            view = np.ascontiguousarray(part).reshape(-1).view(np.uint8)  # no copy
            file.write(view)
            crc = zlib.crc32(view, crc)
    file.write(crc.to_bytes(4, "little") + _END)


_FIELDS = ("config", "next_iteration", "stats_ready", "carry", "totals", "sequence")
_MAGIC = b"SLUICECK"
_END = b"SLUICEND"


def read_record(path: Path) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The header and leaves of a file :func:`write_record` wrote; any damage raises."""
    data = memoryview(Path(path).read_bytes())
    if len(data) < len(_MAGIC) + 8 + 4 + len(_END) or data[: len(_MAGIC)] != _MAGIC:
        raise ValueError("not a sluice checkpoint file (bad magic or too short)")
    if data[-len(_END) :] != _END:
        raise ValueError("truncated (no end marker)")
    body = data[len(_MAGIC) : -len(_END) - 4]
    expected = int.from_bytes(data[-len(_END) - 4 : -len(_END)], "little")
    if zlib.crc32(body) != expected:
        raise ValueError("checksum mismatch")
    size = int.from_bytes(body[:8], "little")
    meta = json.loads(bytes(body[8 : 8 + size]).decode())
    offset = 8 + size
    carry = []
    for dtype, shape in meta["leaves"]:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset + nbytes > len(body):
            raise ValueError("shorter than its header says")
        carry.append(np.frombuffer(body[offset : offset + nbytes], dtype).reshape(shape).copy())
        offset += nbytes
    if offset != len(body):
        raise ValueError("longer than its header says")
    return meta, carry
