"""Closure conversion: a function's closed-over arrays made into explicit arguments.

:func:`closure_convert` hoists every closed-over array, where
``jax.closure_convert`` leaves integer tracers of an outer ``jit`` closed over;
docs/architecture.md ("Models and hoisted data") says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

__all__ = ["closure_convert"]


def closure_convert(fn: Callable, *example_args: Any) -> tuple[Callable, list[Any], Any]:
    """``fn`` traced at ``example_args``' shapes, with everything it closes over hoisted.

    Returns ``(converted, consts, jaxpr)``: ``converted(consts, *args)`` equals
    ``fn(*args)`` for arguments shaped like ``example_args`` and evaluates the
    traced program, ``consts`` are the closed-over values in the order
    ``converted`` takes them, and ``jaxpr`` is the program (its text
    identifies ``fn`` up to the values of ``consts``).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> data = jnp.arange(3.0)
    >>> f, consts, _ = closure_convert(lambda x: jnp.sum(x * data), jnp.ones(3))
    >>> float(f(consts, jnp.ones(3))), len(consts)
    (3.0, 1)
    """
    specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jax.numpy.shape(x), x.dtype), example_args)
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*specs)
    out_tree = jax.tree.structure(out_shape)
    jaxpr = closed.jaxpr

    def converted(consts: Any, *args: Any) -> Any:
        flat = jax.core.eval_jaxpr(jaxpr, list(consts), *jax.tree.leaves(args))
        return jax.tree.unflatten(out_tree, flat)

    return converted, list(closed.consts), jaxpr
