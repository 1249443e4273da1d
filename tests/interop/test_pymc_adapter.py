"""sluice.from_pymc: PyMC's posterior, names, shapes, dims and coords, sampled by sluice.

The reference is ``pm.sample(nuts_sampler="numpyro")`` on the same model, with
``idata_kwargs={"log_likelihood": True}``. PyMC is an optional extra: without
it this module is skipped.

PyTensor's JAX backend switches ``jax_enable_x64`` on when it is imported (PyMC
models are float64); the module fixture below puts the flag back afterwards so
that the rest of the suite runs in JAX's default precision.
"""

from __future__ import annotations

import doctest
import functools
import importlib
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pm = pytest.importorskip(
    "pymc", reason="PyMC is an optional extra (pip install 'sluice[pymc]'); not installed"
)

from adapter_checks import assert_same_posterior, assert_same_structure  # noqa: E402
from model_data import SCHOOLS_Y  # noqa: E402
from pymc_models import MODELS  # noqa: E402

import sluice  # noqa: E402

CHAINS, WARMUP, DRAWS = 4, 500, 1000


@pytest.fixture(scope="module", autouse=True)
def pymc_precision():
    before = jax.config.jax_enable_x64
    from sluice.interop.pymc import _require_pymc

    _require_pymc()  # PyTensor's JAX backend: float64 like the models
    yield
    jax.config.update("jax_enable_x64", before)


@functools.cache
def pymc_model(name: str):
    return MODELS[name]()


@functools.cache
def adapted(name: str) -> sluice.Model:
    from sluice.interop.pymc import from_pymc

    return from_pymc(pymc_model(name))


@functools.cache
def sluice_run(name: str, chunk_size: int = DRAWS) -> sluice.Run:
    return sluice.sample(
        adapted(name),
        chains=CHAINS,
        warmup=WARMUP,
        draws=DRAWS,
        chunk_size=chunk_size,
        seed=13,
        progress=False,
    )


@functools.cache
def pymc_idata(name: str):
    with pymc_model(name):
        return pm.sample(
            DRAWS,
            tune=WARMUP,
            chains=CHAINS,
            nuts_sampler="numpyro",
            random_seed=5,
            progressbar=False,
            compute_convergence_checks=False,
            idata_kwargs={"log_likelihood": True},
        )


# -- agreement with pm.sample ---------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_posterior_matches_pm_sample(name):
    ours, theirs = sluice_run(name).to_arviz(), pymc_idata(name)
    assert_same_posterior(ours.posterior, theirs.posterior)
    assert_same_structure(ours, theirs, groups=("posterior", "log_likelihood"))
    assert set(ours.observed_data.data_vars) == set(theirs.observed_data.data_vars)
    for obs in theirs.observed_data.data_vars:
        np.testing.assert_array_equal(ours.observed_data[obs], theirs.observed_data[obs])
    assert all(v.dtype == np.float64 for v in ours.posterior.data_vars.values())  # PyMC's


@pytest.mark.slow
def test_observed_data_dims_match_pm_sample():
    ours, theirs = sluice_run("eight_schools").to_arviz(), pymc_idata("eight_schools")
    assert_same_structure(ours, theirs, groups=("observed_data",))


@pytest.mark.slow
def test_chunked_and_unchunked_runs_are_bit_identical():
    whole, chunked = sluice_run("hierarchical"), sluice_run("hierarchical", chunk_size=7)
    for group in ("draws", "sample_stats", "log_likelihood"):
        a, b = getattr(whole, group), getattr(chunked, group)
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{group}[{key!r}]")


