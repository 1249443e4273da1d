"""The chunk engine: invariance to chunking, compile-once, bad input, devices."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice._jax import compile as programs
from sluice.io.sinks import Layout, MemorySink
from sluice.runtime import plan
from sluice.runtime.config import RunConfig

SCALES = jnp.array([1.0, 2.0, 0.5, 3.0])


def log_density(p):
    return -0.5 * jnp.sum((p["x"] / SCALES) ** 2) - 0.5 * (p["log_s"] - 1.0) ** 2


MODEL = sluice.Model(
    log_density,
    init={"x": jnp.zeros(4), "log_s": jnp.zeros(())},
    transform=lambda p: {"x": p["x"], "s": jnp.exp(p["log_s"]), "norm": jnp.linalg.norm(p["x"])},
    log_likelihood=lambda p: {"obs": -0.5 * (p["x"] / SCALES) ** 2},
)
SETTINGS = dict(chains=3, warmup=150, draws=120, seed=7, progress=False)


@pytest.fixture(scope="module")
def reference():
    return sluice.sample(MODEL, chunk_size=120, **SETTINGS)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("chunk_size", [30, 7])
def test_draws_do_not_depend_on_chunk_size(reference, chunk_size):
    run = sluice.sample(MODEL, chunk_size=chunk_size, **SETTINGS)
    assert run.info.chunk_size == chunk_size
    assert _same(run.draws, reference.draws)
    assert _same(run.sample_stats, reference.sample_stats)
    assert _same(run.log_likelihood, reference.log_likelihood)
    np.testing.assert_array_equal(run.info.step_size, reference.info.step_size)
    _assert_same_tree(run.stats, reference.stats)  # streaming statistics too, bit for bit


def test_warmup_chunks_end_at_the_adaptation_windows_ends(reference, capsys):
    """A warmup chunk ends after each slow window's last iteration, where the
    window-end program (the new metric, the step-size search) runs, and every
    chunk_size iterations otherwise; the draws are the same."""
    from sluice.mcmc.adaptation import window_schedule

    run = sluice.sample(MODEL, chunk_size=60, **{**SETTINGS, "progress": True})
    ends = [int(e) + 1 for e in window_schedule(150).window_ends if e >= 0]
    assert ends == [20, 40, 100]  # doubling windows from iteration 10, the last stretched
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warmup:")]
    done = [int(line.split()[1].split("/")[0]) for line in lines]
    assert done == [20, 40, 60, 100, 120, 150]
    assert "chunk 6/6," in lines[-1]
    assert _same(run.draws, reference.draws)


def _assert_same_tree(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_run_contents(reference):
    run = reference
    assert {k: v.shape for k, v in run.draws.items()} == {
        "x": (3, 120, 4),
        "s": (3, 120),
        "norm": (3, 120),
    }
    assert set(run.sample_stats) == {
        "lp",
        "acceptance_rate",
        "step_size",
        "tree_depth",
        "n_steps",
        "diverging",
        "energy",
    }
    assert run.sample_stats["diverging"].dtype == bool
    assert run.log_likelihood["obs"].shape == (3, 120, 4)
    # transform is applied to each draw: s = exp(log_s) > 0, norm = |x|
    np.testing.assert_allclose(
        run.draws["norm"], np.linalg.norm(run.draws["x"], axis=-1), rtol=1e-5
    )
    assert np.all(run.draws["s"] > 0)
    # lp is the log density at the recorded draw
    lp = jax.vmap(lambda x, s: log_density({"x": x, "log_s": jnp.log(s)}))(
        run.draws["x"].reshape(-1, 4), run.draws["s"].reshape(-1)
    )
    np.testing.assert_allclose(run.sample_stats["lp"].reshape(-1), lp, rtol=1e-4, atol=1e-4)
    assert run.info.num_gradients == int(run.sample_stats["n_steps"].sum())
    assert run.info.num_gradients_warmup > 0
    chains_differ = not np.array_equal(run.draws["x"][0], run.draws["x"][1])
    assert chains_differ


def test_one_compile_per_run_and_reuse_across_seeds_and_data():
    def make(data):
        return sluice.Model(lambda b: -0.5 * jnp.sum((b - data) ** 2), jnp.zeros(2))

    settings = dict(
        chains=2, warmup=60, draws=23, chunk_size=5, progress=False, devices=[jax.devices()[0]]
    )
    # 5 chunks, the last one short; warmup and sampling share one program, and the
    # warmup's window ends (a new metric, a step-size search) have their own
    programs.clear()
    first = sluice.sample(make(jnp.array([1.0, 2.0])), seed=1, **settings)

    def chunk_programs():
        return sorted(key[1] for key in programs.cached() if key[0] == "mcmc.chunk")

    assert chunk_programs() == ["advance_donated", "init", "window_end_donated"]
    assert first.info.compile_seconds > 0
    # new seed, new data values, new number of draws: nothing is compiled again (the
    # memory sink's default is no streaming statistics, the only thing that compiles
    # the number of draws in)
    second = sluice.sample(make(jnp.array([-3.0, 0.5])), seed=2, **settings)
    assert second.info.compile_seconds == 0
    assert chunk_programs() == ["advance_donated", "init", "window_end_donated"]
    third = sluice.sample(make(jnp.array([1.0, 2.0])), seed=3, **{**settings, "draws": 31})
    assert third.info.compile_seconds == 0
    # with the statistics on, the same seed-and-data reuse holds for a fixed number of draws
    streamed = {**settings, "default_stats": True}
    sluice.sample(make(jnp.array([1.0, 2.0])), seed=1, **streamed)
    fourth = sluice.sample(make(jnp.array([0.0, 2.0])), seed=4, **streamed)
    assert fourth.info.compile_seconds == 0
    assert abs(second.draws["b"].mean() - first.draws["b"].mean()) > 1.0  # new data was used


def test_seed_changes_draws(reference):
    run = sluice.sample(MODEL, chunk_size=120, **{**SETTINGS, "seed": 8})
    assert not np.array_equal(run.draws["x"], reference.draws["x"])


def test_auto_mass_matrix_takes_the_diagonal_for_a_short_cheap_run(monkeypatch):
    """mass_matrix="auto" keeps the low-rank metric only where the run's expected
    gradient traffic can repay its compile; the resolved kernel is what the run records."""
    config = RunConfig(chains=2, warmup=20, draws=20)
    cheap = plan.Plan.build(config, MODEL, sink=MemorySink())
    assert cheap.config.kernel.mass_matrix == "diag"
    assert cheap.describe()["config"]["kernel"]["mass_matrix"] == "diag"
    monkeypatch.setattr(plan, "LOW_RANK_MIN_RUN_BYTES", 0)
    assert plan.Plan.build(config, MODEL, sink=MemorySink()).config.kernel.mass_matrix == "auto"
    explicit = RunConfig(chains=2, warmup=20, draws=20, kernel=sluice.nuts(mass_matrix="low_rank"))
    monkeypatch.setattr(plan, "LOW_RANK_MIN_RUN_BYTES", 2**62)
    built = plan.Plan.build(explicit, MODEL, sink=MemorySink())
    assert built.config.kernel.mass_matrix == "low_rank"  # only "auto" is decided
    assert plan._resolve_mass_matrix(sluice.hmc(), None).mass_matrix == "auto"  # not on CPU


def test_statistics_program_takes_the_classic_emitters_while_its_update_is_cheap():
    """The statistics' own program over more than CLASSIC_STATISTICS_ELEMENTS elements
    compiles with the classic emitters (sooner, slower to run) while the run's
    element-draws are few enough for the compile to outweigh the update, with XLA's
    defaults beyond; the sampler's options do not depend on the statistics."""
    wide = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(1000), name="wide")

    def options(draws: int, statistics: bool = True) -> tuple:
        config = RunConfig(chains=4, warmup=10, draws=draws, default_stats=statistics)
        built = plan.Plan.build(config, wide, sink=MemorySink())
        return built.compile_options, built.statistics_options

    for draws, expected in ((1000, programs.CLASSIC_EMITTER_OPTIONS), (100_000, None)):
        sampler, statistics = options(draws)  # 4M and 400M element-draws
        assert statistics == expected
        assert sampler == options(draws, statistics=False)[0]


