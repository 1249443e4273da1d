"""The three parts of the fused diagnostics, as :class:`~sluice.stats.fused.Part` bundles.

* :func:`moments_part`: exact split moments and extremes of every element
  (:mod:`sluice.stats.split_moments`);
* :func:`histogram_part`: per-half histograms on the pilot grid of the heavy
  elements (:mod:`sluice.stats.histogram`);
* :func:`lags_part`: exact lags, proxy lags and block levels of the heavy
  elements (:mod:`sluice.stats.autocorrelation`, closed by
  :mod:`sluice.stats.effective_size`). Its proxies need the chain's own
  quantiles (read from the histograms) and their per-draw variances (from the
  histograms at close): the one part that reads another.

Each is built from its settings; :func:`sluice.stats.fused.fuse` runs them
side by side.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from sluice.stats._numerics import Compensated, compensated_value
from sluice.stats.autocorrelation import (
    FLUSH,
    REFERENCE_LEVELS,
    LagSettings,
    LagState,
    bulk_proxy,
    lag_due,
    lag_init,
    lag_slow_path,
    lag_update,
    set_reference,
)
from sluice.stats.effective_size import lag_close, lag_combine
from sluice.stats.fused import Closing, Draw, Part, split_position
from sluice.stats.histogram import (
    HistogramSettings,
    HistogramState,
    chain_counts,
    counts_quantile,
    histogram_buffer,
    histogram_close,
    histogram_combine,
    histogram_fix_grid,
    histogram_init,
    histogram_update,
    value_edges,
    value_edges_at,
)
from sluice.stats.split_moments import (
    moments_close,
    moments_combine,
    moments_flush,
    moments_init,
    moments_update,
)

__all__ = ["histogram_part", "lags_part", "moments_part"]


def _pick(a: jax.Array, heavy: Any) -> jax.Array:
    return a if heavy is None else a[heavy]


# -- moments --------------------------------------------------------------------------------
def moments_part(num_draws: int | None) -> Part:
    """Exact split moments of every element (all elements: mean, sd and split R-hat)."""

    def init(d: int, dh: int, dtype: Any):
        del dh
        return moments_init(d, dtype)

    def update(mo, draw: Draw):
        return moments_update(mo, draw.x, draw.y, draw.in_split)

    def events(draw: Draw) -> dict[str, jax.Array]:
        after = draw.index + 1
        half = num_draws // 2 if num_draws is not None else -1
        out = {"flush": (after % FLUSH == 0) | (after == half)}  # partial sums stay in one half
        if num_draws is not None and num_draws % 2 == 1:
            out["middle"] = draw.index == half
        return out

    def rare(mo, draw: Draw, due: dict, view: dict):
        del view
        mo = jax.lax.cond(due["flush"], lambda m: moments_flush(m, draw.seg), lambda m: m, mo)
        if "middle" in due:
            mo = mo._replace(middle=jnp.where(due["middle"], draw.y, mo.middle))
        return mo

    def close(mo, closing: Closing, view: dict):
        del view
        flushed = moments_flush(mo, closing.last_seg)._replace(half_count=closing.half_count)
        half_sum = jnp.stack(
            [
                compensated_value(Compensated(flushed.half_sum.hi[j], flushed.half_sum.lo[j]))
                for j in range(2)
            ]
        )  # (2, D): exact sums of y of each half
        return moments_close(flushed, closing.has_middle), {"half_sum": half_sum}

    return Part(init, update, events, rare, close, moments_combine)


# -- histograms -------------------------------------------------------------------------------
def pilot_rows(count: jax.Array, hs: HistogramSettings, num_draws: int | None) -> jax.Array:
    """Half (histogram row) of each pilot draw, -1 for draws not seen."""
    idx = jnp.arange(hs.pilot_draws, dtype=jnp.int32)
    seg, _, _ = split_position(idx, num_draws)
    return jnp.where(idx < count, seg, -1)


def histogram_part(hs: HistogramSettings, num_draws: int | None) -> Part:
    """Per-half histograms of the heavy elements (quantiles, HDI, rank R-hat, tails)."""

    def init(d: int, dh: int, dtype: Any) -> HistogramState:
        del d
        return histogram_init(dh, dtype, hs)

    def update(hist: HistogramState, draw: Draw) -> HistogramState:
        return histogram_update(hist, draw.y_heavy, draw.index, draw.seg, hs)

    def events(draw: Draw) -> dict[str, jax.Array]:
        return {"pilot": draw.index < hs.pilot_draws, "grid": draw.index + 1 == hs.pilot_draws}

    def rare(hist: HistogramState, draw: Draw, due: dict, view: dict) -> HistogramState:
        hist = jax.lax.cond(
            due["pilot"], lambda h: histogram_buffer(h, draw.y_heavy, draw.index), lambda h: h, hist
        )
        pilot = view["pilot_heavy"]
        return jax.lax.cond(
            due["grid"], lambda h: histogram_fix_grid(h, pilot, hs), lambda h: h, hist
        )

    def close(hist: HistogramState, closing: Closing, view: dict):
        heavy, pilot = view["heavy"], view["pilot_heavy"]
        xmin, xmax = _pick(view["moments"].xmin, heavy), _pick(view["moments"].xmax, heavy)
        grid = chain_counts(hist, pilot, pilot_rows(closing.count, hs, num_draws), hs)
        closed = histogram_close(hist, pilot, xmin, xmax, hs, grid)
        return closed, {"grid": grid}

    def merge(a: HistogramState, b: HistogramState) -> HistogramState:
        return histogram_combine(a, b, hs)

    return Part(init, update, events, rare, close, merge)


# -- lags --------------------------------------------------------------------------------------
def reference_quantiles(
    hist: HistogramState, pilot, count, xmin, xmax, hs: HistogramSettings, num_draws: int | None
) -> jax.Array:
    """This chain's quantiles at REFERENCE_LEVELS from its histograms so far: ``(D, 9)``."""
    floor, top, counts = chain_counts(
        hist, pilot, pilot_rows(count, hs, num_draws), hs, pooled=True
    )
    edges = value_edges_at(floor, top, pilot, xmin, xmax, hs.spec)
    probs = jnp.asarray(REFERENCE_LEVELS, pilot.dtype)
    return counts_quantile(counts[0], edges, probs)


