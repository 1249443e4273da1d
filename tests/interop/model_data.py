"""Data shared by the NumPyro and PyMC test models (fixed seed, float32)."""

from __future__ import annotations

import numpy as np

SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)


def _data() -> dict[str, tuple]:
    rng = np.random.default_rng(20240607)
    x = rng.normal(size=(100, 3)).astype(np.float32)
    logits = 0.3 + x @ np.array([1.0, -0.5, 0.0])
    y_logit = (rng.uniform(size=100) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    num_groups = 5
    group = np.repeat(np.arange(num_groups), 8).astype(np.int32)
    a = rng.normal(1.0, 1.0, size=num_groups)
    y_hier = (a[group] + rng.normal(0.0, 0.7, size=group.shape[0])).astype(np.float32)
    counts = np.array([12.0, 7.0, 3.0, 18.0], np.float32)
    return {
        "logistic_regression": (x, y_logit),
        "hierarchical": (group, num_groups, y_hier),
        "simplex_with_deterministic": (counts,),
    }


DATA = _data()
