"""Argument checks shared by the host entry points (errors name the argument and value)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_count", "check_int"]


def check_count(name: str, value: Any, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive (or non-negative) integer."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not ok or value < (0 if allow_zero else 1):
        bound = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{name} must be {bound} integer, got {value!r}")


def check_int(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is an integer."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
