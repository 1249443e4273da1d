"""Give the heap that an XLA compile leaves behind back to the operating system, and
say how much memory is free.

glibc keeps the hundreds of megabytes a compile frees in arenas the main thread
does not reuse (docs/architecture.md); :func:`release` calls ``malloc_trim(0)``
after each compile (elsewhere than glibc it does nothing). :func:`free_bytes` is
the memory free on a set of devices, where it can be known.
"""

from __future__ import annotations

import contextlib
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
    """Bytes free on ``devices`` together: for CPU devices (which share the host's
    memory) Linux's ``MemAvailable``, within a cgroup v2 limit; elsewhere each device's
    limit less its use, as JAX reports them; ``None`` where it cannot be known."""
    if devices and devices[0].platform == "cpu":
        try:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
            free = int(info["MemAvailable"].split()[0]) * 1024
        except (OSError, KeyError, ValueError):
            return None
        with contextlib.suppress(OSError, ValueError):  # a container's limit
            with open("/sys/fs/cgroup/memory.max") as a, open("/sys/fs/cgroup/memory.current") as b:
                limit, used = a.read().strip(), int(b.read())
            free = free if limit == "max" else min(free, max(0, int(limit) - used))
        return free
    try:
        stats = [d.memory_stats() or {} for d in devices]
    except Exception:  # some backends do not implement memory_stats
        return None
    if not stats or any("bytes_limit" not in m for m in stats):
        return None
    return sum(max(0, m["bytes_limit"] - m.get("bytes_in_use", 0)) for m in stats)
