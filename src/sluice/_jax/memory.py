"""Give the heap that an XLA compile leaves behind back to the operating system, and
say how much memory is free.

glibc keeps the hundreds of megabytes a compile frees in arenas the main thread
does not reuse (docs/architecture.md); :func:`release` calls ``malloc_trim(0)``
after each compile (elsewhere than glibc it does nothing). :func:`free_bytes` is
the memory free on a set of devices, where it can be known.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any

__all__ = ["free_bytes", "release"]


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release() -> bool:
    """Return freed heap memory to the operating system; ``True`` if it could try."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return trim is not None


def free_bytes(devices: list[Any]) -> int | None:
    """Bytes free on ``devices`` together: an accelerator's limit less its use, as JAX
    reports them; for CPU devices (which share the host's memory) the host's available
    memory (Linux ``MemAvailable``, within the process's cgroup limit); ``None`` where
    it cannot be known."""
    if devices and devices[0].platform == "cpu":
        return _host_available()
    total = 0
    for device in devices:
        try:
            stats = device.memory_stats() or {}
        except Exception:  # some backends do not implement memory_stats
            return None
        if "bytes_limit" not in stats:
            return None
        total += max(0, stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return total if devices else None


def _host_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    try:  # a container's limit (cgroup v2), when it is the tighter one
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            current = int(f.read().strip())
        if limit != "max":
            available = min(available, max(0, int(limit) - current))
    except (OSError, ValueError):
        pass
    return available
