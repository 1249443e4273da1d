"""One writer per store: an exclusive ``flock`` that a crash releases.

The lock file sits beside the store's real path (``run.zarr.lock``), so that
replacing a store cannot remove it and every name that reaches the store reaches
one lock. It must be a regular file with one name, opened without following a
link: sluice truncates it. The holder writes who it is into it; a second writer is
refused naming the holder. ``docs/reliability.md`` lists these guarantees.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
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
    """The exclusive lock of the store at ``store`` (a directory path, or a symbolic
    link to one: the lock is the real store's)."""

    def __init__(self, store: str | os.PathLike) -> None:
        self.store = Path(store)
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        """The lock file: beside the store's real path, named after it."""
        real = Path(os.path.realpath(self.store))
        return real.with_name(real.name + ".lock")

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StoreLockedError` naming its holder."""
        if self._fd is not None or fcntl is None:
            return
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._describe(fd)
            os.close(fd)
            store = path.with_name(path.name[: -len(".lock")])
            alias = "" if Path(self.store).absolute() == store else f" (reached as {self.store})"
            raise StoreLockedError(
                f"{store}{alias} is being written by another process ({holder}); wait for it "
                f"to finish, or stop it, before writing this store"
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


def _open_lock_file(path: Path) -> int:
    """Open (or create) the lock file: never through a symbolic link, and only a regular
    file with no other name (a hard link would let the truncation reach another file)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o644)  # O_NONBLOCK: a planted FIFO
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise StoreError(
                f"the lock file {path} is a symbolic link; sluice never writes through one. "
                "Remove it (it is not sluice's) and run again"
            ) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else "a hard link"
        raise StoreError(
            f"the lock file {path} is {what}; sluice writes only a lock file of its own. "
            "Remove it (it is not sluice's) and run again"
        )
    os.set_blocking(fd, True)
    return fd
