"""Streaming autocovariances for the effective sample size.

Two kinds of lag state, both per split half of one chain:

*Exact lags* of ``y = x - c`` up to ``max_lag``: a ring of the last draws,
the running sums ``sum_i y_i y_(i-t)`` and the first/last ``max_lag`` values of
each half. Closing a chain turns them into ``sum_i (y_i - m)(y_(i+t) - m)``
centred at each half's own mean, which is exactly ArviZ's (FFT) biased
autocovariance times the length; so ``ess_mean`` equals ArviZ's whenever
Geyer's truncation falls within ``max_lag`` (flagged otherwise).

*Exact proxy lags*: the same for the first ``proxy_lags`` proxy features below
(the bulk and, by default, both tails), per half over the range where the proxy is
defined, centred at close at the mean over that range. The proxies' ESS then
uses lags at resolution 1 whenever Geyer's truncation falls within
``max_lag``, as ``ess_mean`` does, and the block levels otherwise.

Closing, merging and reading the states (the ESS) is
:mod:`sluice.stats.effective_size`.

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

Costs are kept per draw and element: the exact lags are ``max_lag``
multiply-adds per exact feature into a partial sum flushed every ``FLUSH``
draws (so float32 sums neither drift nor stall over long runs); block levels
add ``F`` sums per draw and do their lagged products only when a block ends,
under ``lax.cond`` (under ``vmap`` a ``cond`` on per-chain state evaluates both
branches, which costs the block work every draw: cheap on accelerators, where ``vmap`` is the
default). Every per-draw array keeps the elements as its last, contiguous
axis and features are separate arrays (tuples): XLA on CPU vectorises
``(..., D)`` elementwise work well, and ``(D, F)`` stacks or reductions over
small trailing axes poorly (5-20x slower, measured).
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

import jax
import jax.numpy as jnp

from sluice.stats._numerics import row_add, row_set_where, zeros_if

__all__ = [
    "REFERENCE_LEVELS",
    "LagSettings",
    "LagState",
    "lag_due",
    "lag_init",
    "lag_slow_path",
    "lag_update",
    "set_reference",
]

# Reference quantile levels fixed per chain and half (knots of the bulk proxy).
REFERENCE_LEVELS = (0.01, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
_LO, _HI = 1, 7  # indices of 0.05 and 0.95 in REFERENCE_LEVELS
# (computed in Python: importing sluice must not start a JAX backend)
_SCORES = tuple(statistics.NormalDist().inv_cdf(p) for p in REFERENCE_LEVELS)
FLUSH = 256  # draws between flushes of the exact lags' partial sums
Y, Q, BULK, TAIL_LO, TAIL_HI = 0, 1, 2, 3, 4  # features
QY, YQ = -2, -1  # cross entries of the pooled sums: q_t y_(t-k) and y_t q_(t-k)


class LagSettings(NamedTuple):
    """Static settings of the lag part."""

    max_lag: int  # exact lags of y (0: none)
    block_sizes: tuple[int, ...]  # block lengths of the block levels, increasing multiples
    block_lags: tuple[int, ...]  # lags of each block level
    proxies: bool  # track the bulk and tail proxies besides y and y^2
    reference_draw: int  # draw at which each chain fixes the first half's reference quantiles
    half: int  # draws per split half (num_draws // 2); 0 when not split
    min_blocks: int  # blocks per split chain a block level needs to be used
    proxy_lags: int  # proxies with exact lags up to max_lag: 0, 1 (bulk) or 3 (bulk, tails)
    second: int = 0  # first draw of the second half (num_draws - half); 0 when not split

    @property
    def num_features(self) -> int:
        return 5 if self.proxies else 2

    @property
    def num_pooled(self) -> int:
        """Features whose lagged products are pooled over halves (all but the tails)."""
        return 3 if self.proxies else 2


class ExactLags(NamedTuple):
    ring: jax.Array  # (2 M, D), M = L0 + 1: the last M draws, each written twice (rows
    #   i mod M and i mod M + M), so rows i mod M + 1 .. i mod M + M hold draws i - L0 .. i
    partial: jax.Array  # (M, D): sum_i y_i y_(i - t) since the last flush, lag t in row L0 - t
    sums: jax.Array  # (M, D): open: flushed sums; closed: centred and summed (same rows)
    head: jax.Array  # (2, L0, D): first L0 draws of each half (oldest first)
    tail: jax.Array  # (L0, D): last L0 draws of the first half (most recent first)


class ProxyLags(NamedTuple):
    """Exact lags of one proxy (the bulk, or a tail indicator) up to ``max_lag``.

    As :class:`ExactLags`, but each half's products and sums are kept apart: a proxy
    exists only from ``reference_draw`` on in the first half, and its transform (the
    reference quantiles) changes between the halves.
    """

    last: jax.Array  # (D,): the value of the latest draw (0 outside its half's range)
    ring: jax.Array  # (2 M, D): the M values before it, as ExactLags.ring
    partial: jax.Array  # (M, D): sum_i p_i p_(i - t) since the last flush (one half),
    #   lag t in row L0 - t, up to the draw before the latest
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
    active: jax.Array  # (17, D): the current half's knots (rows 0-8) and slopes (rows 9-16)
    exact: ExactLags
    proxy_lags: tuple[ProxyLags, ...]  # the first proxy_lags proxies (bulk, tails)
    levels: tuple[BlockLevel, ...]
    proxies: ProxyMoments


def _proxy_lags_init(d: int, dtype, l0: int) -> ProxyLags:
    z, m = jnp.zeros, l0 + 1
    return ProxyLags(z((d,), dtype), z((2 * m, d), dtype), z((m, d), dtype), z((d,), dtype),
                     z((2, m, d), dtype), z((2, d), dtype), z((2, l0, d), dtype),
                     z((l0, d), dtype), z((m, d), dtype))  # fmt: skip


def lag_init(d: int, dtype, settings: LagSettings) -> LagState:
    l0, f, p = settings.max_lag, settings.num_features, settings.num_pooled
    z = jnp.zeros
    exact = ExactLags(z((2 * (l0 + 1), d), dtype), z((l0 + 1, d), dtype), z((l0 + 1, d), dtype),
                      z((2, l0, d), dtype), z((l0, d), dtype))  # fmt: skip
    proxy_lags = tuple(_proxy_lags_init(d, dtype, l0) for _ in range(settings.proxy_lags))
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
    reference = jnp.zeros((2, k, d), dtype)  # set at the reference draws
    return LagState(
        reference, jnp.zeros((2, k - 1, d), dtype), jnp.zeros((2 * k - 1, d), dtype), exact,
        proxy_lags, levels, proxies,
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
    """One draw's features, each ``(D,)`` (proxies meaningless before the reference)."""
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