def proxy_variance(grid, lags: LagState, pilot, xmin, xmax, hs: HistogramSettings) -> tuple:
    """Per proxy feature, ``(2, D)``: each half's per-draw variance, read from its histogram.

    The proxies are functions of the draw and the half's reference knots;
    evaluated at bucket midpoints, weighted by the half's counts (``grid`` from
    :func:`~sluice.stats.histogram.chain_counts`).
    """
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


def lags_part(ls: LagSettings, hs: HistogramSettings | None, num_draws: int | None) -> Part:
    """Lag states of the heavy elements (ESS and MCSE); with ``ls.proxies``, the bulk and
    tail proxies, whose reference quantiles come from the histogram part."""

    def init(d: int, dh: int, dtype: Any) -> LagState:
        del d
        return lag_init(dh, dtype, ls)

    def update(lags: LagState, draw: Draw) -> LagState:
        return lag_update(
            lags, draw.y_heavy, draw.x_heavy, draw.index, draw.seg, draw.pos, draw.in_split, ls
        )

    def events(draw: Draw) -> dict[str, jax.Array]:
        out = {"lags": lag_due(draw.index, draw.seg, draw.pos, draw.in_split, ls)}
        if ls.proxies:
            after = draw.index + 1
            out["reference0"] = after == ls.reference_draw
            out["reference1"] = after == num_draws - num_draws // 2
        return out

    def rare(lags: LagState, draw: Draw, due: dict, view: dict) -> LagState:
        if ls.proxies:
            heavy, pilot = view["heavy"], view["pilot_heavy"]
            xmin, xmax = _pick(view["moments"].xmin, heavy), _pick(view["moments"].xmax, heavy)
            row = due["reference1"].astype(jnp.int32)

            def fix(h, lg):
                q = reference_quantiles(h, pilot, draw.index + 1, xmin, xmax, hs, num_draws).T
                return set_reference(lg, row, q)  # (9, D)

            lags = jax.lax.cond(
                due["reference0"] | due["reference1"],
                fix,
                lambda h, lg: lg,
                view["histogram"],
                lags,
            )
        return lag_slow_path(lags, draw.y_heavy, draw.index, draw.seg, draw.pos, draw.in_split, ls)

    def close(lags: LagState, closing: Closing, view: dict):
        heavy, pilot = view["heavy"], view["pilot_heavy"]
        proxy_var: tuple = ()
        if hs is not None and ls.proxies:
            xmin, xmax = _pick(view["moments"].xmin, heavy), _pick(view["moments"].xmax, heavy)
            proxy_var = proxy_variance(view["grid"], lags, pilot, xmin, xmax, hs)
        half_sum = view["half_sum"] if heavy is None else view["half_sum"][:, heavy]
        closed = lag_close(lags, closing.half_count, half_sum, proxy_var, closing.count, ls)
        return closed, {}

    return Part(init, update, events, rare, close, lag_combine)
