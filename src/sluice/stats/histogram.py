"""Per-element histograms on the pilot grid, and what is read from them.

The accumulator here is one part of the diagnostics state (see
:mod:`sluice.stats.convergence`): per chain, one histogram per split half on
the grid of :mod:`sluice.stats.grid`. Its floor is chosen from the chain's
first ``pilot_draws`` draws: ``E = floor(log2 max |x - c|) - 3 + floor_offset``,
so the grid's linear part (resolution ``2^(E - m)``) spans about an eighth
of the pilot draws' largest deviation and the top (``2^(E + H)``, ``H =
binades``) lies ``2^(H - 3)`` times above it. Those first draws are buffered
and binned when the chain is closed, so nothing is lost.

*Closing* a chain (done by ``merge`` and ``finalize``) adds its halves into the
pooled histogram and records each half's quantiles at ``K`` fixed levels in a
Chan (count, mean, co-moment) summary across split chains. The pooled
histogram gives pooled quantiles, an HDI, the rank-normalised scores of ArviZ
(ties at bucket level) and folded scores; the summary of chain quantiles
gives the between-chain variation needed by rank R-hat and the tail ESS,
through a first-order (delta-method) expansion: a chain's mean of any smooth
function ``g`` of the draws is ``integral g(q_j(p)) dp``, and its deviation
from the pooled one is ``integral g'(q(p)) (q_j(p) - q(p)) dp`` to first
order, a linear function of the chain's quantiles. The expansion is exact
for Gaussian marginals and accurate while chains roughly agree (measured
error of rank R-hat below 5e-3 when R-hat <= 1.02); it errs (by about 0.02 at
R-hat 1.1) when chains disagree strongly, where R-hat is far above any
threshold anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._numerics import blom_scores, chan_merge, cumsum_rows, row_set_where
from sluice.stats.grid import (
    EMPTY_FLOOR,
    EMPTY_TOP,
    GridSpec,
    bucket_edges,
    bucket_edges_at,
    bucket_index,
    exponent,
    remap,
)

__all__ = [
    "HistogramSettings",
    "HistogramState",
    "counts_hdi",
    "counts_quantile",
    "value_edges",
    "value_edges_at",
]


class HistogramSettings(NamedTuple):
    """Static settings of the histogram part."""

    spec: GridSpec  # grid: buckets per binade and binades above the floor
    pilot_draws: int  # draws buffered to choose the floor (B0)
    floor_offset: int  # floor = exponent of the largest pilot |x - c|, - 3, + floor_offset
    num_levels: int  # K: chain quantile levels (k + 1/2) / K summarised across chains


class HistogramState(NamedTuple):
    """One chain's (open) or several chains' (closed) histograms of every element."""

    floor: jax.Array  # (D,) int32: grid floor exponent E (EMPTY_FLOOR until chosen)
    top: jax.Array  # (D,) int32: grid top exponent T (overflow at |x - c| >= 2^T)
    pilot_values: jax.Array  # (B0, D) working dtype: the pilot draws' x - c (binned when closed)
    counts: jax.Array  # (2, D, G) int32: open: one row per split half; closed: row 0 pooled
    quantile_count: jax.Array  # () int32: split chains summarised below
    quantile_mean: jax.Array  # (D, K) working dtype: mean over split chains of their quantiles - c
    quantile_comoment: jax.Array  # (D, K(K+1)/2) working dtype: packed co-moment of those


def _triu(k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(k)


def unpack_comoment(packed: jax.Array, k: int) -> jax.Array:
    """``(D, K(K+1)/2)`` packed upper triangle -> ``(D, K, K)`` symmetric."""
    iu, ju = _triu(k)
    full = jnp.zeros((*packed.shape[:-1], k, k), packed.dtype)
    full = full.at[..., iu, ju].set(packed)
    return full.at[..., ju, iu].set(packed)


def levels(k: int) -> np.ndarray:
    """The chain quantile levels ``(j + 1/2) / K``."""
    return (np.arange(k) + 0.5) / k


def histogram_init(d: int, dtype, settings: HistogramSettings) -> HistogramState:
    g, k = settings.spec.size, settings.num_levels
    return HistogramState(
        floor=jnp.full((d,), EMPTY_FLOOR, jnp.int32),
        top=jnp.full((d,), EMPTY_TOP, jnp.int32),
        pilot_values=jnp.zeros((settings.pilot_draws, d), dtype),
        counts=jnp.zeros((2, d, g), jnp.int32),
        quantile_count=jnp.zeros((), jnp.int32),
        quantile_mean=jnp.zeros((d, k), dtype),
        quantile_comoment=jnp.zeros((d, k * (k + 1) // 2), dtype),
    )


def choose_grid(
    pilot_values: jax.Array, seen: jax.Array, pilot: jax.Array, settings: HistogramSettings
) -> tuple[jax.Array, jax.Array]:
    """Floor and top of a chain's grid from its buffered pilot draws.

    Parameters
    ----------
    pilot_values
        ``(B0, D)``: the first draws' ``x - c``.
    seen
        ``(B0,)`` bool: which of them exist.
    pilot
        ``(D,)``: the pilot ``c`` (fallback scale ``|c| 2^-20`` when every pilot
        draw equals it).
    """
    ok = seen[:, None] & (pilot_values != 0) & jnp.isfinite(pilot_values)
    exps = jnp.where(ok, exponent(jnp.where(ok, pilot_values, 1.0)), EMPTY_FLOOR)
    top_exp = jnp.max(exps, axis=0)
    from_c = jnp.where(pilot != 0, exponent(jnp.where(pilot != 0, pilot, 1.0)) - 20, -100)
    floor = jnp.where(jnp.any(ok, axis=0), top_exp - 3 + settings.floor_offset, from_c)
    floor = floor.astype(jnp.int32)
    return floor, floor + settings.spec.binades


def histogram_update(
    state: HistogramState,
    u: jax.Array,
    index: jax.Array,
    row: jax.Array,
    settings: HistogramSettings,
) -> HistogramState:
    """Add draw ``index`` (``u = x - c``) to half ``row`` of one chain's histograms.

    The first ``pilot_draws`` draws are only counted later: :func:`histogram_buffer`
    keeps them and :func:`histogram_fix_grid` (called once, after them) fixes the
    grid. No ``cond`` and no buffer write here: this runs every draw.
    """
    b0 = settings.pilot_draws
    g = settings.spec.size
    d = u.shape[0]
    bucket = bucket_index(u, state.floor, state.top, settings.spec)
    flat = (row * d + jnp.arange(d)) * g + bucket
    add = (index >= b0).astype(jnp.int32)
    counts = state.counts.reshape(-1).at[flat].add(add, mode="promise_in_bounds")
    return state._replace(counts=counts.reshape(state.counts.shape))


def histogram_buffer(state: HistogramState, u: jax.Array, index: jax.Array) -> HistogramState:
    """Keep pilot draw ``index`` (``< pilot_draws``)."""
    return state._replace(pilot_values=row_set_where(state.pilot_values, index, u, True))


def histogram_fix_grid(
    state: HistogramState, pilot: jax.Array, settings: HistogramSettings
) -> HistogramState:
    """Fix the grid from the (complete) pilot block."""
    seen = jnp.ones((settings.pilot_draws,), bool)
    floor, top = choose_grid(state.pilot_values, seen, pilot, settings)
    return state._replace(floor=floor, top=top)


def search_rows(sorted_rows: jax.Array, values: jax.Array) -> jax.Array:
    """Row-wise ``searchsorted(side="right")``: for each ``values[d, p]`` the number of
    entries of ``sorted_rows[d]`` that are ``<= values[d, p]`` (int32)."""
    search = jax.vmap(lambda row, v: jnp.searchsorted(row, v, side="right"))
    return search(sorted_rows, values).astype(jnp.int32)


def interp_rows(x: jax.Array, xp: jax.Array, fp: jax.Array) -> jax.Array:
    """Row-wise ``jnp.interp`` (``xp`` non-decreasing rows, ``x`` of shape ``(D, P)``)."""
    j = jnp.clip(search_rows(xp, x) - 1, 0, xp.shape[1] - 2)
    x0 = jnp.take_along_axis(xp, j, axis=1)
    x1 = jnp.take_along_axis(xp, j + 1, axis=1)
    f0 = jnp.take_along_axis(fp, j, axis=1)
    f1 = jnp.take_along_axis(fp, j + 1, axis=1)
    w = jnp.where(x1 > x0, (x - x0) / jnp.where(x1 > x0, x1 - x0, 1.0), 0.0)
    out = f0 + jnp.clip(w, 0.0, 1.0) * (f1 - f0)
    return jnp.where(x < xp[:, :1], fp[:, :1], jnp.where(x > xp[:, -1:], fp[:, -1:], out))


Edges = tuple[jax.Array, jax.Array] | Callable[[jax.Array], tuple[jax.Array, jax.Array]]


def _edges_fn(edges: Edges) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """``edges`` as a function of bucket indices ``(D, ...)`` (a table pair is gathered)."""
    if callable(edges):
        return edges
    lo, hi = edges

    def at(index: jax.Array) -> tuple[jax.Array, jax.Array]:
        flat = index.reshape(index.shape[0], -1)
        pick = [jnp.take_along_axis(a, flat, axis=1).reshape(index.shape) for a in (lo, hi)]
        return pick[0], pick[1]

    return at


SEARCH_BLOCK = 32  # buckets per block of the two-level search (a binade at m = 5)


def _prefix_sums(a: jax.Array) -> jax.Array:
    """Inclusive prefix sums along the short last axis, in ``log2`` shifted adds (exact for
    integers; ``jnp.cumsum`` over a small trailing axis is far slower on CPU)."""
    pad = [(0, 0)] * (a.ndim - 1)
    shift = 1
    while shift < a.shape[-1]:
        a = a + jnp.pad(a[..., :-shift], [*pad, (shift, 0)])
        shift *= 2
    return a


def _search_counts(counts: jax.Array, level: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For each ``level[d, p]``: the first bucket ``b`` whose cumulative count exceeds it
    (``searchsorted(cumsum(counts[d]), level, side="right")``, at most ``G - 1``) and that
    cumulative count, both ``(D, P)`` int32.

    Few levels are searched in two steps, on block totals and then inside one
    block, so that only one reduction touches every bucket; many levels use one
    cumulative sum of all buckets.
    """
    d, g = counts.shape
    k = SEARCH_BLOCK
    if level.shape[1] * k >= g:  # many levels: one full cumulative sum
        c = cumsum_rows(counts)
        b = jnp.minimum(search_rows(c.astype(level.dtype), level), g - 1)
        return b, jnp.take_along_axis(c, b, axis=1)
    nb = -(-g // k)
    padded = jnp.pad(counts, ((0, 0), (0, nb * k - g)))  # zero counts past the end
    cb = cumsum_rows(jnp.sum(padded.reshape(d, nb, k), axis=2))  # (D, nb) cumulative blocks
    blk = jnp.minimum(search_rows(cb.astype(level.dtype), level), nb - 1)
    before = jnp.where(blk > 0, jnp.take_along_axis(cb, jnp.maximum(blk - 1, 0), axis=1), 0)
    index = blk[..., None] * k + jnp.arange(k)  # (D, P, k) buckets of the block
    inner = jnp.take_along_axis(padded, index.reshape(d, -1), axis=1).reshape(index.shape)
    c_inner = before[..., None] + _prefix_sums(inner)
    j = jnp.sum(c_inner.astype(level.dtype) <= level[..., None], axis=-1, dtype=jnp.int32)
    b = jnp.minimum(blk * k + j, g - 1)
    # past the block only when the level is beyond every count: c_b is then the total
    c_b = jnp.take_along_axis(c_inner, jnp.minimum(j, k - 1)[..., None], axis=-1)[..., 0]
    return b, c_b


def counts_quantile(counts: jax.Array, edges: Edges, probs: jax.Array) -> jax.Array:
    """Type-7 quantiles from bucket counts, with a density linear within each bucket.

    Order statistic ``h`` (0-based) is placed where the histogram's CDF reaches
    ``h + 1/2``, and ``quantile(p)`` is order statistic ``p (S - 1)``, as
    ``np.quantile`` (linear interpolation) on the draws. Within a bucket the
    density is taken linear, with the slope given by the density estimates of
    the neighbouring buckets at its edges (clipped so that it stays >= 0) and
    the bucket's count as its integral: the CDF is then quadratic, which
    removes the first-order error of evenly spread values where the density
    changes across a bucket. Only the cumulative counts touch every bucket;
    edges are evaluated at the buckets found (and their neighbours).

    Parameters
    ----------
    counts
        ``(D, G)`` integer counts.
    edges
        The bucket edges in the values' units, finite (clipped to the extremes):
        a pair ``(lo, hi)`` of ``(D, G)`` arrays, or a function of bucket indices
        ``(D, ...)`` returning them at those buckets (:func:`value_edges_at`).
    probs
        ``(P,)`` probabilities in ``[0, 1]``, or ``(D, P)``: different ones per row.

    Returns
    -------
    ``(D, P)`` quantiles; NaN where a row is empty.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> counts = jnp.asarray([[0, 2, 2, 0]])
    >>> lo = jnp.asarray([[0.0, 1.0, 2.0, 3.0]])
    >>> q = counts_quantile(counts, (lo, lo + 1.0), jnp.asarray([0.0, 0.5, 1.0]))
    >>> [round(float(v), 3) for v in q[0]]
    [1.25, 2.0, 2.75]
    """
    edges_at = _edges_fn(edges)
    g = counts.shape[1]
    counts = counts.astype(jnp.int32)
    total = jnp.sum(counts, axis=1, keepdims=True)
    dtype = probs.dtype  # the values' dtype (callers pass probabilities in it)
    level = (probs if probs.ndim == 2 else probs[None, :]) * (total.astype(dtype) - 1.0) + 0.5
    b, c_b = _search_counts(counts, level)

    # the bucket and its two neighbours (separate (D, P) arrays: small trailing axes are slow)
    def near(index, exists):
        lo, hi = edges_at(index)
        n = jnp.take_along_axis(counts, index, axis=1).astype(dtype)
        n, w = jnp.where(exists, n, 0.0), jnp.where(exists, hi - lo, 0.0)
        return lo, n, w, jnp.where(w > 0, n / jnp.where(w > 0, w, 1.0), 0.0)

    lo_b, n_b, w_b, d_b = near(b, True)
    _, _, wp, d_prev = near(jnp.maximum(b - 1, 0), b > 0)
    _, _, wn, d_next = near(jnp.minimum(b + 1, g - 1), b < g - 1)
    f_left = jnp.where(wp + w_b > 0, (d_prev * w_b + d_b * wp) / jnp.maximum(wp + w_b, 1e-30), d_b)
    f_right = jnp.where(wn + w_b > 0, (d_next * w_b + d_b * wn) / jnp.maximum(wn + w_b, 1e-30), d_b)
    safe_w = jnp.where(w_b > 0, w_b, 1.0)
    limit = 2.0 * n_b / (safe_w * safe_w)  # steepest slope keeping the density >= 0
    slope = jnp.clip((f_right - f_left) / safe_w, -limit, limit)
    slope = jnp.where(w_b > 0, slope, 0.0)
    start = n_b / safe_w - slope * safe_w / 2.0  # density at the bucket's lower edge
    below = c_b.astype(dtype) - n_b  # draws before the bucket
    need = jnp.clip(level - below, 0.0, n_b)  # count to cover within the bucket
    # solve start t + slope t^2 / 2 = need for t in [0, w] (stable form, slope may be 0)
    root = jnp.sqrt(jnp.maximum(start * start + 2.0 * slope * need, 0.0))
    t = 2.0 * need / jnp.maximum(start + root, 1e-30)
    t = jnp.where(n_b > 0, jnp.clip(t, 0.0, w_b), 0.0)
    out = lo_b + t
    return jnp.where(total > 0, out, jnp.nan)


def counts_hdi(
    counts: jax.Array, edges: Edges, prob: float, num_candidates: int = 129
) -> jax.Array:
    """ArviZ's HDI (narrowest interval holding ``floor(prob S)`` draws) from counts.

    The draws' order statistics are read from the histogram as in
    :func:`counts_quantile`, and the narrowest window is searched over
    ``num_candidates`` evenly spaced starting positions.

    Returns
    -------
    ``(D, 2)``: lower and upper bounds.
    """
    edges = _edges_fn(edges)
    probe = jax.ShapeDtypeStruct((counts.shape[0], 1), jnp.int32)
    dtype = jax.eval_shape(edges, probe)[0].dtype
    total = jnp.sum(counts, axis=1).astype(dtype)
    inc = jnp.floor(prob * total)
    span = jnp.maximum(total - 1.0 - inc, 0.0)
    start = jnp.linspace(0.0, 1.0, num_candidates, dtype=dtype)[None, :] * span[:, None]
    # order statistic h -> probability h / (S - 1) for counts_quantile
    denom = jnp.maximum(total - 1.0, 1.0)[:, None]
    q_lo = counts_quantile(counts, edges, start / denom)
    q_hi = counts_quantile(counts, edges, (start + inc[:, None]) / denom)
    width = q_hi - q_lo
    best = jnp.argmin(jnp.where(jnp.isnan(width), jnp.inf, width), axis=1)
    a = jnp.take_along_axis(q_lo, best[:, None], axis=1)[:, 0]
    b = jnp.take_along_axis(q_hi, best[:, None], axis=1)[:, 0]
    return jnp.stack([a, b], axis=1)


def value_edges(
    floor: jax.Array,
    top: jax.Array,
    pilot: jax.Array,
    xmin: jax.Array,
    xmax: jax.Array,
    spec: GridSpec,
) -> tuple[jax.Array, jax.Array]:
    """Bucket edges in the draws' units, clipped to the exact extremes: ``(D, G)`` each."""
    glo, ghi = bucket_edges(floor, top, spec, pilot.dtype)
    lo = jnp.clip(pilot[:, None] + glo, xmin[:, None], xmax[:, None])
    hi = jnp.clip(pilot[:, None] + ghi, xmin[:, None], xmax[:, None])
    return lo, hi


def value_edges_at(
    floor: jax.Array,
    top: jax.Array,
    pilot: jax.Array,
    xmin: jax.Array,
    xmax: jax.Array,
    spec: GridSpec,
) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """:func:`value_edges` as a function of bucket indices ``(D, ...)``, evaluated
    only there (for :func:`counts_quantile`, which needs a few buckets per row)."""

    def at(index: jax.Array) -> tuple[jax.Array, jax.Array]:
        ex = (slice(None),) + (None,) * (index.ndim - 1)
        glo, ghi = bucket_edges_at(floor, top, index, spec, pilot.dtype)
        lo = jnp.clip(pilot[ex] + glo, xmin[ex], xmax[ex])
        hi = jnp.clip(pilot[ex] + ghi, xmin[ex], xmax[ex])
        return lo, hi

    return at


def chain_counts(
    state: HistogramState,
    pilot: jax.Array,
    pilot_rows: jax.Array,
    settings: HistogramSettings,
    pooled: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One chain's grid and per-half counts with its buffered pilot draws binned in.

    ``pilot_rows`` ``(B0,)`` int32 is the half of each pilot draw (``-1``: not seen).
    With ``pooled`` the two halves come summed, ``(1, D, G)`` (one new array, where
    the per-half counts would be copied first).

    Returns
    -------
    floor, top, counts
        ``(D,)``, ``(D,)`` and ``(2, D, G)`` (``(1, D, G)`` when pooled).
    """
    spec = settings.spec
    d, g = state.counts.shape[1:]
    unset = state.floor == EMPTY_FLOOR  # a chain that saw fewer than B0 draws picks it now
    floor, top = choose_grid(state.pilot_values, pilot_rows >= 0, pilot, settings)
    floor = jnp.where(unset, floor, state.floor)
    top = jnp.where(unset, top, state.top)
    b0 = settings.pilot_draws
    buckets = jax.vmap(lambda u: bucket_index(u, floor, top, spec))(state.pilot_values)  # (B0, D)
    counts = (state.counts[0] + state.counts[1])[None] if pooled else state.counts
    rows = 0 if pooled else jnp.maximum(pilot_rows, 0)[:, None]
    flat = (rows * d + jnp.arange(d)[None, :]) * g + buckets
    seen = jnp.broadcast_to((pilot_rows >= 0)[:, None], (b0, d)).astype(jnp.int32)
    counts = counts.reshape(-1).at[flat.reshape(-1)].add(seen.reshape(-1))
    return floor, top, counts.reshape(-1, d, g)


def histogram_close(
    state: HistogramState,
    pilot: jax.Array,
    xmin: jax.Array,
    xmax: jax.Array,
    settings: HistogramSettings,
    grid: tuple[jax.Array, jax.Array, jax.Array],
) -> HistogramState:
    """Fold one chain's open histograms into the closed form (pooled + quantile summary).

    ``grid``: ``(floor, top, counts)`` from :func:`chain_counts` (pilot draws binned).
    """
    floor, top, counts = grid
    # per-half quantiles at the K levels (both halves in one call), then Chan-merged
    edges = value_edges_at(floor, top, pilot, xmin, xmax, settings.spec)
    k = settings.num_levels
    probs = jnp.asarray(levels(k), pilot.dtype)
    both = jnp.stack([counts_quantile(counts[j], edges, probs) for j in range(2)])
    both = both - pilot[None, :, None]
    qn, qm, qc = state.quantile_count, state.quantile_mean, state.quantile_comoment
    iu, ju = _triu(k)
    for row in range(2):
        has = jnp.sum(counts[row, 0]) > 0
        q = jnp.where(has, both[row], 0.0)
        single = jnp.zeros((*q.shape, k), q.dtype)
        n, mean, com = chan_merge(
            qn, qm, unpack_comoment(qc, k), has.astype(jnp.int32), q, single, outer=True
        )
        qn, qm, qc = n, mean, com[..., iu, ju]
    pooled = jnp.stack([counts[0] + counts[1], jnp.zeros_like(counts[1])])
    return HistogramState(
        floor=floor,
        top=top,
        pilot_values=jnp.zeros_like(state.pilot_values),
        counts=pooled,
        quantile_count=qn,
        quantile_mean=qm,
        quantile_comoment=qc,
    )


def histogram_combine(
    a: HistogramState, b: HistogramState, settings: HistogramSettings
) -> HistogramState:
    """Sum of two closed histogram states, re-binned on their common (coarser) grid."""
    spec = settings.spec
    floor = jnp.maximum(a.floor, b.floor)
    top = jnp.minimum(a.top, b.top)
    ca = remap(a.counts[0], a.floor, a.top, floor, top, spec)
    cb = remap(b.counts[0], b.floor, b.top, floor, top, spec)
    k = settings.num_levels
    iu, ju = _triu(k)
    n, mean, com = chan_merge(
        a.quantile_count,
        a.quantile_mean,
        unpack_comoment(a.quantile_comoment, k),
        b.quantile_count,
        b.quantile_mean,
        unpack_comoment(b.quantile_comoment, k),
        outer=True,
    )
    return HistogramState(
        floor=floor,
        top=top,
        pilot_values=a.pilot_values,
        counts=jnp.stack([ca + cb, jnp.zeros_like(ca)]),
        quantile_count=n,
        quantile_mean=mean,
        quantile_comoment=com[..., iu, ju],
    )


def bucket_scores(counts: jax.Array, dtype) -> jax.Array:
    """ArviZ's rank-normalised score of each bucket (ties within a bucket): ``(D, G)``."""
    n = counts.astype(dtype)
    c = cumsum_rows(n)
    total = c[:, -1:]
    rank = c - n + (n + 1.0) / 2.0
    return blom_scores(rank, total)