def _update_exact(ex: ExactLags, y, index, seg, pos, in_split, settings: LagSettings) -> ExactLags:
    l0 = settings.max_lag
    if l0 == 0:
        return ex
    dtype = y.dtype
    ring, window = _window(ex.ring, y, index)  # draws index - L0 .. index
    lag = l0 - jnp.arange(l0 + 1)
    use = ((lag <= pos) & in_split).astype(dtype)[:, None]  # lags within the current half
    partial = ex.partial + window * y[None] * use
    return ex._replace(ring=ring, partial=partial)


def _proxy_position(seg, pos, settings: LagSettings) -> jax.Array:
    """Position of a draw in its half's proxy range (negative before ``reference_draw``)."""
    return pos - jnp.where(seg == 1, 0, settings.reference_draw)


def proxy_products(pl: ProxyLags, index) -> ProxyLags:
    """Write the values of draw ``index`` (``pl.last``) into the ring and add their lagged
    products and sum (values outside their half's range are 0 in the ring: no mask)."""
    ring, window = _window(pl.ring, pl.last, index)  # draws index - L0 .. index
    return pl._replace(
        ring=ring, partial=pl.partial + window * pl.last[None], partial_sum=pl.partial_sum + pl.last
    )


def update_proxy_lags(pl: ProxyLags, value, index) -> ProxyLags:
    """Add one draw's proxy ``(D,)`` (zero outside its range) to its exact lags.

    Draw ``index - 1`` goes into the ring and the products now, from ``last`` (a
    loop-carried buffer), and this draw's value only into ``last``: XLA on CPU fuses
    an elementwise producer into each of its consumers, and products taken from the
    fresh value would recompute the proxy for every lag (measured 8x slower).
    :func:`_close_proxy_lags` adds the last draw's products.
    """
    pl = proxy_products(pl, index - 1)  # at index 0, zeros
    return pl._replace(last=value)


