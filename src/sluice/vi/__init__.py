"""Variational inference with particles evaluated in parallel.

The log-density is written for ONE point; the particles of the Monte Carlo
ELBO are drawn with ``fold_in(rng_key, i)`` and evaluated with ``vmap`` (or in
chunks, or one by one, with the same result), so many particles cost little
more than one on vector hardware.

* :func:`elbo`, :func:`log_weights`, :func:`sample`: pure functions of a
  model, a family, its parameters and a key.
* :func:`meanfield`, :func:`fullrank`: Gaussian families (bundles of pure
  functions, like optax's transformations).
* :func:`fit`: the optimisation loop in compiled chunks, returning a
  :class:`Fit` with ``.sample()``, ``.summary()``, ``.to_arviz()``.

This package is the public face. Its modules are the traced side (families,
particles, the compiled chunk of steps: :mod:`sluice.vi.chunk`); the host
loop, :func:`fit`, and its results are :mod:`sluice.runtime.fitting`'s,
imported on first use: that module imports this package's traced modules, so
an import here at load time would be a cycle.
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
