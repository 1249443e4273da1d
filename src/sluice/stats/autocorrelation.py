"""Streaming autocovariances for the effective sample size.

Two kinds of lag state, both per split half of one chain:

*Exact lags* of ``y = x - c`` up to ``max_lag``: a ring of the last draws,
the running sums ``sum_i y_i y_(i-t)`` and the first/last ``max_lag`` values of
each half. Closing a chain turns them into ``sum_i (y_i - m)(y_(i+t) - m)``
centred at each half's own mean, which is exactly ArviZ's (FFT) biased
autocovariance times the length; so ``ess_mean`` equals ArviZ's whenever
Geyer's truncation falls within ``max_lag`` (flagged otherwise).

*Block levels*: the same lagged products on means of consecutive blocks of
``b`` draws (``b`` in ``block_sizes``, each a multiple of the previous), for
several features at once. The variance of the chain mean is
``b * (spectral density at 0 of the block means)``, so Geyer's estimator on a
block series estimates the same ESS with lags ``b`` times longer: the
fallback when the exact lags are too few, and the only estimate for the
proxy features below. Block series are centred approximately (the ends of a
half are ignored), an error of order ``lag / blocks``.

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
draws (see :mod:`sluice.stats.diagnostics`).

Costs are kept per draw and element: the exact lags are ``max_lag``
multiply-adds into a partial sum flushed every ``FLUSH`` draws (so float32
sums neither drift nor stall over long runs); block levels add ``F`` sums per
draw and do their lagged products only when a block ends, under ``lax.cond``
(under ``vmap`` a ``cond`` on per-chain state evaluates both branches, which
costs the block work every draw: cheap on accelerators, where ``vmap`` is the
default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri

from sluice.stats._numerics import geyer_tau

__all__ = [
    "REFERENCE_LEVELS",
    "EssResult",
    "EssTarget",
    "LagSettings",
    "LagState",
    "ess_from_lags",
]

# Reference quantile levels fixed per chain and half (knots of the bulk proxy).
REFERENCE_LEVELS = (0.01, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
_LO, _HI = 1, 7  # indices of 0.05 and 0.95 in REFERENCE_LEVELS
FLUSH = 256  # draws between flushes of the exact lags' partial sums
Y, Q, BULK, TAIL_LO, TAIL_HI = 0, 1, 2, 3, 4  # feature columns
QY, YQ = -2, -1  # cross columns of the pooled lag sums: q_t y_(t-k) and y_t q_(t-k)


class LagSettings(NamedTuple):
    """Static settings of the lag part."""

    max_lag: int  # exact lags of y (0: none)
    block_sizes: tuple[int, ...]  # block lengths of the block levels, increasing multiples
    block_lags: int  # lags of every block level
    proxies: bool  # track the bulk and tail proxies besides y and y^2
    reference_draw: int  # draw at which each chain fixes the first half's reference quantiles
    half: int  # draws per split half (num_draws // 2); 0 when not split
    min_blocks: int  # blocks per split chain a block level needs to be used

    @property
    def num_features(self) -> int:
        return 5 if self.proxies else 2

    @property
    def num_pooled(self) -> int:
        """Features whose lagged products are pooled over halves (all but the tails)."""
        return 3 if self.proxies else 2


class ExactLags(NamedTuple):
    ring: jax.Array  # (L0, D): previous draws of the current half, most recent first
    partial: jax.Array  # (L0 + 1, D): sum y_i y_(i-t) since the last flush
    sums: jax.Array  # (L0 + 1, D): open: flushed sums; closed: centred co-moments, summed
    head: jax.Array  # (2, L0, D): first L0 draws of each half (oldest first)
    tail: jax.Array  # (L0, D): last L0 draws of the first half (most recent first)


class BlockLevel(NamedTuple):
    acc: jax.Array  # (D, F): feature sums over the current, incomplete block
    ring: jax.Array  # (L, D, F): previous block means of the current half, most recent first
    valid: jax.Array  # (F,) int32: valid block means in the ring's run (current half)
    sums: jax.Array  # (L + 1, D, P + 2): lagged products of the pooled features (+ cross q.y,
    #   y.q) summed over halves; closed: centred co-moments summed over split chains
    tail_sums: jax.Array  # (2, L + 1, D, F - P): lagged products of the tail indicators per half
    tail_ratio: jax.Array  # (L + 1, D, F - P): closed: sum over split chains of their tail
    #   autocovariances per block divided by their per-draw variance
    tail_chains: jax.Array  # (D, F - P): split chains summed in tail_ratio (non-constant ones)
    half_sum: jax.Array  # (2, D, F): sum of the block means of each half
    half_count: jax.Array  # (2, F) int32: block means of each half
    closed_count: jax.Array  # (F,) int32: block means of all closed split chains
    closed_chains: jax.Array  # (F,) int32: closed split chains with at least one block


class FeatureMoments(NamedTuple):
    count: jax.Array  # (2, F) int32: draws of each half where the feature was defined
    sum: jax.Array  # (2, D, F): their sum
    sumsq: jax.Array  # (2, D, F): their sum of squares
    closed_ss: jax.Array  # (D, F): sum over closed split chains of within sums of squares
    closed_count: jax.Array  # (F,) int32: draws of those


class LagState(NamedTuple):
    reference: jax.Array  # (2, D, 9): per half, the chain's quantiles at REFERENCE_LEVELS
    exact: ExactLags
    levels: tuple[BlockLevel, ...]
    moments: FeatureMoments


def lag_init(d: int, dtype, settings: LagSettings) -> LagState:
    l0, lb, f = settings.max_lag, settings.block_lags, settings.num_features
    z = jnp.zeros
    exact = ExactLags(
        z((l0, d), dtype), z((l0 + 1, d), dtype), z((l0 + 1, d), dtype),
        z((2, l0, d), dtype), z((l0, d), dtype),
    )  # fmt: skip
    p = settings.num_pooled
    levels = tuple(
        BlockLevel(
            z((d, f), dtype),
            z((lb, d, f), dtype),
            z((f,), jnp.int32),
            z((lb + 1, d, p + 2), dtype),
            z((2, lb + 1, d, f - p), dtype),
            z((lb + 1, d, f - p), dtype),
            z((d, f - p), dtype),
            z((2, d, f), dtype),
            z((2, f), jnp.int32),
            z((f,), jnp.int32),
            z((f,), jnp.int32),
        )
        for _ in settings.block_sizes
    )
    moments = FeatureMoments(
        z((2, f), jnp.int32), z((2, d, f), dtype), z((2, d, f), dtype), z((d, f), dtype),
        z((f,), jnp.int32),
    )  # fmt: skip
    reference = jnp.full((2, d, len(REFERENCE_LEVELS)), jnp.nan, dtype)
    return LagState(reference, exact, levels, moments)


def _bulk_proxy(x: jax.Array, knots: jax.Array) -> jax.Array:
    """Piecewise-linear normal scores through the knots, constant beyond them."""
    scores = jnp.asarray(ndtri(np.asarray(REFERENCE_LEVELS)), x.dtype)
    above = jnp.sum(x[:, None] > knots, axis=1)  # knots below x: 0..9
    j = jnp.clip(above - 1, 0, knots.shape[1] - 2)
    lo = jnp.take_along_axis(knots, j[:, None], axis=1)[:, 0]
    hi = jnp.take_along_axis(knots, (j + 1)[:, None], axis=1)[:, 0]
    width = hi - lo
    frac = jnp.where(width > 0, (x - lo) / jnp.where(width > 0, width, 1.0), 0.5)
    z = scores[j] + jnp.clip(frac, 0.0, 1.0) * (scores[j + 1] - scores[j])
    return jnp.where(above == 0, scores[0], jnp.where(above == knots.shape[1], scores[-1], z))


def features(y: jax.Array, x: jax.Array, reference: jax.Array, settings: LagSettings) -> jax.Array:
    """``(D, F)`` feature values of one draw (proxies meaningless before the reference)."""
    base = [y, y * y]
    if settings.proxies:
        base += [
            _bulk_proxy(x, reference),
            (x <= reference[:, _LO]).astype(y.dtype),
            (x > reference[:, _HI]).astype(y.dtype),
        ]
    return jnp.stack(base, axis=1)


def _update_exact(ex: ExactLags, y, seg, pos, in_split, settings: LagSettings) -> ExactLags:
    l0 = settings.max_lag
    if l0 == 0:
        return ex
    t = jnp.arange(1, l0 + 1)
    ok = ((t <= pos) & in_split)[:, None]
    prods = jnp.concatenate(
        [jnp.where(in_split, y * y, 0.0)[None], jnp.where(ok, ex.ring * y[None], 0.0)]
    )
    partial = ex.partial + prods
    ring = jnp.where(in_split, jnp.concatenate([y[None], ex.ring[:-1]]), ex.ring)
    # first / last draws of each half: written only when needed ("drop" skips the others)
    hslot = jnp.where(in_split & (pos < l0), pos, l0)
    head = ex.head.at[seg, hslot].set(y, mode="drop")
    tail = ex.tail
    if settings.half > 0:
        write = in_split & (seg == 0) & (pos >= settings.half - l0)
        tail = tail.at[jnp.where(write, settings.half - 1 - pos, l0)].set(y, mode="drop")
    flush = in_split & (((pos + 1) % FLUSH == 0) | (pos + 1 == settings.half))
    sums, partial = jax.lax.cond(
        flush, lambda s, p: (s + p, jnp.zeros_like(p)), lambda s, p: (s, p), ex.sums, partial
    )
    return ExactLags(ring, partial, sums, head, tail)


def _process_block(lvl: BlockLevel, mean, block_ok, seg, first_of_half) -> BlockLevel:
    lb = lvl.ring.shape[0]
    p = lvl.sums.shape[-1] - 2
    valid_prev = jnp.where(first_of_half, 0, lvl.valid)
    t = jnp.arange(1, lb + 1)
    pair_ok = (t[:, None] <= valid_prev[None, :]) & block_ok[None, :]  # (L, F)
    ring = lvl.ring
    lagged = ring * mean[None]  # (L, D, F)
    lagged = jnp.where(pair_ok[:, None, :], lagged, 0.0)
    cross_ok = pair_ok[:, None, Q : Q + 1]  # y and q are defined together
    cross = jnp.concatenate(
        [
            (mean[None, :, Q] * ring[:, :, Y])[..., None],
            (mean[None, :, Y] * ring[:, :, Q])[..., None],
        ],
        axis=-1,
    )
    zero = jnp.where(block_ok[None, :], mean * mean, 0.0)  # (D, F)
    zero_cross = jnp.where(block_ok[Q], mean[:, Y] * mean[:, Q], 0.0)[:, None].repeat(2, axis=1)
    pooled = jnp.concatenate(
        [jnp.concatenate([zero[:, :p], zero_cross], axis=1)[None],
         jnp.concatenate([lagged[..., :p], jnp.where(cross_ok, cross, 0.0)], axis=-1)],
    )  # fmt: skip
    tails = jnp.concatenate([zero[None, :, p:], lagged[..., p:]])  # (L + 1, D, F - P)
    return lvl._replace(
        acc=jnp.zeros_like(lvl.acc),
        ring=jnp.concatenate([mean[None], ring[:-1]]),
        valid=jnp.where(block_ok, jnp.minimum(valid_prev + 1, lb), 0),
        sums=lvl.sums + pooled,
        tail_sums=lvl.tail_sums.at[seg].add(tails),
        half_sum=lvl.half_sum.at[seg].add(jnp.where(block_ok[None, :], mean, 0.0)),
        half_count=lvl.half_count.at[seg].add(block_ok.astype(jnp.int32)),
    )


def _update_levels(levels, v, index, seg, pos, in_split, settings: LagSettings):
    """Add one draw's features to the block cascade (nested conds: cheap when no block ends)."""
    if not levels:
        return levels
    f = settings.num_features
    # proxies are defined from reference_draw in the first half, from the start in the second
    first = jnp.asarray([0, 0] + [settings.reference_draw] * (f - 2), jnp.int32)
    proxy_from = jnp.where(seg == 1, 0, first)
    sizes = settings.block_sizes

    def cascade(k: int, levels: tuple, value: jax.Array) -> tuple:
        """Levels k, k+1, ... (``levels[0]`` is level k) after adding ``value`` to level k."""
        lvl = levels[0]
        lvl = lvl._replace(acc=lvl.acc + value)
        b = sizes[k]
        done = in_split & ((pos + 1) % b == 0)

        def finish(rest: tuple) -> tuple:
            block_ok = index + 1 - b >= proxy_from
            new = _process_block(lvl, lvl.acc / b, block_ok, seg, pos + 1 == b)
            if rest:
                rest = cascade(k + 1, rest, lvl.acc)
            return (new, *rest)

        def keep(rest: tuple) -> tuple:
            return (lvl, *rest)

        return jax.lax.cond(done, finish, keep, tuple(levels[1:]))

    return cascade(0, tuple(levels), jnp.where(in_split, v, 0.0))


