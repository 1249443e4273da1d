"""Convergence diagnostics of ArviZ 0.23, computed while sampling.

One fused statistic keeps, per chain and per scalar element of a draw:

* split moments (exact): counts, compensated sums of ``y = x - c`` and ``y^2``
  per split half, pooled sums of ``y^3`` and ``y^4``, exact extremes;
* histograms per split half on the pilot grid (:mod:`sluice.stats.histogram`);
* lag states (:mod:`sluice.stats.autocorrelation`).

The split follows ArviZ: with ``num_draws`` ``N`` per chain, draws
``0 .. N//2 - 1`` form the first half and ``N - N//2 .. N - 1`` the second;
for odd ``N`` the middle draw belongs to neither (it still counts in the
mean, sd, quantiles and histograms, as ArviZ's pooled statistics do).

``merge`` *closes* the chains it is given (folds each split half into
between-chain summaries: Chan states of the half means, summed centred
autocovariances, pooled histograms, and a Chan state of the halves'
quantiles) and adds the closed parts; ``finalize`` closes and reads:

==================  ===================================================  =========
output              definition (ArviZ 0.23)                               accuracy
==================  ===================================================  =========
``mean``, ``sd``    pooled, ``ddof=1``                                    exact
``r_hat_split``     ``az.rhat(method="split")``                           exact
``ess_mean``        ``az.ess(method="mean")``                             exact if Geyer stops within ``max_lag``
``mcse_mean``       ``az.mcse(method="mean")``                            as ``ess_mean``
``r_hat``           ``az.rhat()`` (rank-normalised, folded)               ~1e-3 (grid + first order)
``ess_bulk``        ``az.ess(method="bulk")``                             few % (<10% on NUTS, N >= 1000)
``ess_tail``        ``az.ess(method="tail")``                             10-35% on NUTS, N >= 1000 (rough below)
``mcse_sd``         ``az.mcse(method="sd")``                              few % (N >= 1000)
``quantiles``       ``np.quantile`` (linear)                              far below MCSE
``hdi``             ``az.hdi`` (narrowest interval)                       within MCSE
==================  ===================================================  =========

Per-chain values come from ``finalize`` of one chain's state (R-hat is NaN
for one chain, as in ArviZ), pooled values from a merged state.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._batching import uniform_cond
from sluice.stats._layout import flatten, num_elements, own_copy, unflatten, working_dtype
from sluice.stats._numerics import (
    Compensated,
    blom_scores,
    chan_merge,
    compensated_add,
    compensated_merge,
    compensated_value,
    compensated_zeros,
    cumsum_rows,
    rhat_from_summaries,
)
from sluice.stats.autocorrelation import (
    BULK,
    FLUSH,
    REFERENCE_LEVELS,
    TAIL_HI,
    TAIL_LO,
    EssTarget,
    LagSettings,
    LagState,
    Y,
    bulk_proxy,
    direct,
    ess_from_lags,
    exact_mean_acov,
    exact_proxy_acov,
    lag_close,
    lag_combine,
    lag_due,
    lag_init,
    lag_slow_path,
    lag_update,
    proxy,
    set_reference,
    squared_deviation,
    tail_proxy,
)
from sluice.stats.base import Statistic
from sluice.stats.grid import GridSpec
from sluice.stats.histogram import (
    HistogramSettings,
    HistogramState,
    bucket_scores,
    chain_counts,
    counts_hdi,
    counts_quantile,
    histogram_buffer,
    histogram_close,
    histogram_combine,
    histogram_fix_grid,
    histogram_init,
    histogram_update,
    interp_rows,
    levels,
    unpack_comoment,
    value_edges,
    value_edges_at,
)

PyTree = Any

__all__ = [
    "DiagnosticsSettings",
    "diagnostics",
    "ess",
    "hdi",
    "mcse",
    "quantiles",
    "rhat",
    "summary_statistics",
]


class DiagnosticsSettings(NamedTuple):
    """Static settings of the fused diagnostics statistic (built by the factories)."""

    num_draws: int | None  # draws per chain (None: no split, single half)
    histogram: HistogramSettings | None  # None: no quantiles, rank R-hat, bulk/tail ESS
    lags: LagSettings | None  # None: no ESS / MCSE
    probs: tuple[float, ...]  # quantile levels reported
    hdi_prob: float | None  # HDI mass reported (None: no HDI)
    max_elements: int | None  # histograms and lags for at most this many elements per quantity


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


class DiagnosticsState(NamedTuple):
    pilot: PyTree  # the example draw: structure, and the shared shift c
    count: jax.Array  # () int32: draws of the open chain (0 in merged states)
    num_chains: jax.Array  # () int32: chains closed into the summaries
    consistent: jax.Array  # () bool: False once states with different pilots were merged
    moments: SplitMoments
    histogram: HistogramState | None
    lags: LagState | None


def _moments_init(d: int, dtype) -> SplitMoments:
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


def _split_position(index: jax.Array, num_draws: int | None):
    """(half, position in half, in a half) of draw ``index`` (0-based)."""
    if num_draws is None:
        return jnp.zeros((), jnp.int32), index, jnp.ones((), bool)
    half = num_draws // 2
    second = num_draws - half
    seg = (index >= second).astype(jnp.int32)
    pos = index - jnp.where(seg == 1, second, 0)
    in_split = ~((num_draws % 2 == 1) & (index == half))
    return seg, pos, in_split


def heavy_elements(example: PyTree, max_elements: int | None) -> np.ndarray | None:
    """Flat indices of the elements that get histograms and lags (``None``: all of them).

    Each named quantity contributes its first ``max_elements`` elements (C order).
    """
    if max_elements is None:
        return None
    index, offset, capped = [], 0, False
    for leaf in jax.tree.leaves(example):
        size = int(np.prod(np.shape(leaf), dtype=np.int64))
        keep = min(size, max_elements)
        capped |= keep < size
        index.append(offset + np.arange(keep))
        offset += size
    if not capped:
        return None
    return np.concatenate(index) if index else np.zeros((0,), np.int64)


def _flush(mo: SplitMoments, seg: jax.Array) -> SplitMoments:
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


def _moments_update(mo: SplitMoments, x, y, in_split) -> SplitMoments:
    """Per-draw part (no ``cond``, no indexing): plain partial sums and extremes."""
    yw = y * in_split.astype(y.dtype)
    y2w = yw * y
    p1, p2, p3, p4 = mo.partial
    return mo._replace(
        partial=(p1 + yw, p2 + y2w, p3 + y2w * y, p4 + y2w * y2w),
        xmin=jnp.minimum(mo.xmin, x),
        xmax=jnp.maximum(mo.xmax, x),
    )


def _half_counts(count: jax.Array, num_draws: int | None) -> jax.Array:
    """``(2,)`` int32: draws of a chain that saw ``count`` in each split half."""
    if num_draws is None:
        return jnp.stack([count, jnp.zeros_like(count)])
    half = num_draws // 2
    second = num_draws - half
    return jnp.stack([jnp.minimum(count, half), jnp.maximum(count - second, 0)]).astype(jnp.int32)


def _moments_close(mo: SplitMoments, has_middle: jax.Array) -> SplitMoments:
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


def _moments_combine(a: SplitMoments, b: SplitMoments) -> SplitMoments:
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


def _pilot_rows(count: jax.Array, settings: DiagnosticsSettings) -> jax.Array:
    """Half (histogram row) of each pilot draw, -1 for draws not seen."""
    b0 = settings.histogram.pilot_draws
    idx = jnp.arange(b0, dtype=jnp.int32)
    seg, _, _ = _split_position(idx, settings.num_draws)
    return jnp.where(idx < count, seg, -1)


def _reference_quantiles(
    hist: HistogramState,
    pilot: jax.Array,
    count: jax.Array,
    xmin,
    xmax,
    settings: DiagnosticsSettings,
) -> jax.Array:
    """This chain's quantiles at REFERENCE_LEVELS from its histograms so far: ``(D, 9)``."""
    hs = settings.histogram
    floor, top, counts = chain_counts(hist, pilot, _pilot_rows(count, settings), hs, pooled=True)
    edges = value_edges_at(floor, top, pilot, xmin, xmax, hs.spec)
    probs = jnp.asarray(REFERENCE_LEVELS, pilot.dtype)
    return counts_quantile(counts[0], edges, probs)


