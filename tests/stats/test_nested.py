"""Nested R-hat (sluice.stats.nested): the definition, ArviZ's R-hat, and a run's summary.

References: the definition of Margossian et al. (2024), eq. (2.2)-(2.4),
written out on the draws below; and ArviZ's rank-free R-hat (method
"identity"), which for superchains of one chain each relates to nested R-hat
by ``nR^2 = R^2 + 1 / N``.
"""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.io.sinks import MemorySink
from sluice.runtime.config import RunConfig
from sluice.runtime.plan import Plan
from sluice.stats.nested import nested_rhat_from_moments


def nested_by_definition(draws: np.ndarray, superchains: int) -> float:
    """draws (chains, draws): the paper's B_nu / W_nu, loop by loop."""
    chains, n = draws.shape
    m = chains // superchains
    groups = [draws[k * m : (k + 1) * m] for k in range(superchains)]
    chain_means = [[c.mean() for c in g] for g in groups]
    super_means = [np.mean(cm) for cm in chain_means]
    overall = np.mean(super_means)
    b = sum((sm - overall) ** 2 for sm in super_means) / (superchains - 1)
    w = 0.0
    for g, cm, sm in zip(groups, chain_means, super_means, strict=True):
        bt = sum((x - sm) ** 2 for x in cm) / (m - 1) if m > 1 else 0.0
        wt = np.mean([((c - c.mean()) ** 2).sum() / (n - 1) for c in g]) if n > 1 else 0.0
        w += (bt + wt) / superchains
    return float(np.sqrt(1 + b / w))


def _moments(draws):
    return np.full(draws.shape[0], draws.shape[1]), draws.mean(1), draws.var(1, ddof=1)


@pytest.mark.parametrize(("chains", "superchains", "n"), [(64, 8, 10), (64, 64, 5), (96, 4, 2)])
def test_matches_the_definition(chains, superchains, n):
    rng = np.random.default_rng(chains + n)
    offsets = np.repeat(rng.normal(size=superchains), chains // superchains)
    draws = rng.normal(size=(chains, n)) + 0.3 * offsets[:, None]
    got = nested_rhat_from_moments(*(np.asarray(a)[..., None] for a in _moments(draws)),
                                   superchains)  # fmt: skip
    np.testing.assert_allclose(got[0], nested_by_definition(draws, superchains), rtol=1e-12)


def test_single_chain_superchains_relate_to_arviz_rhat():
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(80, 25)) + 0.2 * rng.normal(size=(80, 1))
    nested = nested_rhat_from_moments(*(a[..., None] for a in _moments(draws)), 80)[0]
    classic = float(az.rhat(draws, method="identity"))
    np.testing.assert_allclose(nested**2, classic**2 + 1 / 25, rtol=1e-10)


def test_superchains_that_disagree_are_flagged():
    rng = np.random.default_rng(1)
    stuck = rng.normal(size=(64, 20)) + np.repeat([0.0, 3.0], 32)[:, None]  # two modes
    mixed = rng.normal(size=(64, 20))
    flag = lambda d: nested_rhat_from_moments(*(a[..., None] for a in _moments(d)), 8)[0]  # noqa: E731
    assert flag(stuck) > 1.5 and flag(mixed) < 1.05


def _init(key):
    return {"x": 3.0 * jax.random.normal(key, (2,))}


def _log_density(p):
    return -0.5 * jnp.sum(p["x"] ** 2)


def test_a_run_reports_nested_rhat_from_its_streamed_moments():
    run = sluice.sample(_log_density, init=_init, chains=64, warmup=30, draws=12, superchains=8,
                        chunk_size=30, default_stats=True, progress=False, seed=4)  # fmt: skip
    table = run.summary(round_to="none")
    x = np.asarray(run.draws["x"], np.float64)
    for k in range(2):
        expected = nested_by_definition(x[..., k], 8)
        np.testing.assert_allclose(table["nested_r_hat"].iloc[k], expected, rtol=1e-5)
    few = sluice.sample(_log_density, init=_init, chains=2, warmup=10, draws=10, chunk_size=10,
                        progress=False)  # fmt: skip
    assert "nested_r_hat" not in few.summary().columns  # fewer than 64 chains (ArviZ's table)


def test_the_chains_of_a_superchain_start_from_one_point():
    model = sluice.Model(_log_density, init=_init)
    config = RunConfig(chains=12, warmup=10, draws=10, superchains=3)
    starts = np.asarray(Plan.build(config, model, sink=MemorySink()).local_positions())[:12]
    groups = starts.reshape(3, 4, -1)
    assert np.all(groups == groups[:, :1])  # equal within a superchain
    assert len({tuple(g[0]) for g in groups}) == 3  # distinct across them
    with pytest.raises(ValueError, match="superchains must be at least 2 and divide chains=12"):
        RunConfig(chains=12, superchains=5)
