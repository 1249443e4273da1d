"""NumPyro models (with their data) that the adapter tests and benchmark sample."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)


def eight_schools(sigma, y=None):
    """Non-centered eight schools: a heavy-tailed constrained scale and a deterministic."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("school", sigma.shape[0]):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0))
        theta = numpyro.deterministic("theta", mu + tau * z)
        numpyro.sample("y", dist.Normal(theta, sigma), obs=y)


def logistic_regression(x, y=None):
    """Bernoulli-logit regression on three standardised covariates."""
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 2.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("obs", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=alpha + x @ beta), obs=y)


def hierarchical(group, num_groups, y=None):
    """Varying intercepts with a constrained group scale and a constrained noise scale."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    sigma_group = numpyro.sample("sigma_group", dist.HalfNormal(2.0))
    sigma = numpyro.sample("sigma", dist.Exponential(1.0))
    with numpyro.plate("group", num_groups):
        a = numpyro.sample("a", dist.Normal(mu, sigma_group))
    with numpyro.plate("obs", group.shape[0]):
        numpyro.sample("y", dist.Normal(a[group], sigma), obs=y)


def simplex_with_deterministic(counts):
    """A Dirichlet simplex (stick-breaking: 3 unconstrained values for 4 entries)
    observed through multinomial counts, with deterministic log-odds."""
    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(counts.shape[0])))
    numpyro.deterministic("log_odds", jnp.log(p[0]) - jnp.log(p[1:]))
    numpyro.sample("counts", dist.Multinomial(total_count=int(counts.sum()), probs=p), obs=counts)


def _data():
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
        "eight_schools": (eight_schools, (SCHOOLS_SIGMA,), {"y": SCHOOLS_Y}),
        "logistic_regression": (logistic_regression, (x,), {"y": y_logit}),
        "hierarchical": (hierarchical, (group, num_groups), {"y": y_hier}),
        "simplex_with_deterministic": (simplex_with_deterministic, (counts,), {}),
    }


MODELS = _data()