def _proxy_variance(grid, lags, pilot, xmin, xmax, settings: DiagnosticsSettings) -> tuple:
    """Per proxy feature, ``(2, D)``: each half's per-draw variance, read from its histogram.

    The proxies are functions of the draw and the half's reference knots;
    evaluated at bucket midpoints, weighted by the half's counts (``grid`` from
    :func:`~sluice.stats.histogram.chain_counts`).
    """
    hs = settings.histogram
    floor, top, counts = grid
    lo, hi = value_edges(floor, top, pilot, xmin, xmax, hs.spec)
    mid = 0.5 * (lo + hi).T  # (G, D)
    out = ([], [], [])
    for j in range(2):
        knots = lags.reference[j][:, None, :]  # (9, 1, D)
        slopes = lags.slopes[j][:, None, :]
        w = counts[j].T.astype(mid.dtype)  # (G, D)
        n = jnp.maximum(jnp.sum(w, axis=0), 1.0)
        values = (
            bulk_proxy(mid, knots, slopes),
            (mid <= knots[1]).astype(mid.dtype),
            (mid > knots[7]).astype(mid.dtype),
        )
        for k, v in enumerate(values):
            mean = jnp.sum(w * v, axis=0) / n
            out[k].append(jnp.maximum(jnp.sum(w * v * v, axis=0) / n - mean * mean, 0.0))
    return tuple(jnp.stack(v) for v in out)


def _close(state: DiagnosticsState, settings: DiagnosticsSettings) -> DiagnosticsState:
    """Fold the open chain (if any) into the between-chain summaries."""

    def close(state: DiagnosticsState) -> DiagnosticsState:
        dtype = state.moments.middle.dtype
        pilot = flatten(state.pilot, dtype)
        n = settings.num_draws
        has_middle = jnp.asarray(False)
        if n is not None and n % 2 == 1:
            has_middle = state.count > n // 2
        last_seg, _, _ = _split_position(state.count - 1, n)
        half_count = _half_counts(state.count, n)
        flushed = _flush(state.moments, last_seg)._replace(half_count=half_count)
        half_sum = jnp.stack(
            [
                compensated_value(Compensated(flushed.half_sum.hi[j], flushed.half_sum.lo[j]))
                for j in range(2)
            ]
        )  # (2, D): exact sums of y of each half
        moments = _moments_close(flushed, has_middle)
        heavy = heavy_elements(state.pilot, settings.max_elements)
        xmin, xmax, ph = state.moments.xmin, state.moments.xmax, pilot
        if heavy is not None:
            xmin, xmax, ph = xmin[heavy], xmax[heavy], pilot[heavy]
            half_sum = half_sum[:, heavy]
        hist, lags = state.histogram, state.lags
        proxy_var: tuple = ()
        if hist is not None:
            rows = _pilot_rows(state.count, settings)
            grid = chain_counts(hist, ph, rows, settings.histogram)
            if lags is not None and settings.lags.proxies:
                proxy_var = _proxy_variance(grid, lags, ph, xmin, xmax, settings)
            hist = histogram_close(hist, ph, xmin, xmax, settings.histogram, grid)
        if lags is not None:
            lags = lag_close(lags, half_count, half_sum, proxy_var, state.count, settings.lags)
        return DiagnosticsState(
            state.pilot, jnp.zeros_like(state.count), state.num_chains + 1, state.consistent,
            moments, hist, lags,
        )  # fmt: skip

    return jax.lax.cond(state.count > 0, close, lambda s: s, state)


def _combine(
    a: DiagnosticsState, b: DiagnosticsState, settings: DiagnosticsSettings
) -> DiagnosticsState:
    # Sums, histograms and lags are relative to the pilot: states of different pilots
    # (examples that were not the same on every chain) cannot be combined: poison them.
    a_empty, b_empty = a.num_chains == 0, b.num_chains == 0
    same = jnp.all(jnp.stack([jnp.all(u == v) for u, v in zip(
        jax.tree.leaves(a.pilot), jax.tree.leaves(b.pilot), strict=True)]))  # fmt: skip
    consistent = a.consistent & b.consistent & (same | a_empty | b_empty)
    pilot = jax.tree.map(lambda u, v: jnp.where(a_empty, v, u), a.pilot, b.pilot)
    hist = None
    if a.histogram is not None:
        hist = histogram_combine(a.histogram, b.histogram, settings.histogram)
    lags = lag_combine(a.lags, b.lags) if a.lags is not None else None
    return DiagnosticsState(
        pilot,
        jnp.zeros_like(a.count),
        a.num_chains + b.num_chains,
        consistent,
        _moments_combine(a.moments, b.moments),
        hist,
        lags,
    )


