"""The chunk loop shared by MCMC and variational fits: the device never waits for the host.

Chunk ``k + 1`` is dispatched (JAX returns at once; the device computes)
before chunk ``k``'s results are copied to the host and written, so writing,
checkpointing and progress overlap the next chunk's computation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["pipelined"]


def pipelined(
    starts: Iterable[int],
    dispatch: Callable[[int], Any],
    finish: Callable[[int, Any], None],
) -> None:
    """For each chunk start in order: ``dispatch(start)``, and ``finish(start, result)``
    of the previous chunk once the next one is dispatched (the last one at the end).

    Examples
    --------
    >>> order = []
    >>> pipelined([0, 10, 20], lambda s: order.append(f"run {s}") or s,
    ...           lambda s, r: order.append(f"write {s}"))
    >>> order
    ['run 0', 'run 10', 'write 0', 'run 20', 'write 10', 'write 20']
    """
    pending = None
    for start in starts:
        current = (start, dispatch(start))
        if pending is not None:
            finish(*pending)
        pending = current
    if pending is not None:
        finish(*pending)