def lag_update(state: LagState, y, x, index, seg, pos, in_split, settings: LagSettings) -> LagState:
    """Add draw ``index`` of one chain (``y = x - c``)."""
    f = settings.num_features
    v = features(y, x, state.reference[seg], settings)
    defined = (
        jnp.asarray([True, True] + [False] * (f - 2))
        | (seg == 1)
        | (index >= settings.reference_draw)
    )
    v = jnp.where(defined[None, :], v, 0.0)
    use = (defined & in_split).astype(y.dtype)
    vv = v * use[None, :]
    m = state.moments
    moments = m._replace(
        count=m.count.at[seg].add((defined & in_split).astype(jnp.int32)),
        sum=m.sum.at[seg].add(vv),
        sumsq=m.sumsq.at[seg].add(vv * vv),
    )
    exact = _update_exact(state.exact, y, seg, pos, in_split, settings)
    levels = _update_levels(state.levels, v, index, seg, pos, in_split, settings)
    return LagState(state.reference, exact, levels, moments)


def _close_exact(ex: ExactLags, moments: FeatureMoments, settings: LagSettings) -> ExactLags:
    l0 = settings.max_lag
    if l0 == 0:
        return ex
    dtype = ex.sums.dtype
    sums = ex.sums + ex.partial
    current = jnp.where(moments.count[1, Y] > 0, 1, 0)
    t = jnp.arange(l0 + 1)
    corr = jnp.zeros_like(sums)
    for j in range(2):
        n = moments.count[j, Y]
        nf = n.astype(dtype)
        total = moments.sum[j, :, Y]
        mean = total / jnp.maximum(nf, 1.0)
        last = jnp.where(current == 0, ex.ring, ex.tail) if j == 0 else ex.ring
        zero = jnp.zeros_like(total)[None]
        last_cum = jnp.concatenate([zero, jnp.cumsum(last, axis=0)])  # (L0 + 1, D)
        first_cum = jnp.concatenate([zero, jnp.cumsum(ex.head[j], axis=0)])
        a = total[None] - last_cum  # sum of y_1 .. y_(n - t)
        b = total[None] - first_cum  # sum of y_(t + 1) .. y_n
        term = -mean[None] * (a + b) + (nf - t)[:, None] * (mean * mean)[None]
        corr = corr + jnp.where((t < n)[:, None], term, 0.0)
    z = jnp.zeros_like
    return ExactLags(z(ex.ring), z(ex.partial), sums + corr, z(ex.head), z(ex.tail))