def _events(index, seg, pos, in_split, settings: DiagnosticsSettings) -> dict[str, jax.Array]:
    """The rare things draw ``index`` triggers (each a bool)."""
    after = index + 1
    n = settings.num_draws
    half = n // 2 if n is not None else -1
    events = {"flush": (after % FLUSH == 0) | (after == half)}  # partial sums stay in one half
    if n is not None and n % 2 == 1:
        events["middle"] = index == half
    if settings.histogram is not None:
        events["pilot"] = index < settings.histogram.pilot_draws
        events["grid"] = after == settings.histogram.pilot_draws
    ls = settings.lags
    if ls is not None:
        events["lags"] = lag_due(index, seg, pos, in_split, ls)
        if ls.proxies:
            events["reference0"] = after == ls.reference_draw
            events["reference1"] = after == n - half
    return events


def _slow_path(
    state: DiagnosticsState, y_all, y, index, seg, pos, in_split, events, settings
) -> DiagnosticsState:
    """The rare work of :func:`_events` (nested conds, or selects on single rows)."""
    dtype = state.moments.middle.dtype
    moments = jax.lax.cond(events["flush"], lambda m: _flush(m, seg), lambda m: m, state.moments)
    if "middle" in events:
        moments = moments._replace(middle=jnp.where(events["middle"], y_all, moments.middle))
    hist, lags = state.histogram, state.lags
    heavy = heavy_elements(state.pilot, settings.max_elements)
    pilot = flatten(state.pilot, dtype)
    xmin, xmax = moments.xmin, moments.xmax
    if heavy is not None:
        pilot, xmin, xmax = pilot[heavy], xmin[heavy], xmax[heavy]
    if hist is not None:
        hs = settings.histogram
        hist = jax.lax.cond(
            events["pilot"], lambda h: histogram_buffer(h, y, index), lambda h: h, hist
        )
        hist = jax.lax.cond(
            events["grid"], lambda h: histogram_fix_grid(h, pilot, hs), lambda h: h, hist
        )
    if lags is not None:
        if settings.lags.proxies:
            row = events["reference1"].astype(jnp.int32)

            def fix(h, lg):
                q = _reference_quantiles(h, pilot, index + 1, xmin, xmax, settings).T  # (9, D)
                return set_reference(lg, row, q)

            due = events["reference0"] | events["reference1"]
            lags = jax.lax.cond(due, fix, lambda h, lg: lg, hist, lags)
        lags = lag_slow_path(lags, y, index, seg, pos, in_split, settings.lags)
    return state._replace(moments=moments, histogram=hist, lags=lags)


@functools.lru_cache(maxsize=64)
def _make_core(settings: DiagnosticsSettings) -> tuple:
    """``(init, update, merge, finalize_flat)`` for ``settings``; the same function
    objects for equal settings, so ``jax.jit`` caches their compiles across factories."""

    def init(example: PyTree) -> DiagnosticsState:
        dtype = working_dtype(example)
        d = num_elements(example)
        heavy = heavy_elements(example, settings.max_elements)
        dh = d if heavy is None else len(heavy)
        hist = histogram_init(dh, dtype, settings.histogram) if settings.histogram else None
        lags = lag_init(dh, dtype, settings.lags) if settings.lags else None
        count, chains = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)  # distinct buffers
        ok = jnp.ones((), bool)
        moments = _moments_init(d, dtype)
        return DiagnosticsState(own_copy(example), count, chains, ok, moments, hist, lags)

    def update(state: DiagnosticsState, draw: PyTree) -> DiagnosticsState:
        dtype = state.moments.middle.dtype
        x = flatten(draw, dtype)
        pilot = flatten(state.pilot, dtype)
        y = x - pilot
        index = state.count
        seg, pos, in_split = _split_position(index, settings.num_draws)
        moments = _moments_update(state.moments, x, y, in_split)
        y_all = y
        hist, lags = state.histogram, state.lags
        heavy = heavy_elements(state.pilot, settings.max_elements)
        if heavy is not None:  # histograms and lags see the selected elements only
            x, y, pilot = x[heavy], y[heavy], pilot[heavy]
        if hist is not None:
            hist = histogram_update(hist, y, index, seg, settings.histogram)
        if lags is not None:
            lags = lag_update(lags, y, x, index, seg, pos, in_split, settings.lags)
        state = DiagnosticsState(
            state.pilot, index + 1, state.num_chains, state.consistent, moments, hist, lags
        )
        # Everything rare (flushes, fixing the grid and the proxy references, finished
        # blocks) goes through ONE cond per draw: each cond costs ~0.5 us on CPU. It comes
        # last: a cond that reads a buffer updated after it in the same step copies it.
        # The predicate depends on the draw index only, the same on every chain:
        # uniform_cond keeps it a branch when the engine vmaps chains.
        events = _events(index, seg, pos, in_split, settings)
        return uniform_cond(
            jnp.any(jnp.stack(list(events.values()))),
            lambda ops, sh: _slow_path(*ops, *sh, settings),
            lambda ops, sh: ops[0],
            (state, y_all, y),
            (index, seg, pos, in_split, events),
            # chains vmapped at different draw counts: no valid result (NaN)
            lambda st: st._replace(consistent=jnp.zeros((), bool)),
        )

    @jax.jit  # compiled once per settings when called eagerly; inlined under an outer jit
    def merge(a: DiagnosticsState, b: DiagnosticsState) -> DiagnosticsState:
        return _combine(_close(a, settings), _close(b, settings), settings)

    def finalize(state: DiagnosticsState) -> dict[str, jax.Array]:
        return _finalize_flat(_close(state, settings), settings)

    return init, update, merge, finalize


def _core_key(settings: DiagnosticsSettings) -> DiagnosticsSettings:
    """The settings that matter to init, update and merge (outputs aside)."""
    return settings._replace(probs=(), hdi_prob=None)


