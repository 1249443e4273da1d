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

Two optional fields make a statistic cheaper or better informed:

* ``update_block(state, draws, count) -> state``: the same as ``update`` on
  ``draws[0]``, ..., ``draws[count - 1]`` in order (``draws`` has a leading
  axis of fixed length; rows from ``count`` on are to be ignored). The engine
  then buffers a chunk's draws and calls it once per chunk, where vectorised
  work over many draws costs less than per-draw work inside the sampler;
* ``update_chains(states, draws, count) -> states``: ``update_block`` of every
  chain of a stack (a leading chain axis on the states and the draws). The
  engine updates a device's chains one after another, each chain's state read
  out of the stack and written back (:func:`chains_update`); a statistic with
  large states updates the stack in place instead, so that no chain's state is
  copied;
* ``pilot``: a number ``P`` of final warmup draws per chain. ``init`` then
  receives, instead of one example, the last ``P`` warmup draws of every chain
  of the run pooled along a leading axis (chain-major, the same on every
  chain, device and host), for references shared by all chains (grids,
  thresholds) that reflect the posterior rather than one draw of it.

A statistic whose state and values are element-wise (each element of the draw
has its own columns, as the default summary's) may also say so with ``blocks``
(:class:`Blocks`): the engine then merges and finalizes a large model's
states a block of elements at a time, so that the full-size temporaries of
``merge`` and ``finalize`` never exist at once (for a million elements they
are tens of gigabytes).

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

import jax

from sluice._jax.batching import map_in_place

PyTree = Any

__all__ = ["Blocks", "Statistic", "block_update", "chains_update"]


class Blocks(NamedTuple):
    """How an element-wise statistic's states split into blocks of elements."""

    size: Callable[[Any], int]  # the number of elements of a state
    take: Callable[[Any, int, int, int], Any]  # (state, start, stop, length): padded to length
    finalize: Callable[[Any], dict[str, Any]]  # a state's values, leading axis its elements
    assemble: Callable[[Any, dict[str, Any]], PyTree]  # (state, every element's values)


class Statistic(NamedTuple):
    """``init(example) / update(state, draw) / merge(a, b) / finalize(state)``."""

    init: Callable[[PyTree], Any]
    update: Callable[[Any, PyTree], Any]
    merge: Callable[[Any, Any], Any]
    finalize: Callable[[Any], PyTree]
    key: Hashable | None = None  # a description of the settings (see the module docstring)
    pilot: int = 0  # final warmup draws per chain that init receives, pooled (0: one example)
    update_block: Callable[[Any, PyTree, Any], Any] | None = None  # (state, draws, count)
    blocks: Blocks | None = None  # element-wise: merged and finalized in blocks of elements
    update_chains: Callable[[Any, PyTree, Any], Any] | None = None  # (states, draws, count)

    @property
    def cache_key(self) -> Hashable:
        """What identifies this statistic's programs: ``key``, else its four functions."""
        if self.key is not None:
            return self.key
        return ("functions", self.init, self.update, self.merge, self.finalize, self.pilot,
                self.update_block, self.blocks, self.update_chains)  # fmt: skip


def block_update(statistic: Statistic) -> Callable[[Any, PyTree, Any], Any]:
    """``statistic.update_block``, or its ``update`` applied to rows ``0 .. count - 1``."""
    if statistic.update_block is not None:
        return statistic.update_block

    def scan(state: Any, draws: PyTree, count: Any) -> Any:
        def body(i: Any, s: Any) -> Any:
            return statistic.update(s, jax.tree.map(lambda x: x[i], draws))

        return jax.lax.fori_loop(0, count, body, state)

    return scan


def chains_update(statistic: Statistic) -> Callable[[Any, PyTree, Any], Any]:
    """``statistic.update_chains``, or :func:`block_update` of each chain of the stack
    in turn, its state written back in place (:func:`~sluice._jax.batching.map_in_place`)."""
    if statistic.update_chains is not None:
        return statistic.update_chains
    update = block_update(statistic)

    def each(states: Any, draws: PyTree, count: Any) -> Any:
        return map_in_place(lambda s, d: (update(s, d, count),), (states, draws))[0]

    return each
