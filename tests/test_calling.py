"""How sluice calls a log density of one point (sluice.calling), and errors that point."""

from __future__ import annotations

import io

import jax.numpy as jnp
import jax.scipy as jsp
import numpy as np
import pytest

import sluice
from sluice.calling import Calling, describe_value, resolve_calling
from sluice.runtime.progress import ChunkProgress

SMALL = dict(chains=2, warmup=60, draws=40, progress=False, chain_method="sequential")


def log_joint(beta):  # the JAX notebook's form: one array
    return jnp.sum(jsp.stats.norm.logpdf(beta, loc=1.0, scale=1.0))


def test_a_function_of_one_array_with_a_dict_init_is_called_with_the_array():
    run = sluice.sample(log_joint, init={"beta": jnp.zeros(3)}, **SMALL)
    assert sorted(run.draws) == ["beta"] and run.draws["beta"].shape == (2, 40, 3)
    assert abs(float(run.draws["beta"].mean()) - 1.0) < 0.5  # N(1, 1): sd of the mean < 0.1


def test_a_function_of_one_array_names_its_draws_after_its_parameter():
    run = sluice.sample(log_joint, init=jnp.zeros(3), **SMALL)
    assert sorted(run.draws) == ["beta"]


def test_a_function_of_several_named_parameters_gets_keyword_arguments():
    def two(mu, log_tau):
        return -0.5 * (mu - 2.0) ** 2 - 0.5 * log_tau**2

    run = sluice.sample(two, init={"log_tau": 0.0, "mu": 0.0}, **SMALL)
    assert sorted(run.draws) == ["log_tau", "mu"]
    assert abs(float(run.draws["mu"].mean()) - 2.0) < 0.6


def test_a_function_of_one_pytree_is_called_with_the_pytree():
    run = sluice.sample(lambda p: -0.5 * jnp.sum(p["a"] ** 2) - 0.5 * p["b"] ** 2,
                        init={"a": jnp.zeros(2), "b": jnp.zeros(())}, **SMALL)  # fmt: skip
    assert sorted(run.draws) == ["a", "b"]


def test_the_rule_on_signatures():
    point = {"beta": jnp.zeros(2)}
    assert resolve_calling(log_joint, point) == Calling("keywords")
    assert resolve_calling(log_joint, jnp.zeros(2)) == Calling("array", "beta")
    assert resolve_calling(lambda p: p, {"a": 1.0, "b": 2.0}) == Calling("pytree")
    assert resolve_calling(lambda *args: 0.0, point) == Calling("pytree")
    assert resolve_calling(log_joint, point, "pytree") == Calling("pytree")
    with pytest.raises(ValueError, match="calling must be one of"):
        resolve_calling(log_joint, point, "magic")
    assert describe_value({"mu": jnp.zeros(()), "b": jnp.ones((2, 3))}) == (
        "{'mu': float32[], 'b': float32[2,3]}"
    )


def test_a_failing_call_says_how_sluice_called_the_function():
    with pytest.raises(KeyError) as info:
        sluice.sample(lambda p: jnp.sum(p["b"] ** 2), init={"a": jnp.zeros(2)}, **SMALL)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "sluice called log_density(point) with point = {'a': float32[2]}" in note


def test_lists_of_numbers_are_arrays():
    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=[0.0, 0.0], **SMALL)
    assert run.draws["x"].shape == (2, 40, 2)
    run = sluice.sample(lambda p: -0.5 * jnp.sum(p["b"] ** 2), init={"b": [0, 0, 0]}, **SMALL)
    assert run.draws["b"].shape == (2, 40, 3)


def test_a_non_finite_start_names_the_element():
    with pytest.raises(ValueError, match=r"init\['beta'\]\[1\] is nan"):
        sluice.sample(log_joint, init={"beta": jnp.array([0.0, jnp.nan, 1.0])}, **SMALL)
    with pytest.raises(ValueError, match=r"log_density\(init\) is -inf for chain 0 at"):
        sluice.sample(lambda x: jnp.where(x[0] > 0, 0.0, -jnp.inf), init=jnp.zeros(2), **SMALL)