def _ends(index, seg, pos, in_split, settings: LagSettings) -> tuple[jax.Array, jax.Array]:
    """Whether draw ``index`` is among the first / last ``max_lag`` draws of its half."""
    l0 = settings.max_lag
    head = in_split & (pos < l0)
    tail = jnp.zeros((), bool)
    if settings.half > 0:
        tail = in_split & (seg == 0) & (pos >= settings.half - l0)
    return head, tail


def _proxy_ends(index, seg, pos, in_split, settings: LagSettings) -> tuple[jax.Array, jax.Array]:
    """Whether draw ``index`` is among the first / last ``max_lag`` of its half's proxy range."""
    ppos = _proxy_position(seg, pos, settings)
    head = in_split & (ppos >= 0) & (ppos < settings.max_lag)
    _, tail = _ends(index, seg, pos, in_split, settings)
    return head, tail & (ppos >= 0)


def _proxy_slow_path(pl: ProxyLags, index, seg, pos, in_split, settings) -> ProxyLags:
    """Keep the ends of each half's proxy range, clear the ring of the first half's values
    when the second half starts, flush every ``FLUSH`` draws and once the products of the
    first half are complete (at draw ``half``), so that partial sums belong to one half."""
    head_w, tail_w = _proxy_ends(index, seg, pos, in_split, settings)
    ppos = _proxy_position(seg, pos, settings)
    head = row_set_where(pl.head, (seg, ppos), pl.last, head_w)
    tail = pl.tail
    if settings.half > 0:
        tail = row_set_where(pl.tail, settings.half - 1 - pos, pl.last, tail_w)
    start = (seg == 1) & (pos == 0)
    pl = pl._replace(ring=zeros_if(start, pl.ring), head=head, tail=tail)
    half = settings.half
    row = ((half > 0) & (index > half)).astype(jnp.int32)  # half of the products in partial
    due = ((index + 1) % FLUSH == 0) | ((half > 0) & (index == half))
    return jax.lax.cond(due, lambda q: _flush_proxy_lags(q, row), lambda q: q, pl)


def _flush_proxy_lags(pl: ProxyLags, seg) -> ProxyLags:
    """Move the partial sums into half ``seg``'s sums."""
    z = jnp.zeros_like
    return pl._replace(
        partial=z(pl.partial), partial_sum=z(pl.partial_sum),
        sums=row_add(pl.sums, seg, pl.partial), half_sum=row_add(pl.half_sum, seg, pl.partial_sum),
    )  # fmt: skip


def _write_ends(ex: ExactLags, y, index, seg, pos, in_split, settings: LagSettings) -> ExactLags:
    """Keep the first and last ``max_lag`` draws of each half (their centring terms)."""
    head_w, tail_w = _ends(index, seg, pos, in_split, settings)
    head = row_set_where(ex.head, (seg, pos), y, head_w)
    tail = (
        row_set_where(ex.tail, settings.half - 1 - pos, y, tail_w) if settings.half > 0 else ex.tail
    )
    return ex._replace(head=head, tail=tail)


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