# -- finalize ------------------------------------------------------------------------------
def _finalize_flat(state: DiagnosticsState, settings: DiagnosticsSettings) -> dict[str, jax.Array]:
    """All outputs, as flat ``(D, ...)`` arrays, from a closed state."""
    mo = state.moments
    dtype = mo.middle.dtype
    pilot = flatten(state.pilot, dtype)
    total = mo.total_count.astype(dtype)
    s1 = compensated_value(mo.total_sum)
    mu = s1 / total  # pooled mean of y = x - c
    m2 = (mo.total_sumsq.hi - mo.total_sum.hi * mu) + (mo.total_sumsq.lo - mo.total_sum.lo * mu)
    m2 = jnp.maximum(m2, 0.0)
    sd = jnp.sqrt(m2 / (total - 1.0))
    poison = jnp.where(state.consistent, 0.0, jnp.nan)  # pilots differed: no valid result
    out: dict[str, jax.Array] = {
        "mean": pilot + mu + poison, "sd": sd + poison, "min": mo.xmin + poison, "max": mo.xmax + poison,
    }  # fmt: skip
    if settings.num_draws is None:
        m = jnp.asarray(1.0, dtype)
        n = total
    else:
        m = mo.split_count.astype(dtype)
        n = jnp.where(mo.split_min == mo.split_max, mo.split_min, jnp.nan).astype(dtype)
    chains = state.num_chains
    bad = jnp.isnan(mo.xmin) | jnp.isnan(mo.xmax) | jnp.isnan(mu) | ~state.consistent
    constant = (mo.xmin == mo.xmax) & ~bad
    enough = n >= 2.0  # ArviZ: at least 4 draws per chain
    w_y = mo.within_sum / m
    b_y = jnp.where(m > 1, mo.half_mean_m2 / (m - 1.0), 0.0)
    heavy = heavy_elements(state.pilot, settings.max_elements)

    def h(a: jax.Array) -> jax.Array:
        """The elements that have histograms and lags."""
        return a if heavy is None else a[heavy]

    def clean(value, constant_value=None, heavy_only=True):
        """ArviZ's NaN and constant-chain conventions (on heavy elements by default)."""
        b, c = (h(bad), h(constant)) if heavy_only else (bad, constant)
        value = jnp.where(b[(...,) + (None,) * (value.ndim - 1)] | ~enough, jnp.nan, value)
        if constant_value is not None:
            value = jnp.where(c & enough, constant_value, value)
        return value

    heavy_out: dict[str, jax.Array] = {}
    if settings.num_draws is not None:
        r = clean(rhat_from_summaries(m, n, w_y, b_y), heavy_only=False)
        out["r_hat_split"] = jnp.where(chains >= 2, r, jnp.nan)
    s_split = m * n
    lag, ls = state.lags, settings.lags
    hist, hs = state.histogram, settings.histogram
    hmu, hsd = h(mu), h(sd)
    targets: dict[str, EssTarget] = {}
    if lag is not None:
        exact = exact_mean_acov(lag, h(w_y), n, m) if ls.max_lag > 0 else None
        targets["mean"] = EssTarget(direct(Y), Y, h(w_y), h(b_y), exact)
        if ls.block_sizes:
            # (x - mu)^2: variance terms from the split chains' moments about the pooled mean
            s2 = compensated_value(mo.total_sumsq)
            s3 = compensated_value(mo.total_sum3)
            s4 = compensated_value(mo.total_sum4)
            m4 = h(s4 - 4 * mu * s3 + 6 * mu**2 * s2 - 4 * mu**3 * s1 + total * mu**4)
            sw, sw2, sa, sa2, swa = (h(mo.c2_w[:, i]) for i in range(5))
            t1 = sw - 2 * hmu * sa + m * hmu**2
            t2 = (
                sw2
                + 4 * hmu**2 * sa2
                + m * hmu**4
                - 4 * hmu * swa
                + 2 * hmu**2 * sw
                - 4 * hmu**3 * sa
            )
            b_c2 = jnp.maximum(t2 - t1 * t1 / m, 0.0) / (m - 1.0)
            w_c2 = (m4 * (s_split / total) - n * t2) / (m * (n - 1.0))
            targets["sd"] = EssTarget(squared_deviation(hmu), Y, w_c2, b_c2, None)
    if hist is not None:
        hpilot = h(pilot)
        lo, hi = value_edges(hist.floor, hist.top, hpilot, h(mo.xmin), h(mo.xmax), hs.spec)
        counts = hist.counts[0]
        nan_rows = h(bad)[:, None]
        # every fixed quantile level needed below, in one call
        fixed = (*settings.probs, 0.5, 0.025, 0.075, 0.925, 0.975)
        q_all = counts_quantile(counts, (lo, hi), jnp.asarray(fixed, dtype))
        q_fixed = {p: q_all[:, i] for i, p in enumerate(fixed)}
        if settings.probs:
            heavy_out["quantiles"] = jnp.where(nan_rows, jnp.nan, q_all[:, : len(settings.probs)])
        if settings.hdi_prob is not None:
            heavy_out["hdi"] = jnp.where(
                nan_rows, jnp.nan, counts_hdi(counts, (lo, hi), settings.hdi_prob)
            )
        if settings.num_draws is not None:
            rank = _rank_parts(hist, counts, lo, hi, hpilot, n, m, hs, dtype, q_fixed[0.5])
            for name, key in (("bulk", "r_hat_bulk"), ("fold", "r_hat_folded")):
                r = rhat_from_summaries(m, n, rank[f"w_{name}"], rank[f"b_{name}"])
                heavy_out[key] = jnp.where(chains >= 2, clean(r), jnp.nan)
            heavy_out["r_hat"] = jnp.maximum(heavy_out["r_hat_bulk"], heavy_out["r_hat_folded"])
            if lag is not None and ls.proxies and ls.block_sizes:

                def exact(feature, w):  # proxies with exact lags (the bulk, then the tails)
                    if feature - BULK >= ls.proxy_lags:
                        return None
                    return exact_proxy_acov(lag, feature, w, n)

                w_z, b_z = rank["w_bulk"], rank["b_bulk"]
                target = proxy(lag, BULK, w_z, n)
                targets["bulk"] = EssTarget(target, BULK, w_z, b_z, exact(BULK, w_z))
                for feature, p in ((TAIL_LO, 0.05), (TAIL_HI, 0.95)):
                    q_pm = (q_fixed[round(p - 0.025, 3)], q_fixed[round(p + 0.025, 3)])
                    w_i, b_i = _tail_variance(counts, hist, n, m, p, q_pm, hs, dtype)
                    target = tail_proxy(feature, w_i, n, ls.num_pooled)
                    targets[f"tail{feature}"] = EssTarget(
                        target, feature, w_i, b_i, exact(feature, w_i)
                    )
    if targets:
        results = dict(
            zip(targets, ess_from_lags(lag, list(targets.values()), n, m, ls), strict=True)
        )
        res = results["mean"]
        heavy_out["ess_mean"] = clean(res.ess, s_split)
        heavy_out["ess_mean_resolution"] = res.resolution
        heavy_out["mcse_mean"] = clean(hsd / jnp.sqrt(heavy_out["ess_mean"]), 0.0)
        if "sd" in results:
            ess_sd = clean(results["sd"].ess, s_split)
            evar = h(m2) / total
            varvar = (m4 / total - evar * evar) / ess_sd
            heavy_out["ess_sd"] = ess_sd
            heavy_out["mcse_sd"] = clean(jnp.sqrt(varvar / evar / 4.0))
        if "bulk" in results:
            heavy_out["ess_bulk"] = clean(results["bulk"].ess, s_split)
            heavy_out["ess_bulk_resolution"] = results["bulk"].resolution
            lo_res, hi_res = results[f"tail{TAIL_LO}"], results[f"tail{TAIL_HI}"]
            heavy_out["ess_tail"] = clean(jnp.minimum(lo_res.ess, hi_res.ess), s_split)
            heavy_out["ess_tail_resolution"] = jnp.maximum(lo_res.resolution, hi_res.resolution)
    for key, value in heavy_out.items():
        if heavy is not None:  # elements without histograms or lags: NaN (0 for resolutions)
            fill = 0 if jnp.issubdtype(value.dtype, jnp.integer) else jnp.nan
            full = jnp.full((pilot.shape[0], *value.shape[1:]), fill, value.dtype)
            value = full.at[heavy].set(value)
        out[key] = value
    return out