def _close_level(lvl: BlockLevel, draw_var: jax.Array) -> BlockLevel:
    """Centre one chain's block sums at each half's mean and fold them into the closed sums.

    ``draw_var`` ``(2, D, F)``: each half's per-draw variance of the features.
    """
    dtype = lvl.sums.dtype
    lb = lvl.sums.shape[0] - 1
    p = lvl.sums.shape[-1] - 2
    t = jnp.arange(lb + 1)[:, None, None]
    corr = jnp.zeros_like(lvl.sums)
    ratio = lvl.tail_ratio
    chains = lvl.tail_chains
    for j in range(2):
        n = lvl.half_count[j].astype(dtype)  # (F,)
        mean = lvl.half_sum[j] / jnp.maximum(n, 1.0)  # (D, F)
        products = jnp.concatenate(
            [mean[:, :p] * mean[:, :p], (mean[:, Y] * mean[:, Q])[:, None].repeat(2, axis=1)],
            axis=1,
        )
        count = jnp.concatenate([n[:p], n[Q : Q + 1], n[Q : Q + 1]])
        corr = corr - jnp.maximum(count[None, None, :] - t, 0.0) * products[None]
        # tails: each split chain's autocovariance per block over its per-draw variance
        nt = n[p:]
        mt = mean[:, p:]
        centred = lvl.tail_sums[j] - jnp.maximum(nt[None, None, :] - t, 0.0) * (mt * mt)[None]
        var = draw_var[j][:, p:]
        ok = (var > 0) & (nt[None, :] >= 1)
        r = centred / jnp.maximum(nt, 1.0)[None, None, :] / jnp.where(ok, var, 1.0)[None]
        ratio = ratio + jnp.where(ok[None], r, 0.0)
        chains = chains + ok.astype(dtype)
    z = jnp.zeros_like
    return lvl._replace(
        acc=z(lvl.acc), ring=z(lvl.ring), valid=z(lvl.valid), sums=lvl.sums + corr,
        tail_sums=z(lvl.tail_sums), tail_ratio=ratio, tail_chains=chains,
        half_sum=z(lvl.half_sum), half_count=z(lvl.half_count),
        closed_count=lvl.closed_count + jnp.sum(lvl.half_count, axis=0),
        closed_chains=lvl.closed_chains + jnp.sum((lvl.half_count > 0).astype(jnp.int32), axis=0),
    )  # fmt: skip