def test_num_chunks_and_auto_chunk_size():
    run = sluice.sample(MODEL, num_chunks=4, **SETTINGS)
    assert run.info.chunk_size == 30
    auto = sluice.sample(MODEL, **SETTINGS)
    assert 1 <= auto.info.chunk_size <= 120


def test_auto_chunk_size_respects_the_memory_budget(monkeypatch):
    monkeypatch.setenv("SLUICE_CHUNK_BUDGET_BYTES", str(3 * 10 * 100 * 4 * 2))
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(100))
    layout = Layout(3, 1000, plan._layout_groups(model.flatten(), sluice.nuts()))
    chunk = plan._resolve_chunk_size(RunConfig(3, 1000, 1000), layout, 3)
    # each draw of a chain is 100 float32 + 7 sample stats: about 428 bytes
    assert chunk == (3 * 10 * 100 * 4 * 2) // (3 * (400 + 28))


def test_auto_chunk_size_weighs_the_statistics_state_against_the_draws(monkeypatch):
    """Below a tenth of the draws, smaller chunks hold fewer draws but a longer ring of
    chunk summaries in the default statistics: the chunk size taken keeps the two
    together smallest (checked on the states' actual shapes, every candidate)."""
    from sluice.stats import streaming

    budget = 3 * 10 * 100 * 4 * 2
    monkeypatch.setenv("SLUICE_CHUNK_BUDGET_BYTES", str(budget))
    model = sluice.Model(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros(100))
    layout = Layout(3, 1000, plan._layout_groups(model.flatten(), sluice.nuts()))
    config = RunConfig(3, 1000, 1000)
    by_memory = plan._resolve_chunk_size(config, layout, 3)
    chunk = plan._resolve_chunk_size(config, layout, 3, plan._default_state_bytes(config, layout))
    pilot = {"x": jax.ShapeDtypeStruct((16, 100), jnp.float32)}

    def total(c):  # one chain: the chunk's draws and the whole statistics state
        state = jax.eval_shape(streaming.summary(1000, chunk_size=c, pilot=16).init, pilot)
        return c * plan.bytes_per_draw(layout) + sum(x.size * x.dtype.itemsize
                                                     for x in jax.tree.leaves(state))  # fmt: skip

    candidates = range(by_memory, 101)
    assert by_memory < 100 and total(chunk) == min(total(c) for c in candidates)
    assert total(chunk) < total(by_memory)


