"""Small synthetic data sets used by the demos, tests and benchmarks."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["logistic_regression_data"]


def logistic_regression_data(
    num_points: int = 100, num_features: int = 10, seed: int = 10009
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The synthetic logistic-regression data of the JAX "vmapped log-probs" notebook.

    With the defaults this reproduces the notebook's data exactly: the legacy
    NumPy global generator seeded with ``seed`` draws the true coefficients
    ``beta ~ N(0, I)``, then ``X ~ N(0, I)`` row by row, then labels
    ``y_n ~ Bernoulli(sigmoid(x_n . beta))``. NumPy's global random state is not
    touched.

    Parameters
    ----------
    num_points, num_features
        Shape of ``X``.
    seed
        Seed of the legacy NumPy generator (the notebook uses 10009).

    Returns
    -------
    X : ndarray
        ``(num_points, num_features)`` float32 features.
    y : ndarray
        ``(num_points,)`` int32 labels in {0, 1}.
    true_beta : ndarray
        ``(num_features,)`` float32 coefficients that generated ``y``.

    References
    ----------
    https://docs.jax.dev/en/latest/notebooks/vmapped_log_probs.html

    Examples
    --------
    >>> from sluice.datasets import logistic_regression_data
    >>> X, y, true_beta = logistic_regression_data()
    >>> X.shape, y.shape, true_beta.shape
    ((100, 10), (100,), (10,))
    >>> y[:12].tolist()  # the notebook's first labels
    [0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1]
    """
    # The notebook seeds NumPy's legacy global generator; RandomState(seed) is
    # the same stream without touching the global state.
    rng = np.random.RandomState(seed)
    true_beta = rng.randn(num_features).astype(np.float32)
    X = rng.randn(num_points, num_features).astype(np.float32)
    y = (rng.rand(num_points) < expit(X.dot(true_beta))).astype(np.int32)
    return X, y, true_beta
