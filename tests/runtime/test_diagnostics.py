"""The run's diagnostics against ArviZ on the same draws, and when they speak."""

from __future__ import annotations

import contextlib
import io
import types
import warnings

import arviz as az
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.mcmc.metric import LowRank
from sluice.runtime.diagnostics import convergence_problems, sampler_problems


def funnel(p):  # Neal's funnel in 10 dimensions: divergences and low E-BFMI at defaults
    return -0.5 * p["v"] ** 2 / 9.0 - 0.5 * jnp.sum(p["x"] ** 2) * jnp.exp(-p["v"]) - 4.5 * p["v"]


FUNNEL = {"init": {"v": jnp.zeros(()), "x": jnp.zeros(9)}, "chains": 2, "warmup": 100}


def _sample(model, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = sluice.sample(model, progress=False, **kwargs)
    return run, [w for w in caught if issubclass(w.category, sluice.DiagnosticWarning)]


@pytest.fixture(scope="module")
def funnel_runs():
    """The same run in one chunk and in chunks of 7 draws (E-BFMI joins chunks on the host)."""
    return [_sample(funnel, draws=300, seed=3, num_chunks=n, **FUNNEL) for n in (1, 43)]


def test_sampler_counts_match_the_draws(funnel_runs):
    for run, _ in funnel_runs:
        stats = run.sample_stats
        assert np.array_equal(run.info.chain_divergent, stats["diverging"].sum(1))
        depth = run.info.config.kernel.max_tree_depth
        assert np.array_equal(run.info.chain_saturated, (stats["tree_depth"] >= depth).sum(1))
        assert run.info.num_divergent > 0
        # ArviZ's bfmi on the recorded energies, whatever the chunking (float32 sums)
        np.testing.assert_allclose(run.info.e_bfmi, az.bfmi(stats["energy"]), rtol=1e-4)


def test_a_funnel_is_told_at_the_end_and_in_its_summary(funnel_runs):
    run, caught = funnel_runs[0]
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"{run.info.num_divergent:,} of 600 transitions" in message and "diverged" in message
    assert "E-BFMI below 0.3" in message  # this funnel's E-BFMI is ~0.1 on both chains
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        table = run.summary()
        run.summary()  # told once per run
    told = [w for w in again if issubclass(w.category, sluice.DiagnosticWarning)]
    assert len(told) == 1 and table.attrs["diagnosis"].kinds == run.diagnose().kinds
    assert {"divergences", "e_bfmi"} <= set(run.diagnose().kinds)


def _info(inverse_mass_matrix):
    """A finished run's counters as ``sampler_problems`` reads them: 12 divergences."""
    return types.SimpleNamespace(
        kernel=sluice.nuts(), chain_divergent=np.array([12, 0]), chain_saturated=np.zeros(2, int),
        e_bfmi=np.array([0.9, 0.9]), draws=300, inverse_mass_matrix=inverse_mass_matrix,
    )  # fmt: skip


def test_divergences_under_low_rank_directions_suggest_the_diagonal_metric(funnel_runs):
    advice = "try mass_matrix='diag'"
    run, _ = funnel_runs[0]  # a diagonal metric: no such advice
    assert "diverged" in str(run.diagnose()) and advice not in str(run.diagnose())
    kept = LowRank(jnp.ones((2, 5)), jnp.eye(5, 2)[None].repeat(2, 0), jnp.array([[4.0, 1.0]] * 2))
    assert advice in sampler_problems(_info(kept))[0].message
    none_kept = kept._replace(values=jnp.ones((2, 2)))  # the diagonal alone
    assert advice not in sampler_problems(_info(none_kept))[0].message
    assert advice not in sampler_problems(_info(jnp.ones((2, 5))))[0].message
    # a low-rank run records its metric where the check reads it
    low_rank, _ = _sample(funnel, draws=100, seed=3, mass_matrix="low_rank", **FUNNEL)
    assert isinstance(low_rank.info.inverse_mass_matrix, LowRank)


def test_a_healthy_run_is_told_nothing():
    def normal(x):
        return -0.5 * jnp.sum(x**2)

    run, caught = _sample(normal, init=jnp.zeros(3), chains=4, warmup=300, draws=500)
    with warnings.catch_warnings(record=True) as more:
        warnings.simplefilter("always")
        run.summary()
    assert caught == [] and [w for w in more if w.category is sluice.DiagnosticWarning] == []
    assert not run.diagnose() and "No problems detected" in str(run.diagnose())


def test_convergence_checks_use_arviz_thresholds():
    # two chains that sit apart: ArviZ's R-hat is large, its ESS tiny
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(2, 200, 2)) + np.array([[[0.0, 0.0]], [[3.0, 0.0]]])
    table = az.summary(az.convert_to_dataset({"x": draws}), round_to="none")
    kinds = [p.kind for p in convergence_problems(table, chains=2)]
    assert kinds[0] == "r_hat" and "ess" in kinds
    message = convergence_problems(table, chains=2)[0].message
    assert "R-hat above 1.01 for 1 of 2 elements (x[0]" in message
    healthy = az.summary(az.convert_to_dataset({"x": rng.normal(size=(2, 400, 2))}))
    assert convergence_problems(healthy, chains=2) == []


