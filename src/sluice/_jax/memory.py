"""Give the heap that an XLA compile leaves behind back to the operating system.

glibc keeps the hundreds of megabytes a compile frees in arenas the main thread
does not reuse (docs/architecture.md); :func:`release` calls ``malloc_trim(0)``
after each compile (elsewhere than glibc it does nothing).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

__all__ = ["release"]


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
