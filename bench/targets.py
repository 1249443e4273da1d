"""The posteriors the benchmarks sample: one log-density each, shared by every library.

A target is a log-density of ONE parameter value ``{name: (dim,) float32}``
plus a starting point. sluice takes it as is; NumPyro gets its negative as
``potential_fn``; BlackJAX gets it as ``logdensity_fn``. The data are made
with fixed NumPy seeds, so every process (and every library) sees the same
posterior.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special

__all__ = ["TARGETS", "Target", "make_target"]


@dataclasses.dataclass(frozen=True)
class Target:
    """A log-density of one point and where the chains start."""

    name: str
    description: str
    logdensity_fn: Callable[[dict[str, jax.Array]], jax.Array]
    init: dict[str, jax.Array]  # one point; every chain of every library starts here

    @property
    def dim(self) -> int:
        return sum(int(np.prod(x.shape)) for x in self.init.values())


def _logistic_regression(features: np.ndarray, labels: np.ndarray) -> Callable:
    """``beta ~ N(0, 1)``, ``y_i ~ Bernoulli(sigmoid(x_i . beta))``.

    The JAX notebook writes the likelihood as ``-log(1 + exp(-(2y - 1) x.beta))``;
    ``log_sigmoid`` is the same function, without overflow for large margins.
    """
    x = jnp.asarray(features)
    sign = jnp.asarray(2.0 * labels - 1.0, dtype=jnp.float32)

    def logdensity_fn(params: dict[str, jax.Array]) -> jax.Array:
        beta = params["beta"]
        prior = jnp.sum(jax.scipy.stats.norm.logpdf(beta))
        return prior + jnp.sum(jax.nn.log_sigmoid(sign * (x @ beta)))

    return logdensity_fn


def notebook_logistic() -> Target:
    """The JAX "Autobatching log-densities" notebook's model: 100 points x 10 features.

    Data exactly as the notebook makes them (legacy ``np.random.seed(10009)``
    stream): https://docs.jax.dev/en/latest/notebooks/vmapped_log_probs.html
    """
    legacy = np.random.RandomState(10009)  # = np.random.seed(10009); keep the call order
    num_features, num_points = 10, 100
    true_beta = legacy.randn(num_features).astype(np.float32)
    features = legacy.randn(num_points, num_features).astype(np.float32)
    labels = legacy.rand(num_points) < scipy.special.expit(features.dot(true_beta))
    return Target(
        name="logreg_small",
        description="logistic regression, 100 points x 10 features (JAX vmapped-log-probs notebook)",
        logdensity_fn=_logistic_regression(features, labels.astype(np.int32)),
        init={"beta": jnp.zeros(num_features, jnp.float32)},
    )


def large_logistic(num_points: int = 10_000, num_features: int = 100) -> Target:
    """Synthetic logistic regression, 10,000 points x 100 features.

    Features are standard normal and the true coefficients are scaled by
    ``1/sqrt(num_features)`` so that the logits are O(1): the classes overlap
    and the posterior is well defined (not separable).
    """
    rng = np.random.default_rng(20_000)
    true_beta = rng.standard_normal(num_features) / np.sqrt(num_features)
    features = rng.standard_normal((num_points, num_features)).astype(np.float32)
    labels = rng.random(num_points) < scipy.special.expit(features @ true_beta)
    return Target(
        name="logreg_large",
        description=f"logistic regression, {num_points:,} points x {num_features} features (synthetic)",
        logdensity_fn=_logistic_regression(features, labels.astype(np.int32)),
        init={"beta": jnp.zeros(num_features, jnp.float32)},
    )


def gaussian(
    dim: int = 10_000,
    low: float = 0.1,
    high: float = 10.0,
    seed: int = 30_000,
    name: str = "gaussian",
) -> Target:
    """Independent Gaussian, zero mean, scales log-uniform in ``[low, high]``.

    The scales span two orders of magnitude, so the sampler has to adapt a
    diagonal mass matrix; with ``low == high`` it is an isotropic Gaussian.
    """
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.uniform(np.log(low), np.log(high), dim)).astype(np.float32)
    inv_scales = jnp.asarray(1.0 / scales)

    def logdensity_fn(params: dict[str, jax.Array]) -> jax.Array:
        return -0.5 * jnp.sum((params["x"] * inv_scales) ** 2)

    spread = f"scales log-uniform in [{low}, {high}]" if low != high else f"scale {low}"
    return Target(
        name=name,
        description=f"{dim:,}-dim independent Gaussian, {spread}",
        logdensity_fn=logdensity_fn,
        init={"x": jnp.zeros(dim, jnp.float32)},
    )


TARGETS: dict[str, Callable[[], Target]] = {
    "logreg_small": notebook_logistic,
    "logreg_large": large_logistic,
    "gaussian": gaussian,
}


def make_target(name: str) -> Target:
    """Build a target by name (one of :data:`TARGETS`, or ``gaussian:DIM`` for a unit-scale Gaussian)."""
    if name.startswith("gaussian:"):
        return gaussian(int(name.split(":", 1)[1]), low=1.0, high=1.0, name=name)
    if name not in TARGETS:
        raise ValueError(
            f"unknown target {name!r}; choose from {sorted(TARGETS)} or 'gaussian:DIM'"
        )
    return TARGETS[name]()