class _Interrupted(Exception):
    pass


class _StopsAfter(sluice.ZarrSink):
    """Raises after its second chunk of draws (the run stops; its store stays)."""

    def write(self, start, chunk):
        super().write(start, chunk)
        if start > 0:
            raise _Interrupted


def test_the_counts_and_e_bfmi_survive_a_resume(tmp_path):
    kwargs = dict(draws=40, chunk_size=10, seed=5, **FUNNEL)
    whole, _ = _sample(funnel, sink=sluice.ZarrSink(tmp_path / "a.zarr"), **kwargs)
    with pytest.raises(_Interrupted):
        _sample(funnel, sink=_StopsAfter(tmp_path / "b.zarr"), **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sluice.DiagnosticWarning)
        model = sluice.Model(funnel, init=FUNNEL["init"])
        resumed = sluice.resume(tmp_path / "b.zarr", model, progress=False)
    stored = sluice.open(tmp_path / "b.zarr").sample_stats
    np.testing.assert_allclose(resumed.info.e_bfmi, az.bfmi(stored["energy"].values), rtol=1e-4)
    np.testing.assert_allclose(resumed.info.e_bfmi, whole.info.e_bfmi, rtol=1e-6)
    assert np.array_equal(resumed.info.chain_divergent, stored["diverging"].values.sum(1))


def wall(p):  # a standard normal cut by a stiff wall at x0 = 1: a leapfrog step across it diverges
    return -0.5 * jnp.sum(p["x"] ** 2) - 1e4 * jnp.maximum(p["x"][0] - 1.0, 0.0) ** 2


def test_divergences_in_the_last_window_raise_every_chains_target():
    """The warmup counts the divergences of its last slow window over every chain of the
    run, whatever the layout: 3 chains on one device, vectorized or sequential, and on
    4 devices (one slot padded); every chain then ends its warmup at the raised target,
    each with its own step size, the same in each layout."""
    import jax

    settings = dict(init={"x": jnp.zeros(3)}, chains=3, warmup=300, draws=20, seed=1)
    one = jax.devices()[:1]
    with contextlib.redirect_stderr(io.StringIO()) as shown:  # progress lines, not a terminal
        sluice.sample(wall, progress=True, **settings)
    lines = shown.getvalue().splitlines()
    assert "target" not in lines[0] and "target 0.95" in lines[-1], lines
    runs = [
        _sample(wall, devices=one, chain_method="vectorized", **settings)[0],
        _sample(wall, devices=one, chain_method="sequential", **settings)[0],
        _sample(wall, **settings)[0],
    ]
    for run in runs:
        np.testing.assert_allclose(run.info.target_accept, [0.95] * 3)
        np.testing.assert_allclose(run.info.step_size, runs[0].info.step_size, rtol=1e-5)
    off, _ = _sample(wall, kernel=sluice.nuts(divergent_target_accept=None), **settings)
    np.testing.assert_allclose(off.info.target_accept, [0.8] * 3)
    assert np.all(off.info.step_size > runs[0].info.step_size)  # the higher target's smaller steps


def test_the_advice_after_a_raised_target_is_a_higher_one():
    info = _info(jnp.ones((2, 5)))
    assert "e.g. 0.95" in sampler_problems(info)[0].message
    raised = types.SimpleNamespace(**vars(info), target_accept=np.float32([0.95, 0.95]))
    message = sampler_problems(raised)[0].message
    assert "already raised its target to 0.95" in message and "e.g. 0.99" in message


def test_the_docs_example_of_the_raised_target_runs(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "kernels.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    block = next(b for b in blocks if "divergent_target_accept=None" in b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sluice.DiagnosticWarning)
        exec(compile(block, "docs/kernels.md", "exec"), {})
    out = capsys.readouterr().out
    assert "targets [0.95 0.95 0.95] [0.8 0.8 0.8]" in out, out
