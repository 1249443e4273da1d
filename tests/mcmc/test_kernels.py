"""The kernels (sluice.mcmc.hamiltonian behind sluice.mcmc.kernels): one shared suite for every kernel.

* posterior moments of targets with a known answer, within Monte Carlo error,
  for NUTS (diagonal and dense metric) and HMC, chains sequential and vectorized;
* invariance: chains started at exact draws of a 1-D target are still exactly
  distributed after several transitions (Kolmogorov-Smirnov, fixed seeds);
* NUTS against BlackJAX's NUTS: the same distribution of tree depths,
  acceptance statistics and step counts from independent exact starting points;
* divergences, max_tree_depth, the random numbers, batching.

Tolerances are Monte Carlo errors times Z = 4.5 (MCSE from ArviZ), or p-values
above 1e-3 with fixed seeds.
"""

import functools

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import sluice
from sluice.mcmc import hamiltonian
from sluice.mcmc.kernels import KernelParams, get_kernel, kernel_from_config

Z = 4.5
P_MIN = 1e-3


def _run(kernel, logdensity_fn, x0, params, key, num_steps, method="vectorized"):
    """``num_steps`` transitions of each chain (leading axis of ``x0`` and ``key``)."""

    def chain(key, x):
        state = kernel.init(x, logdensity_fn)

        def body(state, k):
            state, stats = kernel.step(k, state, logdensity_fn, params)
            return state, (state.position, stats)

        return jax.lax.scan(body, state, jax.random.split(key, num_steps))[1]

    keys = jax.random.split(key, x0.shape[0])
    if method == "vectorized":
        return jax.jit(jax.vmap(chain))(keys, x0)
    return jax.jit(lambda k, x: jax.lax.map(lambda a: chain(*a), (k, x)))(keys, x0)


def _check_moments(draws, mean, sd):
    """draws (chain, draw, k) against exact means and standard deviations."""
    draws = np.asarray(draws, np.float64)
    for k in range(draws.shape[-1]):
        x = draws[..., k]
        mcse_mean = float(az.mcse(x, method="mean"))
        mcse_sd = float(az.mcse(x, method="sd"))
        assert abs(x.mean() - mean[k]) <= Z * mcse_mean, (k, x.mean(), mean[k], mcse_mean)
        assert abs(x.std(ddof=1) - sd[k]) <= Z * mcse_sd, (k, x.std(ddof=1), sd[k], mcse_sd)


# -- targets with a known answer ---------------------------------------------------
SCALES = np.array([0.1, 1.0, 5.0, 0.5], np.float32)
LOC = np.array([1.0, -2.0, 0.0, 3.0], np.float32)
COV = np.array([[1.0, 0.9, 0.3], [0.9, 2.0, 0.5], [0.3, 0.5, 0.5]])
GAMMA_A, GAMMA_B = 3.0, 2.0  # z = log(lam), lam ~ Gamma(3, rate 2)


def scaled_gaussian(x):
    return -0.5 * jnp.sum(((x - LOC) / SCALES) ** 2)


def correlated_gaussian(x):
    return -0.5 * x @ jnp.asarray(np.linalg.inv(COV), jnp.float32) @ x


def log_gamma(z):  # density of z = log(lam): lam^a exp(-b lam)
    return jnp.sum(GAMMA_A * z - GAMMA_B * jnp.exp(z))


TARGETS = {
    # name: (log-density, start, (step size, inverse mass matrix), exact mean, exact sd, transform)
    "scaled": (
        scaled_gaussian,
        LOC,
        (0.9, SCALES**2),
        LOC,
        SCALES,
        lambda x: x,
    ),
    "correlated_dense": (
        correlated_gaussian,
        np.zeros(3, np.float32),
        (0.9, COV.astype(np.float32)),
        np.zeros(3),
        np.sqrt(np.diag(COV)),
        lambda x: x,
    ),
    "correlated_diag": (
        correlated_gaussian,
        np.zeros(3, np.float32),
        (0.5, np.diag(COV).astype(np.float32)),
        np.zeros(3),
        np.sqrt(np.diag(COV)),
        lambda x: x,
    ),
    "log_gamma": (
        log_gamma,
        np.zeros(1, np.float32),
        (0.6, np.full(1, 1.0 / GAMMA_A, np.float32)),
        np.array([GAMMA_A / GAMMA_B]),
        np.array([np.sqrt(GAMMA_A) / GAMMA_B]),
        jnp.exp,
    ),
}

KERNELS = {"nuts": sluice.nuts(), "hmc": sluice.hmc(num_integration_steps=7)}


# static HMC with a diagonal metric mixes too slowly on the correlated target to test cheaply
CASES = [
    (k, t) for k in sorted(KERNELS) for t in sorted(TARGETS) if (k, t) != ("hmc", "correlated_diag")
]


