"""Built-in data sets for demos, tests and benchmarks (no downloads)."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import jax.scipy as jsp
import numpy as np
import scipy.special

__all__ = ["LogisticData", "logistic_regression_data", "logistic_regression_model"]


class LogisticData(NamedTuple):
    x: np.ndarray  # (num_points, num_features) float32
    y: np.ndarray  # (num_points,) int32 in {0, 1}
    true_beta: np.ndarray  # (num_features,) float32


def logistic_regression_data(
    num_points: int = 100, num_features: int = 10, seed: int = 10009
) -> LogisticData:
    """The synthetic logistic-regression data of JAX's "vmapped log-probs" notebook.

    With the defaults this reproduces the notebook's data exactly: NumPy's
    legacy generator seeded with ``seed`` draws ``beta ~ N(0, I)``, then
    ``x ~ N(0, I)`` row by row, then ``y_n ~ Bernoulli(sigmoid(x_n . beta))``
    (from a private ``RandomState``: NumPy's global state is untouched).

    Parameters
    ----------
    num_points, num_features
        Shape of ``x``.
    seed
        Seed of the legacy NumPy generator (the notebook uses 10009).

    Returns
    -------
    LogisticData

    References
    ----------
    https://docs.jax.dev/en/latest/notebooks/vmapped_log_probs.html

    Examples
    --------
    >>> from sluice.apps.datasets import logistic_regression_data
    >>> X, y, true_beta = logistic_regression_data()
    >>> X.shape, y.shape, true_beta.shape
    ((100, 10), (100,), (10,))
    >>> y[:12].tolist()  # the notebook's first labels
    [0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1]
    """
    rng = np.random.RandomState(seed)
    true_beta = rng.randn(num_features).astype(np.float32)
    x = rng.randn(num_points, num_features).astype(np.float32)
    y = (rng.rand(num_points) < scipy.special.expit(x.dot(true_beta))).astype(np.int32)
    return LogisticData(x, y, true_beta)


def notebook_log_joint(data: LogisticData):
    """The notebook's ``log_joint(beta)``, as the notebook writes it (for ONE ``beta``)."""
    features, y = jnp.asarray(data.x), jnp.asarray(data.y)

    def log_joint(beta):
        result = 0.0
        # Note that no `axis` parameter is provided to `jnp.sum`.
        result = result + jnp.sum(jsp.stats.norm.logpdf(beta, loc=0.0, scale=1.0))
        result = result + jnp.sum(-jnp.log(1 + jnp.exp(-(2 * y - 1) * jnp.dot(features, beta))))
        return result

    return log_joint


def logistic_regression_model(data: LogisticData | None = None, prior_scale: float = 1.0):
    """The notebook's log-joint as a :class:`sluice.Model` (``beta`` ~ N(0, prior_scale))."""
    from sluice.model import Model

    data = data if data is not None else logistic_regression_data()
    x, y = jnp.asarray(data.x), jnp.asarray(data.y)
    sign = 2.0 * y - 1.0

    def log_likelihood(params):
        return {"y": -jnp.logaddexp(0.0, -sign * (x @ params["beta"]))}

    def log_density(params):
        prior = jnp.sum(jsp.stats.norm.logpdf(params["beta"], 0.0, prior_scale))
        return prior + jnp.sum(log_likelihood(params)["y"])

    return Model(
        log_density=log_density,
        init={"beta": jnp.zeros(x.shape[1], jnp.float32)},
        log_likelihood=log_likelihood,
        observed_data={"y": data.y},
        dims={"beta": ["feature"], "y": ["point"]},
        name="logistic_regression",
    )
