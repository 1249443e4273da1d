"""Variational inference with particles evaluated in parallel (docs/vi.md).

:func:`elbo`, :func:`log_weights` and :func:`sample` are pure functions of a
model, a family (:func:`meanfield`, :func:`fullrank`), its parameters and a
key; :func:`fit` runs the optimisation in compiled chunks. This package's
modules are the traced side; the host loop, :func:`fit`, and its results are
:mod:`sluice.runtime.fitting`'s, imported on first use: that module imports
this package's traced modules, so an import here at load time would be a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.vi.chunk import FitFailure, FitState
from sluice.vi.families import Family, FullRankParams, MeanFieldParams, fullrank, meanfield
from sluice.vi.particles import elbo, log_weights, sample

if TYPE_CHECKING:
    from sluice.runtime.fitting import Fit, FitError, FitInfo, fit

__all__ = [
    "Family",
    "Fit",
    "FitError",
    "FitFailure",
    "FitInfo",
    "FitState",
    "FullRankParams",
    "MeanFieldParams",
    "elbo",
    "fit",
    "fullrank",
    "log_weights",
    "meanfield",
    "sample",
]

_HOST_LOOP = frozenset({"Fit", "FitError", "FitInfo", "fit"})


def __getattr__(name: str) -> Any:
    if name not in _HOST_LOOP:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from sluice.runtime import fitting

    value = getattr(fitting, name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
