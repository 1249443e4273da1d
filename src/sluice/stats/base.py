"""The streaming-statistic interface: a bundle of four pure functions.

A :class:`Statistic` reduces a stream of draws of ONE chain to a small state
and finalizes it to values. The engine calls, for each chain:

* ``init(example)`` once, with one example draw (a pytree shaped like a draw:
  ``{name: array}``). It counts nothing. The engine passes the transformed
  final warmup position of chain 0, identical on every chain, device and
  host, so a statistic may use its *values* as a shared pilot (a shift for
  accurate sums, the centre of a grid) as well as its shapes and dtypes;
* ``update(state, draw) -> state`` once per draw, in draw order, inside the
  compiled chunk (under ``jit``, ``vmap`` and ``lax.scan``);
* ``merge(a, b) -> state`` to combine the states of *different chains* (or
  groups of chains); associative, with ``init(example)`` as its identity;
* ``finalize(state) -> pytree`` to read values, at any time (cheap).

Settings live in the closure (a change of setting never hides in the state);
state is a NamedTuple or dict of arrays with fixed shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

PyTree = Any

__all__ = ["Statistic", "group"]


class Statistic(NamedTuple):
    """``init(example) / update(state, draw) / merge(a, b) / finalize(state)``."""

    init: Callable[[PyTree], Any]
    update: Callable[[Any, PyTree], Any]
    merge: Callable[[Any, Any], Any]
    finalize: Callable[[Any], PyTree]


def group(statistics: dict[str, Statistic]) -> Statistic:
    """Run several statistics side by side; state and result are dicts by name."""
    items = dict(statistics)

    def init(example: PyTree) -> dict[str, Any]:
        return {name: s.init(example) for name, s in items.items()}

    def update(state: dict[str, Any], draw: PyTree) -> dict[str, Any]:
        return {name: s.update(state[name], draw) for name, s in items.items()}

    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {name: s.merge(a[name], b[name]) for name, s in items.items()}

    def finalize(state: dict[str, Any]) -> dict[str, Any]:
        return {name: s.finalize(state[name]) for name, s in items.items()}

    return Statistic(init, update, merge, finalize)
