"""Small pytree helpers shared by the host and traced layers (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def path_name(path: tuple[Any, ...]) -> str:
    """A readable name for a pytree path: ``{"a": [x, y]}`` -> ``"a.0"``, ``"a.1"``."""
    names = []
    for key in path:  # DictKey, FlattenedIndexKey: .key; SequenceKey: .idx; GetAttrKey: .name
        field = next((f for f in ("key", "idx", "name") if hasattr(key, f)), None)
        names.append(str(key if field is None else getattr(key, field)))
    return ".".join(names)


def named_leaves(tree: PyTree, default: str = "x") -> dict[str, Any]:
    """Flatten a pytree into ``{name: leaf}``; a bare array is named ``default``."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    if len(leaves) == 1 and leaves[0][0] == ():
        return {default: leaves[0][1]}
    return {path_name(path): leaf for path, leaf in leaves}


def as_named(fn: Callable[[PyTree], PyTree], default: str = "x") -> Callable[[PyTree], dict]:
    """Wrap ``fn`` so that it returns a flat ``{name: array}`` dict."""

    def named(x: PyTree) -> dict[str, Any]:
        out = fn(x)
        if isinstance(out, dict) and all(isinstance(k, str) for k in out):
            return {k: jnp.asarray(v) for k, v in named_leaves_dict(out).items()}
        return {k: jnp.asarray(v) for k, v in named_leaves(out, default).items()}

    return named


def named_leaves_dict(d: dict) -> dict[str, Any]:
    """Flatten a dict whose values may themselves be pytrees (``{"a": {"b": x}}`` -> ``a.b``)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        if len(leaves) == 1 and leaves[0][0] == ():  # a bare array keeps its key
            items = [(key, leaves[0][1])]
        else:
            items = [(f"{key}.{path_name(path)}", leaf) for path, leaf in leaves]
        for name, leaf in items:
            if name in out:
                raise ValueError(f"two quantities would both be named {name!r}; rename one of them")
            out[name] = leaf
    return out
