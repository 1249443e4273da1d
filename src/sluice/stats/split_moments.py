"""Exact split moments: the part of the diagnostics that is sums and extremes.

Per chain and element, with ``y = x - c`` (``c`` the shared pilot): plain
partial sums of ``y``, ``y^2``, ``y^3``, ``y^4`` since the last flush, added
into compensated sums per split half every ``FLUSH`` draws and at the end of
the first half (so float32 sums neither drift nor stall); exact extremes.
*Closing* a chain folds its halves into between-chain summaries: Chan states
of the half means, the sum of the halves' variances, and the sums ArviZ's
``mcse_sd`` needs (:mod:`sluice.stats.readout`). These give the mean, sd,
extrema and split R-hat exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from sluice.stats._numerics import (
    Compensated,
    chan_merge,
    compensated_add,
    compensated_merge,
    compensated_value,
    compensated_zeros,
)

__all__ = [
    "SplitMoments",
    "moments_close",
    "moments_combine",
    "moments_flush",
    "moments_init",
    "moments_update",
]


class SplitMoments(NamedTuple):
    """Exact moments: open per-half sums of one chain, and closed between-chain summaries."""

    partial: tuple  # 4 x (D,): sums of y, y^2, y^3, y^4 since the last flush (open; flushed
    #   at least at the end of the first half, so they always belong to one half)
    half_count: jax.Array  # (2,) int32: draws in each split half (open; set when closing)
    half_sum: Compensated  # (2, D): sum of y per half (open, flushed)
    half_sumsq: Compensated  # (2, D): sum of y^2 per half (open)
    middle: jax.Array  # (D,): y of the middle draw of an odd num_draws (open)
    total_count: jax.Array  # () int32: draws of closed chains
    total_sum: Compensated  # (D,): sum of y over closed chains
    total_sumsq: Compensated  # (D,): sum of y^2 over closed chains
    total_sum3: Compensated  # (D,): sum of y^3 over all draws (flushed directly)
    total_sum4: Compensated  # (D,): sum of y^4 over all draws (flushed directly)
    xmin: jax.Array  # (D,): smallest x (NaN-propagating)
    xmax: jax.Array  # (D,): largest x
    split_count: jax.Array  # () int32: closed split chains
    split_min: jax.Array  # () int32: shortest closed split chain
    split_max: jax.Array  # () int32: longest closed split chain
    half_mean_mean: jax.Array  # (D,): mean of the split chains' means of y
    half_mean_m2: jax.Array  # (D,): their sum of squared deviations (Chan)
    within_sum: jax.Array  # (D,): sum of the split chains' ddof=1 variances
    c2_w: jax.Array  # (D, 5): sums over split chains of w, w^2, a, a^2, w a (w = v + a^2)


def moments_init(d: int, dtype) -> SplitMoments:
    z = compensated_zeros
    i32 = jnp.int32
    return SplitMoments(
        tuple(jnp.zeros((d,), dtype) for _ in range(4)),
        jnp.zeros((2,), i32), z((2, d), dtype), z((2, d), dtype), jnp.zeros((d,), dtype),
        jnp.zeros((), i32), z((d,), dtype), z((d,), dtype), z((d,), dtype), z((d,), dtype),
        jnp.full((d,), jnp.inf, dtype), jnp.full((d,), -jnp.inf, dtype),
        jnp.zeros((), i32), jnp.full((), 2**31 - 1, i32), jnp.zeros((), i32),
        jnp.zeros((d,), dtype), jnp.zeros((d,), dtype), jnp.zeros((d,), dtype),
        jnp.zeros((d, 5), dtype),
    )  # fmt: skip


def moments_flush(mo: SplitMoments, seg: jax.Array) -> SplitMoments:
    """Add the partial sums (all of half ``seg``) into the compensated sums."""
    p1, p2, p3, p4 = mo.partial

    def row(acc: Compensated, value) -> Compensated:
        hi = jax.lax.dynamic_index_in_dim(acc.hi, seg, keepdims=False)
        lo = jax.lax.dynamic_index_in_dim(acc.lo, seg, keepdims=False)
        new = compensated_add(Compensated(hi, lo), value)
        return Compensated(
            jax.lax.dynamic_update_index_in_dim(acc.hi, new.hi, seg, 0),
            jax.lax.dynamic_update_index_in_dim(acc.lo, new.lo, seg, 0),
        )

    return mo._replace(
        partial=tuple(jnp.zeros_like(a) for a in mo.partial),
        half_sum=row(mo.half_sum, p1),
        half_sumsq=row(mo.half_sumsq, p2),
        total_sum3=compensated_add(mo.total_sum3, p3),
        total_sum4=compensated_add(mo.total_sum4, p4),
    )


def moments_update(mo: SplitMoments, x, y, in_split) -> SplitMoments:
    """Per-draw part (no ``cond``, no indexing): plain partial sums and extremes."""
    yw = y * in_split.astype(y.dtype)
    y2w = yw * y
    p1, p2, p3, p4 = mo.partial
    return mo._replace(
        partial=(p1 + yw, p2 + y2w, p3 + y2w * y, p4 + y2w * y2w),
        xmin=jnp.minimum(mo.xmin, x),
        xmax=jnp.maximum(mo.xmax, x),
    )


def moments_close(mo: SplitMoments, has_middle: jax.Array) -> SplitMoments:
    """Fold one chain's (flushed) half sums into the between-chain summaries."""
    mid = jnp.where(has_middle, mo.middle, 0.0)
    mo = mo._replace(
        total_sum3=compensated_add(mo.total_sum3, mid**3),
        total_sum4=compensated_add(mo.total_sum4, mid**4),
    )
    dtype = mo.middle.dtype
    n_split, mean_mean, m2 = mo.split_count, mo.half_mean_mean, mo.half_mean_m2
    within, c2w = mo.within_sum, mo.c2_w
    split_min, split_max = mo.split_min, mo.split_max
    for j in range(2):
        n = mo.half_count[j]
        nf = jnp.maximum(n, 1).astype(dtype)
        s = Compensated(mo.half_sum.hi[j], mo.half_sum.lo[j])
        ss = Compensated(mo.half_sumsq.hi[j], mo.half_sumsq.lo[j])
        a = compensated_value(s) / nf
        m2j = jnp.maximum((ss.hi - s.hi * a) + (ss.lo - s.lo * a), 0.0)
        has = n > 0
        within = within + jnp.where(has, m2j / (nf - 1.0), 0.0)
        w = m2j / nf + a * a
        c2w = c2w + jnp.where(has, jnp.stack([w, w * w, a, a * a, w * a], axis=1), 0.0)
        one = has.astype(jnp.int32)
        n_split, mean_mean, m2 = chan_merge(n_split, mean_mean, m2, one, a, jnp.zeros_like(a))
        split_min = jnp.where(has, jnp.minimum(split_min, n), split_min)
        split_max = jnp.where(has, jnp.maximum(split_max, n), split_max)
    both_sum = compensated_merge(
        Compensated(mo.half_sum.hi[0], mo.half_sum.lo[0]),
        Compensated(mo.half_sum.hi[1], mo.half_sum.lo[1]),
    )
    both_sumsq = compensated_merge(
        Compensated(mo.half_sumsq.hi[0], mo.half_sumsq.lo[0]),
        Compensated(mo.half_sumsq.hi[1], mo.half_sumsq.lo[1]),
    )
    both_sum = compensated_add(both_sum, mid)
    both_sumsq = compensated_add(both_sumsq, mid * mid)
    z = jnp.zeros_like
    return mo._replace(
        half_count=z(mo.half_count),
        half_sum=Compensated(z(mo.half_sum.hi), z(mo.half_sum.lo)),
        half_sumsq=Compensated(z(mo.half_sumsq.hi), z(mo.half_sumsq.lo)),
        middle=z(mo.middle),
        total_count=mo.total_count
        + jnp.sum(mo.half_count, dtype=jnp.int32)
        + has_middle.astype(jnp.int32),
        total_sum=compensated_merge(mo.total_sum, both_sum),
        total_sumsq=compensated_merge(mo.total_sumsq, both_sumsq),
        split_count=n_split,
        split_min=split_min,
        split_max=split_max,
        half_mean_mean=mean_mean,
        half_mean_m2=m2,
        within_sum=within,
        c2_w=c2w,
    )


def moments_combine(a: SplitMoments, b: SplitMoments) -> SplitMoments:
    n, mean, m2 = chan_merge(
        a.split_count,
        a.half_mean_mean,
        a.half_mean_m2,
        b.split_count,
        b.half_mean_mean,
        b.half_mean_m2,
    )
    return a._replace(
        total_count=a.total_count + b.total_count,
        total_sum=compensated_merge(a.total_sum, b.total_sum),
        total_sumsq=compensated_merge(a.total_sumsq, b.total_sumsq),
        total_sum3=compensated_merge(a.total_sum3, b.total_sum3),
        total_sum4=compensated_merge(a.total_sum4, b.total_sum4),
        xmin=jnp.minimum(a.xmin, b.xmin),
        xmax=jnp.maximum(a.xmax, b.xmax),
        split_count=n,
        split_min=jnp.minimum(a.split_min, b.split_min),
        split_max=jnp.maximum(a.split_max, b.split_max),
        half_mean_mean=mean,
        half_mean_m2=m2,
        within_sum=a.within_sum + b.within_sum,
        c2_w=a.c2_w + b.c2_w,
    )
