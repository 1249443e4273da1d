"""PyMC versions of the NumPyro test models (same data), for the PyMC adapter tests."""

from __future__ import annotations

import numpy as np
import pymc as pm
from model_data import DATA, SCHOOLS_SIGMA, SCHOOLS_Y


def eight_schools() -> pm.Model:
    """Non-centered eight schools: a heavy-tailed constrained scale and a deterministic."""
    with pm.Model(coords={"school": [f"school_{i}" for i in range(8)]}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        z = pm.Normal("z", 0.0, 1.0, dims="school")
        theta = pm.Deterministic("theta", mu + tau * z, dims="school")
        pm.Normal("y", theta, SCHOOLS_SIGMA, observed=SCHOOLS_Y, dims="school")
    return model


def logistic_regression() -> pm.Model:
    """Bernoulli-logit regression; the covariates are pm.Data (a shared variable)."""
    x, y = DATA["logistic_regression"]
    with pm.Model(coords={"covariate": ["x0", "x1", "x2"], "obs": np.arange(len(y))}) as model:
        data = pm.Data("x", x, dims=("obs", "covariate"))
        alpha = pm.Normal("alpha", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, dims="covariate")
        pm.Bernoulli("y", logit_p=alpha + data @ beta, observed=y, dims="obs")
    return model


def hierarchical() -> pm.Model:
    """Varying intercepts with a constrained group scale and a constrained noise scale."""
    group, num_groups, y = DATA["hierarchical"]
    with pm.Model(coords={"group": np.arange(num_groups), "obs": np.arange(len(y))}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        sigma_group = pm.HalfNormal("sigma_group", 2.0)
        sigma = pm.Exponential("sigma", 1.0)
        a = pm.Normal("a", mu, sigma_group, dims="group")
        pm.Normal("y", a[group], sigma, observed=y, dims="obs")
    return model


def simplex_with_deterministic() -> pm.Model:
    """A Dirichlet simplex observed through multinomial counts, with deterministic log-odds."""
    (counts,) = DATA["simplex_with_deterministic"]
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones(len(counts)))
        pm.Deterministic("log_odds", pm.math.log(p[0]) - pm.math.log(p[1:]))
        pm.Multinomial("counts", n=int(counts.sum()), p=p, observed=counts)
    return model


MODELS = {
    "eight_schools": eight_schools,
    "logistic_regression": logistic_regression,
    "hierarchical": hierarchical,
    "simplex_with_deterministic": simplex_with_deterministic,
}
