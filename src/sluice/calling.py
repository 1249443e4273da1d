"""How sluice calls a function of one parameter value: the rule, and how to say it.

A log-density (and a model's ``transform`` and ``log_likelihood``) may be
written in three ways, chosen from its signature and the structure of
``init``:

* **keywords**: ``init`` is a dict whose keys are exactly the function's
  required parameters: ``def log_joint(mu, log_tau)`` with
  ``init={"mu": ..., "log_tau": ...}``, or the JAX notebook's
  ``def log_joint(beta)`` with ``init={"beta": ...}``. sluice calls
  ``fn(**point)``;
* **array**: ``init`` is one array and the function has one required
  parameter: ``def log_joint(beta)`` with ``init=jnp.zeros(10)``. sluice calls
  ``fn(x)``, and the draws are named after the parameter (``beta``);
* **pytree** (otherwise): sluice calls ``fn(point)`` with a point shaped like
  ``init`` (a dict, a tuple, a NamedTuple, ...), as in ``def log_density(p):
  ... p["beta"]``.

A function with ``*args`` or ``**kwargs``, or whose signature cannot be read,
is called as a pytree function. ``sluice.Model(..., calling="pytree")`` forces
that convention (the NumPyro and PyMC adapters do).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = ["CALLINGS", "Calling", "describe_value", "resolve_calling"]

CALLINGS = ("auto", "pytree", "keywords", "array")


class Calling(NamedTuple):
    """How to call a function of one parameter value."""

    kind: str  # "pytree", "keywords" or "array"
    name: str | None = None  # the parameter's name (kind "array")

    def __call__(self, fn: Callable, point: Any) -> Any:
        return fn(**point) if self.kind == "keywords" else fn(point)

    def describe(self, label: str, point: Any) -> str:
        """How sluice called ``label``, with the structure of ``point``: for error notes."""
        if self.kind == "keywords":
            args = ", ".join(f"{k}={describe_value(v)}" for k, v in point.items())
            how = f"{label}({args}): one keyword argument per key of init"
        elif self.kind == "array":
            how = f"{label}({describe_value(point)}): one array, as init is one array"
        else:
            how = (
                f"{label}(point) with point = {describe_value(point)}: one argument shaped "
                "like init"
            )
        return (
            f"sluice called {how}. (The rule: a dict init whose keys are the function's "
            "parameters is passed as keyword arguments; one array init to a function of "
            "one parameter is passed as that array; anything else as one pytree argument. "
            "See sluice.calling.)"
        )


def describe_value(value: Any) -> str:
    """``float32[10]``, ``{'mu': float32[], 'tau': float32[3]}``, ...: structure, no values."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple | list) and not hasattr(value, "shape"):
        inner = ", ".join(describe_value(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        shape = ",".join(str(d) for d in np.shape(value))
        return f"{np.dtype(value.dtype).name}[{shape}]"
    return type(value).__name__


def _required(fn: Callable) -> list[str] | None:
    """The names of ``fn``'s required parameters, or None for functions with ``*args``,
    ``**kwargs``, positional-only parameters (not callable by keyword) or no readable
    signature."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) for p in parameters):
        return None
    return [p.name for p in parameters if p.default is p.empty]


def resolve_calling(fn: Callable, example: Any, requested: str = "auto") -> Calling:
    """The convention for calling ``fn`` with points shaped like ``example`` (see the
    module docstring); ``requested`` forces one."""
    if requested not in CALLINGS:
        raise ValueError(f"calling must be one of {CALLINGS}, got {requested!r}")
    required = _required(fn)
    is_array = hasattr(example, "shape") and not isinstance(example, Mapping)
    if requested in ("auto", "keywords") and isinstance(example, Mapping) and required is not None:
        keys = list(example)
        if all(isinstance(k, str) for k in keys) and set(required) == set(keys):
            return Calling("keywords")
    if requested == "keywords":
        raise ValueError(
            f"calling='keywords' needs a dict init whose keys are the parameters of "
            f"{_label(fn)}; init has {describe_value(example)}"
        )
    if requested in ("auto", "array") and is_array and required is not None and len(required) == 1:
        return Calling("array", required[0])
    if requested == "array":
        raise ValueError(
            f"calling='array' needs one array init and a function of one parameter; got "
            f"init {describe_value(example)} for {_label(fn)}"
        )
    return Calling("pytree")


def _label(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or repr(fn)


def numbers_to_array(point: Any) -> Any:
    """Lists or tuples of plain numbers (``[0.0, 0.0]``, also as values of a dict) as
    float arrays (JAX's default float); anything else as it is."""
    if isinstance(point, Mapping):
        return type(point)({k: numbers_to_array(v) for k, v in point.items()})
    if isinstance(point, list | tuple) and not hasattr(point, "_fields") and point:
        number = int | float | np.integer | np.floating
        if all(isinstance(v, number) and not isinstance(v, bool) for v in point):
            return np.asarray(point, dtype=jax.numpy.result_type(float))
    return point
