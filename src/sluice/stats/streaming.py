"""The default summary statistics: every element, small, open-ended (:func:`summary`).

One statistic keeps, per chain and per scalar element of a draw, what
``az.summary`` needs in about 1.5 KB (float32), and finalizes exactly at any
chunk boundary without knowing how many draws the run will end with: the
pilot's reference is :mod:`sluice.stats.streaming_state`'s, the closing, merging
and reading :mod:`sluice.stats.streaming_readout`'s. ``update_block`` (the
engine's path) processes a chunk's draws in windows of :data:`WINDOW` rows;
``update`` processes one draw. docs/statistics.md ("The default summary: how it
works, and what it costs") explains the method.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax import compile as programs
from sluice._jax.batching import map_in_place
from sluice.stats import streaming_readout
from sluice.stats._layout import flatten, num_elements, own_copy, working_dtype
from sluice.stats._numerics import compensated_add, compensated_zeros, materialize
from sluice.stats.base import Blocks, Statistic
from sluice.stats.streaming_state import (
    COUNT_MAX,
    HI,
    LAG,
    LEVELS,
    LO,
    MID,
    SEG,
    SHARED_FIELDS,
    Hinges,
    StreamSettings,
    StreamState,
    _split_shapes,
    bucket,
    chunk_state_bytes,
    hinges,
    proxy,
    reference,
    score,
)

PyTree = Any

__all__ = ["LEVELS", "StreamSettings", "StreamState", "chunk_state_bytes", "summary"]

WINDOW = 16  # rows processed at once
# Past WHOLE_ELEMENTS (the CPU) or UPDATE_BLOCK (elsewhere) elements the update runs a
# block of them at a time, in place (its temporaries are one block's): UPDATE_BLOCK off
# the CPU; on the CPU as many as keep a block's working set within a core's L2 cache
# (block_elements: about three times the state a block copies, for the copies in and
# out and the window's temporaries; docs/statistics.md, "Blocks the size of a core's
# cache"), unless CPU_UPDATE_BLOCK names a number. Up to WHOLE_ELEMENTS the update
# takes every element at once, as fast as by blocks there and a loop fewer to compile.
UPDATE_BLOCK = 16384
WHOLE_ELEMENTS = 2048
CPU_UPDATE_BLOCK: int | None = None
CACHE_FALLBACK = 2**20  # a core's L2 cache, in bytes, where the system does not report it
WORKING_SET = 3  # a block's working set, in multiples of the state bytes it copies
MIN_BLOCK = 64
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux's description of them
SMALL, SMALL_WINDOW = 100, 4  # at most SMALL elements: fewer rows at once (a quicker compile)


# -- init ---------------------------------------------------------------------------------------
def init(settings: StreamSettings, pooled: PyTree) -> StreamState:
    """A fresh chain from the pooled pilot rows (a leading axis)."""
    example = jax.tree.map(lambda x: x[0], pooled)
    dtype = working_dtype(example)
    d = num_elements(example)
    rows = jax.vmap(lambda p: flatten(p, dtype))(pooled)  # (n, D)
    knots = reference(rows)
    z = lambda *shape: jnp.zeros(shape, dtype)  # noqa: E731
    lags, bl = settings.lags, settings.block_lags
    seg_shape, final_shape = _split_shapes(settings, d)
    return StreamState(
        pilot=jax.tree.map(jnp.zeros_like, own_copy(example)),
        knots=knots,
        count=jnp.zeros((), jnp.int32),
        consistent=jnp.ones((), bool),
        tail=z(lags, d),
        sum1=compensated_zeros((d,), dtype),
        sum2=compensated_zeros((d,), dtype),
        sum34=z(2, d),
        xmin=jnp.full((d,), jnp.inf, dtype),
        xmax=jnp.full((d,), -jnp.inf, dtype),
        hist=jnp.zeros((d * settings.buckets,), settings.counter),
        lag=z(LAG, lags, d),
        partial=z(LAG, d),
        bring=z(LAG, bl, d),
        blag=z(LAG, bl + 1, d),
        nblocks=jnp.zeros((), jnp.int32),
        seg=z(*seg_shape),
        prefix=z(SEG, d),
        folded=jnp.zeros((), jnp.int32),
        final=z(*final_shape),
        closed=jnp.asarray([0, 0, 0, 2**31 - 1, 0, 2**31 - 1, 0], jnp.int32),  # merge identities
    )


# -- one window of rows -----------------------------------------------------------------------
class _Reference(NamedTuple):
    center: jax.Array
    lo: jax.Array
    hi: jax.Array
    bulk: Hinges


def _reference(state: StreamState) -> _Reference:
    k = state.knots
    return _Reference(k[MID], k[LO], k[HI], hinges(k))


def _lag_features(x: jax.Array, z: jax.Array, ref: _Reference) -> list[jax.Array]:
    """The lag features of rows ``x`` ``(R, D)`` with bulk score ``z``: ``y, z, lo, hi``."""
    lo = (x <= ref.lo).astype(x.dtype)
    hi = (x > ref.hi).astype(x.dtype)
    return [x - ref.center, z, lo, hi]


def _rows_sum(a: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """``sum_r weights[r] * a[:, r]`` of ``a`` ``(K, W, D)``, as a chain of row additions
    (XLA on CPU fuses these into one pass; a reduction over the middle axis is far
    slower, and one small op per row and feature makes the program slow to compile)."""
    acc = a[:, 0] if weights is None else a[:, 0] * weights[0]
    for r in range(1, a.shape[1]):
        acc = acc + (a[:, r] if weights is None else a[:, r] * weights[r])
    return acc


def _window(state: StreamState, prev: jax.Array, x: jax.Array, zx: jax.Array, n: jax.Array,
            ref: _Reference, settings: StreamSettings) -> tuple[StreamState, jax.Array]:  # fmt: skip
    """Add rows ``x[0 .. n-1]`` (``(W, D)``, all in the chunk of the first; ``zx`` their
    bulk score) as the next draws; ``prev`` ``(LAG, lags, D)`` are the lag features of
    the last ``lags`` draws (oldest first, zero before the chain's start). Returns the
    state and the new ``prev``."""
    w, lags = x.shape[0], settings.lags
    dtype = x.dtype
    start = state.count
    valid = jnp.arange(w) < n
    vf = valid.astype(dtype)[:, None]
    lagf = jnp.stack(_lag_features(x, zx, ref)) * vf  # rows past n are zero: no products
    y, z = lagf[0], lagf[1]
    q = y * y
    segf = jnp.stack([y, q, z, z * z, jnp.abs(z), lagf[2], lagf[3]])  # (SEG, W, D)
    moments = jnp.stack([y, q, q * y, q * q])
    lagf, segf, moments = materialize((lagf, segf, moments))
    g = start + jnp.arange(w)  # the draw index of each row

    # moments and extremes
    s1, s2, s3, s4 = _rows_sum(moments)
    big = jnp.asarray(jnp.inf, dtype)
    xmn = jnp.min(jnp.where(valid[:, None], x, big), axis=0)
    xmx = jnp.max(jnp.where(valid[:, None], x, -big), axis=0)

    # lag products: pairs (t, t - k), t a new row (prev is zero before the chain's start)
    ext = jnp.concatenate([prev, lagf], axis=1)  # (LAG, lags + W, D), oldest first
    lag = state.lag
    for r in range(w):  # row r pairs with the `lags` rows before it, most recent first
        lag = lag + ext[:, r : r + lags][:, ::-1] * ext[:, lags + r][:, None, :]
    state = _blocks(state, lagf, g, valid, settings)

    # split sums over the parts of the chunk of these rows
    chunk = settings.chunk_size
    j = start // chunk
    pos = g - j * chunk
    m = chunk // 2
    total = _rows_sum(segf)
    parts = [_rows_sum(segf, (valid & (pos < m)).astype(dtype))]
    if settings.parts == 3:
        parts.append(_rows_sum(segf, (valid & (pos == m)).astype(dtype)))
    parts.append(total - sum(parts))
    # the chunk's slot of the ring (a one-slot view of it, by blocks of elements),
    # restarted at the chunk's first row: the chunk it held before was folded
    slot = j % settings.ring if state.seg.shape[0] == settings.ring else 0
    held = jax.lax.dynamic_index_in_dim(state.seg, slot, keepdims=False)
    held = jnp.where(start % chunk == 0, 0.0, held)
    seg = jax.lax.dynamic_update_index_in_dim(state.seg, held + jnp.stack(parts), slot, 0)
    final = state.final
    if settings.final_split:
        first = settings.num_draws // 2
        second = settings.num_draws - first
        f1 = _rows_sum(segf, (valid & (g < first)).astype(dtype))
        f2 = _rows_sum(segf, (valid & (g >= second)).astype(dtype))
        final = final + jnp.stack([f1, f2])

    # the last `lags` draws (most recent first) and their lag features (oldest first)
    rows = jnp.concatenate([state.tail[::-1], x], axis=0)  # oldest first
    tail = jax.lax.dynamic_slice_in_dim(rows, n, lags, 0)[::-1]
    new_prev = jax.lax.dynamic_slice_in_dim(ext, n, lags, 1)
    state = state._replace(
        count=start + n,
        tail=tail,
        sum1=compensated_add(state.sum1, s1),
        sum2=compensated_add(state.sum2, s2),
        sum34=state.sum34 + jnp.stack([s3, s4]),
        xmin=jnp.minimum(state.xmin, xmn),
        xmax=jnp.maximum(state.xmax, xmx),
        lag=lag,
        seg=seg,
        final=final,
    )
    return state, new_prev


def _blocks(state: StreamState, f: jax.Array, g: jax.Array, valid: jax.Array,
            settings: StreamSettings) -> StreamState:  # fmt: skip
    """Add the rows' lag features ``f`` ``(LAG, W, D)`` to the block means (blocks of
    ``block`` draws aligned on the draw index; a window of at most ``block`` rows
    holds at most one block end)."""
    b, w = settings.block, f.shape[1]
    dtype = f.dtype
    ends = valid & ((g + 1) % b == 0)
    any_end = jnp.any(ends)
    end_row = jnp.argmax(ends)
    before = (valid & (jnp.arange(w) <= end_row) & any_end).astype(dtype)
    s_all = _rows_sum(f)
    s_before = _rows_sum(f, before)
    s_after = s_all - s_before
    mean = (state.partial + s_before) / b
    ring = state.bring
    prods = jnp.concatenate([mean[:, None, :], ring], axis=1) * mean[:, None, :]
    have = jnp.arange(settings.block_lags + 1) <= state.nblocks  # lag k needs k earlier blocks
    blag = state.blag + jnp.where(any_end & have[None, :, None], prods, 0.0)
    new_ring = jnp.concatenate([mean[:, None, :], ring[:, :-1]], axis=1)
    return state._replace(
        partial=jnp.where(any_end, s_after, state.partial + s_all),
        bring=jnp.where(any_end, new_ring, ring),
        blag=blag,
        nblocks=state.nblocks + any_end.astype(jnp.int32),
    )


def _fold_prefix(state: StreamState, settings: StreamSettings, chain: Any = None) -> StreamState:
    """Fold the chunk that every later split puts in the first half into the prefix
    (with ``k`` complete chunks, every later split's first half holds at least the
    chunks before ``k // 2``); its slot is reused by a later chunk, which restarts it.
    ``chain``: ``state`` is a stack (leading chain axis) and that chain's is folded,
    in place.

    An update adds at most one chunk, so at most one is due; more (an update out of
    order) mark the state inconsistent. The fold only reads the ring: written (its
    slot zeroed) on a stack, XLA copied the whole stack's ring."""
    lead = () if chain is None else (chain,)

    def own(a: jax.Array) -> jax.Array:
        return a if chain is None else jax.lax.dynamic_index_in_dim(a, chain, keepdims=False)

    def mine(a: jax.Array, value: jax.Array) -> jax.Array:
        return value if chain is None else jax.lax.dynamic_update_index_in_dim(a, value, chain, 0)

    folded = own(state.folded)
    due = (own(state.count) // settings.chunk_size) // 2 - folded
    fold = due > 0
    at = _indices(*lead, folded % settings.ring, 0, 0, 0)
    ones = tuple(1 for _ in lead)
    rows = jax.lax.dynamic_slice(state.seg, at, (*ones, 1, *state.seg.shape[len(lead) + 1 :]))
    size, start = (*ones, *state.prefix.shape[len(lead) :]), _indices(*lead, 0, 0)
    whole = jnp.sum(rows, axis=len(lead) + 1).reshape(size)  # (SEG, D) of the chain
    prefix = jax.lax.dynamic_slice(state.prefix, start, size) + jnp.where(fold, whole, 0.0)
    return state._replace(
        prefix=jax.lax.dynamic_update_slice(state.prefix, prefix, start),
        folded=mine(state.folded, folded + fold.astype(folded.dtype)),
        consistent=mine(state.consistent, own(state.consistent) & (due <= 1)),
    )


def _indices(*values: Any) -> tuple[jax.Array, ...]:
    """Slice indices of one type (``int32``; with ``jax_enable_x64`` Python integers
    would be ``int64`` beside the state's ``int32`` counters)."""
    return tuple(jnp.asarray(v, jnp.int32) for v in values)


def _prev_features(state: StreamState, ref: _Reference, settings: StreamSettings) -> jax.Array:
    """``(LAG, lags, D)`` the lag features of the stored last draws, oldest first, zero
    before the chain's start."""
    lags = settings.lags
    have = ((state.count - lags + jnp.arange(lags)) >= 0).astype(state.tail.dtype)
    x = state.tail[::-1]
    return jnp.stack(_lag_features(x, score(proxy(x, ref.bulk)), ref)) * have[:, None]


@functools.cache
def core_cache_bytes() -> int:
    """One core's share of its L2 cache, in bytes, as Linux reports it (sysfs), else
    :data:`CACHE_FALLBACK`."""
    try:
        for index in sorted(CPU_CACHES.glob("index*")):
            if (index / "level").read_text().strip() != "2":
                continue
            if (index / "type").read_text().strip() not in ("Unified", "Data"):
                continue
            size = (index / "size").read_text().strip()
            scale = {"K": 2**10, "M": 2**20}.get(size[-1:], 1)
            total = int(size.rstrip("KM")) * scale
            return max(total // len(_cpu_list((index / "shared_cpu_list").read_text())), 1)
    except (OSError, ValueError):
        pass
    return CACHE_FALLBACK


def _cpu_list(text: str) -> list[int]:
    """The CPUs of a sysfs list such as ``0-3,8``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus or [0]


def whole_elements() -> int:
    """Elements the update takes at once, past which it runs by blocks: read when a
    program is traced (:data:`WHOLE_ELEMENTS` on the CPU, :data:`UPDATE_BLOCK` elsewhere;
    a :data:`CPU_UPDATE_BLOCK` override also sets it)."""
    if jax.default_backend() != "cpu":
        return UPDATE_BLOCK
    return WHOLE_ELEMENTS if CPU_UPDATE_BLOCK is None else CPU_UPDATE_BLOCK


def block_elements(bytes_per_element: int) -> int:
    """Elements of one block of the update past :func:`whole_elements`, for a block
    that copies ``bytes_per_element`` of each element's state (:func:`_bytes_per_element`)
    per chain: read when a program is traced.

    On the CPU, a block's working set (about :data:`WORKING_SET` times those bytes:
    the columns copied in and written back, and the window's features, lag
    products and the chunk's rows and bulk scores, about as large again) stays
    within a core's L2 cache (:func:`core_cache_bytes`), a multiple of 64
    elements, at least :data:`MIN_BLOCK`; :data:`CPU_UPDATE_BLOCK` overrides it.
    Elsewhere :data:`UPDATE_BLOCK`."""
    if jax.default_backend() != "cpu":
        return UPDATE_BLOCK
    if CPU_UPDATE_BLOCK is not None:
        return CPU_UPDATE_BLOCK
    fits = core_cache_bytes() // (WORKING_SET * max(bytes_per_element, 1))
    return max(MIN_BLOCK, fits // 64 * 64)


def _bytes_per_element(state: StreamState, d: int, chains: int = 1) -> int:
    """The bytes per element of one chain's state that a block of the update copies in
    and out: the fields with a column per element, of the split ring the chunk's own
    slot alone, without the prefix (:func:`_by_blocks`)."""
    total = 0
    for field in state._fields:
        if field in SHARED_FIELDS - {"hist"} or field == "prefix":
            continue
        for leaf in jax.tree.leaves(getattr(state, field)):
            size = math.prod(leaf.shape) * jnp.dtype(leaf.dtype).itemsize
            total += size // leaf.shape[-4] if field == "seg" else size  # one slot of the ring
    return -(-total // (d * chains))


def window_rows(elements: int) -> int:
    """Rows a window processes at once: the window is unrolled in the program, so a
    small model takes fewer rows and compiles quicker; a larger one takes :data:`WINDOW`,
    which passes over the state less often (costs: docs/statistics.md)."""
    return SMALL_WINDOW if elements <= SMALL else WINDOW


def update_block(settings: StreamSettings, state: StreamState, draws: PyTree,
                 count: jax.Array) -> StreamState:  # fmt: skip
    """Add ``draws[0 .. count - 1]`` (a leading axis), the chain's next ``count`` draws.

    The engine calls this once per chunk, at a chunk boundary of the statistic's
    geometry (else the state is marked inconsistent and finalizes to NaN). More than
    :func:`whole_elements` elements are updated a block at a time, in place.
    """
    dtype = state.knots.dtype
    x = jax.vmap(lambda v: flatten(v, dtype))(draws)  # (C, D)
    d = x.shape[1]
    if d <= whole_elements():
        return _update_rows(settings, state, x, count, window_rows(d))
    return _by_blocks(settings, state, x, count, None, block_elements(_bytes_per_element(state, d)))


def update_chains(settings: StreamSettings, states: StreamState, draws: PyTree,
                  count: jax.Array) -> StreamState:  # fmt: skip
    """:func:`update_block` of every chain of a stack (leading chain axis), in place.

    Above :func:`whole_elements` elements each block of each chain's columns is
    read from the stack and written back, so no chain's whole state is copied (as
    the engine's chain-by-chain map would)."""
    dtype = states.knots.dtype
    x = jax.vmap(jax.vmap(lambda v: flatten(v, dtype)))(draws)  # (G, C, D)
    d = x.shape[2]
    if d <= whole_elements():
        one = lambda s, xc: (_update_rows(settings, s, xc, count, window_rows(d)),)  # noqa: E731
        return map_in_place(one, (states, x))[0]

    e = block_elements(_bytes_per_element(states, d, x.shape[0]))

    def chain(c: Any, full: StreamState) -> StreamState:
        return _by_blocks(settings, states, x, count, c, e, full)

    return jax.lax.fori_loop(0, x.shape[0], chain, states)


def _by_blocks(settings: StreamSettings, state: StreamState, x: jax.Array, count: jax.Array,
               chain: Any, e: int, into: StreamState | None = None) -> StreamState:  # fmt: skip
    """``_update_rows`` a block of ``e`` elements (:func:`block_elements`) at a time.

    ``chain`` ``None``: ``state`` is one chain's, ``x`` ``(C, D)``; else ``state`` and
    ``x`` are stacks (leading chain axis) and chain ``chain`` is updated, its blocks
    read from ``into`` (default ``state``) and written there. Every block starts
    from ``state``'s counters (``count``, the folds: the same for every block)."""
    d = x.shape[-1]
    shared = SHARED_FIELDS if settings.final_split else SHARED_FIELDS | {"final"}
    # the split ring is cut to the chunk's own slot, the prefix not at all (the rows
    # touch neither elsewhere; the fold runs after every block, on the whole state):
    # copied in and out of every block, the ring cost as much as the rest at small chunks
    per_element = [f for f in state._fields if f not in shared | {"seg", "prefix"}]
    # the reference quantiles are read, never updated: written back, XLA copied the
    # whole stack's `knots` at every block (a cost in proportion to all the elements)
    written = [f for f in per_element if f != "knots"]
    window = window_rows(d)
    hist = settings.buckets

    def at(a: jax.Array, start: Any) -> tuple:
        return (start,) if chain is None else (chain, *(0,) * (a.ndim - 2), start)

    def cut(a: jax.Array, start: Any, size: int, k: int = 1) -> jax.Array:
        if chain is None:
            return jax.lax.dynamic_slice_in_dim(a, start * k, size * k, a.ndim - 1)
        out = jax.lax.dynamic_slice(a, at(a, start * k), (1, *a.shape[1:-1], size * k))
        return out[0]

    def put(a: jax.Array, b: jax.Array, start: Any, k: int = 1) -> jax.Array:
        if chain is None:
            return jax.lax.dynamic_update_slice_in_dim(a, b, start * k, a.ndim - 1)
        return jax.lax.dynamic_update_slice(a, b[None], at(a, start * k))

    own = state  # its counters (one chain's); its columns come from `cut`
    if chain is not None:
        index = lambda a: jax.lax.dynamic_index_in_dim(a, chain, keepdims=False)  # noqa: E731
        own = state._replace(
            **{f: jax.tree.map(index, getattr(state, f)) for f in sorted(SHARED_FIELDS)}
        )
    rows = x if chain is None else jax.lax.dynamic_index_in_dim(x, chain, keepdims=False)
    slot = (own.count // settings.chunk_size) % settings.ring  # the chunk's, in the ring

    def block(i: Any, full: StreamState) -> StreamState:
        # block i: columns i e .. i e + e - 1; the last ends at column d, overlapping
        # the one before it where e does not divide d, whose columns it keeps as they
        # were (so one program body serves every block)
        start = jnp.minimum(i * e, d - e)
        fresh = jnp.arange(e) + start >= i * e

        def keep(old: jax.Array, updated: jax.Array, k: int = 1) -> jax.Array:
            return jnp.where(jnp.repeat(fresh, k) if k > 1 else fresh, updated, old)

        lead = () if chain is None else (chain,)
        ring_at = _indices(*lead, slot, 0, 0, start)
        view = (*(1 for _ in lead), 1, *full.seg.shape[len(lead) + 1 : -1], e)
        seg = jax.lax.dynamic_slice(full.seg, ring_at, view).reshape(view[len(lead) :])
        sub = own._replace(
            hist=cut(full.hist, start, e, hist), seg=seg, prefix=None,
            **{f: jax.tree.map(lambda a: cut(a, start, e), getattr(full, f)) for f in per_element},
        )  # fmt: skip
        new = _update_rows(settings, sub, jax.lax.dynamic_slice_in_dim(rows, start, e, 1),
                           count, window, fold=False)  # fmt: skip
        counters = {f: getattr(new, f) for f in sorted(SHARED_FIELDS - {"pilot", "hist"})}
        if chain is not None:
            counters = {f: jax.lax.dynamic_update_index_in_dim(getattr(full, f), v, chain, 0)
                        for f, v in counters.items()}  # fmt: skip
        return full._replace(
            seg=jax.lax.dynamic_update_slice(full.seg, keep(seg, new.seg).reshape(view), ring_at),
            hist=put(full.hist, keep(sub.hist, new.hist, hist), start, hist),
            **{f: jax.tree.map(lambda a, b, c: put(a, keep(b, c), start), getattr(full, f),
                               getattr(sub, f), getattr(new, f))
               for f in written},
            **counters,
        )  # fmt: skip

    full = state if into is None else into
    full = jax.lax.fori_loop(0, -(-d // e), block, full)
    return _fold_prefix(full, settings, chain)


def _update_rows(settings: StreamSettings, state: StreamState, x: jax.Array, count: jax.Array,
                 window: int, fold: bool = True) -> StreamState:  # fmt: skip
    """:func:`update_block` of the flat draws ``x`` ``(C, D)``, ``window`` rows at once.
    ``fold`` ``False``: ``state.seg`` is a view of the chunk's slot alone (one slot;
    :func:`_by_blocks`), and the prefix is the caller's to fold."""
    dtype = state.knots.dtype
    rows = x.shape[0]
    count = jnp.minimum(jnp.asarray(count, jnp.int32), rows)
    chunk = settings.chunk_size
    aligned = (state.count % chunk == 0) & (count <= chunk)
    within = state.count + count <= settings.num_draws  # the ring and the counters' room
    state = state._replace(consistent=state.consistent & aligned & within)
    w = min(window, settings.block)
    trips = -(-rows // w)
    padded = jnp.concatenate([x, jnp.zeros((trips * w - rows, x.shape[1]), dtype)], axis=0)
    ref = _reference(state)
    prev = _prev_features(state, ref, settings)
    # the bulk score of every row at once, for the windows and the histogram (computed
    # inside each window, XLA:CPU fuses it with the stacking of the features into slower
    # scalar code)
    z = score(proxy(padded, ref.bulk))

    def body(i: Any, carry: tuple) -> tuple:
        s, p = carry
        lo = i * w
        n = jnp.clip(count - lo, 0, w)
        rows_of = lambda a: jax.lax.dynamic_slice_in_dim(a, lo, w, 0)  # noqa: E731
        return _window(s, p, rows_of(padded), rows_of(z), n, ref, settings)

    state, _ = jax.lax.fori_loop(0, -(-count // w), body, (state, prev))
    state = _histogram(state, z[:rows], jnp.arange(rows) < count, settings)
    return _fold_prefix(state, settings) if fold else state


def _histogram(state: StreamState, z: jax.Array, valid: jax.Array,
               settings: StreamSettings) -> StreamState:  # fmt: skip
    """Count rows of bulk score ``z`` ``(R, D)`` where ``valid`` in the histogram (one
    scatter for all rows: inside the window loop, XLA on CPU would copy the histogram
    each trip)."""
    r, d = z.shape
    b = bucket(z, settings)  # the grid is in the bulk score
    flat = (jnp.arange(d)[None, :] * settings.buckets + b).reshape(-1)
    ones = jnp.broadcast_to(valid.astype(settings.counter)[:, None], (r, d)).reshape(-1)
    return state._replace(hist=state.hist.at[flat].add(ones))


def update(settings: StreamSettings, state: StreamState, draw: PyTree) -> StreamState:
    """Add one draw."""
    dtype = state.knots.dtype
    within = state.count < settings.num_draws  # the ring and the counters' room
    state = state._replace(consistent=state.consistent & within)
    ref = _reference(state)
    prev = _prev_features(state, ref, settings)
    x = flatten(draw, dtype)[None]
    z = score(proxy(x, ref.bulk))
    state, _ = _window(state, prev, x, z, jnp.int32(1), ref, settings)
    state = _histogram(state, z, jnp.ones((1,), bool), settings)
    return _fold_prefix(state, settings)


# -- the statistic --------------------------------------------------------------------------
def _check_count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def summary(
    num_draws: int,
    *,
    chunk_size: int | None = None,
    hdi_prob: float = 0.94,
    lags: int = 16,
    block: int = 32,
    block_lags: int = 5,
    buckets: int | None = None,
    pilot: int = 128,
) -> Statistic:
    """The statistics behind ``az.summary``, for every element (see the module docstring).

    Parameters
    ----------
    num_draws
        The most draws per chain (the split of the final summary).
    chunk_size
        The engine's chunk size (the split geometry); default ``num_draws``.
        The summary is exact at every multiple of it (and at ``num_draws``).
    hdi_prob
        Interval mass, as ``az.summary(hdi_prob=...)``.
    lags, block, block_lags
        Exact lags of the autocovariances; the block length and the lags of
        the block means that extend them when Geyer's sequence runs longer.
    buckets
        Histogram buckets (quantiles, HDI); default 288 with ``uint16`` counters
        (``num_draws <= 65,535``), else 144 (``int32`` counters: the same bytes).
    pilot
        Final warmup draws per chain pooled for the reference.

    Returns
    -------
    Statistic
        ``finalize`` gives ``{output: tree}``: ``mean``, ``sd``, ``min``,
        ``max``, ``quantiles``, ``hdi``, ``r_hat`` (rank), ``r_hat_split``,
        ``r_hat_bulk``, ``r_hat_folded``, ``ess_bulk``, ``ess_tail``,
        ``ess_mean``, ``ess_sd``, ``mcse_mean``, ``mcse_sd`` and
        ``quantile_levels``, ``hdi_prob``, as ``sluice.stats.summary_table`` reads.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice.stats import streaming
    >>> s = streaming.summary(200)
    >>> chains = jax.random.normal(jax.random.PRNGKey(0), (2, 200 + 16, 3))
    >>> pilot = chains[:, :16].reshape(-1, 3)  # stands in for the final warmup draws
    >>> states = [s.update_block(s.init(pilot), c[16:], 200) for c in chains]
    >>> out = s.finalize(s.merge(*states))
    >>> out["ess_bulk"].shape, bool(jnp.all(out["r_hat"] < 1.05))
    ((3,), True)
    """
    num_draws = _check_count("num_draws", num_draws)
    chunk_size = num_draws if chunk_size is None else _check_count("chunk_size", chunk_size)
    if isinstance(hdi_prob, bool) or not isinstance(hdi_prob, int | float) or not 0 < hdi_prob < 1:
        raise ValueError(f"hdi_prob must be a number in (0, 1), got {hdi_prob!r}")
    p = float(hdi_prob)
    if buckets is None:  # as many bytes either way
        buckets = 288 if num_draws <= COUNT_MAX else 144
    settings = StreamSettings(
        num_draws, min(chunk_size, num_draws), _check_count("lags", lags, 2),
        _check_count("block", block, 2), _check_count("block_lags", block_lags, 3),
        _check_count("buckets", buckets, 8),
        _check_count("pilot", pilot, 1),
        ((1 - p) / 2, 0.5, (1 + p) / 2), p,
    )  # fmt: skip
    # called on concrete states, merge, finalize and update_block compile once (sluice's
    # program cache); traced (the engine's programs), they are inlined
    key = ("streaming-summary", settings)
    merge = functools.partial(streaming_readout.merge, settings=settings)
    finalize = functools.partial(streaming_readout.finalize, settings=settings)
    block = functools.partial(update_block, settings)
    chains = functools.partial(update_chains, settings)
    return Statistic(
        functools.partial(init, settings),
        functools.partial(update, settings),
        functools.partial(programs.eager, (*key, "merge"), merge),
        functools.partial(programs.eager, (*key, "finalize"), finalize),
        key,
        settings.pilot,
        functools.partial(programs.eager, (*key, "update_block"), block),
        Blocks(
            streaming_readout.size,
            functools.partial(streaming_readout.take, settings=settings),
            functools.partial(streaming_readout.finalize_flat, settings=settings),
            functools.partial(streaming_readout.assemble, settings=settings),
            functools.partial(streaming_readout.diagnostics_flat, settings=settings),
        ),
        functools.partial(programs.eager, (*key, "update_chains"), chains),
    )
