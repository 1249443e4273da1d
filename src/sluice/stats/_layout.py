"""Flat views of a draw: every scalar element of every named quantity in one vector.

The element-wise statistics work on one ``(D,)`` vector per draw, the
concatenation of all leaves of the draw raveled in C order, in the working
dtype (float32, or float64 when a leaf is float64 under ``jax_enable_x64``).
The example draw given to ``init`` is kept in the state: its structure tells
``finalize`` how to cut results back into named arrays, and its values are
the shared pilot.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax.tree import path_name

PyTree = Any

__all__ = ["element_labels", "flatten", "num_elements", "own_copy", "unflatten", "working_dtype"]


def working_dtype(tree: PyTree) -> jnp.dtype:
    """float64 if any leaf is float64 (only possible with x64 enabled), else float32."""
    leaves = jax.tree.leaves(tree)
    if any(jnp.asarray(x).dtype == jnp.float64 for x in leaves):
        return jnp.dtype(jnp.float64)
    return jnp.dtype(jnp.float32)


def own_copy(tree: PyTree) -> PyTree:
    """The example's leaves as new arrays, to keep in a state.

    A state must own its buffers: the engine may donate it to the compiled chunk,
    and donating an array that is also the caller's example, or that appears
    twice in a grouped state, fails or invalidates the caller's array. Under
    ``jit`` the copy is free.
    """
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def num_elements(tree: PyTree) -> int:
    return int(sum(math.prod(jnp.shape(x)) for x in jax.tree.leaves(tree)))


def flatten(tree: PyTree, dtype: jnp.dtype) -> jax.Array:
    """``(D,)``: all leaves raveled and concatenated, cast to ``dtype``."""
    leaves = [jnp.ravel(jnp.asarray(x)).astype(dtype) for x in jax.tree.leaves(tree)]
    if not leaves:
        return jnp.zeros((0,), dtype)
    return jnp.concatenate(leaves) if len(leaves) > 1 else leaves[0]


def unflatten(example: PyTree, values: jax.Array) -> PyTree:
    """Cut ``values`` (shape ``(D, *extra)``) into the structure of ``example``.

    Each leaf of the result has shape ``leaf.shape + extra``.
    """
    leaves, treedef = jax.tree.flatten(example)
    extra = values.shape[1:]
    out, start = [], 0
    for leaf in leaves:
        shape = tuple(jnp.shape(leaf))
        size = math.prod(shape)
        out.append(values[start : start + size].reshape(shape + extra))
        start += size
    return jax.tree.unflatten(treedef, out)


def element_labels(tree: PyTree) -> list[str]:
    """ArviZ-style labels of every scalar element: ``beta[0]``, ``x[0, 1]``, ``sigma``."""
    labels = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = path_name(path) or "x"
        shape = tuple(np.shape(leaf))
        if not shape:
            labels.append(name)
            continue
        for index in np.ndindex(*shape):
            labels.append(f"{name}[{', '.join(str(i) for i in index)}]")
    return labels