def _rank_parts(
    hist, counts, lo, hi, pilot, n, m, hs: HistogramSettings, dtype, median
) -> dict[str, jax.Array]:
    """Within (W) and between (var of chain means) terms of ArviZ's rank-normalised R-hat."""
    total = jnp.sum(counts, axis=1).astype(dtype)
    nb = counts.astype(dtype)
    z = bucket_scores(counts, dtype)
    # folded: buckets ordered by distance of their centre from the pooled median
    dist = jnp.abs(0.5 * (lo + hi) - median[:, None])
    order = jnp.argsort(dist, axis=1, stable=True)
    n_sorted = jnp.take_along_axis(nb, order, axis=1)
    c_sorted = cumsum_rows(n_sorted)
    rank_sorted = c_sorted - n_sorted + (n_sorted + 1.0) / 2.0
    rank_fold = (
        jnp.zeros_like(rank_sorted).at[jnp.arange(nb.shape[0])[:, None], order].set(rank_sorted)
    )
    zf = blom_scores(rank_fold, total[:, None])
    # continuous versions of both score functions, for slopes at the chain quantiles
    xs = jnp.concatenate([lo[:, :1], hi], axis=1)
    cum = jnp.concatenate([jnp.zeros_like(total)[:, None], cumsum_rows(nb)], axis=1)

    def cdf(x):
        return interp_rows(x, xs, cum)

    def z_bulk(x):
        return blom_scores(cdf(x) + 0.5, total[:, None])

    def z_fold(x):
        d = jnp.abs(x - median[:, None])
        return blom_scores(
            cdf(median[:, None] + d) - cdf(median[:, None] - d) + 0.5, total[:, None]
        )

    k = hs.num_levels
    qbar = pilot[:, None] + hist.quantile_mean  # (D, K)
    first = 2 * qbar[:, :1] - qbar[:, 1:2]
    last = 2 * qbar[:, -1:] - qbar[:, -2:-1]
    ext = jnp.concatenate([first, qbar, last], axis=1)
    cov = unpack_comoment(hist.quantile_comoment, k)
    scale = (m * n) / total  # pooled counts include the middle draws of odd num_draws
    out = {}
    for name, scores, fn in (("bulk", z, z_bulk), ("fold", zf, z_fold)):
        zk = fn(ext)
        width = ext[:, 2:] - ext[:, :-2]
        slope = jnp.where(
            width > 0, (zk[:, 2:] - zk[:, :-2]) / jnp.where(width > 0, width, 1.0), 0.0
        )
        g = slope / k
        gcg = jnp.einsum("di,dij,dj->d", g, cov, g)
        zsum = jnp.sum(nb * scores, axis=1) * scale
        z2sum = jnp.sum(nb * scores * scores, axis=1) * scale
        zbar = zsum / (m * n)
        sum_means_sq = m * zbar * zbar + gcg
        out[f"w_{name}"] = (z2sum - n * sum_means_sq) / (m * (n - 1.0))
        out[f"b_{name}"] = gcg / (m - 1.0)
    return out


def _tail_variance(counts, hist, n, m, p: float, q_pm, hs: HistogramSettings, dtype):
    """W and var(chain means) of the indicator ``x <= q_p`` (delta method on chain quantiles).

    ``q_pm``: the pooled quantiles at ``p -/+ 0.025`` (the density at ``q_p``).
    """
    total = jnp.sum(counts, axis=1).astype(dtype)
    h = 0.025
    density = 2 * h / jnp.maximum(q_pm[1] - q_pm[0], jnp.finfo(dtype).tiny)
    k = hs.num_levels
    lv = jnp.asarray(levels(k), dtype)
    diag = jnp.diagonal(unpack_comoment(hist.quantile_comoment, k), axis1=1, axis2=2)  # (D, K)
    var_q = (
        interp_rows(jnp.full((diag.shape[0], 1), p, dtype), jnp.broadcast_to(lv, diag.shape), diag)[
            :, 0
        ]
        / m
    )
    var_pop = density**2 * var_q
    pbar = (jnp.floor(p * (total - 1.0)) + 1.0) / total
    within = n / (n - 1.0) * (pbar - pbar * pbar - var_pop)
    between = var_pop * m / (m - 1.0)
    return within, between


# -- public factories --------------------------------------------------------------------------
def _check_num_draws(num_draws: Any) -> None:
    if not isinstance(num_draws, int | np.integer) or isinstance(num_draws, bool) or num_draws < 1:
        raise ValueError(f"num_draws must be a positive integer, got {num_draws!r}")


def _check_probs(name: str, probs: Any) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in probs)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of probabilities, got {probs!r}") from None
    if not values or any(not (0.0 <= p <= 1.0) for p in values):
        raise ValueError(f"{name} must be a non-empty sequence of numbers in [0, 1], got {probs!r}")
    return values


