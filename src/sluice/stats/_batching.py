"""A ``lax.cond`` for predicates that are the same on every chain of a batch.

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

__all__ = ["uniform_cond"]


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
        def batch(tree, batched):
            return jax.tree.map(
                lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
                tree,
                batched,
            )

        pred_batched, operand_batched, shared_batched = in_batched
        pred, operand, shared = (
            batch(pred, pred_batched),
            batch(operand, operand_batched),
            batch(shared, shared_batched),
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
