"""A disk that loses every write not followed by fsync: what a power cut would leave.

POSIX makes a file's contents durable by ``fsync`` of the file, and a
directory's entries (new files, renames, removals) by ``fsync`` of the
directory. :class:`Disk` records both, by watching ``os.fsync``: at a file's
fsync, its contents (by inode); at a directory's fsync, its entries (name ->
inode), by the directory's inode (a directory renamed keeps its entries). :meth:`Disk.survivor` rebuilds, under another directory, the tree
that a power cut at the moment of a :meth:`Disk.snapshot` would have left:
entries of directories never synced are gone, files never synced are empty.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["Disk"]


class Disk:
    """Watches ``os.fsync`` under ``root`` (use as a context manager)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.contents: dict[int, bytes] = {}  # inode -> bytes at its last fsync
        # directory inode -> name -> (inode, is a directory)
        self.entries: dict[int, dict[str, tuple[int, bool]]] = {}
        self.snapshots: list[tuple[dict, dict]] = []
        self.syncs = 0
        self._real_fsync = os.fsync

    def _watch(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        parent = str(self.root.parent)
        if not (path == parent or path.startswith(parent + os.sep)):  # the store and beside it
            return
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            entries = {}
            for name in os.listdir(path):
                st = os.lstat(os.path.join(path, name))
                entries[name] = (st.st_ino, stat.S_ISDIR(st.st_mode))
            self.entries[info.st_ino] = entries
        else:
            with open(path, "rb") as f:
                self.contents[info.st_ino] = f.read()
        self.syncs += 1

    def fsync(self, fd: int) -> None:
        self._real_fsync(fd)
        self._watch(fd)

    def snapshot(self) -> int:
        """Remember what is durable now; returns the snapshot's index."""
        self.snapshots.append((dict(self.contents), {d: dict(e) for d, e in self.entries.items()}))
        return len(self.snapshots) - 1

    def survivor(self, index: int, target: Path) -> Path:
        """Rebuild under ``target`` the tree that snapshot ``index`` would leave; returns
        the path of ``root``'s survivor (``target / root.name``)."""
        contents, entries = self.snapshots[index]
        target = Path(target)

        def build(directory: int, out: Path) -> None:
            out.mkdir(parents=True, exist_ok=True)
            for name, (inode, is_dir) in entries.get(directory, {}).items():
                if is_dir:
                    build(inode, out / name)
                else:
                    (out / name).write_bytes(contents.get(inode, b""))

        parent = os.stat(self.root.parent).st_ino
        survivor = target / self.root.name
        if self.root.name in entries.get(parent, {}):
            build(entries[parent][self.root.name][0], survivor)
        return survivor

    def __enter__(self) -> Disk:
        self._patch = contextlib.ExitStack()
        self._patch.enter_context(_patched(os, "fsync", self.fsync))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._patch.close()


@contextlib.contextmanager
def _patched(module: Any, name: str, value: Any):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)
