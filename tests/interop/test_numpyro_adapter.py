"""sluice.from_numpyro: NumPyro's posterior, names, shapes and dims, sampled by sluice.

The reference is NumPyro's own NUTS (``numpyro.infer.MCMC``) on the same model
and data, converted with ``az.from_numpyro``.
"""

from __future__ import annotations

import doctest
import functools
import importlib
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro", reason="NumPyro is an optional extra: sluice[numpyro]")

import numpyro.distributions as dist  # noqa: E402
from adapter_checks import (  # noqa: E402
    assert_same_posterior,
    assert_same_structure,
    moment_mismatches,
)
from numpyro.infer import MCMC, NUTS, init_to_value  # noqa: E402
from numpyro.infer.util import initialize_model  # noqa: E402
from numpyro_models import MODELS, SCHOOLS_SIGMA, SCHOOLS_Y, eight_schools  # noqa: E402

import sluice  # noqa: E402
from sluice.interop.numpyro import convert, from_numpyro  # noqa: E402
from sluice.io.arviz import import_arviz  # noqa: E402

CHAINS, WARMUP, DRAWS = 4, 500, 1000


@functools.cache
def adapted(name: str) -> sluice.Model:
    model, args, kwargs = MODELS[name]
    return from_numpyro(model, *args, **kwargs)


@functools.cache
def sluice_run(name: str, chunk_size: int = DRAWS) -> sluice.Run:
    return sluice.sample(
        adapted(name),
        chains=CHAINS,
        warmup=WARMUP,
        draws=DRAWS,
        chunk_size=chunk_size,
        seed=11,
        progress=False,
    )


@functools.cache
def numpyro_idata(name: str):
    model, args, kwargs = MODELS[name]
    mcmc = MCMC(
        NUTS(model),
        num_warmup=WARMUP,
        num_samples=DRAWS,
        num_chains=CHAINS,
        chain_method="parallel",  # pmap over the 4 virtual CPU devices of conftest.py
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(7), *args, **kwargs)
    return import_arviz().from_numpyro(mcmc)


# -- agreement with NumPyro's own sampler --------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_posterior_matches_numpyro_mcmc(name):
    ours, theirs = sluice_run(name).to_arviz(), numpyro_idata(name)
    assert_same_posterior(ours.posterior, theirs.posterior)
    assert_same_structure(ours, theirs, groups=("posterior", "log_likelihood"))
    # observed data: same names, values and shapes
    assert set(ours.observed_data.data_vars) == set(theirs.observed_data.data_vars)
    for obs in theirs.observed_data.data_vars:
        np.testing.assert_array_equal(ours.observed_data[obs], theirs.observed_data[obs])


@pytest.mark.slow
def test_observed_data_dims_match_numpyro():
    ours, theirs = sluice_run("eight_schools").to_arviz(), numpyro_idata("eight_schools")
    assert_same_structure(ours, theirs, groups=("observed_data",))


@pytest.mark.slow
def test_chunked_and_unchunked_runs_are_bit_identical():
    whole, chunked = sluice_run("eight_schools"), sluice_run("eight_schools", chunk_size=7)
    assert whole.info.chunk_size == DRAWS and chunked.info.chunk_size == 7
    for group in ("draws", "sample_stats", "log_likelihood"):
        a, b = getattr(whole, group), getattr(chunked, group)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{group}[{key!r}]")


def test_the_moment_check_detects_a_shift_of_a_few_mcse():
    rng = np.random.default_rng(0)
    import xarray as xr

    a = xr.Dataset({"x": (("chain", "draw"), rng.normal(size=(4, 1000)))})
    b = xr.Dataset({"x": (("chain", "draw"), rng.normal(0.25, 1.0, size=(4, 1000)))})
    c = xr.Dataset({"x": (("chain", "draw"), rng.normal(0.0, 1.2, size=(4, 1000)))})
    # combined MCSE of the means is about sqrt(2/4000) = 0.022: 0.25 is ~11 of them
    assert any(m.startswith("mean of x") for m in moment_mismatches(a, b))
    assert any(m.startswith("sd of x") for m in moment_mismatches(a, c))
    assert not moment_mismatches(a, a.copy())