# -- the adapted functions are PyMC's ---------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_log_density_transform_and_log_likelihood_equal_pymc(name):
    model, ours = pymc_model(name), adapted(name)
    # PyMC's own functions, compiled by PyTensor's Python backend (no JAX, no C compiler)
    logp = model.compile_logp(mode="FAST_COMPILE")
    recorded = [v for v in model.unobserved_value_vars if not v.name.endswith("__")]
    options = dict(
        inputs=model.value_vars, mode="FAST_COMPILE", point_fn=True, on_unused_input="ignore"
    )
    values = model.compile_fn(recorded, **options)
    pointwise = model.compile_fn(model.logp(model.observed_RVs, sum=False), **options)
    for k in range(3):
        point = ours.init(jax.random.PRNGKey(k))
        numpy_point = {n: np.asarray(v) for n, v in point.items()}
        np.testing.assert_allclose(ours.log_density(point), logp(numpy_point), rtol=1e-10)
        drawn = ours.transform(point)
        assert list(drawn) == [v.name for v in recorded]
        for v, expected in zip(recorded, values(numpy_point), strict=True):
            np.testing.assert_allclose(drawn[v.name], expected, rtol=1e-10, atol=1e-12)
        ll = ours.log_likelihood(point)
        assert list(ll) == [rv.name for rv in model.observed_RVs]
        for rv, expected in zip(model.observed_RVs, pointwise(numpy_point), strict=True):
            np.testing.assert_allclose(ll[rv.name], expected, rtol=1e-10, atol=1e-12)


def test_dims_coords_and_observed_data_are_pymcs():
    ours = adapted("eight_schools")
    assert ours.dims == {"z": ["school"], "theta": ["school"], "y": ["school"]}
    assert list(ours.coords["school"]) == [f"school_{i}" for i in range(8)]
    np.testing.assert_array_equal(ours.observed_data["y"], SCHOOLS_Y.astype(np.float64))
    assert adapted("logistic_regression").dims["x"] == ["obs", "covariate"]  # pm.Data dims kept


def test_init_jitters_the_initial_point_per_chain_key():
    from sluice.interop.pymc import from_pymc

    model = pymc_model("hierarchical")
    start = model.initial_point()
    ours = adapted("hierarchical")
    a, b = ours.init(jax.random.PRNGKey(0)), ours.init(jax.random.PRNGKey(1))
    again = ours.init(jax.random.PRNGKey(0))
    assert set(a) == set(start) == {"mu", "sigma_group_log__", "sigma_log__", "a"}
    for name in start:
        np.testing.assert_array_equal(a[name], again[name])
        assert np.all(np.abs(np.asarray(a[name]) - start[name]) <= 1.0)  # U(-1, 1) jitter
        assert a[name].dtype == np.float64
    assert not np.allclose(a["a"], b["a"])
    plain = from_pymc(model, jitter=False, log_likelihood=False)
    assert plain.log_likelihood is None
    for name in start:
        np.testing.assert_array_equal(plain.init[name], start[name])


def test_jitter_redraws_until_the_log_density_is_finite():
    with pm.Model() as narrow:
        # the support point is 0.5; most U(-1, 1) jitters of it leave (0.4, 0.6)
        x = pm.Normal("x", 0.5, 0.1, transform=None)
        pm.Potential("window", pm.math.switch(pm.math.abs(x - 0.5) < 0.1, 0.0, -np.inf))
    from sluice.interop.pymc import from_pymc

    ours = from_pymc(narrow)
    points = np.array([float(ours.init(jax.random.PRNGKey(k))["x"]) for k in range(20)])
    finite = np.abs(points - 0.5) < 0.1
    # one jitter lands in the window with probability 0.1; eleven tries with 0.69
    assert 8 <= finite.sum() < 20
    assert np.all(jnp.isfinite(jnp.array([ours.log_density({"x": p}) for p in points[finite]])))


def test_discrete_free_variable_is_refused_by_name():
    from sluice.interop.pymc import from_pymc

    with pm.Model() as mixture:
        component = pm.Bernoulli("component", 0.3)
        pm.Normal("y", 3.0 * component, 1.0, observed=1.0)
    with pytest.raises(ValueError, match=r"free variable 'component' .* discrete"):
        from_pymc(mixture)