def lag_update(state: LagState, y, x, index, seg, pos, in_split, settings: LagSettings) -> LagState:
    """Add draw ``index`` of one chain (``y = x - c``): the per-draw part, without ``cond``.

    Blocks that end here are processed by :func:`lag_slow_path`.
    """
    k = len(REFERENCE_LEVELS)
    v = features(y, x, state.active[:k], state.active[k:], settings)
    w = in_split.astype(y.dtype)
    if settings.num_features > 2:
        dw = ((seg == 1) | (index >= settings.reference_draw)).astype(y.dtype) * w
        v = (v[0] * w, v[1] * w, *tuple(a * dw for a in v[2:]))
    else:
        v = tuple(a * w for a in v)
    exact = _update_exact(state.exact, y, index, seg, pos, in_split, settings)
    proxy_lags = tuple(
        update_proxy_lags(pl, value, index)
        for pl, value in zip(state.proxy_lags, v[2:], strict=False)
    )
    levels = state.levels
    if levels:
        acc = tuple(a + b for a, b in zip(levels[0].acc, v, strict=True))
        levels = (levels[0]._replace(acc=acc), *levels[1:])
    return state._replace(exact=exact, proxy_lags=proxy_lags, levels=levels)


def lag_due(index, seg, pos, in_split, settings: LagSettings) -> jax.Array:
    """Whether draw ``index`` needs :func:`lag_slow_path` (a block or flush period ends,
    or the draw is among the first / last ``max_lag`` of its half)."""
    due = jnp.zeros((), bool)
    if settings.block_sizes:
        due = due | (in_split & ((pos + 1) % settings.block_sizes[0] == 0))
        if settings.half > 0:  # the first half's last draw clears its unfinished blocks
            due = due | (index == settings.second - 1)
    if settings.max_lag > 0:
        head, tail = _ends(index, seg, pos, in_split, settings)
        due = due | ((index + 1) % FLUSH == 0) | head | tail
        if settings.proxy_lags > 0:
            head, _ = _proxy_ends(index, seg, pos, in_split, settings)
            due = due | head | ((settings.half > 0) & (index == settings.half))
    return due


def set_reference(state: LagState, row: jax.Array, knots: jax.Array) -> LagState:
    """Fix half ``row``'s reference quantiles ``(9, D)``; they become the active ones."""
    slopes = reference_slopes(knots)
    return state._replace(
        reference=jax.lax.dynamic_update_index_in_dim(state.reference, knots, row, 0),
        slopes=jax.lax.dynamic_update_index_in_dim(state.slopes, slopes, row, 0),
        active=jnp.concatenate([knots, slopes]),
    )


def lag_slow_path(state: LagState, y, index, seg, pos, in_split, settings: LagSettings) -> LagState:
    """Rare per-draw work: ends of halves, flushes, finished blocks (nested conds)."""
    exact = state.exact
    if settings.max_lag > 0:
        exact = _write_ends(exact, y, index, seg, pos, in_split, settings)
        exact = jax.lax.cond((index + 1) % FLUSH == 0, flush_exact, lambda e: e, exact)
    proxy_lags = tuple(
        _proxy_slow_path(pl, index, seg, pos, in_split, settings) for pl in state.proxy_lags
    )
    levels = state.levels
    if levels:
        done = in_split & ((pos + 1) % settings.block_sizes[0] == 0)
        levels = jax.lax.cond(
            done, lambda lv: _finish_levels(lv, index, seg, pos, settings), lambda lv: lv, levels
        )
        if settings.half > 0:  # unfinished blocks of the first half stay out of the second
            end = index == settings.second - 1
            accs = zeros_if(end, tuple(lvl.acc for lvl in levels))
            levels = tuple(lvl._replace(acc=a) for lvl, a in zip(levels, accs, strict=True))
    return state._replace(exact=exact, proxy_lags=proxy_lags, levels=levels)
