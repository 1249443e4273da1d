"""NumPyro models (with their data) that the adapter tests and benchmark sample."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from model_data import DATA, SCHOOLS_SIGMA, SCHOOLS_Y


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


MODELS = {
    "eight_schools": (eight_schools, (SCHOOLS_SIGMA,), {"y": SCHOOLS_Y}),
    "logistic_regression": (
        logistic_regression,
        DATA["logistic_regression"][:1],
        {"y": DATA["logistic_regression"][1]},
    ),
    "hierarchical": (hierarchical, DATA["hierarchical"][:2], {"y": DATA["hierarchical"][2]}),
    "simplex_with_deterministic": (
        simplex_with_deterministic,
        DATA["simplex_with_deterministic"],
        {},
    ),
}
