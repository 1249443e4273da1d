"""Combinators: build a statistic from others (``optax.chain``-style wrapping).

:func:`group` runs several statistics side by side, :func:`restrict` feeds one
only some of a draw's quantities, :func:`transform` a function of each draw; all
three return a :class:`~sluice.stats.base.Statistic`, so they compose freely.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from sluice._jax.tree import path_name
from sluice.stats.base import Statistic, block_update, chains_update

PyTree = Any

__all__ = ["group", "restrict", "transform"]


def group(statistics: Mapping[str, Statistic]) -> Statistic:
    """Run several statistics side by side; state and result are dicts by name.

    Parameters
    ----------
    statistics
        ``{name: Statistic}``.

    Returns
    -------
    Statistic

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.group({"n": stats.count(), "mean": stats.mean()})
    >>> state = s.update(s.init({"x": jnp.zeros(())}), {"x": jnp.asarray(2.0)})
    >>> out = s.finalize(state)
    >>> int(out["n"]), float(out["mean"]["x"])
    (1, 2.0)
    """
    if not isinstance(statistics, Mapping) or not all(
        isinstance(s, Statistic) for s in statistics.values()
    ):
        raise TypeError(f"statistics must be a mapping of name -> Statistic, got {statistics!r}")
    items = dict(statistics)

    pilot = max((s.pilot for s in items.values()), default=0)
    blocked = any(s.update_block is not None for s in items.values())

    def init(example: PyTree) -> dict[str, Any]:
        if not pilot:
            return {name: s.init(example) for name, s in items.items()}
        # pooled pilot draws: statistics without a pilot get one example, the last
        # warmup draw of chain 0 (row pilot - 1), as when no statistic asks for one
        one = jax.tree.map(lambda x: x[pilot - 1], example)
        return {name: s.init(example if s.pilot else one) for name, s in items.items()}

    def update(state: dict[str, Any], draw: PyTree) -> dict[str, Any]:
        return {name: s.update(state[name], draw) for name, s in items.items()}

    def update_block(state: dict[str, Any], draws: PyTree, count: Any) -> dict[str, Any]:
        return {name: block_update(s)(state[name], draws, count) for name, s in items.items()}

    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {name: s.merge(a[name], b[name]) for name, s in items.items()}

    def finalize(state: dict[str, Any]) -> dict[str, Any]:
        return {name: s.finalize(state[name]) for name, s in items.items()}

    def update_chains(states: dict[str, Any], draws: PyTree, count: Any) -> dict[str, Any]:
        return {name: chains_update(s)(states[name], draws, count) for name, s in items.items()}

    stacked = any(s.update_chains is not None for s in items.values())
    key = ("group", tuple((name, s.cache_key) for name, s in items.items()))
    return Statistic(init, update, merge, finalize, key, pilot, update_block if blocked else None,
                     update_chains=update_chains if stacked else None)  # fmt: skip


def transform(fn: Callable[[PyTree], PyTree], statistic: Statistic) -> Statistic:
    """Apply ``fn`` to every draw (and to the example) before ``statistic`` sees it.

    Parameters
    ----------
    fn
        ``fn(draw) -> pytree``, a pure, traceable function of one draw.
    statistic
        The statistic of the transformed draws.

    Returns
    -------
    Statistic

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> norm = stats.transform(lambda d: {"norm": jnp.linalg.norm(d["x"])}, stats.mean())
    >>> state = norm.init({"x": jnp.zeros(2)})
    >>> for v in ([3.0, 4.0], [6.0, 8.0]):
    ...     state = norm.update(state, {"x": jnp.asarray(v)})
    >>> float(norm.finalize(state)["norm"])
    7.5
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    if not isinstance(statistic, Statistic):
        raise TypeError(f"statistic must be a Statistic, got {statistic!r}")

    return _transform(fn, statistic, ("transform", fn, statistic.cache_key))


def _transform(fn: Callable[[PyTree], PyTree], statistic: Statistic, key: Any) -> Statistic:
    def init(example: PyTree) -> Any:
        return statistic.init(jax.vmap(fn)(example) if statistic.pilot else fn(example))

    def update(state: Any, draw: PyTree) -> Any:
        return statistic.update(state, fn(draw))

    def update_block(state: Any, draws: PyTree, count: Any) -> Any:
        return statistic.update_block(state, jax.vmap(fn)(draws), count)

    def update_chains(states: Any, draws: PyTree, count: Any) -> Any:
        return statistic.update_chains(states, jax.vmap(jax.vmap(fn))(draws), count)

    return Statistic(
        init, update, statistic.merge, statistic.finalize, key, statistic.pilot,
        update_block if statistic.update_block is not None else None,
        update_chains=update_chains if statistic.update_chains is not None else None,
    )  # fmt: skip


def restrict(
    statistic: Statistic,
    names: Sequence[str] | Mapping[str, Any],
) -> Statistic:
    """Feed ``statistic`` only some quantities of each draw (or some of their elements).

    Parameters
    ----------
    statistic
        The statistic to restrict.
    names
        Quantities to keep, by name: top-level keys of a dict draw, or pytree
        paths joined by dots (``"a.b"``, ``"params.0"``). A mapping
        ``{name: index}`` also selects elements (``index`` is anything numpy
        indexing accepts: ``slice(0, 100)``, an integer array, ``(0, ...)``).
        The statistic sees ``{name: selected}``.

    Returns
    -------
    Statistic

    Raises
    ------
    ValueError
        When a name is not in the draw (raised by ``init``).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.restrict(stats.mean(), {"beta": slice(0, 2)})
    >>> state = s.init({"beta": jnp.zeros(5), "sigma": jnp.ones(())})
    >>> state = s.update(state, {"beta": jnp.arange(5.0), "sigma": jnp.ones(())})
    >>> s.finalize(state)["beta"].tolist()
    [0.0, 1.0]
    """
    if isinstance(names, str):
        raise TypeError(f"names must be a sequence or mapping of names, not a string: {names!r}")
    selection = dict(names) if isinstance(names, Mapping) else {str(n): None for n in names}
    if not selection:
        raise ValueError("names must select at least one quantity, got an empty selection")
    if not isinstance(statistic, Statistic):
        raise TypeError(f"statistic must be a Statistic, got {statistic!r}")

    def select(draw: PyTree) -> dict[str, Any]:
        leaves = {path_name(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(draw)[0]}
        out = {}
        for name, index in selection.items():
            if name in leaves:
                leaf = leaves[name]
            elif isinstance(draw, Mapping) and name in draw:
                leaf = draw[name]
            else:
                raise ValueError(
                    f"names: {name!r} is not a quantity of the draw; available: {sorted(leaves)}"
                )
            out[name] = leaf if index is None else leaf[index]
        return out

    key = _hashable(selection)
    if key is not None:
        key = ("restrict", key, statistic.cache_key)
    return _transform(select, statistic, key)


def _hashable(value: Any) -> Any:
    """A hashable form of a selection (names to numpy indices), or ``None``."""
    if value is None or value is Ellipsis or isinstance(value, str | int | bool | float):
        return value
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if isinstance(value, Mapping):
        items = [(k, _hashable(v)) for k, v in value.items()]
        if any(v is None and value[k] is not None for k, v in items):
            return None
        return ("mapping", tuple(items))
    if isinstance(value, tuple | list):
        items = [_hashable(v) for v in value]
        if any(h is None and v is not None for h, v in zip(items, value, strict=True)):
            return None
        return (type(value).__name__, tuple(items))
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if array.dtype == object:
        return None
    return ("array", array.dtype.str, array.shape, array.tobytes())
