"""Other libraries' kernels in the chunk engine: ChEES across chains, devices, stop and resume.

ChEES recovers a known Gaussian within Monte Carlo error (MCSE from ArviZ) with
one set of parameters for every chain, also across devices; per-chain kernels
give the same draws on one device and on four; a run killed with SIGKILL
resumes to the uninterrupted run's draws, bit for bit; ``until`` stops a
wrapped kernel where its streamed summary meets the targets.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.helpers import kernel_child
from tests.helpers.kernel_child import LOC, SCALES, log_density

import sluice
from sluice.io.store import ZarrSink

pytest.importorskip("blackjax")
pytest.importorskip("numpyro")

ROOT = Path(__file__).resolve().parents[2]
KERNELS = kernel_child.kernels()
Z = 4.5  # as tests/test_posteriors.py
CHEES = "blackjax.dynamic_hmc-chees"  # warms up across chains: many chains, vectorized


def _dispersed(key):
    return 2.0 * jax.random.normal(key, (3,))


def test_chees_across_chains_recovers_the_gaussian_and_shares_its_parameters():
    run = sluice.sample(log_density, init=_dispersed, kernel=KERNELS[CHEES], chains=64,
                        warmup=400, draws=200, seed=3, progress=False)  # fmt: skip
    x = np.asarray(run.draws["x"], np.float64)
    for k in range(3):
        xk = x[..., k]
        mcse_mean, mcse_sd = float(az.mcse(xk, method="mean")), float(az.mcse(xk, method="sd"))
        assert abs(xk.mean() - LOC[k]) <= Z * mcse_mean, (k, xk.mean(), mcse_mean)
        assert abs(xk.std(ddof=1) - SCALES[k]) <= Z * mcse_sd, (k, xk.std(), mcse_sd)
    params = run.info.params
    for leaf in jax.tree.leaves(params):  # one state for the run: every chain the same
        assert np.all(np.asarray(leaf) == np.asarray(leaf)[:1])
    # the ensemble's metric is the posterior's variances (exact for a Gaussian)
    np.testing.assert_allclose(params["inverse_mass_matrix"][0], SCALES**2, rtol=0.05)
    assert "nested_r_hat" in run.summary().columns  # 64 chains


def test_chees_shares_its_parameters_across_devices_and_needs_vectorized_chains():
    settings = dict(init=_dispersed, kernel=KERNELS[CHEES], chains=6, warmup=40, draws=10,
                    seed=2, progress=False)  # fmt: skip
    run = sluice.sample(log_density, devices=jax.devices(), **settings)  # 6 chains, 8 slots
    for leaf in jax.tree.leaves(run.info.params):
        assert np.all(np.asarray(leaf) == np.asarray(leaf)[:1])
    with pytest.raises(ValueError, match=r"warms up across chains.*not 'sequential'"):
        sluice.sample(log_density, chain_method="sequential", **settings)


@pytest.mark.parametrize("name", ["blackjax.mclmc", "numpyro.NUTS", "sluice.nuts-low_rank"])
def test_chains_over_four_devices_match_one_device(name):

    devices = jax.devices()
    assert len(devices) == 4, "conftest sets JAX_NUM_CPU_DEVICES=4"
    settings = dict(chains=3, warmup=30, draws=20, chunk_size=10, seed=2, progress=False,
                    chain_method="sequential")  # fmt: skip
    one, four = (
        sluice.sample(log_density, init=jnp.zeros(3), kernel=KERNELS[name], devices=d, **settings)
        for d in (devices[:1], devices)  # 3 chains padded to 4 slots
    )
    np.testing.assert_array_equal(one.draws["x"], four.draws["x"])
    for key, values in one.sample_stats.items():
        np.testing.assert_array_equal(four.sample_stats[key], values, err_msg=key)


@pytest.mark.slow
# one of each kind of state: BlackJAX's (MCLMC: drawn at init), a warmup across chains,
# NumPyro's (its own adaptation inside the state), sluice's low-rank ring of draws
@pytest.mark.parametrize("name", ["blackjax.mclmc", CHEES, "numpyro.NUTS", "sluice.nuts-low_rank"])
def test_a_killed_run_resumes_to_the_uninterrupted_draws(tmp_path, name):
    store = tmp_path / "run.zarr"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
           "SLUICE_TEST_KILL_AT_COMMIT": "after:3"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.kernel_child", str(store), name],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    kernel = KERNELS[name]
    if not name.startswith("sluice."):  # sluice's own kernels are rebuilt from their settings
        with pytest.raises(ValueError, match="pass it again"):
            sluice.resume(store, kernel_child.model(), progress=False)  # a store holds no code
    sluice.resume(store, kernel_child.model(), kernel=kernel, progress=False)
    reference = sluice.sample(log_density, init=jnp.zeros(3), kernel=kernel, progress=False,
                              **kernel_child.RESUME_SETTINGS)  # fmt: skip
    kept = ZarrSink.open_existing(store).kept()
    np.testing.assert_array_equal(kept["posterior"]["x"][...], reference.draws["x"])
    for key, values in reference.sample_stats.items():
        np.testing.assert_array_equal(kept["sample_stats"][key][...], values, err_msg=key)


def test_until_stops_a_wrapped_kernel_where_it_has_converged():
    target = sluice.converged(ess_bulk=300, r_hat=1.05)
    run = sluice.sample(log_density, init=jnp.zeros(3), kernel=KERNELS["blackjax.mala"],
                        chains=4, warmup=300, draws=4000, chunk_size=100, until=target,
                        progress=False, seed=1)  # fmt: skip
    assert run.info.converged_at == run.info.draws < 4000
    assert (run.summary(source="stats", round_to="none")["ess_bulk"] >= 300).all()
    x = np.asarray(run.draws["x"], np.float64)
    assert x.shape[1] == run.info.draws
    # ArviZ on the kept draws: the streamed bulk ESS is within 4% of it (docs/statistics.md)
    assert min(float(az.ess(x[..., k])) for k in range(3)) > 0.9 * 300


def test_resume_refuses_another_kernel(tmp_path):
    import blackjax

    store = tmp_path / "run.zarr"
    kernel = KERNELS["blackjax.mala"]
    sluice.sample(log_density, init=jnp.zeros(3), kernel=kernel, chains=1, warmup=10, draws=10,
                  sink=ZarrSink(store), progress=False)  # fmt: skip
    other = sluice.kernels.from_blackjax(blackjax.mala, target_accept=0.6)
    with pytest.raises(ValueError, match="the run used the kernel"):
        sluice.resume(store, kernel_child.model(), kernel=other, progress=False)
    sluice.resume(store, kernel_child.model(), kernel=kernel, progress=False)  # finished: as it is
