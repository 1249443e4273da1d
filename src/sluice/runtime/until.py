"""Stopping a run when it has converged: :func:`converged`.

``sluice.sample(..., until=sluice.converged(ess_bulk=400, r_hat=1.01))`` reads
the default summary statistics, merged over every chain, at each chunk boundary
of the sampling phase and stops at the first one where every element meets
every target given. The decision is a function of the draws so far, so a
resumed run, and every process, stops at the same chunk.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

__all__ = ["WATCHED", "Converged", "converged", "worst"]

_HIGHER = ("ess_bulk", "ess_tail")  # a target is a floor
_LOWER = ("r_hat", "mcse_mean")  # a target is a ceiling
WATCHED = ("r_hat", "ess_bulk", "ess_tail")  # shown while sampling, without targets


@dataclasses.dataclass(frozen=True)
class Converged:
    """Targets every element must meet (``None``: no target); see :func:`converged`."""

    ess_bulk: float | None = None
    ess_tail: float | None = None
    r_hat: float | None = None
    mcse_mean: float | None = None

    def __post_init__(self) -> None:
        for name in (*_HIGHER, *_LOWER):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                raise TypeError(f"{name} must be a number or None, got {value!r}")
            value = float(value)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
            if name == "r_hat" and value <= 1.0:
                raise ValueError(f"r_hat must be above 1 (R-hat is 1 at best), got {value!r}")
            object.__setattr__(self, name, value)
        if self.targets == {}:
            raise ValueError(
                "converged() needs at least one target: ess_bulk, ess_tail, r_hat or mcse_mean"
            )

    @property
    def targets(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def progress(self, summary: dict[str, Any]) -> dict[str, float]:
        """The worst value of each target's quantity over all elements (see :func:`worst`)."""
        return worst(summary, tuple(self.targets))

    def met(self, worst: dict[str, float]) -> bool:
        """Whether every target is met by the worst values (from :meth:`progress`)."""
        for name, target in self.targets.items():
            value = worst[name]
            if math.isnan(value) or (value < target if name in _HIGHER else value > target):
                return False
        return True

    def to_json(self) -> dict[str, float]:
        return self.targets

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Converged | None:
        return None if data is None else cls(**data)


def worst(summary: dict[str, Any], names: tuple[str, ...] = WATCHED) -> dict[str, float]:
    """The worst value over all elements of each quantity ``names`` of a finalized
    summary: least ESS, greatest R-hat and MCSE (NaN counts as the worst: an element
    whose value is not known yet has not converged)."""
    out = {}
    for name in names:
        leaves = [np.ravel(np.asarray(x)) for x in jax.tree.leaves(summary[name])]
        values = np.concatenate(leaves) if leaves else np.zeros(0)
        if values.size == 0 or np.isnan(values).any():
            out[name] = float("nan")
        else:
            out[name] = float(values.min() if name in _HIGHER else values.max())
    return out


def converged(
    *,
    ess_bulk: float | None = None,
    ess_tail: float | None = None,
    r_hat: float | None = None,
    mcse_mean: float | None = None,
) -> Converged:
    """Stop a run at the first chunk boundary where every element meets every target.

    Parameters
    ----------
    ess_bulk, ess_tail
        Least bulk / tail effective sample size (over all chains).
    r_hat
        Greatest rank-normalised R-hat (above 1).
    mcse_mean
        Greatest Monte Carlo standard error of the mean, in the parameter's units.

    Returns
    -------
    Converged
        For ``sluice.sample(..., until=...)``.

    Examples
    --------
    >>> import jax.numpy as jnp, sluice
    >>> run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(3), chains=2,
    ...                     warmup=200, draws=4000, chunk_size=100, sink=None, progress=False,
    ...                     until=sluice.converged(ess_bulk=400, r_hat=1.05))
    >>> run.info.draws < 4000, bool((run.stats["summary"]["ess_bulk"] >= 400).all())
    (True, True)
    """
    return Converged(ess_bulk, ess_tail, r_hat, mcse_mean)
