"""Threefry-2x32, the generator of ``jax.random``, unrolled: keys and random numbers.

On CPU, JAX lowers Threefry to a rolled loop that costs more than a small
model's gradient; these unrolled versions fuse and give ``jax.random``'s bits
exactly, for the run's keys (:func:`fold_in`, :func:`split`, :func:`host_fold_in`)
and a transition's random numbers (:func:`bits`, :func:`uniform`, :func:`normal`).
Reference: Salmon, Moraes, Dror & Shaw (2011), "Parallel random numbers".
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "bits",
    "fold_in",
    "host_fold_in",
    "key_words",
    "normal",
    "split",
    "threefry2x32",
    "uniform",
]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(k0, k1, c0, c1, xp: Any = jnp):
    """Threefry-2x32, 20 rounds (Salmon et al. 2011), the block function of ``jax.random``.

    ``xp=numpy`` computes it on the host, for uint32 arrays (no compile). Traced, it
    is written in ``lax`` operations on broadcast operands, which trace faster than
    ``jnp``'s operators (those check and promote types at each of ~125 operations)."""
    if xp is not jnp:
        return _threefry_rounds(k0, k1, c0, c1, xp.uint32, _OPERATORS)
    k0, k1, c0, c1 = jnp.broadcast_arrays(*(jnp.asarray(v, jnp.uint32) for v in (k0, k1, c0, c1)))
    shape = c0.shape

    def u32(v: int) -> Any:
        return jax.lax.full(shape, v, jnp.uint32)

    return _threefry_rounds(k0, k1, c0, c1, u32, _LAX_OPS)


# add, xor, or, shift left, logical shift right: on host arrays and traced
_OPERATORS = (operator.add, operator.xor, operator.or_, operator.lshift, operator.rshift)
_LAX_OPS = (jax.lax.add, jax.lax.bitwise_xor, jax.lax.bitwise_or, jax.lax.shift_left,
            jax.lax.shift_right_logical)  # fmt: skip


def _threefry_rounds(k0, k1, c0, c1, u32: Callable[[int], Any], ops: tuple):
    add, xor, or_, shl, shr = ops
    ks = (k0, k1, xor(xor(k0, k1), u32(0x1BD11BDA)))
    x0, x1 = add(c0, ks[0]), add(c1, ks[1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = add(x0, x1)
            x1 = or_(shl(x1, u32(r)), shr(x1, u32(32 - r)))
            x1 = xor(x1, x0)
        x0 = add(x0, ks[(i + 1) % 3])
        x1 = add(add(x1, ks[(i + 2) % 3]), u32(i + 1))
    return x0, x1


def host_fold_in(key: np.ndarray, data: int) -> np.ndarray:
    """:func:`fold_in` with NumPy on the host (for ``0 <= data < 2**32``): no compile.

    Examples
    --------
    >>> import jax, numpy as np
    >>> key = np.asarray(jax.random.PRNGKey(4))
    >>> bool(np.array_equal(host_fold_in(key, 9), jax.random.fold_in(key, 9)))
    True
    """
    key = np.asarray(key, np.uint32).reshape(2, 1)
    zero, counter = np.zeros(1, np.uint32), np.full(1, data, np.uint32)
    x0, x1 = threefry2x32(key[0], key[1], zero, counter, xp=np)
    return np.concatenate([x0, x1])


def key_words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The two uint32 words of a Threefry key (raw ``(2,)`` uint32, or a typed key)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if jax.random.key_impl(key) != "threefry2x32":
            # Another generator: derive a Threefry key from it.
            key = jax.random.bits(key, (2,), jnp.uint32)
        else:
            key = jax.random.key_data(key)
    if key.shape != (2,):
        raise ValueError(f"expected a Threefry key of shape (2,), got shape {key.shape}")
    key = key.astype(jnp.uint32)
    return key[0], key[1]


def fold_in(key: jax.Array, data: Any) -> jax.Array:
    """``jax.random.fold_in`` for a raw ``(2,)`` uint32 Threefry key, bit for bit, unrolled.

    Examples
    --------
    >>> import jax, numpy as np
    >>> key = jax.random.PRNGKey(0)
    >>> bool(np.array_equal(fold_in(key, 7), jax.random.fold_in(key, 7)))
    True
    """
    k0, k1 = key_words(key)
    x0, x1 = threefry2x32(k0, k1, jnp.uint32(0), jnp.asarray(data).astype(jnp.uint32))
    return jnp.stack([x0, x1])


def split(key: jax.Array) -> jax.Array:
    """``jax.random.split(key)`` (two keys) for raw Threefry keys, bit for bit, unrolled.

    Examples
    --------
    >>> import jax, numpy as np
    >>> key = jax.random.PRNGKey(3)
    >>> bool(np.array_equal(split(key), jax.random.split(key)))
    True
    """
    k0, k1 = key_words(key)
    zero, counter = jnp.zeros(2, jnp.uint32), jnp.arange(2, dtype=jnp.uint32)
    x0, x1 = threefry2x32(k0, k1, zero, counter)
    return jnp.stack([x0, x1], axis=-1)


def bits(words, stream: Any, counter: Any) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 of the counter blocks ``(stream, counter)`` under the key ``words``."""
    counter = jnp.asarray(counter).astype(jnp.uint32)
    stream = jnp.broadcast_to(jnp.asarray(stream).astype(jnp.uint32), counter.shape)
    return threefry2x32(words[0], words[1], stream, counter)


def to_unit(bits: jax.Array) -> jax.Array:
    """A uniform float32 in [0, 1) from the top 23 bits of a uint32 (as ``jax.random``)."""
    mantissa = (bits >> jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0


def uniform(words, stream: int, counter: Any) -> jax.Array:
    return to_unit(bits(words, stream, counter)[0])


def normal(words, stream: int, dim: int) -> jax.Array:
    """``dim`` standard normals, ``sqrt(2) erfinv(2u - 1)`` (as ``jax.random.normal``)."""
    b0, b1 = bits(words, stream, jnp.arange((dim + 1) // 2, dtype=jnp.uint32))
    u = to_unit(jnp.concatenate([b0, b1])[:dim])
    v = jnp.maximum(2.0 * u - 1.0, jnp.nextafter(jnp.float32(-1.0), jnp.float32(0.0)))
    return jnp.sqrt(jnp.float32(2.0)) * jax.lax.erf_inv(v)
