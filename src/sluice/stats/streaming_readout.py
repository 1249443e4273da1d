"""Closing, merging and reading the default summary statistics (:mod:`sluice.stats.streaming`).

*Closing* a chain splits it as ArviZ does at its current number of draws and
turns its sums into between-chain summaries held in the same arrays
(:class:`Closed` names them), so a merged state is no larger. ``finalize`` reads
mean, sd, quantiles, HDI, the R-hats, the ESSs and the MCSEs; :func:`summary_table`
lays them out as ``az.summary`` does. docs/statistics.md ("The default summary:
how it works, and what it costs") explains each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._layout import element_labels, unflatten
from sluice.stats._numerics import (
    GeyerResult,
    chan_merge,
    compensated_merge,
    compensated_value,
    cumsum_rows,
    geyer_tau,
)
from sluice.stats.streaming_state import (
    COUNT_MAX,
    LAG,
    LAG_FEATURES,
    MID,
    SHARED_FIELDS,
    StreamSettings,
    StreamState,
    bucket_edges,
)

PyTree = Any

__all__ = [
    "Closed",
    "assemble",
    "diagnostics_flat",
    "finalize",
    "finalize_flat",
    "merge",
    "size",
    "summary_table",
    "take",
]

# split features (per half: mean and variance): y, y^2, z, |z|, lo, hi
SY, SQ, SZ, SZF, SLO, SHI = range(6)
SPLIT = 6
_SUM_OF = (0, 1, 2, 4, 5, 6)  # the SEG sums of each split feature
_SQUARE_OF = (1, None, 3, 3, 5, 6)  # the SEG sums of its square (indicators: itself)
LAG_OF_SPLIT = tuple(_SUM_OF.index(f) for f in LAG_FEATURES)  # lag features as split features


class Closed(NamedTuple):
    """Between-chain summaries of closed chains (additive, or Chan-merged)."""

    counts: jax.Array  # (7,) int32: chains, draws, split, nmin, nmax, nbmin, bchains
    wsum: jax.Array  # (SPLIT, D): sum of the halves' ddof=1 variances
    mmean: jax.Array  # (SPLIT, D): mean of the half means (Chan)
    mm2: jax.Array  # (SPLIT, D): their sum of squared deviations (Chan)
    acov: jax.Array  # (LAG, lags + 1, D): sum over halves of n * biased autocovariance
    bw: jax.Array  # (LAG, D): sum over chains of the block means' ddof=1 variance
    bmean: jax.Array  # (LAG, D): mean of the chains' block-series means (Chan)
    bm2: jax.Array  # (LAG, D)
    bacov: jax.Array  # (LAG, block_lags + 1, D): sum over chains of nb * block autocovariance
    hsq: jax.Array  # (LAG, D): sum over chains of ((half mean 1 - half mean 2) / 2)^2


def unpack(state: StreamState) -> Closed:
    """The summaries held by a closed state (or an empty one)."""
    d = state.knots.shape[1]
    flat = state.seg.reshape(-1, d)
    acov = jnp.concatenate([state.partial[:, None], state.lag], axis=1)
    return Closed(
        state.closed, flat[0:SPLIT], flat[SPLIT : 2 * SPLIT], flat[2 * SPLIT : 3 * SPLIT],
        acov, state.bring[:, 0], state.bring[:, 1], state.bring[:, 2], state.blag,
        flat[3 * SPLIT : 3 * SPLIT + LAG],
    )  # fmt: skip


def pack(state: StreamState, c: Closed) -> StreamState:
    """``state`` (its shared sums kept) holding the summaries ``c``, its open sums cleared."""
    z = jnp.zeros_like
    d = state.knots.shape[1]
    flat = jnp.zeros_like(state.seg).reshape(-1, d)
    flat = flat.at[: 3 * SPLIT + c.hsq.shape[0]].set(
        jnp.concatenate([c.wsum, c.mmean, c.mm2, c.hsq])
    )
    bring = z(state.bring).at[:, :3].set(jnp.stack([c.bw, c.bmean, c.bm2], axis=1))
    return state._replace(
        count=z(state.count), tail=z(state.tail), lag=c.acov[:, 1:], partial=c.acov[:, 0],
        bring=bring, blag=c.bacov, nblocks=z(state.nblocks), seg=flat.reshape(state.seg.shape),
        prefix=z(state.prefix), folded=z(state.folded), final=z(state.final), closed=c.counts,
    )  # fmt: skip


# -- closing one chain --------------------------------------------------------------------------
def _slot_chunks(state: StreamState, settings: StreamSettings) -> jax.Array:
    """``(ring,)`` the chunk each slot of the split ring holds (or will: a slot whose
    chunk has not begun still holds a folded one's sums)."""
    slot = jnp.arange(settings.ring)
    return state.folded + ((slot - state.folded) % settings.ring)


def _halves(state: StreamState, settings: StreamSettings) -> tuple[jax.Array, jax.Array, Any]:
    """Split sums ``(SEG, D)`` of the first and second half of the open chain, and whether
    the split is one the geometry knows (a complete chunk, or the final draw)."""
    n_draws = state.count
    chunk = settings.chunk_size
    k = n_draws // chunk
    h = k // 2
    odd = (k % 2) == 1
    # the chunk each slot holds, and where the split puts it (every slot at once)
    c = _slot_chunks(state, settings)
    live = c < k
    whole = jnp.sum(state.seg, axis=1)  # (ring, SEG, D)
    at_split = (live & (c == h) & odd)[:, None, None]
    in_first = (live & (c < h))[:, None, None]
    in_second = (live & ((c > h) | ((c == h) & ~odd)))[:, None, None]
    last = settings.parts - 1  # index of the B part

    def pick(mask: jax.Array, sums: jax.Array) -> jax.Array:
        return jnp.sum(jnp.where(mask, sums, 0.0), axis=0)

    first = state.prefix + pick(in_first, whole) + pick(at_split, state.seg[:, 0])
    second = pick(in_second, whole) + pick(at_split, state.seg[:, last])
    known = n_draws % chunk == 0
    if settings.final_split:
        final = n_draws == settings.num_draws
        first = jnp.where(final, state.final[0], first)
        second = jnp.where(final, state.final[1], second)
        known = known | final
    return first, second, known


def _half_stats(sums: jax.Array, n: jax.Array, state: StreamState) -> tuple[jax.Array, jax.Array]:
    """``(SPLIT, D)`` means and ddof=1 variances of one half from its split sums."""
    dtype = sums.dtype
    nf = jnp.maximum(n, 1).astype(dtype)
    means = jnp.stack([sums[i] for i in _SUM_OF]) / nf
    # y^2's own square is not kept per half: the chain's fourth moment stands in
    total = jnp.maximum(state.count, 1).astype(dtype)
    s2 = compensated_value(state.sum2) / total
    s4 = state.sum34[1] / total
    squares = [sums[i] if i is not None else nf * (s4 - s2 * s2 + means[SQ] ** 2)
               for i in _SQUARE_OF]  # fmt: skip
    m2 = jnp.stack(squares) - nf * means * means
    var = jnp.maximum(m2, 0.0) / jnp.maximum(nf - 1.0, 1.0)
    return means, var


def _chain_summaries(state: StreamState, settings: StreamSettings) -> tuple[Closed, Any]:
    """The open chain's between-chain summaries, and whether its split is known."""
    dtype = state.knots.dtype
    n_draws = state.count
    n = n_draws // 2
    nf = n.astype(dtype)
    h1, h2, known = _halves(state, settings)
    m1, v1 = _half_stats(h1, n, state)
    m2, v2 = _half_stats(h2, n, state)
    mmean = 0.5 * (m1 + m2)
    mm2 = 0.5 * (m1 - m2) ** 2
    # autocovariances of each half, summed: the whole chain's lag products scaled to
    # the pairs within halves, centred at each half's mean
    t = jnp.arange(1, settings.lags + 1, dtype=dtype)[:, None]
    total_pairs = jnp.maximum(n_draws.astype(dtype) - t, 1.0)
    within_pairs = jnp.maximum(2.0 * (nf - t), 0.0)
    idx = jnp.asarray(LAG_OF_SPLIT)
    mu1, mu2 = m1[idx], m2[idx]  # (LAG, D)
    lag_t = (
        state.lag * (within_pairs / total_pairs)[None]
        - (nf - t)[None] * (mu1 * mu1 + mu2 * mu2)[:, None, :]
    )
    lag0 = (v1[idx] + v2[idx]) * jnp.maximum(nf - 1.0, 0.0)  # n * biased variances
    acov = jnp.concatenate([lag0[:, None, :], lag_t], axis=1)
    # block series (unsplit): its mean from the chain's sums less the open block's
    nb = state.nblocks
    nbf = jnp.maximum(nb, 1).astype(dtype)
    begun = _slot_chunks(state, settings) < -(-n_draws // settings.chunk_size)
    whole = state.prefix + jnp.sum(jnp.where(begun[:, None, None, None], state.seg, 0.0),
                                    axis=(0, 1))  # (SEG, D) over every draw  # fmt: skip
    totals = jnp.stack([whole[f] for f in LAG_FEATURES])
    bmean = (totals - state.partial) / settings.block / nbf
    s = jnp.arange(settings.block_lags + 1, dtype=dtype)[:, None]
    bac = state.blag - jnp.maximum(nbf - s, 0.0)[None] * (bmean * bmean)[:, None, :]
    bvar = bac[:, 0] / jnp.maximum(nbf - 1.0, 1.0)
    has_blocks = (nb > 0).astype(jnp.int32)
    counts = jnp.stack([jnp.int32(1), n_draws, jnp.int32(2), n, n, nb, has_blocks])
    hsq = (0.5 * (mu1 - mu2)) ** 2
    closed = Closed(counts, v1 + v2, mmean, mm2, acov, bvar * has_blocks,
                    bmean * has_blocks, jnp.zeros_like(bmean), bac * has_blocks, hsq)  # fmt: skip
    return closed, known


def _combine_closed(a: Closed, b: Closed) -> Closed:
    ca, cb = a.counts, b.counts
    _, mmean, mm2 = chan_merge(ca[2], a.mmean, a.mm2, cb[2], b.mmean, b.mm2)
    _, bmean, bm2 = chan_merge(ca[6], a.bmean, a.bm2, cb[6], b.bmean, b.bm2)
    counts = jnp.stack([
        ca[0] + cb[0], ca[1] + cb[1], ca[2] + cb[2], jnp.minimum(ca[3], cb[3]),
        jnp.maximum(ca[4], cb[4]), jnp.minimum(ca[5], cb[5]), ca[6] + cb[6],
    ])  # fmt: skip
    return Closed(counts, a.wsum + b.wsum, mmean, mm2, a.acov + b.acov, a.bw + b.bw,
                  bmean, bm2, a.bacov + b.bacov, a.hsq + b.hsq)  # fmt: skip


def _close(state: StreamState, settings: StreamSettings) -> StreamState:
    """The state with its open chain (if any) closed."""

    def close(state: StreamState) -> StreamState:
        closed, known = _chain_summaries(state, settings)
        out = pack(state, closed)
        return out._replace(consistent=state.consistent & known)

    return jax.lax.cond(state.count > 0, close, lambda s: s, state)


def merge(a: StreamState, b: StreamState, *, settings: StreamSettings) -> StreamState:
    """Close both sides' open chains and add their summaries."""
    a, b = _close(a, settings), _close(b, settings)
    ca, cb = a.closed[0], b.closed[0]
    same = jnp.all(a.knots == b.knots)
    empty = (ca == 0) | (cb == 0)
    out = pack(a, _combine_closed(unpack(a), unpack(b)))
    return out._replace(
        knots=jnp.where(ca == 0, b.knots, a.knots),
        consistent=a.consistent & b.consistent & (same | empty),
        sum1=compensated_merge(a.sum1, b.sum1),
        sum2=compensated_merge(a.sum2, b.sum2),
        sum34=a.sum34 + b.sum34,
        xmin=jnp.minimum(a.xmin, b.xmin),
        xmax=jnp.maximum(a.xmax, b.xmax),
        hist=_add_counts(a.hist, b.hist),
    )


def _add_counts(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a + b``, saturating at ``uint16``'s largest value (:func:`_recover` restores
    the one bucket per element that may exceed it)."""
    if a.dtype != jnp.uint16:
        return a + b
    return a + jnp.minimum(b, COUNT_MAX - a)


def _recover(counts: jax.Array, draws: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(D, G)`` counts (``int32``) from saturated ones, and where that failed.

    Buckets are counted in ``uint16`` (a chain's draws fit in it) and merged chains
    saturate at :data:`COUNT_MAX`. Every draw lands in one bucket, so the draws an
    element's buckets miss, ``draws - sum(counts)``, belong to its saturated ones:
    with one such bucket the counts are exact again; with several (more than
    131,070 draws in each of two buckets: a discrete element of a long run) the
    split between them is unknown, and the element's quantiles and HDI read NaN.
    """
    n = counts.astype(jnp.int32)
    if counts.dtype != jnp.uint16:
        return n, jnp.zeros(n.shape[:1], bool)
    missing = draws - jnp.sum(n, axis=1)
    full = n == COUNT_MAX
    one = jnp.sum(full, axis=1) == 1
    n = n + jnp.where(full & one[:, None], missing[:, None], 0)
    return n, (missing != 0) & ~one


# -- reading ---------------------------------------------------------------------------------------
def _ess(w, var_plus, acov_sum, split, n, bw_mean, bvar_plus, bacov_sum, bchains, nb, block,
         shift):  # fmt: skip
    """ArviZ's multi-chain ESS (``_ess``): Geyer on the exact lags; where its sequence
    runs past them at the noise level, one more such pair; where it runs past them
    well above the noise, the block means' estimate, its inner lags replaced by the
    exact ones.

    Blocks of ``b`` draws give ``b Var(block mean) = sum_t (1 - |t|/b) gamma_t`` near
    lag 0: the exact lags replace the tapered inner terms (``shift`` recentres the
    halves' autocovariances at the chain means, as the block series are).

    Returns the ESS of each lag feature, the block size its value rests on (0: none
    ended the sequence) and the integrated time of ``(x - mean)^2`` (for ``ess_sd``).
    """
    dtype = w.dtype
    acov_sum = jnp.moveaxis(acov_sum, 1, -1)  # (LAG, D, lags + 1): lags last
    bacov_sum = jnp.moveaxis(bacov_sum, 1, -1)
    mean_acov = acov_sum / jnp.maximum(split.astype(dtype) * n, 1.0)
    # block series: tau = block * Var(block mean) * tau_blocks / sigma^2
    b_acov = bacov_sum / jnp.maximum(bchains.astype(dtype) * nb, 1.0)
    # (x - mean)^2: its autocorrelations taken as those of x squared (exact for a
    # Gaussian process), on the exact lags
    # (row 0 is y itself: LAG_FEATURES[0] is Y)
    rho_y = 1.0 - (w[0][..., None] - mean_acov[0]) / var_plus[0][..., None]
    rho_y = rho_y.at[..., 0].set(1.0)
    # one search over the exact lags, the squared series and the block means (lags
    # padded with NaN, which ends no sequence and joins no sum): one search's
    # operations to compile instead of three's, the same values
    width = max(mean_acov.shape[-1], b_acov.shape[-1])

    def padded(a: jax.Array) -> jax.Array:
        fill = jnp.full((*a.shape[:-1], width - a.shape[-1]), jnp.nan, dtype)
        return jnp.concatenate([a, fill], axis=-1)

    lag = mean_acov.shape[0]
    one = jnp.ones_like(w[:1])
    g = geyer_tau(
        jnp.concatenate([padded(mean_acov), padded(rho_y * rho_y)[None], padded(b_acov)]),
        jnp.concatenate([w, one, bw_mean]),
        jnp.concatenate([var_plus, one, bvar_plus]),
        jnp.concatenate([jnp.full((lag + 1, 1), n, dtype), jnp.full((lag, 1), nb, dtype)]),
    )
    exact, squared, blocks = (
        GeyerResult(*(x[rows] for x in g)) for rows in (slice(0, lag), lag, slice(lag + 1, None))
    )
    safe = jnp.where(var_plus > 0, var_plus, 1.0)
    t = jnp.arange(1, mean_acov.shape[-1], dtype=dtype)
    inner = 2.0 * jnp.sum((t / block) * (mean_acov[..., 1:] + shift[..., None]), axis=-1)
    tau_block = (block * bvar_plus * blocks.tau + inner) / safe
    # A sequence still positive at the last exact lag whose pairs have fallen to the
    # noise of their estimates (two sds by Bartlett's formula) has all but ended:
    # ArviZ's loop adds about one more noise-level pair, bounded by the running
    # minimum. The block means (a few dozen per chain) estimate such a tail far more
    # noisily, so they serve only sequences still well above their noise.
    total = split.astype(dtype) * n
    rho = 1.0 - (w[..., None] - mean_acov) / safe[..., None]
    bartlett = 1.0 + 2.0 * jnp.sum(rho[..., 1:] ** 2, axis=-1)
    noise = 2.0 * jnp.sqrt(2.0 * bartlett / jnp.maximum(total, 1.0))
    settled = ~exact.terminated & (exact.last <= noise)
    use_block = ~exact.terminated & ~settled & (nb >= 8)
    tau = jnp.where(settled, exact.tau + 2.0 * jnp.maximum(exact.last, 0.0), exact.tau)
    tau = jnp.where(use_block, jnp.maximum(tau_block, exact.tau), tau)
    tau = jnp.maximum(tau, 1.0 / jnp.log10(jnp.maximum(total, 10.0)))  # ArviZ's floor
    resolution = jnp.where(
        exact.terminated | settled, 1, jnp.where(use_block & blocks.terminated, block, 0)
    )
    return total / tau, resolution, squared.tau


def _quantile(counts: jax.Array, edges: jax.Array, probs: jax.Array) -> jax.Array:
    """``(D, P)`` quantiles (``np.quantile``'s linear rule) from the histogram.

    Within a bucket the density is taken linear, its mean the bucket's count and
    its slope the central difference of the neighbouring buckets' densities
    (limited so that it stays non-negative): the CDF is then quadratic there.
    """
    dtype = edges.dtype
    tiny = jnp.finfo(dtype).tiny
    n = counts.astype(dtype)  # (D, G)
    total = jnp.sum(n, axis=1, keepdims=True)
    cum = jnp.concatenate([jnp.zeros_like(total), cumsum_rows(n)], 1)  # (D, G + 1)
    width = jnp.maximum(edges[:, 1:] - edges[:, :-1], tiny)
    dens = n / width
    centre = 0.5 * (edges[:, 1:] + edges[:, :-1])
    pad = lambda v: jnp.concatenate([v[:, :1], v, v[:, -1:]], 1)  # noqa: E731
    dp, cp = pad(dens), pad(centre)
    slope = (dp[:, 2:] - dp[:, :-2]) / jnp.maximum(cp[:, 2:] - cp[:, :-2], tiny)
    limit = 2.0 * dens / width
    a = 0.5 * jnp.clip(slope, -limit, limit) * width * width  # mass(t) = n t + a t (t - 1)
    # np.quantile's position h = p (S - 1) on the sorted draws: the value whose CDF
    # (draws at or below, centred) is h + 1/2
    target = probs[None, :] * (total - 1.0) + 0.5  # (D, P)
    g = counts.shape[1]
    idx = jax.vmap(lambda c, t: jnp.searchsorted(c, t, side="left"))(cum, target) - 1
    idx = jnp.clip(idx, 0, g - 1)
    take = lambda v: jnp.take_along_axis(v, idx, axis=1)  # noqa: E731
    nb, ab = take(n), take(a)
    r = jnp.clip(target - take(cum), 0.0, nb)
    lin = r / jnp.maximum(nb, tiny)
    bq = nb - ab
    root = 2.0 * r / jnp.maximum(bq + jnp.sqrt(jnp.maximum(bq * bq + 4.0 * ab * r, 0.0)), tiny)
    t = jnp.where(jnp.abs(ab) > 1e-6 * jnp.maximum(nb, 1.0), root, lin)
    t = jnp.clip(jnp.where(nb > 0, t, 0.0), 0.0, 1.0)
    return take(edges[:, :-1]) + t * take(width)


HDI_LEVELS = 121  # candidate lower levels of the HDI


def _quantiles_and_hdi(counts: jax.Array, edges: jax.Array, probs: jax.Array,
                       prob: float) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """``(D, P)`` quantiles at ``probs`` and ``(D, 2)`` the narrowest interval holding
    ``prob`` of the draws, among :data:`HDI_LEVELS` candidates (one search for all
    levels: the program compiles sooner than with one per set of levels)."""
    levels = jnp.linspace(0.0, 1.0 - prob, HDI_LEVELS, dtype=edges.dtype)
    q = _quantile(counts, edges, jnp.concatenate([probs, levels, levels + prob]))
    p = probs.shape[0]
    lo, hi = q[:, p : p + HDI_LEVELS], q[:, p + HDI_LEVELS :]
    best = jnp.argmin(hi - lo, axis=1)[:, None]
    hdi = jnp.concatenate(
        [jnp.take_along_axis(lo, best, 1), jnp.take_along_axis(hi, best, 1)], axis=1
    )
    return q[:, :p], hdi


BLOCK = 16384  # elements whose quantiles and HDI are read at once


def _by_blocks(fn: Any, *arrays: jax.Array) -> Any:
    """``fn`` over blocks of :data:`BLOCK` elements (rows) at a time: the HDI's search
    holds ~20 KB of temporaries per element, 20 GB for a million of them at once."""
    d = arrays[0].shape[0]
    if d <= BLOCK:
        return fn(*arrays)
    count = -(-d // BLOCK)
    pad = count * BLOCK - d
    blocks = tuple(
        jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1), mode="edge").reshape(
            count, BLOCK, *a.shape[1:]
        )
        for a in arrays
    )
    out = jax.lax.map(lambda xs: fn(*xs), blocks)
    return jax.tree.map(lambda o: o.reshape(count * BLOCK, *o.shape[2:])[:d], out)


def finalize_flat(state: StreamState, *, settings: StreamSettings,
                  quantiles: bool = True) -> dict[str, jax.Array]:  # fmt: skip
    """Every per-element output of :func:`finalize`, flat: leading axis the elements.
    ``quantiles`` ``False``: all but the quantiles and the HDI (:func:`diagnostics_flat`)."""
    state = _close(state, settings)
    c = unpack(state)
    chains, draws, split, nmin, nmax, nbmin, bchains = (c.counts[i] for i in range(7))
    dtype = state.knots.dtype
    total = draws.astype(dtype)
    knots = state.knots
    s1 = compensated_value(state.sum1)
    mu = s1 / total
    m2 = (state.sum2.hi - state.sum1.hi * mu) + (state.sum2.lo - state.sum1.lo * mu)
    sd = jnp.sqrt(jnp.maximum(m2, 0.0) / (total - 1.0))
    poison = jnp.where(state.consistent, 0.0, jnp.nan)
    mean = knots[MID] + mu + poison
    m = split.astype(dtype)
    n = jnp.where(nmin == nmax, nmin, -1).astype(dtype)
    n = jnp.where(n > 0, n, jnp.nan)
    w = c.wsum / jnp.maximum(m, 1.0)  # (SPLIT, D)
    between = jnp.where(m > 1, c.mm2 / jnp.maximum(m - 1.0, 1.0), 0.0)  # B / n
    var_plus = (n - 1.0) / n * w + between
    rhat = jnp.where(m >= 2, jnp.sqrt(var_plus / w), jnp.nan)  # (SPLIT, D): ArviZ's _rhat
    constant = state.xmin == state.xmax
    bad = jnp.isnan(mu) | ~state.consistent | (chains < 1)
    enough = n >= 2.0

    def clean(v, const=None):
        v = jnp.where(bad | ~enough, jnp.nan, v + poison)
        return v if const is None else jnp.where(constant & enough & ~bad, const, v)

    several = chains >= 2
    r_bulk = jnp.where(several, clean(rhat[SZ]), jnp.nan)
    r_folded = jnp.where(several, clean(rhat[SZF]), jnp.nan)

    # ESS of each lag feature
    idx = jnp.asarray(LAG_OF_SPLIT)
    nb = nbmin.astype(dtype)
    cb = bchains.astype(dtype)
    bw_mean = c.bw / jnp.maximum(cb, 1.0)
    b_between = jnp.where(cb > 1, c.bm2 / jnp.maximum(cb - 1.0, 1.0), 0.0)
    bvar_plus = (nb - 1.0) / jnp.maximum(nb, 1.0) * bw_mean + b_between
    shift = c.hsq / jnp.maximum(chains.astype(dtype), 1.0)
    ess, res, tau_sq = _ess(w[idx], var_plus[idx], c.acov, split, n, bw_mean, bvar_plus,
                            c.bacov, bchains, nb, float(settings.block), shift)  # fmt: skip
    s_split = m * n
    ess_mean = clean(ess[0], s_split)
    ess_bulk = clean(ess[1], s_split)
    ess_tail = clean(jnp.minimum(ess[2], ess[3]), s_split)
    ess_sd = clean(
        s_split / jnp.maximum(tau_sq, 1.0 / jnp.log10(jnp.maximum(s_split, 10.0))), s_split
    )
    mcse_mean = clean(sd / jnp.sqrt(ess_mean), 0.0)
    # mcse_sd as ArviZ: the variance of (x - mean)^2 over its ESS, by the delta method
    evar = jnp.maximum(m2, 0.0) / total
    s2, s3, s4 = compensated_value(state.sum2), state.sum34[0], state.sum34[1]
    m4 = (s4 - 4 * mu * s3 + 6 * mu**2 * s2 - 4 * mu**3 * s1 + total * mu**4) / total
    varvar = (m4 - evar * evar) / ess_sd
    mcse_sd = clean(jnp.sqrt(jnp.maximum(varvar, 0.0) / jnp.maximum(evar, 1e-30) / 4.0), 0.0)

    out = {
        "mean": mean, "sd": sd + poison, "min": state.xmin + poison,
        "max": state.xmax + poison,
        "r_hat": jnp.maximum(r_bulk, r_folded), "r_hat_bulk": r_bulk, "r_hat_folded": r_folded,
        "r_hat_split": jnp.where(several, clean(rhat[SY]), jnp.nan),
        "ess_bulk": ess_bulk, "ess_tail": ess_tail, "ess_mean": ess_mean, "ess_sd": ess_sd,
        "mcse_mean": mcse_mean, "mcse_sd": mcse_sd,
        "ess_bulk_resolution": res[1], "ess_tail_resolution": jnp.maximum(res[2], res[3]),
        "ess_mean_resolution": res[0],
    }  # fmt: skip
    if not quantiles:
        return out

    # quantiles and HDI from the pooled histogram (outer edges: the extremes)
    edges = bucket_edges(knots, settings)
    edges = edges.at[:, 0].set(jnp.minimum(edges[:, 1], state.xmin))
    edges = edges.at[:, -1].set(jnp.maximum(edges[:, -2], state.xmax))
    probs = jnp.asarray(settings.probs, dtype)
    hist = state.hist.reshape(-1, settings.buckets)

    def read(h: jax.Array, e: jax.Array) -> tuple[jax.Array, jax.Array]:
        counts, lost = _recover(h, draws)
        q, hdi = _quantiles_and_hdi(counts, e, probs, settings.hdi_prob)
        nan = jnp.where(lost, jnp.nan, 0.0)[:, None]
        return q + nan, hdi + nan

    q, hdi = _by_blocks(read, hist, edges)
    # a bucket's reading can pass the draws' extremes (a point mass at the edge of
    # its bucket); a quantile of the draws lies within their range
    within = lambda v: jnp.clip(v, state.xmin[:, None], state.xmax[:, None])  # noqa: E731
    q, hdi = within(q), within(hdi)
    fill = lambda v: jnp.where(  # noqa: E731
        bad[:, None], jnp.nan, jnp.where(constant[:, None], mean[:, None], v + poison)
    )
    return {**out, "quantiles": fill(q), "hdi": fill(hdi)}


def diagnostics_flat(state: StreamState, *, settings: StreamSettings) -> dict[str, jax.Array]:
    """:func:`finalize_flat` without the quantiles and the HDI: the moments, R-hats, ESSs
    and MCSEs, what a run that stops when converged reads at every chunk. Reading the
    histogram (its bucket edges, then a search of every quantile and HDI candidate) is
    most of the finalize's cost."""
    return finalize_flat(state, settings=settings, quantiles=False)


def assemble(
    state: StreamState, flat: dict[str, Any], *, settings: StreamSettings
) -> dict[str, Any]:
    """:func:`finalize`'s output from the flat values of every element of ``state``."""
    dtype = state.knots.dtype
    result = {k: unflatten(state.pilot, v) for k, v in flat.items()}
    result["quantile_levels"] = jnp.asarray(settings.probs, dtype)
    result["hdi_prob"] = jnp.asarray(settings.hdi_prob, dtype)
    return result


def finalize(state: StreamState, *, settings: StreamSettings) -> dict[str, Any]:
    """Every output of ``az.summary`` (and more), trees shaped like a draw."""
    return assemble(state, finalize_flat(state, settings=settings), settings=settings)


# -- blocks of elements ----------------------------------------------------------------------------
# every field but SHARED_FIELDS holds one column per element, on its last axis (``hist``: a
# row of ``buckets`` per element, flat)


def size(state: StreamState) -> int:
    """The number of elements of a state."""
    return int(state.knots.shape[-1])


def take(
    state: StreamState, start: int, stop: int, length: int, *, settings: StreamSettings
) -> StreamState:
    """The state of elements ``start .. stop - 1`` alone, padded to ``length`` elements
    with copies of the last one (so that every block has one shape and one program).

    Works on host arrays (slices are views: a block costs only its own copy when
    it is sent to the device) and, without padding, on abstract values.
    """
    pad = length - (stop - start)

    def cut(x: Any) -> Any:  # elements on the last axis
        x = x[..., start:stop]
        return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)], mode="edge") if pad else x

    rows = cut(state.hist.reshape(size(state), settings.buckets).T).T  # a row per element
    # without a short last chunk, ``final`` is one number, not per element: kept whole
    shared = SHARED_FIELDS if settings.final_split else SHARED_FIELDS | {"final"}
    fields = {f: jax.tree.map(cut, getattr(state, f)) for f in state._fields if f not in shared}
    pilot = np.zeros((length,), state.knots.dtype)
    return state._replace(pilot=pilot, hist=rows.reshape(-1), **fields)