def _check_prob(name: str, prob: Any) -> float:
    if (
        isinstance(prob, bool)
        or not isinstance(prob, int | float | np.floating)
        or not 0.0 < prob <= 1.0
    ):
        raise ValueError(f"{name} must be a number in (0, 1], got {prob!r}")
    return float(prob)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_max_elements(max_elements: Any) -> int | None:
    if max_elements is None:
        return None
    if (
        isinstance(max_elements, bool)
        or not isinstance(max_elements, int | np.integer)
        or max_elements < 1
    ):
        raise ValueError(f"max_elements must be a positive integer or None, got {max_elements!r}")
    return int(max_elements)


def histogram_settings(
    mantissa_bits: int = 5, binades: int = 8, pilot_draws: int = 16, floor_offset: int = 0,
    num_levels: int = 12,
) -> HistogramSettings:  # fmt: skip
    """Validated :class:`~sluice.stats.histogram.HistogramSettings` (see :mod:`sluice.stats.grid`)."""
    spec = GridSpec.checked(mantissa_bits, binades)
    if isinstance(pilot_draws, bool) or not isinstance(pilot_draws, int) or pilot_draws < 1:
        raise ValueError(f"pilot_draws must be a positive integer, got {pilot_draws!r}")
    if isinstance(floor_offset, bool) or not isinstance(floor_offset, int) or abs(floor_offset) > 8:
        raise ValueError(f"floor_offset must be an integer in [-8, 8], got {floor_offset!r}")
    if isinstance(num_levels, bool) or not isinstance(num_levels, int) or not 2 <= num_levels <= 64:
        raise ValueError(f"num_levels must be an integer in [2, 64], got {num_levels!r}")
    return HistogramSettings(spec, pilot_draws, floor_offset, num_levels)