# -- the adapted functions are NumPyro's ----------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_log_density_transform_and_log_likelihood_equal_numpyro(name):
    model, args, kwargs = MODELS[name]
    ours = adapted(name)
    points = [ours.init(jax.random.PRNGKey(k)) for k in range(3)]
    theta = jax.tree.map(lambda *xs: jnp.stack(xs), *points)  # three points, evaluated batched

    @jax.jit
    def evaluate(theta):
        # NumPyro's own functions, built inside the trace (one compile, no eager ops)
        info = initialize_model(jax.random.PRNGKey(3), model, model_args=args, model_kwargs=kwargs)
        drawn = jax.vmap(ours.transform)(theta)
        return {
            "ours": (
                jax.vmap(ours.log_density)(theta),
                drawn,
                jax.vmap(ours.log_likelihood)(theta),
            ),
            "numpyro": (
                -jax.vmap(info.potential_fn)(theta),
                jax.vmap(info.postprocess_fn)(theta),
                numpyro.infer.log_likelihood(model, drawn, *args, **kwargs),
            ),
        }

    out = evaluate(theta)
    (ld, drawn, ll), (ref_ld, constrained, ref_ll) = out["ours"], out["numpyro"]
    np.testing.assert_allclose(ld, ref_ld, rtol=1e-6, atol=1e-6)
    assert set(drawn) == set(constrained) | _deterministic_names(model, args, kwargs)
    for key, value in constrained.items():
        np.testing.assert_allclose(drawn[key], value, rtol=1e-6)
    assert ll.keys() == ref_ll.keys()
    for key in ref_ll:
        np.testing.assert_allclose(ll[key], ref_ll[key], rtol=1e-6, atol=1e-6)


def _deterministic_names(model, args, kwargs) -> set[str]:
    trace = numpyro.handlers.trace(numpyro.handlers.seed(model, 0)).get_trace(*args, **kwargs)
    return {k for k, site in trace.items() if site["type"] == "deterministic"}


def test_functions_batch_with_vmap():
    ours = adapted("hierarchical")
    points = [ours.init(jax.random.PRNGKey(k)) for k in range(4)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *points)
    batched = jax.jit(jax.vmap(ours.log_density))(stacked)
    one_by_one = jnp.stack([ours.log_density(p) for p in points])
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-5)
    draws = jax.vmap(ours.transform)(stacked)
    assert draws["a"].shape == (4, 5) and draws["sigma"].shape == (4,)


def test_init_uses_numpyro_strategy_per_chain_key():
    ours = adapted("eight_schools")
    a, b = ours.init(jax.random.PRNGKey(0)), ours.init(jax.random.PRNGKey(1))
    again = ours.init(jax.random.PRNGKey(0))
    for key in a:
        np.testing.assert_array_equal(a[key], again[key])  # a key decides the point
    assert not np.allclose(a["z"], b["z"])  # chains start apart
    # init_to_uniform: every unconstrained coordinate in (-2, 2)
    for point in (a, b):
        flat = np.concatenate([np.ravel(v) for v in point.values()])
        assert np.all(np.abs(flat) < 2.0)
    assert set(a) == {"mu", "tau", "z"}  # unconstrained sites, NumPyro's names

    fixed = convert(
        eight_schools,
        (SCHOOLS_SIGMA,),
        {"y": SCHOOLS_Y},
        init_strategy=init_to_value(values={"mu": 3.0, "tau": 1.0}),
    )
    point = fixed.init(jax.random.PRNGKey(5))
    assert float(point["mu"]) == 3.0 and float(point["tau"]) == 0.0  # tau unconstrained: log 1
    assert np.all(np.abs(np.asarray(point["z"])) < 2.0)  # sites without a value: uniform


def test_dims_and_coords_come_from_plates_and_can_be_overridden():
    ours = adapted("eight_schools")
    assert ours.dims == {"z": ["school"], "theta": ["school"], "y": ["school"]}
    np.testing.assert_array_equal(ours.coords["school"], np.arange(8))
    names = list("ABCDEFGH")
    labelled = convert(
        eight_schools, (SCHOOLS_SIGMA,), {"y": SCHOOLS_Y}, coords={"school": names}, name="8s"
    )
    assert list(labelled.coords["school"]) == names and labelled.name == "8s"
    quiet = convert(eight_schools, (SCHOOLS_SIGMA,), {"y": SCHOOLS_Y}, log_likelihood=False)
    assert quiet.log_likelihood is None and quiet.observed_data is not None
    assert adapted("logistic_regression").dims == {"y": ["obs"]}
    np.testing.assert_array_equal(adapted("eight_schools").observed_data["y"], SCHOOLS_Y)


