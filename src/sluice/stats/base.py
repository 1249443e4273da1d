"""The streaming-statistic interface: a bundle of four pure functions.

A :class:`Statistic` reduces a stream of draws of ONE chain to a small state
and finalizes it to values: ``init``, ``update``, ``merge`` and ``finalize``,
with optional fields for blocks of draws, stacks of chains and large states.
docs/statistics.md ("The interface") states the contract.
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
    # finalize's convergence diagnostics alone (R-hat, ESS, MCSE; cheaper), as finalize's:
    # what a run that stops when converged reads at every chunk
    diagnostics: Callable[[Any], dict[str, Any]] | None = None


class Statistic(NamedTuple):
    """``init(example) / update(state, draw) / merge(a, b) / finalize(state)``."""

    init: Callable[[PyTree], Any]
    update: Callable[[Any, PyTree], Any]
    merge: Callable[[Any, Any], Any]
    finalize: Callable[[Any], PyTree]
    key: Hashable | None = None  # a description of the settings (docs/statistics.md)
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