def lag_close(state: LagState, settings: LagSettings) -> LagState:
    """Fold one chain's open lag state into the closed form (centred, summed over halves)."""
    m = state.moments
    dtype = m.sum.dtype
    n = m.count.astype(dtype)[:, None, :]  # (2, 1, F)
    ss = m.sumsq - m.sum * m.sum / jnp.maximum(n, 1.0)
    moments = FeatureMoments(
        jnp.zeros_like(m.count),
        jnp.zeros_like(m.sum),
        jnp.zeros_like(m.sumsq),
        m.closed_ss + jnp.sum(jnp.where(n > 0, ss, 0.0), axis=0),
        m.closed_count + jnp.sum(m.count, axis=0),
    )
    exact = _close_exact(state.exact, m, settings)
    draw_var = jnp.where(n > 0, ss / jnp.maximum(n, 1.0), 0.0)  # (2, D, F)
    levels = tuple(_close_level(lvl, draw_var) for lvl in state.levels)
    return LagState(jnp.full_like(state.reference, jnp.nan), exact, levels, moments)


def lag_combine(a: LagState, b: LagState) -> LagState:
    """Sum of two closed lag states."""
    exact = a.exact._replace(sums=a.exact.sums + b.exact.sums)
    levels = tuple(
        la._replace(
            sums=la.sums + lb.sums,
            tail_ratio=la.tail_ratio + lb.tail_ratio,
            tail_chains=la.tail_chains + lb.tail_chains,
            closed_count=la.closed_count + lb.closed_count,
            closed_chains=la.closed_chains + lb.closed_chains,
        )
        for la, lb in zip(a.levels, b.levels, strict=True)
    )
    moments = a.moments._replace(
        closed_ss=a.moments.closed_ss + b.moments.closed_ss,
        closed_count=a.moments.closed_count + b.moments.closed_count,
    )
    return LagState(a.reference, exact, levels, moments)


