"""Batching rules of sluice's own (``custom_vmap``), for vectorized chains.

* :func:`batched_by`: a per-chain function with a batched implementation of
  its own (NUTS runs its loops while any chain is active, instead of JAX's
  batching of ``while_loop``, which selects every carried array at every step);
* :func:`uniform_cond`: a ``lax.cond`` whose predicate is the same on every
  chain of a batch.

The statistics do their rare work (flushes, finished blocks, fixing grids)
under one ``lax.cond`` per draw, whose predicate depends only on the draw
index. Under ``vmap`` JAX cannot know that every chain agrees, and turns a
``cond`` with a batched predicate into a ``select`` that runs both branches
(and every nested ``cond`` inside them) at every draw: on CPU that cost six
times a NUTS draw of a 1000-dim logistic regression. :func:`uniform_cond`
branches once for the whole batch, keeping the schedule values unbatched
inside so that nested ``cond``\\ s stay branches too, and checks at run time
that the chains agree (they always do in the engine); a batch whose chains
disagree is marked invalid rather than compiled a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

__all__ = ["batched_by", "broadcast_unbatched", "uniform_cond"]


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


def uniform_cond(
    pred: jax.Array,
    true_fn: Callable,
    false_fn: Callable,
    operand: Any,
    shared: Any,
    on_disagree: Callable,
) -> Any:
    """``true_fn(operand, shared)`` if ``pred`` else ``false_fn(operand, shared)``.

    ``shared`` holds the values that decide the branching (the draw index and
    what derives from it), equal on every chain of a batch when the chains
    have seen the same number of draws, as in the engine. The functions must
    read traced values only through ``operand`` and ``shared`` and return the
    same structure. Outside ``vmap`` this is ``lax.cond``.

    Under ``vmap`` the branch is taken once for the batch, with chain 0's
    ``pred`` and ``shared`` (unbatched inside, so nested conds stay branches).
    If the chains disagree, that result is wrong for some of them, and
    ``on_disagree`` (applied to every chain's result) must mark it invalid:
    one copy of each branch in the program, where an exact fallback would
    compile both branches a second time.
    """

    @custom_vmap
    def branch(pred, operand, shared):
        return jax.lax.cond(
            pred, lambda o: true_fn(o, shared), lambda o: false_fn(o, shared), operand
        )

    @branch.def_vmap
    def _batched(axis_size, in_batched, pred, operand, shared):
        pred, operand, shared = broadcast_unbatched(
            axis_size, (pred, operand, shared), tuple(in_batched)
        )
        first = jax.tree.map(lambda x: x[0], shared)
        agree = jnp.all(pred == pred[0])
        for leaf in jax.tree.leaves(shared):
            agree = agree & jnp.all(leaf == leaf[0])
        out = jax.lax.cond(
            pred[0],
            lambda o: jax.vmap(lambda x: true_fn(x, first))(o),
            lambda o: jax.vmap(lambda x: false_fn(x, first))(o),
            operand,
        )
        out = jax.lax.cond(agree, lambda o: o, jax.vmap(on_disagree), out)
        return out, jax.tree.map(lambda _: True, out)

    return branch(pred, operand, shared)
