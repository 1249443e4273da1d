"""Batching of sluice's own over chains: a batched implementation of a per-chain function
under ``vmap`` (:func:`batched_by`), and chains one after another with each one's state
updated in place (:func:`map_in_place`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

__all__ = ["batched_by", "broadcast_unbatched", "map_in_place"]


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


def map_in_place(one: Callable, per_chain: tuple) -> tuple:
    """``lax.map(one, per_chain)`` for a ``one`` whose first output replaces its first input.

    Each chain's result overwrites its input in the scan's own state (the chunk
    program donates the carry), where ``lax.map`` would make three passes over it;
    only the other outputs are stacked.
    """
    carry, rest = per_chain[0], tuple(per_chain[1:])
    n = jax.tree.leaves(carry)[0].shape[0]

    def body(stacked, xs):
        c, rest_c = xs
        carry_c = jax.tree.map(
            lambda x: jax.lax.dynamic_index_in_dim(x, c, keepdims=False), stacked
        )
        new, *more = one(carry_c, *rest_c)
        put = lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x, c, 0)  # noqa: E731
        return jax.tree.map(put, stacked, new), tuple(more)

    carry, outputs = jax.lax.scan(body, carry, (jnp.arange(n), rest))
    return (carry, *outputs)