def lag_settings(
    num_draws: int,
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    proxies: bool = True,
    reference_draw: int | None = None,
    min_blocks: int = 32,
    pilot_draws: int = 16,
    proxy_lags: int | None = None,
) -> LagSettings:
    """Validated :class:`~sluice.stats.autocorrelation.LagSettings`."""
    if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
        raise ValueError(f"max_lag must be a non-negative integer, got {max_lag!r}")
    try:
        sizes = tuple(block_sizes)
    except TypeError:
        raise ValueError(
            f"block_sizes must be a sequence of integers, got {block_sizes!r}"
        ) from None
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes) or any(
        b2 % b1 or b2 <= b1 for b1, b2 in itertools.pairwise(sizes)
    ):
        raise ValueError(
            "block_sizes must be increasing positive integers, each a multiple of the previous, "
            f"got {block_sizes!r}"
        )
    if block_lags is None:  # the finest level 4 lags (it runs most often), the others 8
        block_lags = tuple(4 if i == 0 else 8 for i in range(len(sizes)))
    lags = (block_lags,) * len(sizes) if isinstance(block_lags, int | np.integer) else block_lags
    try:
        lags = tuple(lags)
    except TypeError:
        raise ValueError(
            f"block_lags must be a positive integer or one per block size, got {block_lags!r}"
        ) from None
    if len(lags) != len(sizes) or any(
        isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in lags
    ):
        raise ValueError(
            f"block_lags must be a positive integer or one per block size, got {block_lags!r}"
        )
    lags = tuple(int(v) for v in lags)
    if max_lag == 0 and not sizes:
        raise ValueError("give max_lag > 0 or some block_sizes: the ESS needs lags")
    if isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or min_blocks < 4:
        raise ValueError(f"min_blocks must be an integer >= 4, got {min_blocks!r}")
    if reference_draw is None:
        reference_draw = min(max(num_draws // 16, 2 * pilot_draws), max(num_draws // 2 - 1, 0))
    if (
        isinstance(reference_draw, bool)
        or not isinstance(reference_draw, int)
        or reference_draw < 0
    ):
        raise ValueError(f"reference_draw must be a non-negative integer, got {reference_draw!r}")
    if proxy_lags is None:  # bulk and tails: block means alone are noisy on antithetic chains
        proxy_lags = 3
    if proxy_lags not in (0, 1, 3):
        raise ValueError(f"proxy_lags must be 0, 1 or 3, got {proxy_lags!r}")
    if not proxies or max_lag == 0:
        proxy_lags = 0
    half = num_draws // 2
    return LagSettings(
        max_lag, sizes, lags, proxies, reference_draw, half, min_blocks, proxy_lags,
        num_draws - half,
    )  # fmt: skip


def _build(
    num_draws: int | None,
    *,
    histogram: bool,
    lags: bool,
    proxies: bool,
    probs: tuple[float, ...] = (),
    hdi_prob: float | None = None,
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    reference_draw: int | None = None,
    proxy_lags: int | None = None,
    mantissa_bits: int = 5,
    binades: int = 8,
    pilot_draws: int = 16,
    num_levels: int = 12,
    max_elements: int | None = None,
) -> DiagnosticsSettings:
    if num_draws is not None:
        _check_num_draws(num_draws)
    hs = (
        histogram_settings(mantissa_bits, binades, pilot_draws, num_levels=num_levels)
        if histogram
        else None
    )
    ls = None
    if lags:
        ls = lag_settings(
            num_draws, max_lag, block_sizes, block_lags, proxies=proxies,
            reference_draw=reference_draw, pilot_draws=pilot_draws, proxy_lags=proxy_lags,
        )  # fmt: skip
    return DiagnosticsSettings(
        num_draws, hs, ls, probs, hdi_prob, _check_max_elements(max_elements)
    )


@functools.lru_cache(maxsize=64)
def _finalize_compiled(settings: DiagnosticsSettings) -> Callable:
    """Jitted ``finalize_flat`` per settings: called eagerly, statistics that report
    different outputs of the same settings share one compile (inlined under an outer jit)."""
    return jax.jit(lambda state: _finalize_flat(_close(state, settings), settings))


def _statistic(settings: DiagnosticsSettings, select: Callable[[PyTree, dict], Any]) -> Statistic:
    # statistics that differ only in their outputs share init / update / merge (and so
    # their compiles); finalize reads the outputs this one reports
    init, update, merge, _ = _make_core(_core_key(settings))

    def finalize(state: DiagnosticsState) -> Any:
        return select(state.pilot, _finalize_compiled(settings)(state))

    return Statistic(init, update, merge, finalize)


def _one(key: str) -> Callable[[PyTree, dict], PyTree]:
    return lambda pilot, flat: unflatten(pilot, flat[key])


def _all(settings: DiagnosticsSettings) -> Callable[[PyTree, dict], dict[str, PyTree]]:
    """Every output as a tree, plus the settings a table needs (interval levels)."""

    def select(pilot: PyTree, flat: dict) -> dict[str, Any]:
        out: dict[str, Any] = {k: unflatten(pilot, v) for k, v in flat.items()}
        if settings.probs:
            out["quantile_levels"] = jnp.asarray(settings.probs)
        if settings.hdi_prob is not None:
            out["hdi_prob"] = jnp.asarray(settings.hdi_prob)
        return out

    return select


def diagnostics(
    num_draws: int,
    *,
    probs: tuple[float, ...] = (0.03, 0.5, 0.97),
    hdi_prob: float | None = 0.94,
    histogram: bool = True,
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    reference_draw: int | None = None,
    proxy_lags: int | None = None,
    max_elements: int | None = 4096,
    mantissa_bits: int = 5,
    binades: int = 8,
    pilot_draws: int = 16,
    num_levels: int = 12,
) -> Statistic:
    """All diagnostics of ``az.summary`` (and more) for every scalar element of a draw.

    Parameters
    ----------
    num_draws
        Draws per chain: fixes ArviZ's split halves.
    probs
        Quantile levels reported under ``"quantiles"`` (empty: none).
    hdi_prob
        Mass of the highest-density interval (``None``: none).
    histogram
        Keep histograms: quantiles, HDI, rank R-hat and the bulk / tail ESS
        need them. Without, the exact moment and lag outputs remain.
    max_lag
        Exact lags of the draws: ``ess_mean`` equals ArviZ's whenever Geyer's
        sequence stops within them (typical for NUTS, whose autocorrelation
        time is a few draws); ``ess_mean_resolution`` is 1 then. On antithetic
        chains (ESS above the draws, common with NUTS) the sequence stops where
        noise first turns a pair of lags negative, often past lag 8 (see
        docs/statistics.md).
    proxy_lags
        The bulk and tail proxies with exact lags up to ``max_lag`` too: 3 (the
        bulk and both tails, default), 1 (the bulk) or 0 (block levels only).
        Each costs about as much per draw as the exact lags of the draws (the
        tails' two: ~9 us per draw on a 1000-element model inside NUTS); with
        block means alone the tail ESS of short NUTS runs is rough (4 x 1,000
        draws of a Gaussian: 11.9% rms off ArviZ's, against 7.9%).
    block_sizes, block_lags
        Block levels (:mod:`sluice.stats.autocorrelation`) and their lags (one
        number, or one per level): they cover lags up to the last level's
        ``block_lags * block_size`` draws; ``ess_*_resolution`` gives
        the block size used (0: no level ended Geyer's sequence, the value is
        a truncated, upward-biased estimate).
    reference_draw
        Draw at which each chain fixes its first half's reference quantiles
        for the bulk and tail proxies (default ``num_draws // 16``).
    max_elements
        Histograms and lags (everything but mean, sd, extrema and split R-hat)
        for at most this many elements of each named quantity (the first ones,
        C order); the others report NaN there. ``None``: all elements.
    mantissa_bits, binades, pilot_draws, num_levels
        The histogram grid (:mod:`sluice.stats.grid`) and the number of chain
        quantile levels summarised for the between-chain terms.

    Returns
    -------
    Statistic
        ``finalize`` gives ``{output: tree}``, trees shaped like a draw
        (``quantiles`` and ``hdi`` add a trailing axis); outputs: ``mean``,
        ``sd``, ``min``, ``max``, ``r_hat_split`` and, per options,
        ``quantiles``, ``hdi``, ``r_hat`` (rank), ``r_hat_bulk``,
        ``r_hat_folded``, ``ess_mean``, ``ess_bulk``, ``ess_tail``,
        ``ess_sd``, ``mcse_mean``, ``mcse_sd``, ``ess_*_resolution``; and the
        arrays ``quantile_levels`` and ``hdi_prob`` (the settings, for tables).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.diagnostics(num_draws=200)
    >>> draws = jax.random.normal(jax.random.PRNGKey(0), (2, 200, 3))
    >>> example = {"x": draws[0, 0]}  # the same example (pilot) for every chain
    >>> @jax.jit
    ... def run(chain):
    ...     body = lambda st, x: (s.update(st, {"x": x}), None)
    ...     return jax.lax.scan(body, s.init(example), chain)[0]
    >>> out = s.finalize(s.merge(run(draws[0]), run(draws[1])))
    >>> out["r_hat"]["x"].shape, bool(jnp.all(jnp.abs(out["r_hat"]["x"] - 1) < 0.05))
    ((3,), True)
    """
    probs = _check_probs("probs", probs) if probs else ()
    if hdi_prob is not None:
        hdi_prob = _check_prob("hdi_prob", hdi_prob)
    settings = _build(
        num_draws, histogram=histogram, lags=True, proxies=histogram,
        probs=probs if histogram else (), hdi_prob=hdi_prob if histogram else None,
        max_lag=max_lag, block_sizes=block_sizes, block_lags=block_lags,
        reference_draw=reference_draw, proxy_lags=proxy_lags, mantissa_bits=mantissa_bits,
        binades=binades,
        pilot_draws=pilot_draws, num_levels=num_levels, max_elements=max_elements,
    )  # fmt: skip
    return _statistic(settings, _all(settings))


def summary_statistics(num_draws: int, *, hdi_prob: float = 0.94, **options: Any) -> Statistic:
    """The default diagnostics behind a summary table (see :func:`sluice.stats.summary_table`).

    :func:`diagnostics` with quantiles at ``(1 - hdi_prob)/2, 0.5, (1 + hdi_prob)/2``
    (the equal-tailed interval) and the HDI of mass ``hdi_prob``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    hdi_prob
        Interval mass, as ``az.summary(hdi_prob=...)``.
    **options
        Passed to :func:`diagnostics` (``max_lag``, ``max_elements``, ...).

    Returns
    -------
    Statistic

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.summary_statistics(num_draws=100)
    >>> chain = jax.random.normal(jax.random.PRNGKey(1), (100, 2))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"b": x}), None),
    ...                      s.init({"b": chain[0]}), chain)[0]
    >>> stats.summary_table(s.finalize(state)).index.tolist()
    ['b[0]', 'b[1]']
    """
    p = _check_prob("hdi_prob", hdi_prob)
    return diagnostics(num_draws, probs=((1 - p) / 2, 0.5, (1 + p) / 2), hdi_prob=p, **options)


def rhat(num_draws: int, *, method: str = "rank", **histogram_options: Any) -> Statistic:
    """R-hat of every element, as ``az.rhat(method=method)``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    method
        ``"rank"`` (ArviZ's default: max of the rank-normalised split R-hat
        and its folded version; approximate, from histograms) or ``"split"``
        (classic split R-hat; exact).
    **histogram_options
        ``mantissa_bits``, ``binades``, ``pilot_draws``, ``num_levels``,
        ``max_elements`` (see :func:`diagnostics`).

    Returns
    -------
    Statistic
        ``finalize`` gives a tree shaped like a draw: NaN for one chain (as ArviZ).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.rhat(num_draws=100, method="split")
    >>> chains = jax.random.normal(jax.random.PRNGKey(2), (2, 100))
    >>> run = jax.jit(lambda c: jax.lax.scan(lambda st, x: (s.update(st, {"a": x}), None),
    ...                                      s.init({"a": chains[0, 0]}), c)[0])
    >>> r = s.finalize(s.merge(run(chains[0]), run(chains[1])))["a"]
    >>> bool(0.98 < r < 1.05)
    True
    """
    _check_choice("method", method, ("rank", "split"))
    settings = _build(
        num_draws, histogram=method == "rank", lags=False, proxies=False, **histogram_options
    )
    return _statistic(settings, _one("r_hat" if method == "rank" else "r_hat_split"))


def ess(
    num_draws: int,
    *,
    method: str = "bulk",
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    **options: Any,
) -> Statistic:
    """Effective sample size of every element, as ``az.ess(method=method)``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    method
        ``"bulk"`` (ArviZ's default; rank-normalised), ``"tail"`` (min over the
        5% and 95% quantile indicators), ``"mean"`` (exact whenever Geyer's
        truncation falls within ``max_lag``) or ``"sd"`` (of ``(x - mean)^2``,
        as used by ``mcse(method="sd")``).
    max_lag, block_sizes, block_lags
        The lags (see :func:`diagnostics`). Raise ``max_lag`` for chains whose
        autocorrelation time is long (``ess_mean`` stays exact up to it).
    **options
        Histogram options of :func:`diagnostics` (for ``bulk`` and ``tail``),
        ``reference_draw`` and ``max_elements``.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree shaped like a draw.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.ess(num_draws=400, method="mean")
    >>> chain = jax.random.normal(jax.random.PRNGKey(3), (400,))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"m": x}), None),
    ...                      s.init({"m": chain[0]}), chain)[0]
    >>> bool(200 < s.finalize(state)["m"] < 800)
    True
    """
    _check_choice("method", method, ("bulk", "tail", "mean", "sd"))
    rank = method in ("bulk", "tail")
    settings = _build(
        num_draws, histogram=rank, lags=True, proxies=rank, max_lag=max_lag,
        block_sizes=block_sizes, block_lags=block_lags, **options,
    )  # fmt: skip
    return _statistic(settings, _one(f"ess_{method}"))


def mcse(num_draws: int, *, method: str = "mean", **options: Any) -> Statistic:
    """Monte Carlo standard error of the mean or sd of every element, as ``az.mcse``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    method
        ``"mean"`` (``sd / sqrt(ess_mean)``) or ``"sd"`` (delta method on the
        ESS of ``(x - mean)^2``).
    **options
        Lag options of :func:`ess`.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree shaped like a draw.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.mcse(num_draws=400)
    >>> chain = jax.random.normal(jax.random.PRNGKey(4), (400,))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"m": x}), None),
    ...                      s.init({"m": chain[0]}), chain)[0]
    >>> bool(0.03 < s.finalize(state)["m"] < 0.08)
    True
    """
    _check_choice("method", method, ("mean", "sd"))
    settings = _build(num_draws, histogram=False, lags=True, proxies=False, **options)
    return _statistic(settings, _one(f"mcse_{method}"))


def quantiles(probs: tuple[float, ...], **histogram_options: Any) -> Statistic:
    """Quantiles of every element, as ``np.quantile`` (linear interpolation) on all draws.

    Read from a histogram on the pilot grid (:mod:`sluice.stats.grid`); the
    error is far below the quantiles' Monte Carlo error.

    Parameters
    ----------
    probs
        Levels in ``[0, 1]``.
    **histogram_options
        ``mantissa_bits``, ``binades``, ``pilot_draws``, ``max_elements``.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree whose leaves have a trailing axis of ``len(probs)``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.quantiles((0.1, 0.5, 0.9))
    >>> draws = jax.random.permutation(jax.random.PRNGKey(0), jnp.linspace(0.0, 1.0, 1001))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"u": x}), None),
    ...                      s.init({"u": draws[0]}), draws)[0]
    >>> [round(float(v), 2) for v in s.finalize(state)["u"]]
    [0.1, 0.5, 0.9]
    """
    values = _check_probs("probs", probs)
    settings = _build(
        None, histogram=True, lags=False, proxies=False, probs=values, **histogram_options
    )
    return _statistic(settings, _one("quantiles"))


def hdi(prob: float = 0.94, **histogram_options: Any) -> Statistic:
    """Highest-density interval of every element, as ``az.hdi(hdi_prob=prob)``.

    The narrowest interval holding ``floor(prob * S)`` of the ``S`` draws, read
    from a histogram (:func:`quantiles`).

    Parameters
    ----------
    prob
        Mass of the interval.
    **histogram_options
        As :func:`quantiles`.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree whose leaves have a trailing axis ``(lower, upper)``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.hdi(0.5)
    >>> draws = jax.random.uniform(jax.random.PRNGKey(0), (4000,)) ** 2  # density 1 / (2 sqrt(u))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"u": x}), None),
    ...                      s.init({"u": draws[0]}), draws)[0]
    >>> [round(float(v), 1) for v in s.finalize(state)["u"]]
    [0.0, 0.2]
    """
    p = _check_prob("prob", prob)
    settings = _build(
        None, histogram=True, lags=False, proxies=False, hdi_prob=p, **histogram_options
    )
    return _statistic(settings, _one("hdi"))
