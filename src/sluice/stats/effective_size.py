"""Closing and merging lag states, and the ESS read from them (Geyer's estimator).

*Closing* one chain's lag state (:mod:`sluice.stats.autocorrelation`) centres
each split half's lagged sums at that half's own mean and adds them into
sums over split chains; merging adds closed states. :func:`ess_from_lags`
then applies ArviZ's multi-chain Geyer estimator to the pooled
autocovariances of each target (the draws, ``(x - mu)^2``, the bulk and
tail proxies), at resolution 1 from the exact lags when Geyer's sequence
ends within them, else from the coarsest block level that ends it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from sluice.stats._numerics import geyer_tau, row_add
from sluice.stats.autocorrelation import (
    BULK,
    QY,
    YQ,
    BlockLevel,
    ExactLags,
    LagSettings,
    LagState,
    ProxyLags,
    ProxyMoments,
    Q,
    Y,
    proxy_products,
)

__all__ = [
    "EssResult",
    "EssTarget",
    "direct",
    "ess_from_lags",
    "exact_mean_acov",
    "exact_proxy_acov",
    "lag_close",
    "lag_combine",
    "proxy",
    "squared_deviation",
    "tail_proxy",
]


def _close_exact(ex: ExactLags, half_count, half_sum, count, settings: LagSettings) -> ExactLags:
    """Centre the exact lag sums at each half's mean (``half_sum`` ``(2, D)``, exact sums of y)."""
    l0 = settings.max_lag
    if l0 == 0:
        return ex
    dtype = ex.sums.dtype
    sums = (ex.sums + ex.partial)[::-1][1:]  # lags 1 .. L0 (row t - 1: lag t)
    m = l0 + 1
    recent = jax.lax.dynamic_slice_in_dim(ex.ring, (count - 1) % m + 1, m)[::-1][
        :l0
    ]  # newest first
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
    return ExactLags(z(ex.ring), z(ex.partial), closed, z(ex.head), z(ex.tail))


def _close_proxy_lags(
    pl: ProxyLags, half_count, count, indicator: bool, settings: LagSettings
) -> ProxyLags:
    """Centre each half's lag sums at the mean over the half's proxy range and fold them
    into ``closed``: summed (the bulk), or as autocorrelations (an ``indicator``)."""
    l0 = settings.max_lag
    dtype = pl.sums.dtype
    pl = proxy_products(pl, count - 1)  # the last draw (see _update_proxy_lags)
    last_seg = ((settings.half > 0) & (count - 1 >= settings.half)).astype(jnp.int32)
    sums = row_add(pl.sums, last_seg, pl.partial)
    half_sum = row_add(pl.half_sum, last_seg, pl.partial_sum)
    m = l0 + 1
    recent = jax.lax.dynamic_slice_in_dim(pl.ring, (count - 1) % m + 1, m)[::-1][:l0]
    first_done = (settings.half > 0) & (half_count[0] >= settings.half)
    t = jnp.arange(l0 + 1)  # lags 0 .. L0
    zero = jnp.zeros_like(pl.last)[None]
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
    return ProxyLags(z(pl.last), z(pl.ring), z(pl.partial), z(pl.partial_sum), z(pl.sums),
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
    state: LagState, half_count, half_sum, proxy_var: tuple, count, settings: LagSettings
) -> LagState:
    """Fold one chain's open lag state into the closed form.

    Parameters
    ----------
    half_count, half_sum
        ``(2,)`` and ``(2, D)``: the exact count and sum of ``y`` of each split
        half (from the moments).
    count
        Draws the chain has seen (the middle one of an odd ``num_draws`` included).
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
    exact = _close_exact(state.exact, half_count, half_sum, count, settings)
    proxy_lags = tuple(
        _close_proxy_lags(pl, half_count, count, k > 0, settings)
        for k, pl in enumerate(state.proxy_lags)
    )
    levels = tuple(_close_level(lvl, proxy_var, settings.num_pooled) for lvl in state.levels)
    z = jnp.zeros_like
    return LagState(
        z(state.reference), z(state.slopes), z(state.active), exact, proxy_lags, levels, proxies
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
    return LagState(a.reference, a.slopes, a.active, exact, proxy_lags, levels, proxies)


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
    # ArviZ clamps tau at 1 / log10(total) from below: an estimate above the cap or a
    # negative one (tau < 0: a short chain whose first pair of autocorrelations sums
    # below 1/2) reads as the cap. NaN stays NaN.
    cap = total * jnp.log10(total)
    ess = jnp.where((ess > cap) | (ess < 0), cap, ess)
    return [EssResult(ess[i], resolution[i], ~found[i]) for i in range(len(targets))]
