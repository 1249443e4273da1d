"""Exact moment statistics: count, mean, variance, covariance, extrema.

Every element is accumulated as a shifted, compensated sum: ``y = x - c`` with
``c`` the pilot (the example draw, identical on every chain, device and host)
and each sum a :class:`~sluice.stats._numerics.Compensated` float pair, so that
``merge`` is exact addition (docs/statistics.md, "Exact moments").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sluice._checks import check_count
from sluice.stats._layout import flatten, num_elements, own_copy, unflatten, working_dtype
from sluice.stats._numerics import (
    Compensated,
    compensated_add,
    compensated_merge,
    compensated_value,
    compensated_zeros,
)
from sluice.stats.base import Statistic

PyTree = Any
Product = Callable[[jax.Array, jax.Array], jax.Array]  # (y, y) -> the second sums' terms

__all__ = ["count", "covariance", "extrema", "mean", "variance"]


class CountState(NamedTuple):
    count: jax.Array  # () int32: draws seen


def count() -> Statistic:
    """Number of draws seen (summed over merged chains).

    Returns
    -------
    Statistic
        ``finalize`` gives an int32 scalar.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.count()
    >>> state = s.init({"x": jnp.zeros(2)})
    >>> for _ in range(3):
    ...     state = s.update(state, {"x": jnp.ones(2)})
    >>> int(s.finalize(s.merge(state, state)))
    6
    """

    def init(example: PyTree) -> CountState:
        return CountState(jnp.zeros((), jnp.int32))

    def update(state: CountState, draw: PyTree) -> CountState:
        return CountState(state.count + 1)

    def merge(a: CountState, b: CountState) -> CountState:
        return CountState(a.count + b.count)

    def finalize(state: CountState) -> jax.Array:
        return state.count

    return Statistic(init, update, merge, finalize, ("count",))


class SumsState(NamedTuple):
    """Shifted compensated sums of each element and of products of elements."""

    pilot: PyTree  # the example draw (structure and shift c)
    count: jax.Array  # () int32: draws seen
    sum: Compensated  # (D,) working dtype: sum of y = x - c
    second: Compensated  # working dtype: (D,) sum of y^2 (mean: zeros) or (D, D) of y y^T


def _elementwise(a: jax.Array, b: jax.Array) -> jax.Array:
    return a * b


def _outer(a: jax.Array, b: jax.Array) -> jax.Array:
    return a[:, None] * b[None, :]


def _sums(product: Product, second: bool = True) -> tuple[Callable[..., SumsState], ...]:
    """``init``, ``update`` and ``merge`` of the sums of ``y`` and of ``product(y, y)``
    (``second`` False: the latter stay zero)."""

    def init(example: PyTree) -> SumsState:
        y = jnp.zeros((num_elements(example),), working_dtype(example))
        return SumsState(
            own_copy(example),
            jnp.zeros((), jnp.int32),
            compensated_zeros(y.shape, y.dtype),
            compensated_zeros(product(y, y).shape, y.dtype),
        )

    def update(state: SumsState, draw: PyTree) -> SumsState:
        dtype = state.sum.hi.dtype
        y = flatten(draw, dtype) - flatten(state.pilot, dtype)
        total = compensated_add(state.sum, y)
        products = compensated_add(state.second, product(y, y)) if second else state.second
        return SumsState(state.pilot, state.count + 1, total, products)

    def merge(a: SumsState, b: SumsState) -> SumsState:
        # the pilots agree when the contract is kept; if not, shift b's sums onto a's pilot
        dtype = a.sum.hi.dtype
        delta = flatten(b.pilot, dtype) - flatten(a.pilot, dtype)
        n = b.count.astype(dtype)
        s1 = compensated_value(b.sum)
        shift = product(s1, delta) + product(delta, s1) + product(n * delta, delta)
        return SumsState(
            a.pilot,
            a.count + b.count,
            compensated_merge(a.sum, compensated_add(b.sum, n * delta)),
            compensated_merge(a.second, compensated_add(b.second, shift)),
        )

    return init, update, merge


def _comoment(state: SumsState, product: Product) -> tuple[jax.Array, jax.Array]:
    """``sum product(y - mean, y - mean)`` from the sums, and the count (as a float)."""
    dtype = state.sum.hi.dtype
    n = state.count.astype(dtype)
    mean_y = compensated_value(state.sum) / n
    total, second = state.sum, state.second
    # both parts of the compensated pairs
    m2 = (second.hi - product(total.hi, mean_y)) + (second.lo - product(total.lo, mean_y))
    return m2, n


def mean() -> Statistic:
    """Mean of every element over all draws (and merged chains).

    Returns
    -------
    Statistic
        ``finalize`` gives a pytree shaped like a draw; NaN before any draw.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.mean()
    >>> state = s.init({"b": jnp.zeros(2)})
    >>> for v in (1.0, 2.0, 6.0):
    ...     state = s.update(state, {"b": jnp.array([v, -v])})
    >>> s.finalize(state)["b"].tolist()
    [3.0, -3.0]
    """

    def finalize(state: SumsState) -> PyTree:
        dtype = state.sum.hi.dtype
        n = state.count.astype(dtype)
        value = flatten(state.pilot, dtype) + compensated_value(state.sum) / n
        return unflatten(state.pilot, value)

    return Statistic(*_sums(_elementwise, second=False), finalize, ("mean",))


def variance(ddof: int = 1) -> Statistic:
    """Variance of every element (``ddof=1``: the sample variance, as ``np.var(ddof=1)``).

    Parameters
    ----------
    ddof
        Delta degrees of freedom: the divisor is ``count - ddof``.

    Returns
    -------
    Statistic
        ``finalize`` gives a pytree shaped like a draw.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.variance()
    >>> state = s.init({"x": jnp.zeros(())})
    >>> for v in (1.0, 2.0, 3.0, 4.0):
    ...     state = s.update(state, {"x": jnp.asarray(v)})
    >>> round(float(s.finalize(state)["x"]), 4)
    1.6667
    """
    check_count("ddof", ddof, allow_zero=True)

    def finalize(state: SumsState) -> PyTree:
        m2, n = _comoment(state, _elementwise)
        return unflatten(state.pilot, jnp.maximum(m2, 0.0) / (n - ddof))

    return Statistic(*_sums(_elementwise), finalize, ("variance", ddof))


def covariance(ddof: int = 1) -> Statistic:
    """Covariance matrix of all scalar elements of a draw (opt-in: memory ``D^2``).

    The elements are ordered as ``jax.tree.leaves``, each raveled in C order;
    :func:`sluice.stats.element_labels` names them. ``ddof`` as in :func:`variance`.

    Returns
    -------
    Statistic
        ``finalize`` gives a ``(D, D)`` array.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.covariance()
    >>> state = s.init({"a": jnp.zeros(()), "b": jnp.zeros(())})
    >>> for v in (1.0, 2.0, 3.0):
    ...     state = s.update(state, {"a": jnp.asarray(v), "b": jnp.asarray(-2 * v)})
    >>> s.finalize(state).tolist()
    [[1.0, -2.0], [-2.0, 4.0]]
    """
    check_count("ddof", ddof, allow_zero=True)

    def finalize(state: SumsState) -> jax.Array:
        c, n = _comoment(state, _outer)
        return c / (n - ddof)

    return Statistic(*_sums(_outer), finalize, ("covariance", ddof))


class ExtremaState(NamedTuple):
    pilot: PyTree  # the example draw (structure)
    min: jax.Array  # (D,) working dtype: smallest value seen (+inf before any draw)
    max: jax.Array  # (D,) working dtype: largest value seen (-inf before any draw)


def extrema() -> Statistic:
    """Smallest and largest value of every element.

    NaN draws propagate (the result is NaN), as ``np.min`` does.

    Returns
    -------
    Statistic
        ``finalize`` gives ``{"min": tree, "max": tree}``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.extrema()
    >>> state = s.init({"x": jnp.zeros(2)})
    >>> for v in (3.0, -1.0, 2.0):
    ...     state = s.update(state, {"x": jnp.array([v, 2 * v])})
    >>> out = s.finalize(state)
    >>> out["min"]["x"].tolist(), out["max"]["x"].tolist()
    ([-1.0, -2.0], [3.0, 6.0])
    """

    def init(example: PyTree) -> ExtremaState:
        dtype = working_dtype(example)
        d = num_elements(example)
        return ExtremaState(
            own_copy(example), jnp.full((d,), jnp.inf, dtype), jnp.full((d,), -jnp.inf, dtype)
        )

    def update(state: ExtremaState, draw: PyTree) -> ExtremaState:
        x = flatten(draw, state.min.dtype)
        return ExtremaState(state.pilot, jnp.minimum(state.min, x), jnp.maximum(state.max, x))

    def merge(a: ExtremaState, b: ExtremaState) -> ExtremaState:
        return ExtremaState(a.pilot, jnp.minimum(a.min, b.min), jnp.maximum(a.max, b.max))

    def finalize(state: ExtremaState) -> dict[str, PyTree]:
        return {"min": unflatten(state.pilot, state.min), "max": unflatten(state.pilot, state.max)}

    return Statistic(init, update, merge, finalize, ("extrema",))
