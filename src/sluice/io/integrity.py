"""Every byte a reader trusts is checked: chunk checksums and a manifest of the metadata.

:class:`CheckedStore` is a Zarr store that checks each document and chunk as Zarr
reads it and raises a :class:`StoreError` naming the file; docs/architecture.md
("Sinks, stores and checkpoints") describes the checks. This module imports
Zarr, so :mod:`sluice.io.store` imports it on first use.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
import zlib
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.storage import WrapperStore

from sluice.io.checkpoint import StoreError

__all__ = [
    "CheckedStore",
    "array_options",
    "checked_store",
    "committed_chunks",
    "metadata_digests",
    "resized_digest",
]

METADATA = "zarr.json"


def array_options(compressors: Any = "zstd") -> dict[str, Any]:
    """``create_array`` options of every array sluice writes: the codecs after its
    serializer, ``compressors`` (``None``: none; one codec or a sequence; ``"zstd"``:
    Zarr's default for arrays written whole), then the CRC-32C of the chunk's final
    bytes; and chunks of fill values written too, so that a missing chunk file is
    damage."""
    if compressors == "zstd":
        compressors = ZstdCodec(level=0)
    if compressors is None:
        compressors = ()
    elif not isinstance(compressors, list | tuple):
        compressors = (compressors,)
    return {"compressors": (*compressors, Crc32cCodec()), "config": {"write_empty_chunks": True}}


def metadata_digests(root: Path) -> dict[str, list[int]]:
    """The manifest of the store at ``root``: ``{relative path of a zarr.json: [CRC-32]}``
    (a list: :meth:`ZarrSink.stop` accepts an array's document before and after it cuts
    the array)."""
    manifest = {}
    for directory, _, files in os.walk(root):
        if METADATA in files:
            file = Path(directory) / METADATA
            manifest[file.relative_to(root).as_posix()] = [zlib.crc32(file.read_bytes())]
    return dict(sorted(manifest.items()))


def resized_digest(array: Any, shape: tuple[int, ...]) -> int:
    """The CRC-32 of ``array``'s ``zarr.json`` once resized to ``shape``, as Zarr's resize
    writes it (Zarr's own serializer of the new metadata)."""
    from zarr.core.buffer import default_buffer_prototype

    documents = array.metadata.update_shape(shape).to_buffer_dict(default_buffer_prototype())
    return zlib.crc32(documents[METADATA].to_bytes())


def committed_chunks(
    arrays: dict[str, dict[str, Any]], draw_groups: Iterable[str], draws: int
) -> set[str]:
    """The chunk keys (paths relative to the store) that hold committed values, from the
    arrays' documents: every chunk of every array, except that the arrays of
    ``draw_groups`` laid out ``(chain, draw, ...)`` hold ``draws`` draws per chain."""
    keys = set()
    for path, meta in arrays.items():
        shape = meta["shape"]
        chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
        grid = [-(-size // max(chunk, 1)) for size, chunk in zip(shape, chunks, strict=True)]
        if _has_draws(path, meta, draw_groups):
            grid[1] = min(grid[1], -(-draws // chunks[1]))
        encoding = meta["chunk_key_encoding"]
        separator = encoding.get("configuration", {}).get("separator", "/")
        for index in itertools.product(*(range(n) for n in grid)):
            if encoding["name"] == "default":
                key = "c" + "".join(f"{separator}{i}" for i in index)
            else:  # "v2"
                key = separator.join(map(str, index)) or "0"
            keys.add(f"{path}/{key}")
    return keys


def checked_store(
    root: Path, record: dict[str, Any] | None, record_path: Path, writable: bool,
    draw_groups: Iterable[str],
) -> CheckedStore:  # fmt: skip
    """The store to open ``root`` through, its manifest (the commit ``record``'s, if it
    has one) checked first: every document of it exists and has a recorded CRC-32, else
    a :class:`StoreError` names the first that does not. Its ``draws`` (committed, per
    chain) are the caller's to set once the record is known to be sound."""
    from zarr.storage import LocalStore

    manifest = None if record is None else record.get("metadata")
    store = CheckedStore(LocalStore(root, read_only=not writable), root, manifest, record_path,
                         draw_groups)  # fmt: skip
    for name, accepted in (manifest or {}).items():
        data = _read(root / name)
        _check_document(root / name, data, accepted, record_path)
        store.verified[name] = data
        meta = json.loads(data)
        if meta.get("node_type") == "array":
            store.documents[name[: -len(METADATA)].rstrip("/")] = meta
    return store


class CheckedStore(WrapperStore):
    """A Zarr store that checks what Zarr reads from the wrapped one.

    A ``zarr.json`` of the manifest must exist and have a recorded CRC-32; a chunk of
    an array whose codecs end with the CRC-32C must match its checksum, and exist
    where it holds committed values (:func:`committed_chunks`).
    """

    def __init__(
        self,
        store: Any,
        root: Path,
        manifest: dict[str, list[int]] | None = None,
        record: Path | None = None,
        draw_groups: Iterable[str] = (),
    ) -> None:
        super().__init__(store)
        self.root, self.manifest, self.record = Path(root), manifest, record
        self.draws: int | None = None  # committed per chain (set by the opener)
        self.draw_groups = tuple(draw_groups)
        # the arrays whose chunks carry a CRC-32C: {path: draws per chunk, 0 if no draws}
        self._checked: dict[str, int] = {}
        self.documents: dict[str, dict[str, Any]] = {}  # the manifest's arrays' metadata
        self.verified: dict[str, bytes] = {}  # the manifest's documents, as checked

    def check_committed(self) -> None:
        """Read every committed chunk once and check that it exists and matches its
        checksum (what a resume does before it writes)."""
        if self.manifest is not None and self.draws is not None:
            for key in sorted(committed_chunks(self.documents, self.draw_groups, self.draws)):
                _read_chunk(self.root, key, committed=True)

    def _with_store(self, store: Any) -> CheckedStore:
        other = copy.copy(self)  # sharing what it learnt and checked
        other._store = store
        return other

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if byte_range is not None:  # (sluice reads whole chunks; a part cannot be checked)
            return await self._store.get(key, prototype, byte_range)
        if key == METADATA or key.endswith("/" + METADATA):
            if self.read_only and key in self.verified:  # checked on opening: not read again
                data = self.verified[key]
            else:
                value = await self._store.get(key, prototype, byte_range)
                data = None if value is None else value.to_bytes()
                if self.manifest is not None and key in self.manifest:
                    _check_document(self.root / key, data, self.manifest[key], self.record)
            if data is not None and self._learn(key, data) and self.read_only:
                return prototype.buffer.from_bytes(_without_checksum(data))
            return None if data is None else prototype.buffer.from_bytes(data)
        array, index = _chunk_of(key)
        if array not in self._checked:
            return await self._store.get(key, prototype, byte_range)
        per_chunk = self._checked[array]
        committed = self.draws is not None and (per_chunk == 0 or index[1] * per_chunk < self.draws)
        # read and checked in one worker thread: the CRC-32C releases the GIL, so the
        # checks of a read's chunks run in parallel, as their reads do
        data = await asyncio.to_thread(_read_chunk, self.root, key, committed)
        if data is None:
            return None
        # read-only, checked once: Zarr reads it without the checksum
        return prototype.buffer.from_array_like(data[:-4] if self.read_only else data)

    async def get_partial_values(self, prototype: Any, key_ranges: Iterable[Any]) -> list[Any]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def _get_many(self, requests: Iterable[Any]) -> AsyncGenerator[Any, None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    def _learn(self, key: str, data: bytes) -> bool:
        """Note an array whose codecs end with the CRC-32C (from its metadata)."""
        try:
            meta = json.loads(data)
        except ValueError:
            return False  # (Zarr reports it; a document of the manifest was checked above)
        if not isinstance(meta, dict) or meta.get("node_type") != "array":
            return False
        codecs = meta.get("codecs")
        if not (isinstance(codecs, list) and codecs and codecs[-1] == {"name": "crc32c"}):
            return False
        path = key[: -len(METADATA)].rstrip("/")
        draws = _has_draws(path, meta, self.draw_groups)
        self._checked[path] = meta["chunk_grid"]["configuration"]["chunk_shape"][1] if draws else 0
        return True


def _has_draws(path: str, meta: dict[str, Any], draw_groups: Iterable[str]) -> bool:
    names = tuple(meta.get("dimension_names") or ())
    return path.split("/")[0] in draw_groups and names[:2] == ("chain", "draw")


def _without_checksum(document: bytes) -> bytes:
    """An array's metadata without its last codec, the CRC-32C (checked here)."""
    meta = json.loads(document)
    meta["codecs"] = meta["codecs"][:-1]
    return json.dumps(meta).encode()


def _chunk_of(key: str) -> tuple[str, tuple[int, ...]]:
    """The array path and chunk index of a chunk key of Zarr's default encoding
    (``posterior/x/c/0/1/0``); ``("", ())`` for another key."""
    parts = key.split("/")
    index = []
    while parts and parts[-1].isdigit():
        index.append(int(parts.pop()))
    if not parts or parts[-1] != "c":
        return "", ()
    return "/".join(parts[:-1]), tuple(reversed(index))


def _read(file: Path) -> bytes | None:
    try:
        return file.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StoreError(f"{file} cannot be read: {error.strerror or error}") from error


def _read_chunk(root: Path, key: str, committed: bool) -> np.ndarray | None:
    """The bytes of chunk ``key``, checked: they end with the CRC-32C of the rest
    (``None``: no file, where that is allowed)."""
    file = root / key
    data = _read(file)
    if data is None and not committed:
        return None
    if data is not None:
        chunk = np.frombuffer(data, np.uint8)
        if len(chunk) >= 4 and crc32c.crc32c(chunk[:-4]) == int.from_bytes(data[-4:], "little"):
            return chunk
    problem = "is missing" if data is None else "is damaged (its checksum does not match)"
    if committed:
        raise StoreError(
            f"{file} {problem}: it held committed values, which are lost; the store "
            "cannot restore them (sample the run again)"
        )
    raise StoreError(
        f"{file} {problem}, but it holds no committed draws: resuming the run writes it again"
    )


def _check_document(file: Path, data: bytes | None, accepted: list[int], record: Any) -> None:
    where = f"the commit record {record}" if record else "the store's commit record"
    if data is None:
        raise StoreError(
            f"{file} is missing ({where} lists it): the store's structure is damaged and "
            "cannot be read or resumed safely (sample the run again)"
        )
    if zlib.crc32(data) not in accepted:
        raise StoreError(
            f"{file} is damaged: its checksum differs from the one in {where}; the store "
            "cannot be read or resumed safely (sample the run again)"
        )