@pytest.mark.parametrize(("kernel_name", "target"), CASES)
def test_posterior_moments_within_mcse(kernel_name, target):
    fn, start, (eps, imm), mean, sd, transform = TARGETS[target]
    kernel = KERNELS[kernel_name]
    params = KernelParams(jnp.float32(eps), jnp.asarray(imm))
    x0 = jnp.broadcast_to(jnp.asarray(start), (4, len(start)))
    key = jax.random.PRNGKey(sorted(TARGETS).index(target))
    positions, stats = _run(kernel, fn, x0, params, key, 1500)
    draws = np.asarray(jax.vmap(jax.vmap(transform))(positions))[:, 100:]
    _check_moments(draws, mean, sd)
    assert not np.any(np.asarray(stats["diverging"]))


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
def test_sequential_and_vectorized_chains_follow_the_same_trajectories(kernel_name):
    fn, _start, (eps, imm), *_ = TARGETS["scaled"]
    params = KernelParams(jnp.float32(eps), jnp.asarray(imm))
    x0 = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32)
    key = jax.random.PRNGKey(3)
    seq_x, seq_stats = _run(KERNELS[kernel_name], fn, x0, params, key, 60, "sequential")
    vec_x, vec_stats = _run(KERNELS[kernel_name], fn, x0, params, key, 60, "vectorized")
    np.testing.assert_array_equal(seq_stats["n_steps"], vec_stats["n_steps"])
    np.testing.assert_allclose(seq_x, vec_x, rtol=1e-5, atol=1e-5)


# -- invariance: exact draws stay exact ----------------------------------------------
MIX_W, MIX_MU, MIX_SD = 0.3, (-1.0, 1.5), (0.5, 1.0)


def mixture(x):
    comps = [
        jnp.log(w) + jax.scipy.stats.norm.logpdf(x[0], m, s)
        for w, m, s in zip((MIX_W, 1 - MIX_W), MIX_MU, MIX_SD, strict=True)
    ]
    return jax.scipy.special.logsumexp(jnp.stack(comps))


def mixture_cdf(x):
    return MIX_W * scipy.stats.norm.cdf(x, MIX_MU[0], MIX_SD[0]) + (
        1 - MIX_W
    ) * scipy.stats.norm.cdf(x, MIX_MU[1], MIX_SD[1])


def log_gamma_cdf(z):
    return scipy.stats.gamma.cdf(np.exp(z), GAMMA_A, scale=1 / GAMMA_B)


def _exact_draws(target, n, rng):
    if target == "mixture":
        comp = rng.random(n) < MIX_W
        return np.where(
            comp, rng.normal(MIX_MU[0], MIX_SD[0], n), rng.normal(MIX_MU[1], MIX_SD[1], n)
        )
    return np.log(rng.gamma(GAMMA_A, 1 / GAMMA_B, n))


@pytest.mark.parametrize(
    "kernel", [sluice.nuts(), sluice.nuts(max_tree_depth=1), sluice.hmc(num_integration_steps=3)]
)
@pytest.mark.parametrize("target", ["mixture", "log_gamma"])
def test_exact_draws_stay_exactly_distributed(kernel, target):
    """Stationarity, which detailed balance implies, on 1-D targets (KS test, fixed seeds).

    10,000 independent chains start at exact draws and make 20 transitions;
    their end points must pass a KS test against the exact CDF. The step size
    (acceptance about 0.7-0.85) makes the energy errors, and so the weights of
    the multinomial choice, matter: a NUTS that picks the subtree's states
    uniformly instead of by weight fails this with p < 1e-9 on both targets.
    """
    fn, cdf = (mixture, mixture_cdf) if target == "mixture" else (log_gamma, log_gamma_cdf)
    x0 = _exact_draws(target, 10_000, np.random.default_rng(11))
    params = KernelParams(jnp.float32(0.9), jnp.ones(1, jnp.float32))
    positions, _ = _run(
        kernel, fn, jnp.asarray(x0[:, None], jnp.float32), params, jax.random.PRNGKey(5), 20
    )
    final = np.asarray(positions[:, -1, 0], np.float64)
    assert not np.allclose(final, x0)  # the chains moved
    assert scipy.stats.kstest(final, cdf).pvalue > P_MIN
    assert scipy.stats.kstest(x0, cdf).pvalue > P_MIN  # the check itself is sound


# -- against BlackJAX -----------------------------------------------------------
def _independent_transitions(step, logdensity_fn, x0, key):
    """One transition from each row of ``x0`` (exact draws): i.i.d. statistics."""

    def one(k, x):
        return step(k, (x, *jax.value_and_grad(logdensity_fn)(x)))

    keys = jax.random.split(key, x0.shape[0])
    return jax.jit(jax.vmap(one))(keys, x0)


