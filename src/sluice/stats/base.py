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

A statistic may also carry a ``key``: a hashable description of its
settings (``("variance", 1)``), so that two statistics built alike share
their compiled programs (:mod:`sluice._jax.compile`). Without one, a
statistic is its functions: the same object reuses its programs, an equal
one built anew compiles again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

PyTree = Any

__all__ = ["Statistic"]


class Statistic(NamedTuple):
    """``init(example) / update(state, draw) / merge(a, b) / finalize(state)``."""

    init: Callable[[PyTree], Any]
    update: Callable[[Any, PyTree], Any]
    merge: Callable[[Any, Any], Any]
    finalize: Callable[[Any], PyTree]
    key: Hashable | None = None  # a description of the settings (see the module docstring)

    @property
    def cache_key(self) -> Hashable:
        """What identifies this statistic's programs: ``key``, else its four functions."""
        if self.key is not None:
            return self.key
        return ("functions", self.init, self.update, self.merge, self.finalize)
