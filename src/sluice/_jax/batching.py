"""Batching rules of sluice's own (``custom_vmap``), for vectorized chains.

:func:`batched_by`: a per-chain function with a batched implementation of its
own (NUTS runs its loops while any chain is active, instead of JAX's batching
of ``while_loop``, which selects every carried array at every step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

__all__ = ["batched_by", "broadcast_unbatched"]


def broadcast_unbatched(axis_size: int, tree: Any, batched: Any) -> Any:
    """``tree`` with a leading axis of ``axis_size`` on every leaf ``batched`` marks False."""
    return jax.tree.map(
        lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))), tree, batched
    )


def batched_by(one: Callable, many: Callable) -> Callable:
    """``one(*args, consts)``; under ``vmap``, ``many(*batched args, consts)`` instead.

    ``many`` takes a leading batch axis on every argument but the last
    (``consts``, the data a log-density closes over: see
    :mod:`sluice._jax.closure`); arguments the ``vmap`` leaves unbatched are
    broadcast first. If the consts are batched too (a different model per
    chain), JAX's default batching of ``one`` is used.
    """
    fn = custom_vmap(one)

    @fn.def_vmap
    def _rule(axis_size, in_batched, *args):
        *per_chain, consts = args
        batched = broadcast_unbatched(axis_size, tuple(per_chain), tuple(in_batched[:-1]))
        if any(jax.tree.leaves(in_batched[-1])):
            in_axes = (0,) * len(batched) + ([0 if b else None for b in in_batched[-1]],)
            out = jax.vmap(one, in_axes=in_axes)(*batched, consts)
        else:
            out = many(*batched, consts)
        return out, jax.tree.map(lambda _: True, out)

    return fn