@pytest.mark.parametrize("dense", [False, True])
def test_nuts_matches_blackjax_in_distribution(dense):
    import blackjax.mcmc.nuts as bj_nuts
    from blackjax.mcmc.hmc import HMCState

    scales = np.array([0.5, 1.0, 2.0, 1.5, 0.7], np.float32)
    imm = np.full(5, 1.3, np.float32) * scales**2
    imm = np.diag(imm) if dense else imm
    eps = jnp.float32(0.8)

    def fn(x):
        return -0.5 * jnp.sum((x / scales) ** 2)

    def ours(key, state):
        new, info = hamiltonian.nuts_step(key, state, fn, eps, jnp.asarray(imm))
        return info["tree_depth"], info["n_steps"], info["acceptance_rate"], new[0]

    bj_kernel = bj_nuts.build_kernel()

    def theirs(key, state):
        new, info = bj_kernel(key, HMCState(*state), fn, eps, jnp.asarray(imm), 10)
        return (
            info.num_trajectory_expansions,
            info.num_integration_steps,
            info.acceptance_rate,
            new.position,
        )

    n = 6000
    x0 = jnp.asarray(np.random.default_rng(2).normal(size=(n, 5)) * scales, jnp.float32)
    a = _independent_transitions(ours, fn, x0, jax.random.PRNGKey(0))
    b = _independent_transitions(theirs, fn, x0, jax.random.PRNGKey(1))
    depths = np.arange(1, 11)
    table = np.array([[np.sum(np.asarray(s[0]) == d) for d in depths] for s in (a, b)])
    table = table[:, table.sum(0) > 0]
    assert table.shape[1] >= 2
    assert scipy.stats.chi2_contingency(table).pvalue > P_MIN
    for field in (1, 2):  # step counts, acceptance statistics
        assert scipy.stats.ks_2samp(np.asarray(a[field]), np.asarray(b[field])).pvalue > P_MIN
    # both leave the exact distribution exact
    for s in (a, b):
        z = np.asarray(s[3]) / scales
        assert scipy.stats.kstest(z.ravel(), "norm").pvalue > P_MIN


# -- divergences and tree depth --------------------------------------------------
def test_divergences_are_reported_and_end_the_trajectory():
    def fn(x):  # a wall: -inf (NaN gradient energy) beyond x > 2
        return jnp.where(x[0] < 2.0, -0.5 * jnp.sum(x**2), -jnp.inf)

    kernel = sluice.nuts()
    x0 = jnp.zeros((64, 1))
    big = KernelParams(jnp.float32(3.0), jnp.ones(1))
    _, stats = _run(kernel, fn, x0, big, jax.random.PRNGKey(0), 20)
    diverging = np.asarray(stats["diverging"])
    assert diverging.mean() > 0.2
    # a divergent trajectory stops at the doubling where it diverged
    assert np.all(np.asarray(stats["n_steps"])[diverging] < 2**kernel.max_tree_depth - 1)
    small = KernelParams(jnp.float32(0.2), jnp.asarray(SCALES**2))
    _positions, stats = _run(
        kernel, scaled_gaussian, jnp.zeros((8, 4)), small, jax.random.PRNGKey(1), 50
    )
    assert not np.any(np.asarray(stats["diverging"]))
    # energy errors of a huge step size on a Gaussian are divergences too
    huge = KernelParams(jnp.float32(50.0), jnp.ones(4))
    _, stats = _run(kernel, scaled_gaussian, jnp.zeros((8, 4)), huge, jax.random.PRNGKey(2), 5)
    assert np.all(np.asarray(stats["diverging"]))
    assert np.all(np.asarray(stats["acceptance_rate"]) < 1e-3)


@pytest.mark.parametrize("max_tree_depth", [1, 3])
def test_max_tree_depth_is_respected(max_tree_depth):
    kernel = sluice.nuts(max_tree_depth=max_tree_depth)
    tiny = KernelParams(jnp.float32(1e-3), jnp.ones(4))  # would need ~1000 steps to turn
    _, stats = _run(kernel, scaled_gaussian, jnp.zeros((3, 4)), tiny, jax.random.PRNGKey(0), 10)
    assert np.all(np.asarray(stats["tree_depth"]) == max_tree_depth)
    assert np.all(np.asarray(stats["n_steps"]) == 2**max_tree_depth - 1)


