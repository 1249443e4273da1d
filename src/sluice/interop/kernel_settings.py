"""What the kernels from other libraries share: their settings (code, arrays or plain
values) kept hashable for the compile cache and as JSON for a store's record, and the
shapes of their sample statistics.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["describe", "digest", "setting_key", "stats_shapes"]


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
    return value if isinstance(value, int | float | bool | str) or value is None else repr(value)


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


def stats_shapes(kernel: Any, dtype: Any, dim: int = 2) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes of ``kernel.step``'s statistics, from a traced step, with its warmup's first
    parameters, on a stand-in ``(dim,)`` Gaussian (the statistics are scalars whatever
    the dimension)."""
    logdensity = lambda z: -0.5 * jnp.sum(z * z)  # noqa: E731

    def one(z: jax.Array) -> dict[str, jax.Array]:
        key = jnp.zeros((2,), jnp.uint32)
        warmup = kernel.warmup()
        state = kernel.init(z, logdensity, key)
        warmup_state, _ = warmup.init(key, state, logdensity)
        return kernel.step(key, state, logdensity, warmup.params(warmup_state))[1]

    return jax.eval_shape(one, jax.ShapeDtypeStruct((dim,), dtype))