def test_a_non_finite_gradient_at_the_start_names_the_element():
    def edge(p):  # finite at the start, but sqrt's gradient at 0 is infinite
        return -jnp.sum(jnp.sqrt(p["s"])) - 0.5 * jnp.sum(p["m"] ** 2)

    with pytest.raises(ValueError, match=r"the gradient at init\['s'\]\[0\] is -?inf"):
        sluice.sample(edge, init={"m": jnp.zeros(2), "s": jnp.array([0.0, 1.0])}, **SMALL)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("dense_mass", "yes", "dense_mass must be True or False, got 'yes'"),
        ("target_accept", True, "target_accept must be a number in \\(0, 1\\), got True"),
        ("max_tree_depth", 2.5, "max_tree_depth must be an int in \\[1, 30\\], got 2.5"),
        ("progress", "no", "progress must be True or False, got 'no'"),
        ("devices", "cpu", "devices must be a list of jax.Device"),
        ("chains", "4", "chains must be a positive integer, got '4'"),
        ("seed", 1.5, "seed must be an integer, got 1.5"),
        ("chain_method", "fast", "chain_method must be one of"),
        ("default_stats", "yes", "default_stats must be True, False or 'auto', got 'yes'"),
    ],
)
def test_every_option_is_checked_by_name(option, value, message):
    with pytest.raises((TypeError, ValueError), match=message):
        sluice.sample(log_joint, init=jnp.zeros(2), **{**SMALL, option: value})


def test_progress_shows_the_sampler_state_one_line_per_chunk_when_not_a_terminal():
    stream = io.StringIO()
    bar = ChunkProgress("sampling", 20, 10, 2, True, stream=stream)
    bar.advance(10, divergent=3, step_size=0.4213, grads_per_draw=7.04)
    bar.advance(10, divergent=4, step_size=0.4213, grads_per_draw=6.0, max_r_hat=1.0021)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("sampling: 10/20 (chunk 1/2, ")
    assert "3 divergent, step 0.421, 7.0 grads/draw" in lines[0]
    assert "max R-hat 1.002" in lines[1]
    quiet = io.StringIO()
    ChunkProgress("sampling", 20, 10, 2, False, stream=quiet).advance(10, divergent=1)
    assert quiet.getvalue() == ""


def test_a_run_reports_its_progress_per_chunk(capsys):
    sluice.sample(log_joint, init=jnp.zeros(2), **{**SMALL, "progress": True, "chunk_size": 20})
    err = capsys.readouterr().err.splitlines()
    sampling = [line for line in err if line.startswith("sampling:")]
    assert len(sampling) == 2, err
    assert "divergent" in sampling[0] and "grads/draw" in sampling[0] and "step" in sampling[0]
    sluice.sample(log_joint, init=jnp.zeros(2), **SMALL)
    assert capsys.readouterr().err == ""


def test_progress_shows_the_worst_r_hat_and_lowest_ess_when_statistics_stream(capsys):
    kwargs = {**SMALL, "chunk_size": 20, "default_stats": True}
    shown = sluice.sample(log_joint, init=jnp.zeros(2), **{**kwargs, "progress": True})
    err = capsys.readouterr().err.splitlines()
    sampling = [line for line in err if line.startswith("sampling:")]
    # read once compiled, within the display's share of the time, and always at the
    # last chunk: the final summary's worst
    assert len(sampling) == 2 and "max R-hat" in sampling[-1] and "min ESS" in sampling[-1], err
    table = shown.summary(round_to="none")
    assert f"max R-hat {table['r_hat'].max():.3f}" in sampling[-1]
    assert f"min ESS {min(table['ess_bulk'].min(), table['ess_tail'].min()):,.0f}" in sampling[-1]
    quiet = sluice.sample(log_joint, init=jnp.zeros(2), **kwargs)  # pipelined: the same draws
    np.testing.assert_array_equal(shown.draws["beta"], quiet.draws["beta"])


def test_to_datatree_has_arviz_1_groups():
    run = sluice.sample(log_joint, init={"beta": jnp.zeros(3)}, **SMALL)
    tree = run.to_datatree()
    assert set(tree.children) == {"posterior", "sample_stats"}
    posterior = tree["posterior"].dataset
    assert posterior["beta"].dims == ("chain", "draw", "beta_dim_0")
    np.testing.assert_array_equal(posterior["beta"].values, run.draws["beta"])
    np.testing.assert_array_equal(
        tree["sample_stats"].dataset["diverging"].values, run.sample_stats["diverging"]
    )
