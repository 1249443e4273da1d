"""A mergeable, scale-free histogram grid around a shared pilot value.

Histograms of different chains, devices and hosts can only be added when their
bucket edges agree. The grid here is fixed by the pilot ``c`` (the example
draw, identical everywhere) and by one integer per element, the *floor*
exponent ``E``; buckets for ``u = x - c`` are those of a floating-point number
format whose smallest normal binade is ``[2^E, 2^(E+1))``:

* ``|u| < 2^E`` (the "subnormal" range): ``2^m`` equal buckets of width
  ``2^(E-m)``;
* ``2^(E+b) <= |u| < 2^(E+b+1)`` for ``b = 0 .. H-1``: ``2^m`` equal buckets
  per binade, so the relative width is between ``2^-m`` and ``2^-(m+1)``;
* ``|u| >= 2^T`` (``T <= E + H``, the *top*): one overflow bucket per sign
  (exact extremes are kept by the moment statistics);

mirrored for ``u < 0``. Bucket indices come from the bits of ``|u|`` (no
search). The resolution is absolute near the pilot and relative away from it,
so one grid covers both a posterior whose scale is 10^-6 and one whose scale
is 10^6, provided the floor sits near the scale of the draws: each chain picks
its floor from its first draws (see :mod:`sluice.stats.histogram`).

Grids with different floors are *aligned*: every bucket of the grid with the
lower floor lies inside exactly one bucket of the grid with the higher floor
(powers of two), so raising the floor merges buckets exactly. Merging two
histograms therefore takes the higher floor and the lower top and re-bins
both into that grid: an exact, associative operation.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "EMPTY_FLOOR",
    "EMPTY_TOP",
    "GridSpec",
    "bucket_edges",
    "bucket_edges_at",
    "bucket_index",
    "exponent",
    "remap",
]

# Floors and tops of a histogram that has seen nothing: neutral for max / min.
EMPTY_FLOOR = -(2**30)
EMPTY_TOP = 2**30


class GridSpec(NamedTuple):
    """Static grid settings: ``mantissa_bits`` (m) and ``binades`` (H) (hashable).

    Parameters
    ----------
    mantissa_bits
        Buckets per binade are ``2**mantissa_bits``.
    binades
        Binades above the floor kept before the overflow bucket.
    """

    mantissa_bits: int
    binades: int

    @classmethod
    def checked(cls, mantissa_bits: int, binades: int) -> GridSpec:
        if (
            isinstance(mantissa_bits, bool)
            or not isinstance(mantissa_bits, int)
            or not 1 <= mantissa_bits <= 8
        ):
            raise ValueError(f"mantissa_bits must be an integer in [1, 8], got {mantissa_bits!r}")
        if isinstance(binades, bool) or not isinstance(binades, int) or not 1 <= binades <= 24:
            raise ValueError(f"binades must be an integer in [1, 24], got {binades!r}")
        return cls(mantissa_bits, binades)

    @property
    def per_binade(self) -> int:
        return 2**self.mantissa_bits

    @property
    def side(self) -> int:
        """Bucket ids per sign, the overflow bucket last."""
        return (self.binades + 1) * self.per_binade + 1

    @property
    def size(self) -> int:
        """G: buckets of one histogram."""
        return 2 * self.side


def _float_params(dtype) -> tuple[int, int, int, jnp.dtype]:
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        return 23, 127, 0xFF, jnp.dtype(jnp.int32)
    if dtype == jnp.float64:
        return 52, 1023, 0x7FF, jnp.dtype(jnp.int64)
    raise TypeError(f"histogram grids need float32 or float64 values, got {dtype}")


def exponent(u: jax.Array) -> jax.Array:
    """``floor(log2 |u|)`` as int32 for finite nonzero ``u`` (subnormals included)."""
    mant_bits, bias, _, itype = _float_params(u.dtype)
    bits = jax.lax.bitcast_convert_type(jnp.abs(u), itype)
    field = (bits >> mant_bits).astype(jnp.int32)
    mant = bits & ((1 << mant_bits) - 1)
    nbits = 8 * jnp.dtype(itype).itemsize
    lead = (nbits - jax.lax.clz(mant)).astype(jnp.int32)  # bit length of a subnormal mantissa
    sub = lead - bias - mant_bits
    return jnp.where(field > 0, field - bias, sub)


def bucket_index(u: jax.Array, floor: jax.Array, top: jax.Array, spec: GridSpec) -> jax.Array:
    """Global bucket index (int32, ordered by value) of each ``u`` on its element's grid.

    Parameters
    ----------
    u
        ``(D,)`` values minus the pilot, float32 or float64.
    floor, top
        ``(D,)`` int32 exponents ``E`` and ``T`` of each element's grid.
    spec
        The grid settings.
    """
    mant_bits, bias, field_mask, itype = _float_params(u.dtype)
    m = spec.mantissa_bits
    a = jnp.abs(u)
    bits = jax.lax.bitcast_convert_type(a, itype)
    field = ((bits >> mant_bits) & field_mask).astype(jnp.int32)
    eb = jnp.maximum(field, 1) - bias  # binade exponent (subnormals: the lowest one)
    # linear ("subnormal") part: floor(|u| * 2^(m - E)); the power of two is built from bits
    # (exact scaling; its exponent is clamped to the normal range, extreme floors only)
    scale_field = jnp.clip(m - floor + bias, 1, 2 * bias).astype(itype) << mant_bits
    scale = jax.lax.bitcast_convert_type(scale_field, u.dtype)
    lin = jnp.minimum((a * scale).astype(jnp.int32), spec.per_binade - 1)
    mant_top = ((bits >> (mant_bits - m)) & (spec.per_binade - 1)).astype(jnp.int32)
    logid = spec.per_binade * (1 + eb - floor) + mant_top
    overflow = (eb >= top) | (eb - floor >= spec.binades) | (field == field_mask)
    pos = jnp.where(eb < floor, lin, jnp.where(overflow, spec.side - 1, logid))
    return jnp.where(u < 0, spec.side - 1 - pos, spec.side + pos)


def bucket_edges(
    floor: jax.Array, top: jax.Array, spec: GridSpec, dtype
) -> tuple[jax.Array, jax.Array]:
    """``(lo, hi)``, each ``(D, G)``: the bucket edges in units of ``u = x - c``.

    Buckets of binades at or above the top (unused) collapse onto ``2^T``; the
    overflow buckets extend to infinity (clip them by the exact extremes).
    """
    _m, per = spec.mantissa_bits, spec.per_binade
    ids = np.arange(spec.side - 1)
    is_lin = ids < per
    binade = np.where(is_lin, 0, ids // per - 1)
    j = ids % per
    # positive side, in units of 2^E (exact small floats), then scaled by 2^E
    lo_rel = np.where(is_lin, ids / per, 2.0**binade * (1 + j / per))
    hi_rel = np.where(is_lin, (ids + 1) / per, 2.0**binade * (1 + (j + 1) / per))
    e = floor[:, None].astype(jnp.int32)
    t = top[:, None].astype(jnp.int32)
    scale_exp = jnp.clip(e, -1100, 1100)
    lo = jnp.ldexp(jnp.asarray(lo_rel, dtype)[None, :], scale_exp)
    hi = jnp.ldexp(jnp.asarray(hi_rel, dtype)[None, :], scale_exp)
    cap = jnp.ldexp(jnp.ones((), dtype), jnp.clip(t, -1100, 1100))
    above = (jnp.asarray(binade)[None, :] + e >= t) & ~jnp.asarray(is_lin)[None, :]
    lo = jnp.where(above, cap, jnp.minimum(lo, cap))
    hi = jnp.where(above, cap, jnp.minimum(hi, cap))
    inf = jnp.full((lo.shape[0], 1), jnp.inf, dtype)
    pos_lo = jnp.concatenate([lo, cap], axis=1)
    pos_hi = jnp.concatenate([hi, inf], axis=1)
    glo = jnp.concatenate([-pos_hi[:, ::-1], pos_lo], axis=1)
    ghi = jnp.concatenate([-pos_lo[:, ::-1], pos_hi], axis=1)
    return glo, ghi


def bucket_edges_at(
    floor: jax.Array, top: jax.Array, index: jax.Array, spec: GridSpec, dtype
) -> tuple[jax.Array, jax.Array]:
    """The edges of :func:`bucket_edges` at given buckets only (cheap for few buckets).

    Parameters
    ----------
    floor, top
        ``(D,)`` int32 exponents of each element's grid.
    index
        ``(D, ...)`` int32 global bucket indices in ``[0, G)``.
    spec, dtype
        The grid settings and the values' dtype.

    Returns
    -------
    ``(lo, hi)``, each shaped as ``index``: the edges in units of ``u = x - c``.
    """
    per, side = spec.per_binade, spec.side
    ids = np.arange(side)  # positive-side position; the last one is the overflow bucket
    last = ids == side - 1
    is_lin = (ids < per) | last
    binade = np.where(ids < per, 0, ids // per - 1)
    j = ids % per
    lo_rel = np.where(ids < per, ids / per, 2.0**binade * (1 + j / per))
    hi_rel = np.where(ids < per, (ids + 1) / per, 2.0**binade * (1 + (j + 1) / per))
    neg = index < side
    k = jnp.where(neg, side - 1 - index, index - side)
    expand = (slice(None),) + (None,) * (index.ndim - 1)
    e = floor.astype(jnp.int32)[expand]
    t = top.astype(jnp.int32)[expand]
    scale_exp = jnp.clip(e, -1100, 1100)
    lo = jnp.ldexp(jnp.asarray(lo_rel, dtype)[k], scale_exp)
    hi = jnp.ldexp(jnp.asarray(hi_rel, dtype)[k], scale_exp)
    cap = jnp.ldexp(jnp.ones((), dtype), jnp.clip(t, -1100, 1100))
    above = (jnp.asarray(binade, jnp.int32)[k] + e >= t) & ~jnp.asarray(is_lin)[k]
    lo = jnp.where(above, cap, jnp.minimum(lo, cap))
    hi = jnp.where(above, cap, jnp.minimum(hi, cap))
    is_last = jnp.asarray(last)[k]
    lo = jnp.where(is_last, cap, lo)
    hi = jnp.where(is_last, jnp.inf, hi)
    return jnp.where(neg, -hi, lo), jnp.where(neg, -lo, hi)


def _bit_length(v: jax.Array) -> jax.Array:
    return 32 - jax.lax.clz(v.astype(jnp.int32))


def remap(
    counts: jax.Array,
    old_floor: jax.Array,
    old_top: jax.Array,
    new_floor: jax.Array,
    new_top: jax.Array,
    spec: GridSpec,
) -> jax.Array:
    """Re-bin ``counts`` ``(D, G)`` from grids ``(old_floor, old_top)`` into coarser ones.

    Requires ``new_floor >= old_floor`` and ``new_top <= old_top`` elementwise
    (both are what merging produces); buckets then map exactly.
    """
    m, per, side = spec.mantissa_bits, spec.per_binade, spec.side
    ids = jnp.arange(side - 1, dtype=jnp.int32)
    is_lin = ids < per
    binade = jnp.where(is_lin, 0, ids // per - 1)
    # value of the bucket's lower edge in units of 2^(E_old - m), as an integer
    v = jnp.where(is_lin, ids, (per + ids % per) << binade)
    delta = jnp.clip(new_floor - old_floor, 0, 31)[:, None]
    vn = v[None, :] >> delta
    bl = _bit_length(vn)
    nb = jnp.maximum(bl - 1 - m, 0)  # new binade (when not linear)
    new_id = jnp.where(vn < per, vn, per * (1 + nb) + ((vn >> nb) - per))
    new_exp = new_floor[:, None] + nb
    overflow = (vn >= per) & ((new_exp >= new_top[:, None]) | (nb >= spec.binades))
    new_id = jnp.where(overflow, side - 1, new_id)
    # old overflow stays overflow; an untouched empty grid maps to itself
    pos_map = jnp.concatenate([new_id, jnp.full((new_id.shape[0], 1), side - 1, jnp.int32)], axis=1)
    full = jnp.concatenate([side - 1 - pos_map[:, ::-1], side + pos_map], axis=1)  # (D, G)
    rows = jnp.broadcast_to(jnp.arange(counts.shape[0])[:, None], counts.shape)
    return jnp.zeros_like(counts).at[rows, full].add(counts)
