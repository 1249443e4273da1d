"""The default summary's settings and state, and the reference geometry they share.

:mod:`sluice.stats.streaming` adds draws to a :class:`StreamState`;
:mod:`sluice.stats.streaming_readout` closes, merges and reads it. Both take from
here the state's layout and the pilot's reference: quantiles, the bulk proxy
and its score, and the histogram's grid on that score.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics as _statistics
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.stats._numerics import Compensated, cummax_rows, materialize

PyTree = Any

__all__ = [
    "LEVELS",
    "SHARED_FIELDS",
    "StreamSettings",
    "StreamState",
    "bucket",
    "bucket_edges",
    "chunk_state_bytes",
    "grid",
    "hinges",
    "inverse",
    "proxy",
    "reference",
    "score",
    "sort_rows",
    "unscore",
]

LEVELS = (0.02, 0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95, 0.98)  # reference quantile levels
SCORES = tuple(_statistics.NormalDist().inv_cdf(p) for p in LEVELS)
LO, MID, HI = 1, 4, 7  # indices of 0.05, 0.5, 0.95
ROLL = 1.0  # how far the bulk score reaches beyond the outer reference scores (score)
BOUND = SCORES[-1] + ROLL  # the bulk score's range, (-BOUND, BOUND), is the histogram's
FOCUS, FOCUS_HALF = 4.0, 0.7  # the grid's refinement around each quantile read (grid)
COUNT_MAX = 2**16 - 1  # the most draws a uint16 counter holds
# split features, and the lag features (a subset)
Y, Q, Z, Z2, ZF, TLO, THI = range(7)
SEG = 7
LAG_FEATURES = (Y, Z, TLO, THI)
LAG = len(LAG_FEATURES)
# StreamState's fields with no column per element (``final`` is one number, not per
# element, without a short last chunk: StreamSettings.final_split)
SHARED_FIELDS = frozenset({"pilot", "count", "consistent", "nblocks", "folded", "closed", "hist"})


class StreamSettings(NamedTuple):
    """Static settings (see :func:`summary`)."""

    num_draws: int  # the most draws per chain (the final split)
    chunk_size: int  # the split geometry's unit (the engine's chunk size)
    lags: int = 16
    block: int = 32
    block_lags: int = 5
    buckets: int = 288
    pilot: int = 128
    probs: tuple[float, ...] = ()
    hdi_prob: float | None = None

    @property
    def ring(self) -> int:
        """Chunk summaries kept apart: those a later split may put in the second half
        (at least 2, which also holds a closed chain's between-chain summaries)."""
        num_chunks = -(-self.num_draws // self.chunk_size)
        return max(num_chunks // 2 + 1, 2)

    @property
    def counter(self) -> Any:
        """The histogram's counter dtype: ``uint16`` while a chain's draws fit in it."""
        return jnp.uint16 if self.num_draws <= COUNT_MAX else jnp.int32

    @property
    def parts(self) -> int:
        return 3 if self.chunk_size % 2 else 2

    @property
    def final_split(self) -> bool:
        """The last chunk is short: the final halves are kept apart."""
        return self.num_draws % self.chunk_size != 0


class StreamState(NamedTuple):
    """One chain's sums (open) or several chains' summaries (closed, after ``merge``).

    Arrays marked *reused* hold the between-chain summaries once closed
    (see :mod:`sluice.stats.streaming_readout`).
    """

    pilot: PyTree  # the example structure (a draw of zeros) and dtype
    knots: jax.Array  # (9, D) reference quantiles of x
    count: jax.Array  # () int32: draws of the open chain (0 once closed)
    consistent: jax.Array  # () bool: False once an update came out of order
    tail: jax.Array  # (lags, D): the last draws, most recent first
    sum1: Compensated  # (D,) sum of y
    sum2: Compensated  # (D,) sum of y^2
    sum34: jax.Array  # (2, D) sums of y^3, y^4
    xmin: jax.Array  # (D,)
    xmax: jax.Array  # (D,)
    hist: jax.Array  # (D * buckets,) settings.counter, element-major (flat: updated in place)
    lag: jax.Array  # (LAG, lags, D): sum_t f_t f_(t-k); reused: autocovariances
    partial: jax.Array  # (LAG, D): the current block's sums; reused: lag-0 autocovariance
    bring: jax.Array  # (LAG, block_lags, D): the last block means, most recent first; reused
    blag: jax.Array  # (LAG, block_lags + 1, D): sum_i b_i b_(i-k), k = 0..; reused
    nblocks: jax.Array  # () int32
    seg: jax.Array  # (ring, parts, SEG, D): per chunk, sums over its parts; reused
    prefix: jax.Array  # (SEG, D): the chunks folded into the first half
    folded: jax.Array  # () int32: chunks folded into the prefix
    final: jax.Array  # (2, SEG, D): sums over draws < N//2 and >= N - N//2 (short last chunk)
    closed: jax.Array  # (7,) int32: chains, draws, split, nmin, nmax, nbmin, bchains


def _split_shapes(settings: StreamSettings, d: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``seg`` and ``final``: the parts of the state the chunk size sets
    (``final`` is one number unless the last chunk is short: XLA does not shard
    zero-size arrays)."""
    final = (2, SEG, d) if settings.final_split else (1,)
    return (settings.ring, settings.parts, SEG, d), final


def chunk_state_bytes(num_draws: int, chunk_size: int, elements: int, itemsize: int = 4) -> int:
    """Bytes of one chain's state that depend on the chunk size: the chunk summaries
    of the split-half ring (``num_chunks // 2 + 1`` of them, three parts each for an
    odd chunk) and the final halves (a short last chunk). Smaller chunks hold fewer
    draws on the device but more of these; the engine weighs the two."""
    shapes = _split_shapes(StreamSettings(num_draws, min(chunk_size, num_draws)), elements)
    return sum(math.prod(shape) for shape in shapes) * itemsize


# -- the reference ---------------------------------------------------------------------------
def reference(rows: jax.Array) -> jax.Array:
    """``(9, D)`` the reference quantiles of pooled pilot rows ``(n, D)``, as
    ``jnp.quantile`` (linear interpolation) computes them."""
    n = rows.shape[0]
    ordered = sort_rows(rows)
    at = np.asarray(LEVELS) * (n - 1)
    lo, hi = np.floor(at).astype(int), np.ceil(at).astype(int)
    frac = jnp.asarray(at - lo, rows.dtype)[:, None]
    return ordered[lo] * (1 - frac) + ordered[hi] * frac


def sort_rows(x: jax.Array) -> jax.Array:
    """``x`` ``(n, D)`` sorted along its first axis, NaN last (positive NaN; a NaN with
    its sign bit set comes first), ``-0.0`` before ``0.0``.

    Sorted as integers whose order is the floats' (the sign bit set: the other bits
    flipped), which XLA:CPU sorts about five times faster than floats."""
    bits = jnp.finfo(x.dtype).bits
    itype = {32: jnp.int32, 64: jnp.int64}[bits]
    i = jax.lax.bitcast_convert_type(x, itype)
    flip = jnp.asarray((1 << (bits - 1)) - 1, itype)

    def order(k: jax.Array) -> jax.Array:  # an involution
        return k ^ ((k >> (bits - 1)) & flip)

    return jax.lax.bitcast_convert_type(order(jnp.sort(order(i), axis=0)), x.dtype)


class Hinges(NamedTuple):
    """``z(v) = base + slope * v + sum_k delta_k * max(v - k_k, 0)`` (per element)."""

    base: jax.Array  # (D,)
    slope: jax.Array  # (D,)
    at: jax.Array  # (J, D) the interior knots
    delta: jax.Array  # (J, D) slope changes there


def _slopes(knots: jax.Array) -> jax.Array:
    """``(8, D)`` the slope of each segment between ``knots`` ``(9, D)``, in score per
    unit of ``x``; the outer two also extend beyond the outer knots.

    A tied segment (a point mass in the pilot) has no extent: its slope is 0. A
    tied outer segment extends with the slope of the nearest segment that has
    width, so that draws beyond the pilot's range still spread over the
    histogram's buckets; a pilot with no width at all (constant) with slope 1.
    """
    width = knots[1:] - knots[:-1]  # (8, D)
    rise = jnp.asarray(np.diff(SCORES), knots.dtype)[:, None]
    wide = _wide(knots)
    slopes = jnp.where(wide, rise / jnp.where(wide, width, 1.0), 0.0)
    some = jnp.any(wide, axis=0)
    nearest = jnp.stack([jnp.argmax(wide, axis=0), len(wide) - 1 - jnp.argmax(wide[::-1], axis=0)])
    first, last = jnp.take_along_axis(slopes, nearest, 0)
    one = jnp.ones_like(first)
    return slopes.at[0].set(jnp.where(some, first, one)).at[-1].set(jnp.where(some, last, one))


def _wide(knots: jax.Array) -> jax.Array:
    """``(8, D)`` whether each segment between ``knots`` ``(9, D)`` has width (knots
    interpolated between equal draws differ by rounding, a few ulps: tied)."""
    ulps = 4 * jnp.finfo(knots.dtype).eps * jnp.maximum(jnp.abs(knots[1:]), jnp.abs(knots[:-1]))
    return knots[1:] - knots[:-1] > ulps


def hinges(knots: jax.Array) -> Hinges:
    """The piecewise-linear normal scores through ``knots`` ``(9, D)``, extended
    linearly beyond the outer knots, as hinges (three operations per knot)."""
    slopes = _slopes(knots)
    base = SCORES[0] - slopes[0] * knots[0]
    return Hinges(base, slopes[0], knots[1:-1], slopes[1:] - slopes[:-1])


def proxy(v: jax.Array, h: Hinges) -> jax.Array:
    """The proxy of ``v`` (``(..., D)``) through hinges ``h``."""
    z = h.base + h.slope * v
    for k in range(h.at.shape[0]):
        z = z + h.delta[k] * jnp.maximum(v - h.at[k], 0.0)
    return z


def inverse(z: jax.Array, knots: jax.Array) -> jax.Array:
    """``x`` ``(D, M)`` with ``proxy(x, hinges(knots)) = z`` for scores ``z`` ``(M,)``
    shared by every element: the inverse of the piecewise-linear proxy (a flat
    segment, tied knots, maps to its start). The segments' slopes are taken exactly,
    not summed from the hinges' changes: a tied segment's 0 would come back as
    rounding error, and its inverse as far away.

    Each score's segment is counted against the interior knots' scores and read by
    selects, not searched and gathered: with ``J + 1 = 8`` segments, a few fused
    operations per value against a search's loop of gathers (the summary reads
    this at every element)."""
    h = hinges(knots)
    slopes = _slopes(knots)  # (J + 1, D)
    z_at = proxy(h.at, h)  # (J, D): the proxy at each interior knot
    # per element, computed once (fused into the (D, M) values below, XLA would
    # recompute them at every value)
    h, slopes, z_at = materialize((h, slopes, z_at))
    zz = z[None, :]
    seg = sum((z_at[k][:, None] <= zz).astype(jnp.int32) for k in range(z_at.shape[0]))

    def pick(rows: jax.Array, first: jax.Array) -> jax.Array:
        """``rows[seg - 1]`` (``(J, D)``) at each value, ``first`` where ``seg == 0``."""
        out = jnp.broadcast_to(first[:, None], seg.shape)
        for k in range(rows.shape[0]):
            out = jnp.where(seg == k + 1, rows[k][:, None], out)
        return out

    zero = jnp.zeros_like(h.base)
    s = pick(slopes[1:], slopes[0])
    xs, zs = pick(h.at, zero), pick(z_at, zero)
    first = (zz - h.base[:, None]) / h.slope[:, None]  # (the first slope is never 0)
    inner = jnp.where(s > 0, xs + (zz - zs) / jnp.where(s > 0, s, 1.0), xs)
    return jnp.where(seg == 0, first, inner)


def score(z: jax.Array) -> jax.Array:
    """The bulk score of proxy values ``z``: ``z`` between the outer reference scores,
    ``u / (1 + u / ROLL)`` beyond them at a distance ``u`` (at most ``ROLL`` further).

    Rank normalisation bounds a draw's score by the number of draws; the proxy,
    linear beyond the outer knots, does not, and a heavy tail's few far draws then
    dominate the lag products (docs/statistics.md)."""
    inner = jnp.clip(z, SCORES[0], SCORES[-1])
    u = z - inner
    return inner + u / (1.0 + jnp.abs(u) * (1.0 / ROLL))


def unscore(s: jax.Array) -> jax.Array:
    """The proxy value of bulk score ``s`` (the inverse of :func:`score`; ``+-inf`` at
    its bounds ``+-BOUND``)."""
    inner = jnp.clip(s, SCORES[0], SCORES[-1])
    e = s - inner
    room = 1.0 - jnp.abs(e) * (1.0 / ROLL)
    return inner + jnp.where(room > 0, e / jnp.where(room > 0, room, 1.0), jnp.sign(e) * jnp.inf)


def _unscore_host(s: np.ndarray) -> np.ndarray:
    """:func:`unscore` of host values, in NumPy (float64)."""
    inner = np.clip(s, SCORES[0], SCORES[-1])
    e = s - inner
    room = 1.0 - np.abs(e) * (1.0 / ROLL)
    with np.errstate(divide="ignore", invalid="ignore"):
        return inner + np.where(room > 0, e / np.where(room > 0, room, 1.0), np.sign(e) * np.inf)


@functools.lru_cache(maxsize=64)
def grid(probs: tuple[float, ...], buckets: int, focus: float = FOCUS,
         half: float = FOCUS_HALF) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(at, position)``: the histogram's grid as a piecewise-linear map from bulk
    score to bucket position (``0`` at ``-BOUND``, ``buckets`` at ``BOUND``), through
    its breakpoints ``at``.

    The buckets are ``focus`` times narrower within ``half`` of the normal score
    of each level in ``probs`` (the quantiles and the HDI's ends the
    summary reads; the bulk score puts them there, up to the pilot's error): a
    quantile read from the histogram misses the draws' by an error that grows with
    the width of its bucket. The fine parts are wide enough for the pilot's error
    (the grids compared: docs/statistics.md).
    """
    centres = sorted(_statistics.NormalDist().inv_cdf(p) for p in probs)
    fine: list[list[float]] = []
    for c in centres:
        lo, hi = max(c - half, -BOUND), min(c + half, BOUND)
        if hi <= lo:  # beyond the score's range
            continue
        if fine and lo <= fine[-1][1]:
            fine[-1][1] = max(fine[-1][1], hi)
        else:
            fine.append([lo, hi])
    # the cumulative weight at each breakpoint: 1 per unit of score, `focus` in the fine parts
    # (every second segment between the breakpoints)
    at, weight = [-BOUND], [0.0]
    breaks = [-BOUND, *(v for part in fine for v in part), BOUND]
    for k, (lo, hi) in enumerate(itertools.pairwise(breaks)):
        if hi > lo:  # a fine part may start or end at a bound
            at.append(hi)
            weight.append(weight[-1] + (hi - lo) * (focus if k % 2 else 1.0))
    return np.asarray(at), np.asarray(weight) * (buckets / weight[-1])


def bucket(s: jax.Array, settings: StreamSettings) -> jax.Array:
    """The histogram bucket of bulk scores ``s`` on :func:`grid` (finest where the
    summary reads its quantiles, coarser in the tails, which reach every value)."""
    at, position = grid(settings.probs, settings.buckets)
    slopes = [float(v) for v in np.diff(position) / np.diff(at)]
    b = slopes[0] * (s + BOUND)
    for k in range(1, len(slopes)):  # a hinge per breakpoint
        b = b + (slopes[k] - slopes[k - 1]) * jnp.maximum(s - float(at[k]), 0.0)
    return jnp.clip(jnp.floor(b), 0, settings.buckets - 1).astype(jnp.int32)


def bucket_edges(knots: jax.Array, settings: StreamSettings) -> jax.Array:
    """``(D, buckets + 1)`` edges of the buckets in ``x`` units (the outer edges are
    infinite: the readout uses the extremes there).

    Where no two knots tie (the proxy passes through each knot at its normal score),
    every element puts an edge's score in the same segment, known when the program is
    traced: each edge is then the linear interpolation between two knots, a few
    operations against :func:`inverse`'s search of every score's segment (several
    times the cost where the readout compiles for a quick compile, and it reads
    every element). A block of elements with a tie takes :func:`inverse`."""
    at, position = grid(settings.probs, settings.buckets)
    w = np.interp(np.arange(settings.buckets + 1), position, at)
    z_host = _unscore_host(w)  # (G + 1,) the edges' proxy values, +-inf at the ends
    z = jnp.asarray(np.clip(z_host, -1e30, 1e30), knots.dtype)
    outer = jnp.asarray(z_host, knots.dtype)

    def general(knots: jax.Array) -> jax.Array:
        # non-decreasing whatever the rounding of the inverse: no bucket of negative width
        return cummax_rows(jnp.where(np.isinf(z_host), outer, inverse(z, knots)))

    def untied(knots: jax.Array) -> jax.Array:
        # each edge's segment, between knots seg and seg + 1 (the outer two extended),
        # and its edges kept between those knots: non-decreasing as the knots are
        scores = np.asarray(SCORES)
        seg = np.clip(np.searchsorted(scores[1:-1], z_host, "right"), 0, len(scores) - 2)
        rise = jnp.asarray(np.diff(scores), knots.dtype)[:, None]
        per_score = (knots[1:] - knots[:-1]) / rise  # (8, D): x per unit of score
        offset = z[:, None] - jnp.asarray(scores[seg], knots.dtype)[:, None]
        lo, hi = knots[seg], knots[seg + 1]  # (G + 1, D)
        x = lo + offset * per_score[seg]
        first, last = (seg == 0)[:, None], (seg == len(scores) - 2)[:, None]
        x = jnp.where(first, x, jnp.maximum(x, lo))
        x = jnp.where(last, x, jnp.minimum(x, hi))
        return jnp.where(np.isinf(z_host)[:, None], outer[:, None], x).T

    return jax.lax.cond(jnp.all(_wide(knots)), untied, general, knots)