# -- ESS --------------------------------------------------------------------------------------
# A "target" maps a closed block level to the target's mean autocovariance per block,
# (D, L + 1), in the target's own units.
Target = Callable[[BlockLevel], jax.Array]


def _per_block(lvl: BlockLevel, column: int) -> jax.Array:
    count = jnp.maximum(lvl.closed_count[column], 1).astype(lvl.sums.dtype)
    return lvl.sums / count


def direct(column: int) -> Target:
    """The target is the feature itself (y: ESS of the mean)."""
    return lambda lvl: _per_block(lvl, column)[:, :, column].T


def squared_deviation(delta: jax.Array) -> Target:
    """The target is ``(x - mu)^2`` with ``mu - c = delta`` ``(D,)``: exact from y, q and cross."""

    def fn(lvl: BlockLevel) -> jax.Array:
        a = _per_block(lvl, Q)
        c2 = a[:, :, Q] - 2.0 * delta * (a[:, :, QY] + a[:, :, YQ]) + 4.0 * delta**2 * a[:, :, Y]
        return c2.T

    return fn


def proxy(state: LagState, column: int, within: jax.Array, length) -> Target:
    """The target's autocorrelations are those of a pooled proxy feature; its ``W`` is known."""
    mom = state.moments
    dtype = within.dtype
    v0 = mom.closed_ss[:, column] / jnp.maximum(mom.closed_count[column], 1).astype(dtype)
    n = jnp.asarray(length, dtype)
    scale = within * (n - 1.0) / n / v0
    return lambda lvl: scale[:, None] * _per_block(lvl, column)[:, :, column].T


