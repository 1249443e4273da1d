"""One combinator that fuses parts of a diagnostic into a single :class:`Statistic`.

The diagnostics of :mod:`sluice.stats.convergence` are three parts (exact
split moments, histograms, lag states: :mod:`sluice.stats.parts`), each
shaped like a statistic of one chain's flat draws: ``init``, a per-draw
``update``, ``close`` (fold the open chain into between-chain summaries,
ArviZ's split halves included) and ``merge``. Run side by side through
:func:`~sluice.stats.combinators.group` they would cost several ``lax.cond``
per draw and recompute the shared per-draw values; :func:`fuse` shares them:

* one pilot ``c`` (the example draw, the same on every chain) and
  ``y = x - c``; the split-half geometry of ArviZ (``index`` -> half, position
  in the half, whether the draw belongs to a half); the selection of the
  elements that get the heavier parts (``max_elements``);
* per draw, each part's cheap ``update``, then ONE ``cond`` for the rare
  work of all parts (flushes, grid choices, finished blocks): each ``cond``
  costs ~0.5 us on CPU, and the predicate depends on the draw index only,
  so :func:`~sluice._jax.batching.uniform_cond` keeps it a branch under
  ``vmap``;
* at ``merge`` and ``finalize``, parts are closed in order, each seeing
  what the earlier ones exported (the histograms' grid for the lag
  proxies' variances, the moments' half sums for centring the lags).

``finalize`` is a *readout* of the closed parts (:mod:`sluice.stats.readout`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax.batching import uniform_cond
from sluice.stats._layout import flatten, num_elements, own_copy, working_dtype

PyTree = Any

__all__ = [
    "Closing",
    "Draw",
    "FusedState",
    "Geometry",
    "Part",
    "fuse",
    "heavy_elements",
    "split_position",
]


class Geometry(NamedTuple):
    """What every part shares: ArviZ's split of ``num_draws`` and the heavy elements."""

    num_draws: int | None  # draws per chain (None: no split, a single half)
    max_elements: int | None  # heavy parts for at most this many elements per quantity


class Draw(NamedTuple):
    """What a part sees of one draw."""

    x: jax.Array | None  # (D,): the draw, every element (None in the rare path)
    y: jax.Array  # (D,): x - c, every element
    y_heavy: jax.Array  # (H,): the heavy elements of y
    x_heavy: jax.Array | None  # (H,): the heavy elements of x (None in the rare path)
    index: jax.Array  # () int32: draw index in the chain
    seg: jax.Array  # () int32: split half (0 or 1)
    pos: jax.Array  # () int32: position in the half
    in_split: jax.Array  # () bool: the draw belongs to a half (not an odd N's middle draw)


class Closing(NamedTuple):
    """What closing a chain shares with every part."""

    count: jax.Array  # () int32: draws of the chain
    last_seg: jax.Array  # () int32: half of its last draw
    half_count: jax.Array  # (2,) int32: draws in each half
    has_middle: jax.Array  # () bool: it saw an odd num_draws' middle draw


class Part(NamedTuple):
    """One piece of a fused diagnostic, shaped like a statistic of flat draws.

    ``view`` holds ``pilot`` (``(D,)``), ``pilot_heavy`` and ``heavy`` (the
    heavy elements' indices or ``None``), the states of the parts before
    this one (already updated at this draw, or closed), and what their
    ``close`` exported.
    """

    init: Callable[[int, int, Any], Any]  # (elements, heavy elements, dtype) -> state
    update: Callable[[Any, Draw], Any]  # per draw, no cond
    events: Callable[[Draw], dict[str, jax.Array]]  # the rare work this draw triggers
    rare: Callable[[Any, Draw, dict, dict], Any]  # (state, draw, events, view) -> state
    close: Callable[[Any, Closing, dict], tuple[Any, dict]]  # -> (state, exports)
    merge: Callable[[Any, Any], Any]  # two closed states


class FusedState(NamedTuple):
    pilot: PyTree  # the example draw: structure, and the shared shift c
    count: jax.Array  # () int32: draws of the open chain (0 in merged states)
    num_chains: jax.Array  # () int32: chains closed into the summaries
    consistent: jax.Array  # () bool: False once states with different pilots were merged
    parts: tuple  # one state per part, in the parts' order


def split_position(index: jax.Array, num_draws: int | None):
    """(half, position in half, in a half) of draw ``index`` (0-based)."""
    if num_draws is None:
        return jnp.zeros((), jnp.int32), index, jnp.ones((), bool)
    half = num_draws // 2
    second = num_draws - half
    seg = (index >= second).astype(jnp.int32)
    pos = index - jnp.where(seg == 1, second, 0)
    in_split = ~((num_draws % 2 == 1) & (index == half))
    return seg, pos, in_split


def half_counts(count: jax.Array, num_draws: int | None) -> jax.Array:
    """``(2,)`` int32: draws of a chain that saw ``count`` in each split half."""
    if num_draws is None:
        return jnp.stack([count, jnp.zeros_like(count)])
    half = num_draws // 2
    second = num_draws - half
    return jnp.stack([jnp.minimum(count, half), jnp.maximum(count - second, 0)]).astype(jnp.int32)


