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
"""

from sluice.vi.families import Family, FullRankParams, MeanFieldParams, fullrank, meanfield
from sluice.vi.fitting import Fit, FitError, FitFailure, FitInfo, FitState, fit
from sluice.vi.particles import elbo, log_weights, sample

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