def test_stats_only_run_keeps_no_draws():
    run = sluice.sample(MODEL, sink=None, **SETTINGS)
    with pytest.raises(AttributeError, match="kept no draws"):
        run.draws  # noqa: B018
    assert run.info.num_gradients > 0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(draws=0), ValueError, r"draws must be a positive integer, got 0"),
        (dict(draws=10.5), ValueError, r"draws must be a positive integer, got 10.5"),
        (dict(chains=-1), ValueError, r"chains must be a positive integer, got -1"),
        (dict(warmup=-5), ValueError, r"warmup must be a non-negative integer, got -5"),
        (dict(chunk_size=0), ValueError, r"chunk_size must be a positive integer, got 0"),
        (dict(chunk_size=10, num_chunks=2), ValueError, r"chunk_size or num_chunks, not both"),
        (dict(num_chunks=0), ValueError, r"num_chunks must be a positive integer, got 0"),
        (dict(chain_method="parallel"), ValueError, r"chain_method must be one of .* 'parallel'"),
        (dict(kernel="mala"), ValueError, r"kernel must be one of .* 'mala'"),
        (
            dict(target_accept=1.5),
            ValueError,
            r"target_accept must be a number in \(0, 1\), got 1.5",
        ),
        (dict(max_tree_depth=0), ValueError, r"max_tree_depth must be an int in \[1, 30\], got 0"),
        (
            dict(sink="disk"),
            ValueError,
            r"sink must be 'memory', None or a sink object, got 'disk'",
        ),
        (dict(stats=[1]), TypeError, r"stats must be a dict"),
        (dict(seed=1.5), TypeError, r"seed must be an integer, got 1.5"),
    ],
)
def test_bad_arguments_are_rejected_before_compiling(kwargs, error, match):
    with pytest.raises(error, match=match):
        sluice.sample(MODEL, **{**SETTINGS, **kwargs})


def test_non_finite_log_density_at_init():
    with pytest.raises(ValueError, match=r"log_density\(init\) is -inf for chain 0"):
        sluice.sample(lambda x: jnp.sum(jnp.log(x)), init=jnp.zeros(2), progress=False)


def test_non_finite_gradient_names_the_parameter():
    def ld(p):
        return jnp.sum(jnp.sqrt(p["a"])) - 0.5 * jnp.sum(p["b"] ** 2)

    with pytest.raises(
        ValueError, match=r"gradient of log_density .* not finite: the gradient at init\['a'\]\[0\]"
    ):
        sluice.sample(ld, init={"a": jnp.zeros(2), "b": jnp.zeros(3)}, progress=False)


