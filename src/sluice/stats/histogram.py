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

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._numerics import blom_scores, chan_merge, row_set_where
from sluice.stats.grid import (
    EMPTY_FLOOR,
    EMPTY_TOP,
    GridSpec,
    bucket_edges,
    bucket_index,
    exponent,
    remap,
)

__all__ = [
    "HistogramSettings",
    "HistogramState",
    "counts_hdi",
    "counts_quantile",
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


def counts_quantile(counts: jax.Array, lo: jax.Array, hi: jax.Array, probs: jax.Array) -> jax.Array:
    """Type-7 quantiles from bucket counts, with a density linear within each bucket.

    Order statistic ``h`` (0-based) is placed where the histogram's CDF reaches
    ``h + 1/2``, and ``quantile(p)`` is order statistic ``p (S - 1)``, as
    ``np.quantile`` (linear interpolation) on the draws. Within a bucket the
    density is taken linear, with the slope given by the density estimates of
    the neighbouring buckets at its edges (clipped so that it stays >= 0) and
    the bucket's count as its integral: the CDF is then quadratic, which
    removes the first-order error of evenly spread values where the density
    changes across a bucket.

    Parameters
    ----------
    counts
        ``(D, G)`` integer counts.
    lo, hi
        ``(D, G)`` bucket edges in the values' units, finite (clipped to the extremes).
    probs
        ``(P,)`` probabilities in ``[0, 1]``, or ``(D, P)``: different ones per row.

    Returns
    -------
    ``(D, P)`` quantiles; NaN where a row is empty.
    """
    dtype = lo.dtype
    n = counts.astype(dtype)
    c = jnp.cumsum(n, axis=1)
    total = c[:, -1:]
    level = (probs if probs.ndim == 2 else probs[None, :]) * (total - 1.0) + 0.5
    b = jnp.minimum(search_rows(c, level), counts.shape[1] - 1)
    # density per bucket and its estimates at the bucket edges (from the neighbours)
    width = hi - lo
    dens = jnp.where(width > 0, n / jnp.where(width > 0, width, 1.0), 0.0)
    pad = jnp.zeros_like(dens[:, :1])
    d_prev = jnp.concatenate([pad, dens[:, :-1]], axis=1)
    d_next = jnp.concatenate([dens[:, 1:], pad], axis=1)
    w_prev = jnp.concatenate([pad, width[:, :-1]], axis=1)
    w_next = jnp.concatenate([width[:, 1:], pad], axis=1)

    def at(a):
        return jnp.take_along_axis(a, b, axis=1)

    n_b, w_b, d_b = at(n), at(width), at(dens)
    wp, wn = at(w_prev), at(w_next)
    f_left = jnp.where(
        wp + w_b > 0, (at(d_prev) * w_b + d_b * wp) / jnp.maximum(wp + w_b, 1e-30), d_b
    )
    f_right = jnp.where(
        wn + w_b > 0, (at(d_next) * w_b + d_b * wn) / jnp.maximum(wn + w_b, 1e-30), d_b
    )
    safe_w = jnp.where(w_b > 0, w_b, 1.0)
    limit = 2.0 * n_b / (safe_w * safe_w)  # steepest slope keeping the density >= 0
    slope = jnp.clip((f_right - f_left) / safe_w, -limit, limit)
    slope = jnp.where(w_b > 0, slope, 0.0)
    start = n_b / safe_w - slope * safe_w / 2.0  # density at the bucket's lower edge
    need = jnp.clip(level - (at(c) - n_b), 0.0, n_b)  # count to cover within the bucket
    # solve start t + slope t^2 / 2 = need for t in [0, w] (stable form, slope may be 0)
    root = jnp.sqrt(jnp.maximum(start * start + 2.0 * slope * need, 0.0))
    t = 2.0 * need / jnp.maximum(start + root, 1e-30)
    t = jnp.where(n_b > 0, jnp.clip(t, 0.0, w_b), 0.0)
    out = at(lo) + t
    return jnp.where(total > 0, out, jnp.nan)


def counts_hdi(
    counts: jax.Array, lo: jax.Array, hi: jax.Array, prob: float, num_candidates: int = 129
) -> jax.Array:
    """ArviZ's HDI (narrowest interval holding ``floor(prob S)`` draws) from counts.

    The draws' order statistics are read from the histogram as in
    :func:`counts_quantile`, and the narrowest window is searched over
    ``num_candidates`` evenly spaced starting positions.

    Returns
    -------
    ``(D, 2)``: lower and upper bounds.
    """
    dtype = lo.dtype
    total = jnp.sum(counts, axis=1).astype(dtype)
    inc = jnp.floor(prob * total)
    span = jnp.maximum(total - 1.0 - inc, 0.0)
    start = jnp.linspace(0.0, 1.0, num_candidates, dtype=dtype)[None, :] * span[:, None]
    # order statistic h -> probability h / (S - 1) for counts_quantile
    denom = jnp.maximum(total - 1.0, 1.0)[:, None]
    q_lo = counts_quantile(counts, lo, hi, start / denom)
    q_hi = counts_quantile(counts, lo, hi, (start + inc[:, None]) / denom)
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


def chain_counts(
    state: HistogramState, pilot: jax.Array, pilot_rows: jax.Array, settings: HistogramSettings
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One chain's grid and per-half counts with its buffered pilot draws binned in.

    ``pilot_rows`` ``(B0,)`` int32 is the half of each pilot draw (``-1``: not seen).

    Returns
    -------
    floor, top, counts
        ``(D,)``, ``(D,)`` and ``(2, D, G)``.
    """
    spec = settings.spec
    d, g = state.counts.shape[1:]
    unset = state.floor == EMPTY_FLOOR  # a chain that saw fewer than B0 draws picks it now
    floor, top = choose_grid(state.pilot_values, pilot_rows >= 0, pilot, settings)
    floor = jnp.where(unset, floor, state.floor)
    top = jnp.where(unset, top, state.top)
    b0 = settings.pilot_draws
    buckets = jax.vmap(lambda u: bucket_index(u, floor, top, spec))(state.pilot_values)  # (B0, D)
    rows = jnp.maximum(pilot_rows, 0)[:, None]
    flat = (rows * d + jnp.arange(d)[None, :]) * g + buckets
    seen = jnp.broadcast_to((pilot_rows >= 0)[:, None], (b0, d)).astype(jnp.int32)
    counts = state.counts.reshape(-1).at[flat.reshape(-1)].add(seen.reshape(-1))
    return floor, top, counts.reshape(state.counts.shape)


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
    lo, hi = value_edges(floor, top, pilot, xmin, xmax, settings.spec)
    k = settings.num_levels
    probs = jnp.asarray(levels(k), pilot.dtype)
    d = pilot.shape[0]
    both = (
        counts_quantile(
            counts.reshape(2 * d, -1), jnp.tile(lo, (2, 1)), jnp.tile(hi, (2, 1)), probs
        ).reshape(2, d, k)
        - pilot[None, :, None]
    )
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
    c = jnp.cumsum(n, axis=1)
    total = c[:, -1:]
    rank = c - n + (n + 1.0) / 2.0
    return blom_scores(rank, total)
