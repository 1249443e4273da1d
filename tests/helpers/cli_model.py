"""A model script for `sluice sample FILE.py` in the tests."""

import jax.numpy as jnp
import numpy as np

import sluice

y = np.random.default_rng(1).normal(2.0, 1.5, size=40).astype(np.float32)


def log_density(p):
    sigma = jnp.exp(p["log_sigma"])
    return (
        -0.5 * (p["mu"] / 10) ** 2
        - 0.5 * p["log_sigma"] ** 2
        - jnp.sum(0.5 * ((y - p["mu"]) / sigma) ** 2)
        - len(y) * p["log_sigma"]
    )


model = sluice.Model(
    log_density,
    {"mu": jnp.zeros(()), "log_sigma": jnp.zeros(())},
    transform=lambda p: {"mu": p["mu"], "sigma": jnp.exp(p["log_sigma"])},
)