def test_random_init_function_gives_each_chain_its_own_start():
    model = sluice.Model(
        lambda x: -0.5 * jnp.sum(x**2),
        init=lambda key: jax.random.uniform(key, (2,), minval=-2, maxval=2),
    )
    points = model.initial_points(jax.random.PRNGKey(0), np.arange(3))
    assert points.shape == (3, 2) and len({tuple(np.asarray(p)) for p in points}) == 3
    run = sluice.sample(model, chains=2, warmup=50, draws=20, progress=False)
    assert run.draws["x"].shape == (2, 20, 2)


def test_divergences_are_counted_and_warned():
    # Neal's funnel, with a tiny step size target that still diverges in the neck.
    def funnel(p):
        return (
            -0.5 * p["v"] ** 2 / 9.0 - 0.5 * jnp.sum(p["x"] ** 2) * jnp.exp(-p["v"]) - 4.5 * p["v"]
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = sluice.sample(
            funnel,
            init={"v": jnp.zeros(()), "x": jnp.zeros(9)},
            chains=2,
            warmup=100,
            draws=300,
            progress=False,
            seed=3,
        )
    assert run.info.num_divergent == int(run.sample_stats["diverging"].sum())
    assert run.info.num_divergent > 0
    told = [w for w in caught if issubclass(w.category, sluice.DiagnosticWarning)]
    assert len(told) == 1 and f"{run.info.num_divergent:,} of" in str(told[0].message)


def test_hmc_kernel_and_settings():
    run = sluice.sample(MODEL, kernel=sluice.hmc(num_integration_steps=7), **SETTINGS)
    assert np.all(run.sample_stats["n_steps"] == 7)
    assert "tree_depth" not in run.sample_stats
    deep = sluice.sample(MODEL, kernel="nuts", max_tree_depth=2, **SETTINGS)
    assert deep.sample_stats["tree_depth"].max() <= 2


@pytest.mark.parametrize("method", ["vectorized", "sequential"])
def test_chain_methods_sample_the_same_posterior(reference, method):
    run = sluice.sample(MODEL, chunk_size=120, chain_method=method, **{**SETTINGS, "draws": 120})
    assert run.info.chain_method == method
    x = run.draws["x"].reshape(-1, 4)
    # both methods follow the same keys: agree in distribution (sd of the mean ~ scale/sqrt(ESS))
    assert np.all(np.abs(x.mean(0)) < 5 * np.asarray(SCALES) / np.sqrt(100))


def test_chains_over_four_devices_match_one_device():
    devices = jax.devices()
    assert len(devices) == 4, "conftest sets JAX_NUM_CPU_DEVICES=4"
    settings = dict(
        chains=6,
        warmup=60,
        draws=40,
        chunk_size=16,
        seed=3,
        progress=False,
        chain_method="sequential",
    )
    one = sluice.sample(MODEL, devices=devices[:1], **settings)
    four = sluice.sample(MODEL, devices=devices, **settings)  # 6 chains padded to 8 slots
    assert four.draws["x"].shape == (6, 40, 4)
    assert _same(one.draws, four.draws)
    assert _same(one.sample_stats, four.sample_stats)
    _assert_same_tree(one.stats_per_chain, four.stats_per_chain)
    _assert_same_tree(one.stats, four.stats)


def test_run_keys_from_seed_are_jax_random_keys():
    """Keys are derived on the host (NumPy Threefry) but are jax.random's bit for bit."""
    from sluice.mcmc.chunk import RunKeys

    for seed in (0, 1, 123_456, 2**31 - 1, 2**31, -5):
        keys = RunKeys.from_seed(seed)
        root = jax.random.PRNGKey(seed)
        for i, key in enumerate(keys):
            np.testing.assert_array_equal(key, jax.random.fold_in(root, i))


def test_a_fixed_init_starts_every_chain_at_its_raveled_point():
    """A fixed init is raveled on the host in ravel_pytree's order and dtype."""
    from jax.flatten_util import ravel_pytree

    init = {"b": jnp.asarray([1.5, -2.0]), "a": jnp.asarray(0.25), "c": jnp.ones((2, 2)) * 3}
    built = plan.Plan.build(
        RunConfig(chains=3, warmup=10, draws=10),
        lambda p: -0.5 * sum(jnp.sum(v**2) for v in jax.tree.leaves(p)),
        sink=MemorySink(),
        init=init,
    )
    positions = built.local_positions()
    expected = np.asarray(ravel_pytree(init)[0])
    assert positions.dtype == expected.dtype
    np.testing.assert_array_equal(positions, np.broadcast_to(expected, (3, expected.size)))