def tail_proxy(column: int, within: jax.Array, length, num_pooled: int) -> Target:
    """Like :func:`proxy`, for a tail indicator normalised per split chain."""
    n = jnp.asarray(length, within.dtype)

    def fn(lvl: BlockLevel) -> jax.Array:
        j = column - num_pooled
        mean_ratio = lvl.tail_ratio[:, :, j] / jnp.maximum(lvl.tail_chains[:, j], 1.0)[None]
        return (within * (n - 1.0) / n)[:, None] * mean_ratio.T

    return fn


class EssResult(NamedTuple):
    ess: jax.Array  # (D,) float: effective sample size
    resolution: jax.Array  # (D,) int32: block size of the lags used (1: exact), 0 if none
    truncated: jax.Array  # (D,) bool: Geyer's sequence did not end within any level's lags


class EssTarget(NamedTuple):
    """One quantity whose ESS is wanted (see :func:`ess_from_lags`)."""

    acov: Target  # block level -> the target's mean autocovariance per block (D, L + 1)
    column: int  # feature whose block counts give the level's length
    within: jax.Array  # (D,): the target's W (mean ddof=1 within-chain variance)
    between: jax.Array  # (D,): var_ddof1 of the target's split-chain means
    use_exact: bool  # try the exact lags first (the mean only: they hold y alone)


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
    exact_rows = [i for i, t in enumerate(targets) if t.use_exact]
    if exact_rows and settings.max_lag > 0:
        acm = jnp.broadcast_to(
            state.exact.sums.T / (n * m), (len(targets), *state.exact.sums.T.shape)
        )
        res = geyer_tau(acm, within, var_plus, n)
        allowed = jnp.asarray([t.use_exact for t in targets])[:, None]
        candidates.append((total / res.tau, res.terminated & allowed, (n >= 4) & allowed, 1))
    if state.levels:
        acm = jnp.stack(
            [jnp.stack([t.acov(lvl) for t in targets]) for lvl in state.levels]
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