def test_param_sites_are_held_at_their_initial_value_as_numpyro_mcmc_does():
    def with_param(y):
        shift = numpyro.param("shift", 2.5)
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + shift, 1.0), obs=y)

    ours = from_numpyro(with_param, np.float32(3.0))
    theta = {"mu": jnp.float32(0.1)}
    expected = -0.5 * 0.1**2 - 0.5 * (3.0 - 0.1 - 2.5) ** 2 - np.log(2 * np.pi)
    np.testing.assert_allclose(ours.log_density(theta), expected, rtol=1e-5)


def test_discrete_latent_site_is_refused_by_name():
    def mixture(y):
        z = numpyro.sample("component", dist.Bernoulli(0.3))
        numpyro.sample("y", dist.Normal(3.0 * z, 1.0), obs=y)

    with pytest.raises(ValueError, match=r"latent site 'component' .* discrete \(Bernoulli"):
        from_numpyro(mixture, np.float32(1.0))


def test_subsampled_plate_is_refused_by_name():
    def minibatch(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", y.shape[0], subsample_size=5):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y[:5])

    with pytest.raises(ValueError, match=r"plate 'data' .* subsamples 5 of 20"):
        from_numpyro(minibatch, np.zeros(20, np.float32))


def test_model_without_latent_sites_is_refused():
    def fixed(y):
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)

    with pytest.raises(ValueError, match="no latent sample site"):
        from_numpyro(fixed, np.float32(0.0))


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="model must be a NumPyro model"):
        from_numpyro("eight_schools")
    with pytest.raises(TypeError, match="model_args must be a tuple"):
        convert(eight_schools, [SCHOOLS_SIGMA])


def test_init_that_never_finds_a_finite_density_names_the_model():
    def impossible(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.factor("never", jnp.where(mu > 10.0, 0.0, -jnp.inf))
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    ours = from_numpyro(impossible, np.float32(0.0))
    with pytest.raises(ValueError, match=r"found no point .* model 'impossible'"):
        ours.init(jax.random.PRNGKey(0))


def test_program_fingerprint_is_the_same_in_a_fresh_process():
    """A store's resume check compares it: it must not depend on the process."""
    code = (
        f"import sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "from numpyro_models import MODELS\n"
        "from sluice.interop.numpyro import from_numpyro\n"
        "model, args, kwargs = MODELS['eight_schools']\n"
        "print(from_numpyro(model, *args, **kwargs).flatten().fingerprint)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == adapted("eight_schools").flatten().fingerprint


# -- the docs ------------------------------------------------------------------------------
def _doc_blocks() -> list[str]:
    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.slow
def test_the_docs_numpyro_examples_run_as_written(monkeypatch):
    """The python blocks of docs/adapters.md up to the PyMC section, then the Zarr one."""
    blocks = _doc_blocks()
    assert len(blocks) >= 6
    namespace: dict = {}
    for block in blocks:
        if "pymc" in block or "idata_pymc" in block or "idata_sluice_pymc" in block:
            continue  # run by tests/interop/test_pymc_adapter.py where PyMC is installed
        exec(compile(block, "docs/adapters.md", "exec"), namespace)
    assert namespace["run"].info.num_chunks == 10
    assert namespace["idata_sluice"].posterior["theta"].shape == (4, 1000, 8)


def test_sluice_exports_the_adapters():
    import sluice.interop.numpyro
    import sluice.interop.pymc

    assert sluice.from_numpyro is sluice.interop.numpyro.from_numpyro
    assert sluice.from_pymc is sluice.interop.pymc.from_pymc


@pytest.mark.parametrize("module", ["sluice.interop.numpyro"])
def test_docstring_examples_run(module, monkeypatch):
    result = doctest.testmod(
        importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0 and result.failed == 0