def test_model_without_free_variables_is_refused():
    from sluice.interop.pymc import from_pymc

    with pm.Model() as fixed:
        pm.Normal("y", 0.0, 1.0, observed=0.0)
    with pytest.raises(ValueError, match="no free variable"):
        from_pymc(fixed)


def test_float64_model_under_32_bit_jax_is_refused():
    from sluice.interop.pymc import from_pymc

    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match=r"float64 .*jax_enable_x64"):
            from_pymc(pymc_model("eight_schools"))
    finally:
        jax.config.update("jax_enable_x64", True)


def test_model_from_the_with_block():
    from sluice.interop.pymc import from_pymc

    with pymc_model("simplex_with_deterministic"):
        ours = from_pymc(name="simplex")
    assert ours.name == "simplex"
    assert set(ours.transform(ours.init(jax.random.PRNGKey(0)))) == {"p", "log_odds"}
    with pytest.raises(TypeError, match=r"model must be a pymc\.Model"):
        from_pymc("not a model")


# -- the docs ------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_docs_pymc_examples_run_as_written(monkeypatch):
    """The set-up block of docs/adapters.md, then its PyMC blocks."""
    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    pymc_blocks = [b for b in blocks if "pymc" in b]
    assert len(pymc_blocks) == 3
    namespace: dict = {}
    for block in [blocks[0], *pymc_blocks]:
        exec(compile(block, "docs/adapters.md", "exec"), namespace)
    assert namespace["idata_sluice_pymc"].posterior["theta"].shape == (4, 1000, 8)


@pytest.mark.parametrize("module", ["sluice.interop.pymc", "sluice.pymc"])
def test_docstring_examples_run(module, monkeypatch):
    result = doctest.testmod(
        importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0 and result.failed == 0


# -- sluice.pymc.sample: pm.sample's drop-in -------------------------------------------------
@pytest.mark.slow
def test_pymc_sample_is_a_drop_in_for_pm_sample():
    """Inside `with model:`, the same arguments as pm.sample; the InferenceData has
    PyMC's names, dims, coords, observed data and NumPyro-backend sample stats, and the
    log-likelihood when asked as PyMC asks; the posterior agrees with pm.sample's."""
    theirs = pymc_idata("eight_schools")
    with pymc_model("eight_schools"):
        ours = sluice.pymc.sample(
            DRAWS, tune=WARMUP, chains=CHAINS, target_accept=0.8, random_seed=5,
            progressbar=False, idata_kwargs={"log_likelihood": True}, cores=2,
        )  # fmt: skip
    assert_same_posterior(ours.posterior, theirs.posterior)
    assert_same_structure(ours, theirs, groups=("posterior", "log_likelihood", "observed_data"))
    assert set(ours.sample_stats.data_vars) <= set(theirs.sample_stats.data_vars) | {"energy"}
    assert {"diverging", "lp", "step_size", "tree_depth"} <= set(ours.sample_stats.data_vars)
    assert ours.posterior.attrs["tuning_steps"] == WARMUP


def test_pymc_sample_takes_the_model_argument_and_sluice_options(tmp_path):
    model = pymc_model("hierarchical")
    idata = sluice.pymc.sample(40, tune=60, chains=2, model=model, random_seed=np.random.default_rng(3),
                               progressbar=False, chunk_size=20,
                               sink=sluice.ZarrSink(tmp_path / "run.zarr"))  # fmt: skip
    assert idata.posterior.sizes["draw"] == 40 and "log_likelihood" not in idata.groups()
    assert sluice.open(tmp_path / "run.zarr").posterior.sizes["chain"] == 2
    with pytest.raises(TypeError, match=r"does not take pm\.sample's nuts_sampler="):
        sluice.pymc.sample(10, tune=10, model=model, nuts_sampler="numpyro")
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['warmup'\]"):
        sluice.pymc.sample(10, tune=10, model=model, warmup=10)
    with pytest.raises(TypeError, match="random_seed must be an int"):
        sluice.pymc.sample(10, tune=10, model=model, random_seed="seven")
