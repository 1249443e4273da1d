"""Writes that survive a crash or a power cut: atomic replacement and ``fsync``.

A file is durable once it and the directory entries that lead to it are synced;
:func:`atomic_write` makes a file appear whole or not at all. The store
(:mod:`sluice.io.store`) builds its commit protocol from these.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` (creations, renames) durable."""
    fsync_file(path, getattr(os, "O_DIRECTORY", 0))


def atomic_write(target: Path, payload: bytes | Callable[[Any], None]) -> None:
    """Write ``payload`` (bytes, or a function that writes to a file) to ``target``
    atomically and durably: a temporary file of a unique name, flushed and synced,
    renamed over ``target``, then the directory synced. On failure the temporary
    file is removed and ``target`` is untouched. The temporary file is created new
    (never opened through a symbolic link or over an existing file)."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(payload):
                payload(f)
            else:
                f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def fsync_file(path: Path, flags: int = 0) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_chunks(root: Path, array: Any, chains: tuple[int, int], draws: tuple[int, int]) -> None:
    """Sync the Zarr chunk files of ``array[chains, draws]`` and the directories that
    hold them (up to the array's own), so that they survive a power cut."""
    encode = array.metadata.chunk_key_encoding.encode_chunk_key
    c, d = array.chunks[0], array.chunks[1]
    rest = (0,) * (len(array.shape) - 2)
    base = root / array.path
    directories = set()
    for ci in range(chains[0] // c, -(-chains[1] // c)):
        for di in range(draws[0] // d, -(-draws[1] // d)):
            file = base / encode((ci, di, *rest))
            if file.exists():
                fsync_file(file)
            parent = file.parent
            while not parent.exists():
                parent = parent.parent
            while parent != base.parent and parent not in directories:
                directories.add(parent)
                parent = parent.parent
    for directory in sorted(directories, key=lambda p: -len(p.parts)):
        fsync_directory(directory)


def sync_tree(root: Path) -> None:
    """Sync every file and directory under ``root`` (and ``root`` in its parent)."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(Path(directory) / name)
        fsync_directory(Path(directory))
    fsync_directory(root.parent)
