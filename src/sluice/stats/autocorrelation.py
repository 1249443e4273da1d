"""Streaming autocovariances for the effective sample size.

Two kinds of lag state, both per split half of one chain:

*Exact lags* of ``y = x - c`` up to ``max_lag``: a ring of the last draws,
the running sums ``sum_i y_i y_(i-t)`` and the first/last ``max_lag`` values of
each half. Closing a chain turns them into ``sum_i (y_i - m)(y_(i+t) - m)``
centred at each half's own mean, which is exactly ArviZ's (FFT) biased
autocovariance times the length; so ``ess_mean`` equals ArviZ's whenever
Geyer's truncation falls within ``max_lag`` (flagged otherwise).

*Exact proxy lags*: the same for the first ``proxy_lags`` proxy features below
(the bulk; optionally the tails), per half over the range where the proxy is
defined, centred at close at the mean over that range. The proxies' ESS then
uses lags at resolution 1 whenever Geyer's truncation falls within
``max_lag``, as ``ess_mean`` does, and the block levels otherwise.

*Block levels*: the same lagged products on means of consecutive blocks of
``b`` draws (``b`` in ``block_sizes``, each a multiple of the previous), for
several features at once. The variance of the chain mean is
``b * (spectral density at 0 of the block means)``, so Geyer's estimator on a
block series estimates the same ESS with lags ``b`` times longer: the
fallback when the exact lags are too few, and the only estimate for the
proxy features without exact lags. Block series are centred approximately
(the ends of a half are ignored), an error of order ``lag / blocks``. On
antithetic chains (NUTS) Geyer's sequence on block means is noisy: block-only
bulk ESS missed ArviZ's by up to 40-70% on 4 x 400-1,000 NUTS draws.

Features (``F`` = 5, or 2 with ``proxies=False``):

0. ``y`` (ESS of the mean) and 1. ``q = y^2``: with the lagged cross products
   of ``y`` and ``q`` the autocovariance of ``(x - mu)^2`` follows exactly for
   any ``mu`` known later (``mu - c = delta``):
   ``acov(q) - 2 delta (acov(q, y) + acov(y, q)) + 4 delta^2 acov(y)``
   (ArviZ's ``mcse_sd`` uses the ESS of ``(x - mean)^2``);
2. ``z``: piecewise-linear normal scores through the chain's own reference
   quantiles, a proxy of ArviZ's rank normalisation (ESS bulk);
3. ``x <= q_ref(0.05)`` and 4. ``x > q_ref(0.95)``: proxies of ArviZ's
   indicators at the pooled quantiles (ESS tail).

The proxies need quantiles of the chain's own draws (``reference``): for the
first half they are fixed at draw ``reference_draw`` (from the draws before
it), for the second half at its first draw (from the whole first half).
Lagged products never cross the halves, so each half's autocorrelations use
one fixed transform, and only the first ``reference_draw`` draws lack
proxies. Only the *autocorrelations* of the proxies are used: the variance
terms of ArviZ's formula (within-chain ``W`` and between-chain ``B``) come,
exactly or to first order, from the moments and histograms of the pooled
draws (see :mod:`sluice.stats.convergence`).

Costs. Per draw, the lag state only receives the draw: one row written into
a window of the last ``max_lag + B`` draws. When a *lag block* of ``B`` draws
ends (``B = 16``, or a divisor of the finest block size; blocks start at
multiples of ``B`` in each half, and the halves' ends close a block early),
one rare-path pass computes the block's features, the exact lagged products
of ``y`` and of the proxies from static slices of the window (``max_lag``
multiply-adds per draw and feature, into partial sums flushed every ``FLUSH``
draws, so float32 sums neither drift nor stall over long runs), and the
finest block level's sums; the block levels do their own lagged products when
their blocks end. Products per draw read and wrote the whole
``(max_lag + 1, D)`` sums at every draw: per block they are one vectorised
pass (17.6 -> 11.3 us per draw for the default statistics of 1000 elements).
The features are computed in a ``cond`` of their own: XLA on CPU fuses cheap
elementwise producers into every consumer, even one that reads each value
``B`` times, and drops ``optimization_barrier``; a ``cond``'s outputs are
buffers. All rare work sits under ``lax.cond`` on the draw index only (under
``vmap``, :func:`~sluice.stats._batching.uniform_cond` keeps it a branch).
Every array keeps the elements as its last, contiguous axis and features are
separate arrays (tuples): XLA on CPU vectorises ``(..., D)`` elementwise work
well, and ``(D, F)`` stacks or reductions over small axes poorly (5-20x
slower, measured).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._numerics import geyer_tau, row_add

__all__ = [
    "REFERENCE_LEVELS",
    "EssResult",
    "EssTarget",
    "LagSettings",
    "LagState",
    "ess_from_lags",
    "exact_mean_acov",
    "exact_proxy_acov",
]

# Reference quantile levels fixed per chain and half (knots of the bulk proxy).
REFERENCE_LEVELS = (0.01, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
_LO, _HI = 1, 7  # indices of 0.05 and 0.95 in REFERENCE_LEVELS
# (computed in Python: importing sluice must not start a JAX backend)
_SCORES = tuple(statistics.NormalDist().inv_cdf(p) for p in REFERENCE_LEVELS)
FLUSH = 256  # draws between flushes of the exact lags' partial sums
MAX_BLOCK = 16  # at most this many draws per lag block (see LagSettings.block)
Y, Q, BULK, TAIL_LO, TAIL_HI = 0, 1, 2, 3, 4  # features
QY, YQ = -2, -1  # cross entries of the pooled sums: q_t y_(t-k) and y_t q_(t-k)


class LagSettings(NamedTuple):
    """Static settings of the lag part."""

    max_lag: int  # exact lags of y (0: none)
    block_sizes: tuple[int, ...]  # block lengths of the block levels, increasing multiples
    block_lags: tuple[int, ...]  # lags of each block level
    proxies: bool  # track the bulk and tail proxies besides y and y^2
    reference_draw: int  # draw at which each chain fixes the first half's reference quantiles
    half: int  # draws per split half (num_draws // 2)
    min_blocks: int  # blocks per split chain a block level needs to be used
    proxy_lags: int  # proxies with exact lags up to max_lag: 0, 1 (bulk) or 3 (bulk, tails)
    second: int = 0  # first draw of the second half (num_draws - half)

    @property
    def num_features(self) -> int:
        return 5 if self.proxies else 2

    @property
    def num_pooled(self) -> int:
        """Features whose lagged products are pooled over halves (all but the tails)."""
        return 3 if self.proxies else 2

    @property
    def block(self) -> int:
        """Draws per lag block ``B``: ``MAX_BLOCK`` when it divides the first block size or
        the first block size divides it (or there are no block levels), else the largest
        divisor of the first block size below ``MAX_BLOCK``."""
        if not self.block_sizes:
            return MAX_BLOCK
        b0 = self.block_sizes[0]
        if b0 % MAX_BLOCK == 0 or MAX_BLOCK % b0 == 0:
            return MAX_BLOCK
        return max(b for b in range(1, MAX_BLOCK + 1) if b0 % b == 0)

    @property
    def window_rows(self) -> int:
        """Rows ``R`` of the draw window: ``max_lag`` processed draws, then a block."""
        return self.max_lag + self.block


class WindowRows(NamedTuple):
    """The draws of the ``R`` rows of the window (see :class:`LagState`), oldest first."""

    index: jax.Array  # (R,) int32 (negative before the first draw)
    seg: jax.Array  # (R,) int32: split half
    pos: jax.Array  # (R,) int32: position in the half
    in_split: jax.Array  # (R,) bool
    pending: jax.Array  # () int32: draws of the block not yet in the sums (rows L0 ..)


class ExactLags(NamedTuple):
    partial: jax.Array  # (M, D), M = L0 + 1: sum_i y_i y_(i - t) since the last flush,
    #   lag t in row L0 - t
    sums: jax.Array  # (M, D): open: flushed sums; closed: centred and summed (same rows)
    head: jax.Array  # (2, L0, D): first L0 draws of each half (oldest first)
    tail: jax.Array  # (L0, D): last L0 draws of the first half (most recent first)


class ProxyLags(NamedTuple):
    """Exact lags of one proxy (the bulk, or a tail indicator) up to ``max_lag``.

    As :class:`ExactLags`, but each half's products and sums are kept apart: a proxy
    exists only from ``reference_draw`` on in the first half, and its transform (the
    reference quantiles) changes between the halves.
    """

    window: jax.Array  # (L0, D): the values of the last L0 processed draws, oldest first
    partial: jax.Array  # (M, D): sum_i p_i p_(i - t) since the last flush (one half),
    #   lag t in row L0 - t
    partial_sum: jax.Array  # (D,): sum_i p_i since the last flush
    sums: jax.Array  # (2, M, D): flushed lag sums of each half
    half_sum: jax.Array  # (2, D): flushed sums of each half
    head: jax.Array  # (2, L0, D): first L0 values of each half's range (oldest first)
    tail: jax.Array  # (L0, D): last L0 values of the first half (most recent first)
    closed: jax.Array  # (M, D): closed: sum over split chains of the centred lag sums (bulk)
    #   or of the autocorrelations (tails: non-constant split chains only); lag t in row t


class BlockLevel(NamedTuple):
    """One block level. Lag sums keep lag ``t`` in row ``L - t`` (the ring window's order)."""

    acc: tuple  # F x (D,): feature sums over the current, incomplete block
    ring: tuple  # F x (2 (L + 1), D): double-buffered block means (see _window)
    blocks: jax.Array  # () int32: blocks written to the rings
    valid: jax.Array  # (F,) int32: valid block means in the ring's run (current half)
    sums: tuple  # (P + 2) x (L + 1, D): lagged products of the pooled features and the
    #   cross products q.y, y.q, summed over halves; closed: centred, summed over split chains
    tail_sums: tuple  # (F - P) x (2, L + 1, D): lagged products of the tail indicators per half
    tail_ratio: tuple  # (F - P) x (L + 1, D): closed: sum over split chains of their tail
    #   autocovariance per block over their per-draw variance
    tail_chains: tuple  # (F - P) x (D,): split chains summed in tail_ratio (non-constant ones)
    half_sum: tuple  # F x (2, D): sum of the block means of each half
    half_count: jax.Array  # (2, F) int32: block means of each half
    closed_count: jax.Array  # (F,) int32: block means of all closed split chains
    closed_chains: jax.Array  # (F,) int32: closed split chains with at least one block


class ProxyMoments(NamedTuple):
    """Closed only: the proxies' pooled within-chain variance per draw (normalises them).

    Computed when a chain is closed, from its histograms (the proxies are
    functions of the draw and of the chain's reference quantiles), so that
    nothing is accumulated per draw for them.
    """

    closed_ss: tuple  # (F - 2) x (D,): sum over closed split chains of n * within variance
    closed_count: jax.Array  # () float: sum of those chains' lengths


class LagState(NamedTuple):
    reference: jax.Array  # (2, 9, D): per half, the chain's quantiles at REFERENCE_LEVELS
    slopes: jax.Array  # (2, 8, D): per half, the bulk proxy's slope between reference knots
    window: jax.Array  # (R, D): draws x (not x - c): rows 0 .. L0 - 1 the last L0 draws
    #   already in the sums (oldest first), rows L0 + s the s-th draw of the current block
    exact: ExactLags
    proxy_lags: tuple[ProxyLags, ...]  # the first proxy_lags proxies (bulk, tails)
    levels: tuple[BlockLevel, ...]
    proxies: ProxyMoments


def _proxy_lags_init(d: int, dtype, settings: LagSettings) -> ProxyLags:
    z, m, l0 = jnp.zeros, settings.max_lag + 1, settings.max_lag
    return ProxyLags(z((l0, d), dtype), z((m, d), dtype), z((d,), dtype), z((2, m, d), dtype),
                     z((2, d), dtype), z((2, l0, d), dtype), z((l0, d), dtype),
                     z((m, d), dtype))  # fmt: skip


def lag_init(d: int, dtype, settings: LagSettings) -> LagState:
    l0, f, p = settings.max_lag, settings.num_features, settings.num_pooled
    z = jnp.zeros
    exact = ExactLags(z((l0 + 1, d), dtype), z((l0 + 1, d), dtype), z((2, l0, d), dtype),
                      z((l0, d), dtype))  # fmt: skip
    proxy_lags = tuple(_proxy_lags_init(d, dtype, settings) for _ in range(settings.proxy_lags))
    levels = tuple(
        BlockLevel(
            acc=tuple(z((d,), dtype) for _ in range(f)),
            ring=tuple(z((2 * (lb + 1), d), dtype) for _ in range(f)),
            blocks=z((), jnp.int32),
            valid=z((f,), jnp.int32),
            sums=tuple(z((lb + 1, d), dtype) for _ in range(p + 2)),
            tail_sums=tuple(z((2, lb + 1, d), dtype) for _ in range(f - p)),
            tail_ratio=tuple(z((lb + 1, d), dtype) for _ in range(f - p)),
            tail_chains=tuple(z((d,), dtype) for _ in range(f - p)),
            half_sum=tuple(z((2, d), dtype) for _ in range(f)),
            half_count=z((2, f), jnp.int32),
            closed_count=z((f,), jnp.int32),
            closed_chains=z((f,), jnp.int32),
        )
        for lb in settings.block_lags
    )
    proxies = ProxyMoments(tuple(z((d,), dtype) for _ in range(f - 2)), z((), dtype))
    k = len(REFERENCE_LEVELS)
    return LagState(
        z((2, k, d), dtype), z((2, k - 1, d), dtype), z((settings.window_rows, d), dtype),
        exact, proxy_lags, levels, proxies,
    )  # fmt: skip


def reference_slopes(knots: jax.Array) -> jax.Array:
    """``(8, D)`` slopes of the bulk proxy between consecutive knots ``(9, D)`` (0 if equal)."""
    width = knots[1:] - knots[:-1]
    rise = jnp.diff(jnp.asarray(_SCORES, knots.dtype))[:, None]
    return jnp.where(width > 0, rise / jnp.where(width > 0, width, 1.0), 0.0)


def bulk_proxy(x: jax.Array, knots: jax.Array, slopes: jax.Array) -> jax.Array:
    """Piecewise-linear normal scores through ``knots`` ``(9, ...)``, constant beyond them."""
    z = jnp.full_like(x, _SCORES[0])
    for k in range(len(_SCORES) - 1):
        z = z + slopes[k] * jnp.clip(x - knots[k], 0.0, knots[k + 1] - knots[k])
    return z


def features(y, x, knots: jax.Array, slopes: jax.Array, settings: LagSettings) -> tuple:
    """Draws' features, each shaped as ``y`` (proxies meaningless before the reference)."""
    out = (y, y * y)
    if settings.proxies:
        out += (
            bulk_proxy(x, knots, slopes),
            (x <= knots[_LO]).astype(y.dtype),
            (x > knots[_HI]).astype(y.dtype),
        )
    return out


def _window(ring: jax.Array, y: jax.Array, position: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Write ``y`` into a double-buffered ring ``(2 M, D)`` at ``position``; return the ring
    and the window ``(M, D)`` of the last ``M`` values, oldest first (``y`` last)."""
    m = ring.shape[0] // 2
    r = position % m
    ring = jax.lax.dynamic_update_index_in_dim(ring, y, r, 0)
    ring = jax.lax.dynamic_update_index_in_dim(ring, y, r + m, 0)
    return ring, jax.lax.dynamic_slice_in_dim(ring, r + 1, m)


def _split(index: jax.Array, settings: LagSettings) -> tuple:
    """(half, position in half, in a half) of draws ``index`` (as ``convergence``'s)."""
    seg = (index >= settings.second).astype(jnp.int32)
    pos = index - seg * settings.second
    in_split = ~((settings.second != settings.half) & (index == settings.half))
    return seg, pos, in_split


def _slot(index: jax.Array, settings: LagSettings) -> jax.Array:
    """Row of draw ``index`` in its block: blocks start at multiples of ``B`` in each half,
    and the middle draw of an odd ``num_draws`` is a block of its own."""
    _, pos, in_split = _split(index, settings)
    return jnp.where(in_split, pos % settings.block, 0)


def _window_rows(index: jax.Array, pending: jax.Array, settings: LagSettings) -> WindowRows:
    """The draws of the window's rows once draw ``index`` is written and ``pending`` draws
    of the block (the last of them ``index``) are not yet in the sums."""
    r = settings.window_rows
    idx = index - pending - settings.max_lag + 1 + jnp.arange(r, dtype=jnp.int32)
    seg, pos, in_split = _split(idx, settings)
    return WindowRows(idx, seg, pos, in_split, pending)


def _lagged_products(window: jax.Array, use: jax.Array) -> jax.Array:
    """``(L0 + 1, D)``: row ``k`` sums ``use[k, j] w[L0 + j] w[k + j]`` over the block's rows
    ``j`` (lag ``L0 - k``) of a window ``w`` ``(L0 + B, D)``.

    Static slices of a buffer: one fused, vectorised pass per block, where per-draw
    products read and wrote the whole ``(L0 + 1, D)`` sums at every draw.
    """
    b = use.shape[1]
    m = window.shape[0] - b + 1
    total = None
    for j in range(b):
        term = use[:, j, None] * window[j : j + m] * window[m - 1 + j][None]
        total = term if total is None else total + term
    return total


def _sum_rows(a: jax.Array, weight: jax.Array) -> jax.Array:
    """``sum_j weight[j] a[j]`` over the rows of ``a`` ``(B, D)``, as adds of ``(D,)`` rows:
    XLA on CPU reduces a small leading axis through a library call (slower here)."""
    total = weight[0] * a[0]
    for j in range(1, a.shape[0]):
        total = total + weight[j] * a[j]
    return total


def _proxy_position(seg, pos, settings: LagSettings) -> jax.Array:
    """Position of a draw in its half's proxy range (negative before ``reference_draw``)."""
    return pos - jnp.where(seg == 1, 0, settings.reference_draw)


def _keep_ends(lags, values, rows: WindowRows, head_pos, ok, settings: LagSettings):
    """``lags`` (exact or proxy) with the block's draws kept that are among the first
    ``max_lag`` of their half (``head_pos`` in ``[0, L0)``) or among the last ``max_lag``
    of the first half, where ``ok`` ``(B,)``; ``values`` ``(B, D)``."""
    l0 = settings.max_lag
    h = jnp.arange(l0)
    seg = rows.seg[-1]
    pos = rows.pos[l0:]

    def pick(rows_wanted, match_pos):  # (L0, D) values of the rows whose position matches
        match = (match_pos[None, :] == rows_wanted[:, None]) & ok[None, :]  # (L0, B)
        return jnp.take(values, jnp.argmax(match, axis=1), axis=0), jnp.any(match, axis=1)

    new, has = pick(h, head_pos)
    cur = jax.lax.dynamic_index_in_dim(lags.head, seg, keepdims=False)
    head = jax.lax.dynamic_update_index_in_dim(lags.head, jnp.where(has[:, None], new, cur), seg, 0)
    tail = lags.tail
    if settings.half > 0:
        # tail row k: position half - 1 - k of the first half
        new, has = pick(settings.half - 1 - h, jnp.where(rows.seg[l0:] == 0, pos, -1))
        tail = jnp.where(has[:, None], new, tail)
    return lags._replace(head=head, tail=tail)


def _ends_due(rows: WindowRows, head_pos, settings: LagSettings) -> jax.Array:
    """Whether some draw of the block may be among the ends :func:`_keep_ends` keeps
    (from the draw index only, so that the cond stays a branch under ``vmap``)."""
    l0 = settings.max_lag
    ins = rows.in_split[l0:]
    due = jnp.any(ins & (head_pos >= 0) & (head_pos < l0))
    if settings.half > 0:
        due = due | jnp.any(ins & (rows.seg[l0:] == 0) & (rows.pos[l0:] >= settings.half - l0))
    return due


def _flush_proxy_lags(pl: ProxyLags, seg) -> ProxyLags:
    """Move the partial sums into half ``seg``'s sums."""
    z = jnp.zeros_like
    return pl._replace(
        partial=z(pl.partial), partial_sum=z(pl.partial_sum),
        sums=row_add(pl.sums, seg, pl.partial), half_sum=row_add(pl.half_sum, seg, pl.partial_sum),
    )  # fmt: skip


def flush_exact(ex: ExactLags) -> ExactLags:
    """Move the partial lag sums into the running sums."""
    return ex._replace(sums=ex.sums + ex.partial, partial=jnp.zeros_like(ex.partial))


def _process_block(
    lvl: BlockLevel, means: tuple, block_ok, seg, first_of_half, p: int
) -> BlockLevel:
    """Lagged products of one finished block's feature means (each ``(D,)``)."""
    lb = lvl.sums[0].shape[0] - 1
    f = len(means)
    dtype = means[0].dtype
    valid_prev = jnp.where(first_of_half, 0, lvl.valid)
    lag = lb - jnp.arange(lb + 1)  # row k of a window holds lag L - k
    # lag t is usable when t earlier blocks of this half are in the ring and the block is valid
    use = [((lag <= valid_prev[i]) & block_ok[i]).astype(dtype)[:, None] for i in range(f)]
    rings, windows = [], []
    for r, mean in zip(lvl.ring, means, strict=True):
        r, w = _window(r, mean, lvl.blocks)
        rings.append(r)
        windows.append(w)
    sums = [lvl.sums[i] + use[i] * windows[i] * means[i][None] for i in range(p)]
    sums.append(lvl.sums[QY] + use[Q] * windows[Y] * means[Q][None])  # q_t y_(t-k)
    sums.append(lvl.sums[YQ] + use[Q] * windows[Q] * means[Y][None])  # y_t q_(t-k)
    tail_sums = tuple(
        row_add(lvl.tail_sums[j], seg, use[i] * windows[i] * means[i][None])
        for j, i in enumerate(range(p, f))
    )
    ok = [block_ok[i].astype(dtype) for i in range(f)]
    return lvl._replace(
        acc=tuple(jnp.zeros_like(a) for a in lvl.acc),
        ring=tuple(rings),
        blocks=lvl.blocks + 1,
        valid=jnp.where(block_ok, jnp.minimum(valid_prev + 1, lb), 0),
        sums=tuple(sums),
        tail_sums=tail_sums,
        half_sum=tuple(
            row_add(h, seg, o * m) for h, o, m in zip(lvl.half_sum, ok, means, strict=True)
        ),
        half_count=row_add(lvl.half_count, seg, block_ok.astype(jnp.int32)),
    )


def _finish_levels(levels: tuple, index, seg, pos, settings: LagSettings) -> tuple:
    """Process the level-0 block that just ended, and the higher ones that end with it."""
    f, p = settings.num_features, settings.num_pooled
    # proxies are defined from reference_draw in the first half, from the start in the second
    first = jnp.asarray([0, 0] + [settings.reference_draw] * (f - 2), jnp.int32)
    proxy_from = jnp.where(seg == 1, 0, first)
    sizes = settings.block_sizes

    def cascade(k: int, levels: tuple) -> tuple:
        """Levels k, k+1, ... (``levels[0]`` is level k, whose block just ended)."""
        lvl = levels[0]
        b = sizes[k]
        block_ok = index + 1 - b >= proxy_from
        means = tuple(a / b for a in lvl.acc)
        new = _process_block(lvl, means, block_ok, seg, pos + 1 == b, p)
        rest = tuple(levels[1:])
        if not rest:
            return (new,)
        nxt = rest[0]._replace(acc=tuple(a + c for a, c in zip(rest[0].acc, lvl.acc, strict=True)))
        rest = (nxt, *rest[1:])
        done = (pos + 1) % sizes[k + 1] == 0
        rest = jax.lax.cond(done, lambda r: cascade(k + 1, r), lambda r: r, rest)
        return (new, *rest)

    return cascade(0, tuple(levels))


def lag_update(state: LagState, x: jax.Array, index: jax.Array, settings: LagSettings) -> LagState:
    """Add draw ``index`` of one chain: write ``x`` into the window (no arithmetic per draw).

    The lagged products, proxies and block sums of a block's draws are computed
    when the block ends, by :func:`lag_slow_path`.
    """
    row = settings.max_lag + _slot(index, settings)
    return state._replace(window=jax.lax.dynamic_update_index_in_dim(state.window, x, row, 0))


def _half_end(index, settings: LagSettings) -> jax.Array:
    """Whether draw ``index`` is the last of the first half's in-split draws, or the
    middle draw of an odd ``num_draws`` (blocks never straddle the halves)."""
    if settings.half == 0:
        return jnp.zeros((), bool)
    return (index == settings.half - 1) | (index == settings.second - 1)


def _block_due(index, pos, settings: LagSettings) -> jax.Array:
    return ((pos + 1) % settings.block == 0) | _half_end(index, settings)


def lag_due(index, seg, pos, in_split, settings: LagSettings) -> jax.Array:
    """Whether draw ``index`` needs :func:`lag_slow_path` (a lag block ends, or a flush)."""
    del seg, in_split
    due = _block_due(index, pos, settings)
    if settings.max_lag > 0:
        due = due | ((index + 1) % FLUSH == 0)
    return due


def set_reference(state: LagState, row: jax.Array, knots: jax.Array) -> LagState:
    """Fix half ``row``'s reference quantiles ``(9, D)`` (the knots of its proxies)."""
    slopes = reference_slopes(knots)
    return state._replace(
        reference=jax.lax.dynamic_update_index_in_dim(state.reference, knots, row, 0),
        slopes=jax.lax.dynamic_update_index_in_dim(state.slopes, slopes, row, 0),
    )


def _masked_features(state: LagState, x, pilot, index, seg, settings: LagSettings) -> tuple:
    """Features of draws ``x`` ``(n, D)`` (draw indices ``index`` ``(n,)``, all in half
    ``seg``), zero outside the split (all) and outside the half's proxy range (proxies)."""
    dtype = x.dtype
    y = x - pilot[None]  # as computed per draw: the same values
    knots = jax.lax.dynamic_index_in_dim(state.reference, seg, keepdims=False)
    slopes = jax.lax.dynamic_index_in_dim(state.slopes, seg, keepdims=False)
    v = features(y, x, knots, slopes, settings)
    row_seg, _, in_split = _split(index, settings)
    w = in_split.astype(dtype)[:, None]
    if settings.num_features > 2:
        in_range = (row_seg == 1) | (index >= settings.reference_draw)
        dw = in_range.astype(dtype)[:, None] * w
        return (v[0] * w, v[1] * w, *tuple(a * dw for a in v[2:]))
    return tuple(a * w for a in v)


def _block_features(state: LagState, pilot, rows: WindowRows, seg, settings) -> tuple:
    """``(block, windows)``: the block's draws' features (masked), each ``(B, D)``, and
    for each proxy with exact lags its values over the window, ``(R, D)`` (the block's
    after the ``L0`` kept in its :class:`ProxyLags`)."""
    l0 = settings.max_lag
    block = _masked_features(state, state.window[l0:], pilot, rows.index[l0:], seg, settings)
    windows = tuple(
        jnp.concatenate([pl.window, block[BULK + k]]) for k, pl in enumerate(state.proxy_lags)
    )
    return block, windows


def _lag_block(
    state: LagState,
    pilot,
    rows: WindowRows,
    index,
    seg,
    pos,
    settings: LagSettings,
    levels: bool,
    features: tuple | None = None,
) -> LagState:
    """Add the block's ``rows.pending`` draws (window rows ``L0 ..``; the last is draw
    ``index``, in half ``seg`` at ``pos``) to the exact lags, the proxy lags and, with
    ``levels``, the finest block level; then shift the windows by them. ``features``:
    :func:`_block_features`, computed here if not given."""
    l0, b = settings.max_lag, settings.block
    dtype = state.window.dtype
    p = rows.pending
    valid = jnp.arange(b) < p  # (B,): block rows holding pending draws
    weight = valid.astype(dtype)
    xw = state.window
    if features is None:
        features = _block_features(state, pilot, rows, seg, settings)
    block, windows = features
    lag = (l0 - jnp.arange(l0 + 1))[:, None]  # (L0 + 1, 1): lag of each row of the sums
    within = lag <= rows.pos[None, l0:]  # (L0 + 1, B): the pair lies in the draw's half
    block_split = rows.in_split[l0:]

    def shift(w):  # the last L0 rows once the pending draws are added
        return jax.lax.dynamic_slice_in_dim(w, p, l0)

    exact = state.exact
    window = xw
    if l0 > 0:
        yw = xw - pilot[None]
        use = (within & (block_split & valid)[None]).astype(dtype)
        exact = exact._replace(partial=exact.partial + _lagged_products(yw, use))
        exact = jax.lax.cond(
            _ends_due(rows, rows.pos[l0:], settings),
            lambda e: _keep_ends(e, yw[l0:], rows, rows.pos[l0:], block_split & valid, settings),
            lambda e: e,
            exact,
        )
        window = jax.lax.dynamic_update_slice_in_dim(xw, shift(xw), 0, 0)

    proxy_lags = []
    head_pos = _proxy_position(rows.seg[l0:], rows.pos[l0:], settings)
    ok = block_split & valid & (head_pos >= 0)
    use = (within & valid[None]).astype(dtype)
    for pl, values in zip(state.proxy_lags, windows, strict=True):
        # values (R, D): zero outside the half's proxy range
        pl = pl._replace(
            window=shift(values),
            partial=pl.partial + _lagged_products(values, use),
            partial_sum=pl.partial_sum + _sum_rows(values[l0:], weight),
        )
        pl = jax.lax.cond(
            _ends_due(rows, jnp.where(head_pos >= 0, head_pos, l0), settings),
            lambda q, values=values: _keep_ends(q, values[l0:], rows, head_pos, ok, settings),
            lambda q: q,
            pl,
        )
        proxy_lags.append(pl)

    lv = state.levels
    if levels and lv:
        # the block's draws in groups of the finest level's block size (one group when
        # that is B or more), each closing a level-0 block when its last draw ends one
        b0 = settings.block_sizes[0]
        g = min(b0, b)
        last = l0 + np.arange(g - 1, b, g)  # window row of each group's last draw
        groups = (
            tuple(
                jnp.stack([_sum_rows(a[k : k + g], weight[k : k + g]) for k in range(0, b, g)])
                for a in block
            ),  # F x (groups, D)
            rows.index[last], rows.seg[last], rows.pos[last],
            valid[last - l0] & rows.in_split[last] & ((rows.pos[last] + 1) % b0 == 0),
        )  # fmt: skip

        def group(lv: tuple, xs: tuple) -> tuple:
            sums, at_index, at_seg, at_pos, done = xs
            acc = tuple(a + s for a, s in zip(lv[0].acc, sums, strict=True))
            lv = (lv[0]._replace(acc=acc), *lv[1:])
            finish = lambda q: _finish_levels(q, at_index, at_seg, at_pos, settings)  # noqa: E731
            return jax.lax.cond(done, finish, lambda q: q, lv), None

        if b // g == 1:
            lv, _ = group(lv, jax.tree.map(lambda a: a[0], groups))
        else:  # one copy of the level cascade in the program, not one per group
            lv, _ = jax.lax.scan(group, lv, groups)
        # incomplete blocks of the first half do not carry into the second
        end = _half_end(index, settings)
        lv = tuple(lvl._replace(acc=tuple(jnp.where(end, 0.0, a) for a in lvl.acc)) for lvl in lv)
    return state._replace(window=window, exact=exact, proxy_lags=tuple(proxy_lags), levels=lv)


def lag_slow_path(state: LagState, pilot, index, seg, pos, settings: LagSettings) -> LagState:
    """Rare per-draw work: a finished lag block, flushes (nested conds).

    ``pilot``: the shift ``c`` of the elements with lags.
    """
    rows = _window_rows(index, _slot(index, settings) + 1, settings)

    # The cond carries only what the block changes (the reference, read here, stays out).
    def block(parts: dict) -> dict:
        out = _lag_block(
            state._replace(**parts), pilot, rows, index, seg, pos, settings, True, features
        )
        return {k: getattr(out, k) for k in parts}

    due = _block_due(index, pos, settings)
    # The features in a cond of their own, so that they are computed once, into buffers:
    # XLA on CPU fuses cheap elementwise producers into each consumer, even ones that
    # read every value B times (the lagged products), and drops optimization barriers.
    features = jax.lax.cond(
        due,
        lambda: _block_features(state, pilot, rows, seg, settings),
        lambda: jax.tree.map(
            jnp.zeros_like,
            jax.eval_shape(lambda: _block_features(state, pilot, rows, seg, settings)),
        ),
    )
    parts = {k: getattr(state, k) for k in ("window", "exact", "proxy_lags", "levels")}
    parts = jax.lax.cond(due, block, lambda q: q, parts)
    state = state._replace(**parts)
    if settings.max_lag > 0:
        flush = (index + 1) % FLUSH == 0
        exact = jax.lax.cond(flush, flush_exact, lambda e: e, state.exact)
        half = settings.half
        # each half's proxy products are flushed into their own row
        due = flush | ((half > 0) & (index == half - 1))
        row = ((half > 0) & (index >= half)).astype(jnp.int32)
        proxy_lags = tuple(
            jax.lax.cond(due, lambda q: _flush_proxy_lags(q, row), lambda q: q, pl)
            for pl in state.proxy_lags
        )
        state = state._replace(exact=exact, proxy_lags=proxy_lags)
    return state


def _close_exact(ex: ExactLags, recent, half_count, half_sum, settings: LagSettings) -> ExactLags:
    """Centre the exact lag sums at each half's mean (``half_sum`` ``(2, D)``, exact sums of
    y; ``recent`` ``(L0, D)``: the last draws' y, newest first)."""
    l0 = settings.max_lag
    if l0 == 0:
        return ex
    dtype = ex.sums.dtype
    sums = (ex.sums + ex.partial)[::-1][1:]  # lags 1 .. L0 (row t - 1: lag t)
    first_done = (settings.half > 0) & (half_count[0] >= settings.half)
    t = jnp.arange(1, l0 + 1)
    corr = jnp.zeros_like(sums)
    for j in range(2):
        n = half_count[j]
        nf = n.astype(dtype)
        total = half_sum[j]
        mean = total / jnp.maximum(nf, 1.0)
        last = jnp.where(first_done, ex.tail, recent) if j == 0 else recent
        a = total[None] - jnp.cumsum(last, axis=0)  # lag t: sum of y_1 .. y_(n - t)
        b = total[None] - jnp.cumsum(ex.head[j], axis=0)  # sum of y_(t + 1) .. y_n
        term = -mean[None] * (a + b) + (nf - t)[:, None] * (mean * mean)[None]
        corr = corr + jnp.where((t < n)[:, None], term, 0.0)
    z = jnp.zeros_like
    closed = jnp.concatenate([(sums + corr)[::-1], jnp.zeros_like(sums[:1])])  # rows as open
    return ExactLags(z(ex.partial), closed, z(ex.head), z(ex.tail))


def _close_proxy_lags(
    pl: ProxyLags, recent, half_count, count, indicator: bool, settings: LagSettings
) -> ProxyLags:
    """Centre each half's lag sums at the mean over the half's proxy range and fold them
    into ``closed``: summed (the bulk), or as autocorrelations (an ``indicator``).
    ``recent`` ``(L0, D)``: the last draws' values, newest first; the pending draws must
    have been added (:func:`_lag_block`)."""
    l0 = settings.max_lag
    dtype = pl.sums.dtype
    last_seg = ((settings.half > 0) & (count - 1 >= settings.half)).astype(jnp.int32)
    sums = row_add(pl.sums, last_seg, pl.partial)
    half_sum = row_add(pl.half_sum, last_seg, pl.partial_sum)
    first_done = (settings.half > 0) & (half_count[0] >= settings.half)
    t = jnp.arange(l0 + 1)  # lags 0 .. L0
    zero = jnp.zeros_like(pl.partial_sum)[None]
    closed = pl.closed
    for j in range(2):
        n = jnp.maximum(half_count[j] - (settings.reference_draw if j == 0 else 0), 0)
        nf = n.astype(dtype)
        total = half_sum[j]
        mean = total / jnp.maximum(nf, 1.0)
        last = jnp.where(first_done, pl.tail, recent) if j == 0 else recent
        a = total[None] - jnp.concatenate([zero, jnp.cumsum(last, axis=0)])  # p_1 .. p_(n-t)
        b = total[None] - jnp.concatenate([zero, jnp.cumsum(pl.head[j], axis=0)])  # p_(t+1) ..
        centred = sums[j][::-1] - mean[None] * (a + b) + (nf - t)[:, None] * (mean * mean)[None]
        centred = jnp.where((t < n)[:, None], centred, 0.0)  # (L0 + 1, D), row t: lag t
        if indicator:
            # a varying indicator has lag 0 = n p (1 - p) >= 1 - 1/n; a constant one, 0
            ok = centred[0] > 0.25
            centred = jnp.where(ok[None], centred / jnp.where(ok, centred[0], 1.0)[None], 0.0)
        closed = closed + centred
    z = jnp.zeros_like
    return ProxyLags(z(pl.window), z(pl.partial), z(pl.partial_sum), z(pl.sums),
                     z(pl.half_sum), z(pl.head), z(pl.tail), closed)  # fmt: skip


def _close_level(lvl: BlockLevel, proxy_var: tuple, p: int) -> BlockLevel:
    """Centre one chain's block sums at each half's mean and fold them into the closed sums.

    ``proxy_var``: per proxy feature ``(2, D)``, each half's per-draw variance.
    """
    dtype = lvl.half_sum[0].dtype
    lb = lvl.sums[0].shape[0] - 1
    f = len(lvl.acc)
    t = (lb - jnp.arange(lb + 1)).astype(dtype)[:, None]  # lag of each row
    sums = list(lvl.sums)
    ratio = list(lvl.tail_ratio)
    chains = list(lvl.tail_chains)
    for j in range(2):
        n = lvl.half_count[j].astype(dtype)  # (F,)
        means = [h[j] / jnp.maximum(n[i], 1.0) for i, h in enumerate(lvl.half_sum)]
        for i in range(p):
            sums[i] = sums[i] - jnp.maximum(n[i] - t, 0.0) * (means[i] * means[i])[None]
        cross = jnp.maximum(n[Q] - t, 0.0) * (means[Y] * means[Q])[None]
        sums[QY] = sums[QY] - cross
        sums[YQ] = sums[YQ] - cross
        for k, i in enumerate(range(p, f)):
            # tails: each split chain's autocovariance per block over its per-draw variance
            centred = lvl.tail_sums[k][j] - jnp.maximum(n[i] - t, 0.0) * (means[i] * means[i])[None]
            var = proxy_var[i - 2][j]
            ok = (var > 0) & (n[i] >= 1)
            r = centred / jnp.maximum(n[i], 1.0) / jnp.where(ok, var, 1.0)[None]
            ratio[k] = ratio[k] + jnp.where(ok[None], r, 0.0)
            chains[k] = chains[k] + ok.astype(dtype)
    z = jnp.zeros_like
    return lvl._replace(
        acc=tuple(z(a) for a in lvl.acc), ring=tuple(z(r) for r in lvl.ring), blocks=z(lvl.blocks),
        valid=z(lvl.valid),
        sums=tuple(sums), tail_sums=tuple(z(a) for a in lvl.tail_sums), tail_ratio=tuple(ratio),
        tail_chains=tuple(chains), half_sum=tuple(z(h) for h in lvl.half_sum),
        half_count=z(lvl.half_count),
        closed_count=lvl.closed_count + jnp.sum(lvl.half_count, axis=0, dtype=jnp.int32),
        closed_chains=lvl.closed_chains
        + jnp.sum((lvl.half_count > 0).astype(jnp.int32), axis=0, dtype=jnp.int32),
    )  # fmt: skip


def lag_close(
    state: LagState, pilot, half_count, half_sum, proxy_var: tuple, count, settings: LagSettings
) -> LagState:
    """Fold one chain's open lag state into the closed form.

    Parameters
    ----------
    pilot
        ``(D,)``: the shift ``c`` of the elements with lags.
    half_count, half_sum
        ``(2,)`` and ``(2, D)``: the exact count and sum of ``y`` of each split
        half (from the moments).
    count
        Draws the chain has seen (the middle one of an odd ``num_draws`` included).
        The draws of an unfinished lag block are added first; an unfinished block
        of a block level is dropped.
    proxy_var
        Per proxy feature, ``(2, D)``: each half's per-draw variance (from the
        histograms; empty without proxies).
    """
    pm = state.proxies
    dtype = half_sum.dtype
    n = half_count.astype(dtype)[:, None]  # (2, 1)
    proxies = ProxyMoments(
        tuple(c + jnp.sum(n * v, axis=0) for c, v in zip(pm.closed_ss, proxy_var, strict=True)),
        pm.closed_count + jnp.sum(half_count).astype(dtype),
    )
    l0 = settings.max_lag
    index = count - 1
    seg, pos, _ = _split(index, settings)
    pending = jnp.where(_block_due(index, pos, settings), 0, _slot(index, settings) + 1)
    rows = _window_rows(index, pending, settings)
    state = _lag_block(state, pilot, rows, index, seg, pos, settings, levels=False)
    last = state.window[:l0]  # the last L0 draws, oldest first
    recent = (last - pilot[None])[::-1]
    exact = _close_exact(state.exact, recent, half_count, half_sum, settings)
    proxy_lags = tuple(
        _close_proxy_lags(pl, pl.window[::-1], half_count, count, k > 0, settings)
        for k, pl in enumerate(state.proxy_lags)
    )
    levels = tuple(_close_level(lvl, proxy_var, settings.num_pooled) for lvl in state.levels)
    z = jnp.zeros_like
    return LagState(
        z(state.reference), z(state.slopes), z(state.window), exact, proxy_lags, levels, proxies
    )


def lag_combine(a: LagState, b: LagState) -> LagState:
    """Sum of two closed lag states."""

    def add(u, v):
        return jax.tree.map(jnp.add, u, v)

    exact = a.exact._replace(sums=a.exact.sums + b.exact.sums)
    proxy_lags = tuple(
        pa._replace(closed=pa.closed + pb.closed)
        for pa, pb in zip(a.proxy_lags, b.proxy_lags, strict=True)
    )
    levels = tuple(
        la._replace(
            sums=add(la.sums, lb.sums),
            tail_ratio=add(la.tail_ratio, lb.tail_ratio),
            tail_chains=add(la.tail_chains, lb.tail_chains),
            closed_count=la.closed_count + lb.closed_count,
            closed_chains=la.closed_chains + lb.closed_chains,
        )
        for la, lb in zip(a.levels, b.levels, strict=True)
    )
    proxies = a.proxies._replace(
        closed_ss=add(a.proxies.closed_ss, b.proxies.closed_ss),
        closed_count=a.proxies.closed_count + b.proxies.closed_count,
    )
    return LagState(a.reference, a.slopes, a.window, exact, proxy_lags, levels, proxies)


# -- ESS --------------------------------------------------------------------------------------
# A "target" maps a closed block level to the target's mean autocovariance per block,
# (L + 1, D), in the target's own units.
Target = Callable[[BlockLevel], jax.Array]


def _count(lvl: BlockLevel, feature: int) -> jax.Array:
    return jnp.maximum(lvl.closed_count[feature], 1).astype(lvl.sums[0].dtype)


def direct(feature: int) -> Target:
    """The target is the feature itself (y: ESS of the mean)."""
    return lambda lvl: lvl.sums[feature][::-1] / _count(lvl, feature)


def squared_deviation(delta: jax.Array) -> Target:
    """The target is ``(x - mu)^2`` with ``mu - c = delta`` ``(D,)``: exact from y, q and cross."""

    def fn(lvl: BlockLevel) -> jax.Array:
        s = lvl.sums
        c2 = s[Q] - 2.0 * delta * (s[QY] + s[YQ]) + 4.0 * delta**2 * s[Y]
        return c2[::-1] / _count(lvl, Q)

    return fn


def proxy(state: LagState, feature: int, within: jax.Array, length) -> Target:
    """The target's autocorrelations are those of a pooled proxy feature; its ``W`` is known."""
    pm = state.proxies
    dtype = within.dtype
    v0 = pm.closed_ss[feature - 2] / jnp.maximum(pm.closed_count, 1.0)
    n = jnp.asarray(length, dtype)
    scale = within * (n - 1.0) / n / v0
    return lambda lvl: scale[None] * lvl.sums[feature][::-1] / _count(lvl, feature)


def tail_proxy(feature: int, within: jax.Array, length, num_pooled: int) -> Target:
    """Like :func:`proxy`, for a tail indicator normalised per split chain."""
    n = jnp.asarray(length, within.dtype)

    def fn(lvl: BlockLevel) -> jax.Array:
        k = feature - num_pooled
        mean_ratio = lvl.tail_ratio[k][::-1] / jnp.maximum(lvl.tail_chains[k], 1.0)[None]
        return (within * (n - 1.0) / n)[None] * mean_ratio

    return fn


class EssResult(NamedTuple):
    ess: jax.Array  # (D,) float: effective sample size
    resolution: jax.Array  # (D,) int32: block size of the lags used (1: exact), 0 if none
    truncated: jax.Array  # (D,) bool: Geyer's sequence did not end within any level's lags


def exact_mean_acov(state: LagState, within: jax.Array, length, num_split) -> jax.Array:
    """``(D, L0 + 1)``: the mean autocovariance of ``y`` at lags ``0 .. max_lag`` (exact).

    Lag 0 from the exact within sums of squares: ``W (n - 1) / n = mean_j acov_j(0)``.
    """
    dtype = within.dtype
    n = jnp.asarray(length, dtype)
    lags = state.exact.sums[::-1][1:]  # lags 1 .. L0
    return jnp.concatenate([(within * (n - 1.0) / n)[:, None], lags.T / (n * num_split)], axis=1)


def exact_proxy_acov(state: LagState, feature: int, within: jax.Array, length) -> jax.Array:
    """``(D, L0 + 1)``: a target's mean autocovariance at lags ``0 .. max_lag``, from the
    autocorrelations of its proxy ``feature`` (exact lags, see :class:`ProxyLags`) and
    its ``W``."""
    closed = state.proxy_lags[feature - BULK].closed  # (L0 + 1, D)
    c0 = closed[0]
    rho = jnp.where(c0 > 0, closed / jnp.where(c0 > 0, c0, 1.0)[None], 0.0)
    n = jnp.asarray(length, within.dtype)
    return (within * (n - 1.0) / n)[:, None] * rho.T


class EssTarget(NamedTuple):
    """One quantity whose ESS is wanted (see :func:`ess_from_lags`)."""

    acov: Target  # block level -> the target's mean autocovariance per block (D, L + 1)
    column: int  # feature whose block counts give the level's length
    within: jax.Array  # (D,): the target's W (mean ddof=1 within-chain variance)
    between: jax.Array  # (D,): var_ddof1 of the target's split-chain means
    exact: jax.Array | None  # (D, L0 + 1): mean autocovariance at lags 0 .. max_lag from
    #   exact lags (exact_mean_acov, exact_proxy_acov), tried first; None: block levels only


def ess_from_lags(
    state: LagState, targets: list[EssTarget], length, num_split, settings: LagSettings
) -> list[EssResult]:
    """ArviZ's multi-chain ESS of several targets from a closed lag state.

    For each target, the finest level (exact lags first, then block sizes in
    increasing order) whose Geyer sequence ends within its lags and that has
    at least ``min_blocks`` blocks per split chain (4 for the finest block
    level, so that short chains get a value) gives the ESS; when none does,
    the coarsest usable level's truncated value (``truncated`` True).
    All targets and levels go through one vectorised Geyer computation.

    Parameters
    ----------
    state
        Closed lag state (summed over split chains).
    targets
        The quantities (their autocovariance maps and variance terms).
    length, num_split
        Draws per split chain ``n`` and number of split chains ``m``.
    """
    dtype = targets[0].within.dtype
    n = jnp.asarray(length, dtype)
    m = jnp.asarray(num_split, dtype)
    total = m * n
    within = jnp.stack([t.within for t in targets])  # (T, D)
    between = jnp.stack([t.between for t in targets])
    var_plus = within * (n - 1.0) / n + between
    candidates = []  # (ess (T, D), terminated, usable, resolution), finest first
    if any(t.exact is not None for t in targets) and settings.max_lag > 0:
        shape = (within.shape[1], settings.max_lag + 1)
        acm = jnp.stack(
            [t.exact if t.exact is not None else jnp.full(shape, jnp.nan, dtype) for t in targets]
        )  # (T, D, L0 + 1)
        res = geyer_tau(acm, within, var_plus, n)
        allowed = jnp.asarray([t.exact is not None for t in targets])[:, None]
        candidates.append((total / res.tau, res.terminated & allowed, (n >= 4) & allowed, 1))
    if state.levels:
        longest = max(settings.block_lags) + 1

        def padded(a):  # lags beyond a level's own read as NaN: the sequence cannot end there
            return jnp.pad(a, ((0, 0), (0, longest - a.shape[1])), constant_values=jnp.nan)

        acm = jnp.stack(
            [jnp.stack([padded(t.acov(lvl).T) for t in targets]) for lvl in state.levels]
        )  # (V, T, D, L + 1)
        cols = [t.column for t in targets]
        count = jnp.stack([lvl.closed_count[jnp.asarray(cols)] for lvl in state.levels]).astype(
            dtype
        )
        chains = jnp.stack([lvl.closed_chains[jnp.asarray(cols)] for lvl in state.levels])
        n_l = (count / jnp.maximum(chains, 1).astype(dtype))[:, :, None]  # (V, T, 1)
        vp_l = acm[..., 0] + between[None]
        res = geyer_tau(acm, acm[..., 0] * n_l / (n_l - 1.0), vp_l, n_l)
        sizes = jnp.asarray(settings.block_sizes, dtype)[:, None, None]
        ess = total * var_plus[None] / (sizes * res.tau * vp_l)
        # a level needs min_blocks blocks per split chain; the finest one, 4 (short chains)
        need = jnp.asarray([4] + [settings.min_blocks] * (len(settings.block_sizes) - 1), dtype)
        usable = jnp.broadcast_to(n_l >= need[:, None, None], ess.shape)
        for v, b in enumerate(settings.block_sizes):
            candidates.append((ess[v], res.terminated[v], usable[v], b))
    shape = within.shape
    ess = jnp.full(shape, jnp.nan, dtype)
    resolution = jnp.zeros(shape, jnp.int32)
    found = jnp.zeros(shape, bool)
    for value, terminated, usable, b in candidates:
        take = ~found & terminated & usable
        ess = jnp.where(take, value, ess)
        resolution = jnp.where(take, b, resolution)
        found = found | take
    fallback = jnp.full(shape, jnp.nan, dtype)
    fb_res = jnp.zeros(shape, jnp.int32)
    for value, _, usable, b in candidates:  # coarsest usable level, truncated
        fallback = jnp.where(usable, value, fallback)
        fb_res = jnp.where(usable, b, fb_res)
    ess = jnp.where(found, ess, fallback)
    resolution = jnp.where(found, resolution, fb_res)
    ess = jnp.minimum(ess, total * jnp.log10(total))
    return [EssResult(ess[i], resolution[i], ~found[i]) for i in range(len(targets))]
