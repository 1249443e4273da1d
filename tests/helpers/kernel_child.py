"""Other libraries' kernels for the kernel tests, and a run that the resume test kills.

``python -m tests.helpers.kernel_child STORE KERNEL`` samples the Gaussian
below with ``KERNEL`` (a key of :func:`kernels`) into the store ``STORE``,
resuming it when it has a checkpoint; with ``SLUICE_TEST_KILL_AT_COMMIT=after:N``
in the environment it SIGKILLs itself right after its N-th commit.
"""

from __future__ import annotations

import os
import sys

import jax.numpy as jnp
import numpy as np

import sluice
from sluice.io.store import COMMIT, ZarrSink

LOC = np.array([1.0, -2.0, 0.5], np.float32)
SCALES = np.array([0.5, 1.0, 2.0], np.float32)
RESUME_SETTINGS = dict(chains=2, warmup=40, draws=60, chunk_size=10, seed=5)


def log_density(x):
    return -0.5 * jnp.sum(((x - LOC) / SCALES) ** 2)


def model() -> sluice.Model:
    return sluice.Model(log_density, init=jnp.zeros(3))


def kernels() -> dict:
    """Each wrapped kernel the tests run, by name (and sluice's NUTS with a low-rank metric)."""
    import blackjax
    import numpyro.infer

    from sluice.kernels import from_blackjax, from_numpyro

    return {
        "blackjax.nuts": from_blackjax(blackjax.nuts),
        "blackjax.hmc-fixed": from_blackjax(
            blackjax.hmc,
            warmup=None,
            step_size=0.3,
            num_integration_steps=7,
            inverse_mass_matrix=SCALES**2,
        ),
        "blackjax.mala": from_blackjax(blackjax.mala),
        "blackjax.mclmc": from_blackjax(blackjax.mclmc),
        "blackjax.adjusted_mclmc": from_blackjax(blackjax.adjusted_mclmc, num_integration_steps=6),
        "blackjax.dynamic_hmc-chees": from_blackjax(blackjax.dynamic_hmc, warmup="chees"),
        "numpyro.NUTS": from_numpyro(numpyro.infer.NUTS),
        "numpyro.BarkerMH": from_numpyro(numpyro.infer.BarkerMH),
        "numpyro.SA": from_numpyro(numpyro.infer.SA),
        # sluice's own NUTS with the low-rank metric: its ring of draws in the carry
        "sluice.nuts-low_rank": sluice.nuts(mass_matrix="low_rank", max_rank=2),
    }


def main(path: str, name: str) -> None:
    kernel = kernels()[name]
    if os.path.exists(os.path.join(path, COMMIT)):
        sluice.resume(path, model(), kernel=kernel, progress=False)
    else:
        sluice.sample(model(), kernel=kernel, progress=False,
                      sink=ZarrSink(path, overwrite=True), **RESUME_SETTINGS)  # fmt: skip
    print("DONE", flush=True)


if __name__ == "__main__":
    from tests.helpers.store_child import _kill_at_commit

    if os.environ.get("SLUICE_TEST_KILL_AT_COMMIT"):
        _kill_at_commit(os.environ["SLUICE_TEST_KILL_AT_COMMIT"])
    main(sys.argv[1], sys.argv[2])