def heavy_elements(example: PyTree, max_elements: int | None) -> np.ndarray | None:
    """Flat indices of the elements that get the heavy parts (``None``: all of them).

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


def fuse(
    parts: dict[str, Part],
    geometry: Geometry,
    readout: Callable[[FusedState, dict[str, Any]], Any],
) -> tuple[Callable, Callable, Callable, Callable]:
    """``(init, update, merge, finalize)`` of the parts run as one statistic.

    ``readout(state, parts)`` reads values from a closed state (``parts``:
    the closed part states by name).
    """
    names = tuple(parts)
    items = tuple(parts.values())

    def _heavy(pilot_tree: PyTree) -> np.ndarray | None:
        return heavy_elements(pilot_tree, geometry.max_elements)

    def _pick(a: jax.Array, heavy: np.ndarray | None) -> jax.Array:
        return a if heavy is None else a[heavy]

    def init(example: PyTree) -> FusedState:
        dtype = working_dtype(example)
        d = num_elements(example)
        heavy = _heavy(example)
        dh = d if heavy is None else len(heavy)
        states = tuple(part.init(d, dh, dtype) for part in items)
        count, chains = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)  # distinct buffers
        return FusedState(own_copy(example), count, chains, jnp.ones((), bool), states)

    def _events(draw: Draw) -> dict[str, jax.Array]:
        events: dict[str, jax.Array] = {}
        for part in items:
            events.update(part.events(draw))
        return events

    def _rare(state: FusedState, y, y_heavy, index, seg, pos, in_split, events) -> FusedState:
        dtype = y.dtype
        draw = Draw(None, y, y_heavy, None, index, seg, pos, in_split)
        heavy = _heavy(state.pilot)
        pilot = flatten(state.pilot, dtype)
        view: dict[str, Any] = {"pilot": pilot, "pilot_heavy": _pick(pilot, heavy), "heavy": heavy}
        new = []
        for name, part, part_state in zip(names, items, state.parts, strict=True):
            part_state = part.rare(part_state, draw, events, view)
            view[name] = part_state
            new.append(part_state)
        return state._replace(parts=tuple(new))

    def update(state: FusedState, draw: PyTree) -> FusedState:
        dtype = working_dtype(state.pilot)
        x = flatten(draw, dtype)
        pilot = flatten(state.pilot, dtype)
        y = x - pilot
        index = state.count
        seg, pos, in_split = split_position(index, geometry.num_draws)
        heavy = _heavy(state.pilot)
        one = Draw(x, y, _pick(y, heavy), _pick(x, heavy), index, seg, pos, in_split)
        states = tuple(part.update(s, one) for part, s in zip(items, state.parts, strict=True))
        state = FusedState(state.pilot, index + 1, state.num_chains, state.consistent, states)
        # Everything rare goes through ONE cond per draw. It comes last: a cond that
        # reads a buffer updated after it in the same step copies it. The predicate
        # depends on the draw index only, the same on every chain: uniform_cond keeps
        # it a branch when the engine vmaps chains.
        events = _events(one)
        return uniform_cond(
            jnp.any(jnp.stack(list(events.values()))),
            lambda ops, sh: _rare(*ops, *sh),
            lambda ops, sh: ops[0],
            (state, one.y, one.y_heavy),
            (index, seg, pos, in_split, events),
            # chains vmapped at different draw counts: no valid result (NaN)
            lambda st: st._replace(consistent=jnp.zeros((), bool)),
        )

    def close(state: FusedState) -> FusedState:
        """Fold the open chain (if any) into the between-chain summaries."""

        def close_open(state: FusedState) -> FusedState:
            dtype = working_dtype(state.pilot)
            pilot = flatten(state.pilot, dtype)
            n = geometry.num_draws
            has_middle = jnp.asarray(False)
            if n is not None and n % 2 == 1:
                has_middle = state.count > n // 2
            last_seg, _, _ = split_position(state.count - 1, n)
            closing = Closing(state.count, last_seg, half_counts(state.count, n), has_middle)
            heavy = _heavy(state.pilot)
            view: dict[str, Any] = {
                "pilot": pilot,
                "pilot_heavy": _pick(pilot, heavy),
                "heavy": heavy,
            }
            new = []
            for name, part, part_state in zip(names, items, state.parts, strict=True):
                part_state, exports = part.close(part_state, closing, view)
                view[name] = part_state
                view.update(exports)
                new.append(part_state)
            return FusedState(
                state.pilot, jnp.zeros_like(state.count), state.num_chains + 1,
                state.consistent, tuple(new),
            )  # fmt: skip

        return jax.lax.cond(state.count > 0, close_open, lambda s: s, state)

    def combine(a: FusedState, b: FusedState) -> FusedState:
        # Sums, histograms and lags are relative to the pilot: states of different pilots
        # (examples that were not the same on every chain) cannot be combined: poison them.
        a_empty, b_empty = a.num_chains == 0, b.num_chains == 0
        same = jnp.all(jnp.stack([jnp.all(u == v) for u, v in zip(
            jax.tree.leaves(a.pilot), jax.tree.leaves(b.pilot), strict=True)]))  # fmt: skip
        consistent = a.consistent & b.consistent & (same | a_empty | b_empty)
        pilot = jax.tree.map(lambda u, v: jnp.where(a_empty, v, u), a.pilot, b.pilot)
        states = tuple(part.merge(u, v) for part, u, v in zip(items, a.parts, b.parts, strict=True))
        return FusedState(
            pilot, jnp.zeros_like(a.count), a.num_chains + b.num_chains, consistent, states
        )

    def merge(a: FusedState, b: FusedState) -> FusedState:
        return combine(close(a), close(b))

    def finalize(state: FusedState) -> Any:
        state = close(state)
        return readout(state, dict(zip(names, state.parts, strict=True)))

    return init, update, merge, finalize
