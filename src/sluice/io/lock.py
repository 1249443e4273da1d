"""One writer per store: an exclusive ``flock`` that a crash releases.

The lock file sits beside the store (``run.zarr.lock``), so that replacing
a store (``overwrite=True``) cannot remove the lock another writer holds.
The holder writes who it is (host, process id, command, time) into the file
after locking; a second writer is refused with that description. The kernel
releases a ``flock`` when its holder dies, whatever the cause (SIGKILL
included), so a crashed run never leaves a store locked. In a multi-process
run, process 0 holds the lock for the whole run.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from sluice.io.checkpoint import StoreError

__all__ = ["StoreLock", "StoreLockedError"]

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None


class StoreLockedError(StoreError):
    """Another live process writes this store."""


class StoreLock:
    """The exclusive lock of the store at ``store`` (a directory path)."""

    def __init__(self, store: str | os.PathLike) -> None:
        store = Path(store)
        self.path = store.with_name(store.name + ".lock")
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StoreLockedError` naming its holder."""
        if self._fd is not None or fcntl is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._describe(fd)
            os.close(fd)
            store = self.path.with_name(self.path.name[: -len(".lock")])
            raise StoreLockedError(
                f"{store} is being written by another process ({holder}); wait for it to "
                f"finish, or stop it, before writing this store"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": " ".join(sys.argv)[:200],
            "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (also released when the process dies)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    @staticmethod
    def _describe(fd: int) -> str:
        try:
            info: dict[str, Any] = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        except (OSError, ValueError):
            info = {}
        if not info:
            return "holder unknown"
        return (
            f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}: "
            f"{info.get('command')}"
        )