# -- the summary table ------------------------------------------------------------------------------
_ROUNDING = {"ess_bulk": 0, "ess_tail": 0, "r_hat": 2}  # ArviZ's default decimals (others: 3)


def _percent(p: float) -> str:
    """ArviZ's label of a level: ``0.03 -> "3%"`` (settings stored in float32 included)."""
    return f"{100 * round(float(p), 6):g}%"


def summary_table(result: dict[str, Any], *, interval: str = "hdi", round_to: Any = None) -> Any:
    """A pandas DataFrame like ``az.summary`` of the finalized default summary: one row
    per scalar element, named as ``az.summary`` does, and its columns.

    Parameters
    ----------
    result
        ``{output: tree}`` from ``finalize`` of :func:`sluice.stats.streaming.summary`
        (the default statistics of a run) for a merged state (pooled over chains).
    interval
        ``"hdi"``: the highest-density interval (``hdi_3%``, ``hdi_97%`` for
        mass 0.94, like ``az.summary``), read from the histogram (the
        narrowest window holding its mass);
        ``"eti"``: the equal-tailed interval from the outer quantiles
        (``eti_3%``, ``eti_97%``, like ``az.summary(stat_focus="median")``).
    round_to
        ``None``: ArviZ's default decimals; ``"none"``: none; an integer: that many.

    Returns
    -------
    pandas.DataFrame

    Examples
    --------
    >>> import jax
    >>> from sluice import stats
    >>> s = stats.streaming.summary(100)
    >>> chains = jax.random.normal(jax.random.PRNGKey(0), (2, 116, 2, 2))
    >>> pilot = chains[:, :16].reshape(-1, 2, 2)  # stands in for the final warmup draws
    >>> states = [s.update_block(s.init(pilot), c[16:], 100) for c in chains]
    >>> table = stats.summary_table(s.finalize(s.merge(*states)))
    >>> table.index.tolist()
    ['x[0, 0]', 'x[0, 1]', 'x[1, 0]', 'x[1, 1]']
    >>> table.columns.tolist()
    ['mean', 'sd', 'hdi_3%', 'hdi_97%', 'mcse_mean', 'mcse_sd', 'ess_bulk', 'ess_tail', 'r_hat']
    """
    import pandas as pd

    if interval not in ("hdi", "eti"):
        raise ValueError(f"interval must be 'hdi' or 'eti', got {interval!r}")
    round_table = rounding(round_to)
    if not isinstance(result, dict) or "mean" not in result:
        raise TypeError(
            "result must be the finalized dict of sluice.stats.streaming.summary "
            f"(with a 'mean' entry), got {type(result).__name__}"
        )
    result = jax.device_get(result)
    template = result["mean"]
    labels = element_labels(template)

    def flat(tree: Any) -> np.ndarray:
        leaves = jax.tree.leaves(tree)
        n_template = [np.size(x) for x in jax.tree.leaves(template)]
        parts = [np.asarray(x).reshape(n, -1) for x, n in zip(leaves, n_template, strict=True)]
        return np.concatenate(parts, axis=0) if parts else np.zeros((0, 1))

    def column(name: str) -> np.ndarray:
        return flat(result[name])[:, 0] if name in result else np.full(len(labels), np.nan)

    columns: dict[str, np.ndarray] = {"mean": column("mean"), "sd": column("sd")}
    if interval == "hdi":
        if "hdi" not in result:
            raise ValueError(
                "result has no 'hdi': build it with hdi_prob set, or use interval='eti'"
            )
        bounds = flat(result["hdi"])
        prob = float(result.get("hdi_prob", 0.94))
        lo_name, hi_name = f"hdi_{_percent((1 - prob) / 2)}", f"hdi_{_percent((1 + prob) / 2)}"
    else:
        if "quantiles" not in result or "quantile_levels" not in result:
            raise ValueError("result has no quantiles: build it with streaming.summary")
        levels = np.asarray(result["quantile_levels"])
        bounds = flat(result["quantiles"])[:, [0, -1]]
        lo_name, hi_name = f"eti_{_percent(levels[0])}", f"eti_{_percent(levels[-1])}"
    columns[lo_name] = bounds[:, 0]
    columns[hi_name] = bounds[:, 1]
    for name in ("mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat"):
        columns[name] = column(name)
    return round_table(pd.DataFrame(columns, index=labels))


def rounding(round_to: Any) -> Callable[[Any], Any]:
    """The rounding of a summary table: ``None`` ArviZ's default decimals (3; ``ess_*`` 0,
    ``r_hat`` 2), ``"none"`` none, an integer that many decimals."""
    if round_to is None:
        return lambda table: table.round({c: _ROUNDING.get(c, 3) for c in table.columns})
    if isinstance(round_to, int) and not isinstance(round_to, bool):
        return lambda table: table.round(round_to)
    if isinstance(round_to, str) and round_to.lower() == "none":
        return lambda table: table
    raise ValueError(f"round_to must be None, 'none' or an integer, got {round_to!r}")