def test_statistics_have_arviz_names_and_types():
    kernel = sluice.nuts()
    params = KernelParams(jnp.float32(0.5), jnp.ones(4))
    positions, stats = _run(
        kernel, scaled_gaussian, jnp.zeros((2, 4)), params, jax.random.PRNGKey(0), 5
    )
    assert set(stats) == {
        "lp",
        "acceptance_rate",
        "step_size",
        "tree_depth",
        "n_steps",
        "diverging",
        "energy",
    }
    assert stats["diverging"].dtype == bool and stats["n_steps"].dtype == jnp.int32
    lp = jax.vmap(jax.vmap(scaled_gaussian))(positions)
    np.testing.assert_allclose(stats["lp"], lp, rtol=1e-5)
    # energy = -lp + kinetic >= -lp
    assert np.all(np.asarray(stats["energy"]) >= -np.asarray(stats["lp"]) - 1e-5)


# -- batching ---------------------------------------------------
def test_per_chain_data_falls_back_to_default_batching():
    """A log-density whose data differ by chain (batched consts) still samples each chain right."""
    locs = jnp.array([-3.0, 0.0, 4.0])

    def chain(loc, key):
        fn = functools.partial(lambda x, m: -0.5 * jnp.sum((x - m) ** 2), m=loc)
        state = (jnp.zeros(2), *jax.value_and_grad(fn)(jnp.zeros(2)))

        def body(s, k):
            new, _info = hamiltonian.nuts_step(k, s, fn, 0.9, jnp.ones(2))
            return new, new[0]

        return jax.lax.scan(body, state, jax.random.split(key, 400))[1]

    draws = jax.jit(jax.vmap(chain))(locs, jax.random.split(jax.random.PRNGKey(0), 3))
    means = np.asarray(draws[:, 50:]).mean(axis=(1, 2))
    np.testing.assert_allclose(means, locs, atol=0.3)


def test_kernel_config_round_trip_and_validation():
    for kernel in (
        sluice.nuts(max_tree_depth=7, target_accept=0.9),
        sluice.hmc(num_integration_steps=5),
    ):
        assert kernel_from_config(kernel.to_config()) == kernel
    assert get_kernel("nuts", max_tree_depth=4) == sluice.nuts(max_tree_depth=4)
    with pytest.raises(ValueError, match="max_tree_depth"):
        sluice.nuts(max_tree_depth=0)
    with pytest.raises(ValueError, match="target_accept"):
        sluice.nuts(target_accept=1.5)
    with pytest.raises(TypeError, match="no setting"):
        get_kernel("hmc", max_tree_depth=3)


def test_find_step_size_crosses_the_target_acceptance():
    kernel = sluice.nuts()
    state = kernel.init(jnp.asarray(LOC), scaled_gaussian)
    for start in (1e-4, 1.0, 1e3):
        params = KernelParams(jnp.float32(start), jnp.asarray(SCALES**2))
        eps, n = jax.jit(kernel.find_step_size, static_argnums=2)(
            jax.random.PRNGKey(0), state, scaled_gaussian, params
        )
        assert 0.05 < float(eps) < 20.0 and int(n) >= 1


@pytest.mark.parametrize("kernel_name", ["nuts", "hmc"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_stats_shapes_are_what_a_transition_returns(kernel_name, dtype, monkeypatch):
    """The engine lays out the sample statistics from ``stats_shapes`` without
    tracing a transition; they must be exactly what ``step`` returns."""
    from sluice.mcmc.kernels import KernelState

    kernel = get_kernel(kernel_name, dense_mass=dtype == jnp.float64)
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", dtype == jnp.float64)
    try:
        x = jax.ShapeDtypeStruct((3,), dtype)
        imm = (3, 3) if kernel.dense_mass else (3,)
        params = KernelParams(jax.ShapeDtypeStruct((), dtype), jax.ShapeDtypeStruct(imm, dtype))
        traced = jax.eval_shape(
            lambda s, p: kernel.step(jax.random.PRNGKey(0), s, lambda z: -0.5 * jnp.sum(z**2), p)[
                1
            ],
            KernelState(x, jax.ShapeDtypeStruct((), dtype), x),
            params,
        )
        assert kernel.stats_shapes(dtype) == traced
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.mark.parametrize(
    "kernel_name, dim, chain_method",
    [("nuts", 3, "vectorized"), ("hmc", 3, "sequential"), ("nuts", 300, "sequential")],
)
def test_float64_models_sample_under_x64(kernel_name, dim, chain_method):
    """PyMC switches ``jax_enable_x64`` on when imported: the transitions must trace in
    float64 (they did not: a checkpoint write mixed int32 and int64 indices, and
    every PyMC model failed; dim 300 takes the branch-per-write path)."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        run = sluice.sample(
            lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(dim), chains=2, warmup=30,
            draws=10, kernel=kernel_name, chain_method=chain_method, progress=False, seed=0,
        )  # fmt: skip
        draws = np.asarray(run.draws["x"])
        assert draws.dtype == np.float64 and np.all(np.isfinite(draws))
    finally:
        jax.config.update("jax_enable_x64", before)
