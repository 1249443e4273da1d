"""How a kernel from another library keeps its settings (code, arrays or plain
values): hashable for the compile cache, and JSON for a store's record.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np

__all__ = ["describe", "digest", "setting_key"]


def digest(a: Any) -> str:
    """SHA-256 of an array's dtype, shape and bytes."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def describe(value: Any) -> Any:
    """A JSON-able description of a setting."""
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
    if isinstance(value, np.generic | np.ndarray | jax.Array):
        return np.asarray(value).tolist()
    if isinstance(value, int | float | bool | str) or value is None:
        return value
    return repr(value)


def setting_key(value: Any) -> Any:
    """A hashable stand-in for a setting: equal settings give equal keys."""
    if isinstance(value, np.generic | np.ndarray | jax.Array):
        return ("array", digest(np.asarray(value)))
    if callable(value):
        return ("callable", id(value))
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return value
