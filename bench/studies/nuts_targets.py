"""The three MCMC benchmark posteriors of ``bench/mcmc.py``, on a flat vector (same data as bench/targets.py).

* ``logreg_small``: the JAX notebook's logistic regression, 100 points x 10 features;
* ``logreg_large``: synthetic logistic regression, 10,000 points x 100 features;
* ``gaussian``: 10,000-dim independent Gaussian, scales log-uniform in [0.1, 10].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special

__all__ = ["MODELS", "make"]


def _logistic(features: np.ndarray, labels: np.ndarray):
    x = jnp.asarray(features)
    sign = jnp.asarray(2.0 * labels - 1.0, dtype=jnp.float32)

    def logdensity_fn(beta: jax.Array) -> jax.Array:
        prior = jnp.sum(jax.scipy.stats.norm.logpdf(beta))
        return prior + jnp.sum(jax.nn.log_sigmoid(sign * (x @ beta)))

    return logdensity_fn


def logreg_small():
    legacy = np.random.RandomState(10009)
    true_beta = legacy.randn(10).astype(np.float32)
    features = legacy.randn(100, 10).astype(np.float32)
    labels = legacy.rand(100) < scipy.special.expit(features.dot(true_beta))
    return _logistic(features, labels.astype(np.int32)), jnp.zeros(10, jnp.float32)


def logreg_large(num_points: int = 10_000, num_features: int = 100):
    rng = np.random.default_rng(20_000)
    true_beta = rng.standard_normal(num_features) / np.sqrt(num_features)
    features = rng.standard_normal((num_points, num_features)).astype(np.float32)
    labels = rng.random(num_points) < scipy.special.expit(features @ true_beta)
    return _logistic(features, labels.astype(np.int32)), jnp.zeros(num_features, jnp.float32)


def gaussian(dim: int = 10_000, low: float = 0.1, high: float = 10.0, seed: int = 30_000):
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.uniform(np.log(low), np.log(high), dim)).astype(np.float32)
    inv_scales = jnp.asarray(1.0 / scales)

    def logdensity_fn(x: jax.Array) -> jax.Array:
        return -0.5 * jnp.sum((x * inv_scales) ** 2)

    return logdensity_fn, jnp.zeros(dim, jnp.float32)


MODELS = {"logreg_small": logreg_small, "logreg_large": logreg_large, "gaussian": gaussian}


def make(name: str):
    """``(logdensity_fn of a flat (dim,) vector, initial point)``."""
    return MODELS[name]()
