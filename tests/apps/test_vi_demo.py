"""The notebook demo: same data, same algorithm in distribution, a figure; runnable docstrings."""

import doctest
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import sluice.apps.datasets
import sluice.apps.vi_demo
import sluice.runtime.fitting
import sluice.vi.families
import sluice.vi.particles
from sluice.apps.datasets import logistic_regression_data

NUM_SEEDS = 16


def notebook_fits(num_seeds, steps=1000, batch_size=128, step_size=0.01, prior_scale=10.0):
    """The notebook's VI loop, as written there (prior scale 10, SGD ascent), for several keys.

    Returns the final (beta_loc, beta_log_scale) and the notebook's printed ELBO trace.
    """
    X, y, _ = logistic_regression_data()

    def log_joint(beta):
        prior = jnp.sum(jax.scipy.stats.norm.logpdf(beta, loc=0.0, scale=prior_scale))
        return prior + jnp.sum(-jnp.log(1 + jnp.exp(-(2 * y - 1) * jnp.dot(X, beta))))

    def elbo(beta_loc, beta_log_scale, epsilon):
        beta_sample = beta_loc + jnp.exp(beta_log_scale) * epsilon
        return jnp.mean(jax.vmap(log_joint)(beta_sample), 0) + jnp.sum(
            beta_log_scale - 0.5 * np.log(2 * np.pi)
        )

    def run(key):
        def step(carry, k):
            loc, log_scale = carry
            epsilon = jax.random.normal(k, (batch_size, X.shape[1]))
            value, (g_loc, g_log_scale) = jax.value_and_grad(elbo, argnums=(0, 1))(
                loc, log_scale, epsilon
            )
            return (loc + step_size * g_loc, log_scale + step_size * g_log_scale), value

        start = (jnp.zeros(X.shape[1]), jnp.zeros(X.shape[1]))
        return jax.lax.scan(step, start, jax.random.split(key, steps))

    keys = jax.random.split(jax.random.PRNGKey(10003), num_seeds)
    (loc, log_scale), trace = jax.jit(jax.vmap(run))(keys)
    return np.asarray(loc), np.asarray(log_scale), np.asarray(trace)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return sluice.apps.vi_demo.main(str(tmp_path_factory.mktemp("demo")), progress=False)


def test_demo_writes_the_figure(demo):
    result, path = demo
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert result.elbo.shape == (1000,) and result.info.particles == 128


def test_demo_matches_the_notebook_algorithm_in_distribution(demo):
    """sluice's fit is one draw from the distribution of the notebook's final iterate.

    For each quantity, a Bonferroni-corrected t prediction interval from 16 runs
    of the notebook's own loop must contain sluice's value.
    """
    result, _ = demo

    def summary(loc, log_scale, trace):
        tail = trace[..., -100:].mean(-1) + sluice.apps.vi_demo.NOTEBOOK_ELBO_OFFSET
        return np.concatenate([loc, log_scale, tail[..., None]], axis=-1)

    reference = summary(*notebook_fits(NUM_SEEDS))
    centre = reference.mean(0)
    half_width = stats.t.isf(1e-3 / (2 * centre.size), NUM_SEEDS - 1) * reference.std(0, ddof=1)
    half_width *= np.sqrt(1 + 1 / NUM_SEEDS)
    ours = np.concatenate([result.params.loc, result.params.log_scale, [result.elbo[-100:].mean()]])
    assert np.all(np.abs(ours - centre) < half_width), (ours, centre, half_width)
    # The intervals have power: a plausible mistake (the notebook's MCMC prior scale, 1) is caught.
    wrong_prior = summary(*(x[0] for x in notebook_fits(1, prior_scale=1.0)))
    assert np.any(np.abs(wrong_prior - centre) > half_width)


def test_the_data_are_the_notebooks():
    X, y, true_beta = logistic_regression_data()
    assert X.dtype == np.float32 and y.dtype == np.int32 and true_beta.dtype == np.float32
    np.testing.assert_allclose(true_beta[:3], [0.05139999, -1.2454735, -1.081729], rtol=1e-6)
    notebook_y = (  # the labels printed in the notebook
        "00011101111101000111101000001010001000100000110100011001000001100001100011111100011010111010"
        "00010100"
    )
    assert "".join(map(str, y.tolist())) == notebook_y
    state = np.random.get_state()[1].copy()  # noqa: NPY002 - checks the legacy global state
    logistic_regression_data(seed=1)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002 - untouched


@pytest.mark.parametrize(
    "module",
    [
        sluice.apps.datasets,
        sluice.vi.families,
        sluice.vi.particles,
        sluice.runtime.fitting,
        sluice.apps.vi_demo,
    ],
)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_the_docs_example_runs():
    """The python blocks of docs/vi.md run as written."""
    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "vi.md"
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert blocks
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(path), "exec"), namespace)
    assert namespace["draws"]["beta"].shape == (2000, 10)
    assert np.corrcoef(namespace["fit"].params.loc, namespace["true_beta"])[0, 1] > 0.9
