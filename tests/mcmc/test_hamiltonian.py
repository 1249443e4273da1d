"""The transitions of sluice.mcmc.hamiltonian, called directly (nuts_step, hmc_step, find_step_size).

tests/mcmc/test_kernels.py tests the kernels built on them (moments, stationarity on
1-D targets over many transitions, agreement with BlackJAX, batching, configs). Here:

* static HMC is the leapfrog integrator in the original coordinates with the mass
  matrix, then Metropolis: checked step by step against NumPy, same random numbers;
* one NUTS or HMC transition from exact draws of a correlated 2-D Gaussian (a
  metric that is not its covariance) leaves them exact (KS tests, p > 1e-3);
* divergences, the divergence threshold, and the bounds on steps and tree depth;
* whitening: a dense metric equal to the covariance makes a strongly correlated
  target isotropic (short trees, near-independent draws);
* the step-size search, replayed trial by trial in NumPy.
"""

import functools

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from sluice._jax import random
from sluice.mcmc import hamiltonian
from sluice.mcmc.hamiltonian import find_step_size, hmc_step, nuts_step

P_MIN = 1e-3

COV = np.array([[1.0, 0.8], [0.8, 2.0]])
PREC = np.linalg.inv(COV)


def gaussian(x):
    return -0.5 * x @ jnp.asarray(PREC, jnp.float32) @ x


def _state(fn, x):
    return (x, *jax.value_and_grad(fn)(x))


def _exact(n, seed, cov=COV):
    rng = np.random.default_rng(seed)
    return rng.multivariate_normal(np.zeros(len(cov)), cov, size=n).astype(np.float32)


# -- a NumPy reference: leapfrog in the original coordinates --------------------------
def _np_factor(imm):
    imm = np.asarray(imm, np.float64)
    return np.diag(np.sqrt(imm)) if imm.ndim == 1 else np.linalg.cholesky(imm)


def _np_leapfrog(x, p, eps, imm, num_steps, prec=PREC):
    """Leapfrog for H = x' prec x / 2 + p' M^{-1} p / 2 with M^{-1} = ``imm``.

    Returns the end point, its momentum and the energies at the start and end."""
    imm = np.diag(imm) if np.ndim(imm) == 1 else np.asarray(imm, np.float64)

    def energy(x, p):
        return 0.5 * x @ prec @ x + 0.5 * p @ imm @ p

    h0 = energy(x, p)
    for _ in range(num_steps):
        p = p - 0.5 * eps * prec @ x
        x = x + eps * imm @ p
        p = p - 0.5 * eps * prec @ x
    return x, p, h0, energy(x, p)


@jax.jit
@functools.partial(jax.vmap, in_axes=(0, None))
def _normals(key, stream):
    return random.normal(random.key_words(key), stream, 2)


@jax.jit
@functools.partial(jax.vmap, in_axes=(0, None))
def _uniforms(key, stream):
    return random.uniform(random.key_words(key), stream, 0)


def _momenta(keys, stream, imm):
    """The momenta transitions draw, in the original coordinates: ``p = L^{-T} z`` for
    the whitened standard normals ``z`` of their stream (``L L' = M^{-1}``)."""
    z = np.asarray(_normals(keys, stream), np.float64)
    return np.linalg.solve(_np_factor(imm).T, z.T).T


METRICS = {
    "diagonal": np.array([0.7, 1.6], np.float32),
    "dense": np.array([[1.2, 0.3], [0.3, 0.9]], np.float32),
}


N = 6000  # transitions per batch (one shape: the batched programs compile once per setting)


@functools.cache
def _batch(kind, setting=10, threshold=1000.0):
    """Independent transitions, one per row: ``(keys, x, step sizes, metrics)`` all batched.

    ``setting``: max_tree_depth (NUTS) or num_integration_steps (HMC)."""

    def one(key, x, eps, imm):
        state = _state(gaussian, x)
        if kind == "nuts":
            return nuts_step(
                key, state, gaussian, eps, imm, max_tree_depth=setting,
                divergence_threshold=threshold,
            )  # fmt: skip
        return hmc_step(
            key, state, gaussian, eps, imm, num_integration_steps=setting,
            divergence_threshold=threshold,
        )  # fmt: skip

    return jax.jit(jax.vmap(one))


def _run(kind, x0, eps, imm, seed, setting=10, threshold=1000.0):
    n = x0.shape[0]
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    eps = jnp.broadcast_to(jnp.asarray(eps, jnp.float32), (n,))
    imm = jnp.broadcast_to(jnp.asarray(imm, jnp.float32), (n, *np.shape(imm)))
    return _batch(kind, setting, float(threshold))(keys, jnp.asarray(x0), eps, imm)


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_hmc_step_is_leapfrog_then_metropolis(metric):
    imm = METRICS[metric]
    eps, num_steps = 1.2, 6  # acceptance about 0.7
    x0 = _exact(N, 0)
    (x_new, logp, grad), info = _run("hmc", x0, eps, imm, seed=3, setting=num_steps)
    keys = jax.random.split(jax.random.PRNGKey(3), N)[:300]  # the first 300, by hand
    momenta = _momenta(keys, hamiltonian._MOMENTUM, imm)
    uniforms = np.asarray(_uniforms(keys, hamiltonian._ACCEPT))
    accepted = rejected = 0
    for i, (x, p, u) in enumerate(zip(x0.astype(np.float64), momenta, uniforms, strict=False)):
        x_end, _, h0, h1 = _np_leapfrog(x, p, eps, imm, num_steps)
        accept_prob = min(1.0, np.exp(h0 - h1))
        np.testing.assert_allclose(info["acceptance_rate"][i], accept_prob, rtol=1e-4, atol=1e-5)
        assert int(info["n_steps"][i]) == num_steps and not bool(info["diverging"][i])
        if abs(u - accept_prob) < 1e-3:
            continue  # too close to call in float32
        expected = x_end if u < accept_prob else x
        accepted, rejected = accepted + (u < accept_prob), rejected + (u >= accept_prob)
        np.testing.assert_allclose(x_new[i], expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(logp[i], -0.5 * expected @ PREC @ expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(grad[i], -PREC @ expected, rtol=1e-4, atol=1e-5)
        energy = h1 if u < accept_prob else h0
        np.testing.assert_allclose(info["energy"][i], energy, rtol=1e-4, atol=1e-5)
    assert accepted >= 100 and rejected >= 30  # both branches were checked


# -- one transition preserves the target ------------------------------------------------
def _assert_exactly_distributed(x):
    """KS tests of projections of ``x`` (n, 2) against N(0, COV), and of the Mahalanobis radius."""
    x = np.asarray(x, np.float64)
    for u in ([1.0, 0.0], [0.0, 1.0], [1.0, -1.0], [1.0, 1.0]):
        u = np.asarray(u)
        z = x @ u / np.sqrt(u @ COV @ u)
        assert scipy.stats.kstest(z, "norm").pvalue > P_MIN, u
    r2 = np.einsum("ni,ij,nj->n", x, PREC, x)
    assert scipy.stats.kstest(r2, "chi2", args=(2,)).pvalue > P_MIN


# a metric that is not the covariance; step sizes with acceptance about 0.7-0.9
TRANSITIONS = {
    "nuts_diagonal": ("nuts", 1.1, METRICS["diagonal"], {}),
    "nuts_dense": ("nuts", 1.1, METRICS["dense"], {}),
    "hmc_dense": ("hmc", 0.9, METRICS["dense"], {"setting": 3}),
}


def _check_steps(info, max_tree_depth):
    depth, steps = np.asarray(info["tree_depth"]), np.asarray(info["n_steps"])
    assert np.all((1 <= depth) & (depth <= max_tree_depth))
    assert np.all(steps <= 2**max_tree_depth - 1)
    # depth d: d - 1 complete doublings (2**(d-1) - 1 steps), then at least one more step
    assert np.all((2 ** (depth - 1) <= steps) & (steps <= 2**depth - 1))
    acceptance = np.asarray(info["acceptance_rate"])
    assert np.all((0 <= acceptance) & (acceptance <= 1))
    return depth


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_one_transition_from_exact_draws_leaves_them_exact(name):
    kind, eps, imm, settings = TRANSITIONS[name]
    x0 = _exact(N, 1)
    _assert_exactly_distributed(x0)  # the check itself is sound
    (x, _, _), info = _run(kind, x0, eps, imm, seed=2, **settings)
    moved = np.any(np.asarray(x) != x0, axis=1).mean()
    assert moved > 0.5, moved
    acceptance = float(np.mean(info["acceptance_rate"]))
    assert 0.5 < acceptance < 0.97, acceptance  # energy errors matter at this step size
    assert not np.any(np.asarray(info["diverging"]))
    _assert_exactly_distributed(x)
    if kind == "nuts":
        _check_steps(info, 10)


# -- divergences, tree depth --------------------------------------------------------
def test_a_huge_step_size_diverges_at_the_first_step_and_keeps_the_state():
    x0 = _exact(N, 3)
    logp0 = -0.5 * np.einsum("ni,ij,nj->n", x0, PREC, x0)
    (x, logp, grad), info = _run("nuts", x0, 50.0, np.ones(2), seed=0)
    assert np.all(np.asarray(info["diverging"]))
    assert np.all(np.asarray(info["n_steps"]) == 1) and np.all(np.asarray(info["tree_depth"]) == 1)
    assert np.all(np.asarray(info["acceptance_rate"]) < 1e-6)
    np.testing.assert_array_equal(x, x0)  # the divergent subtree is not a candidate
    np.testing.assert_allclose(logp, logp0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, -x0 @ PREC, rtol=1e-5, atol=1e-5)

    (x, _, _), info = _run("hmc", x0, 50.0, np.eye(2), seed=1, setting=3)
    assert np.all(np.asarray(info["diverging"]))
    np.testing.assert_array_equal(x, x0)


def test_the_divergence_threshold_is_the_energy_error_allowed():
    x0 = _exact(N, 4)

    def run(threshold):  # 2.2 is past the stability limit of the narrow direction
        return _run("nuts", x0, 2.2, METRICS["diagonal"], seed=2, threshold=threshold)[1]

    strict, lax = run(1.0), run(1000.0)
    strict_d, lax_d = np.asarray(strict["diverging"]), np.asarray(lax["diverging"])
    assert np.all(lax_d <= strict_d)  # a larger threshold flags a subset
    assert strict_d.mean() > 0.5 and 0.05 < lax_d.mean() < strict_d.mean()
    # a divergent trajectory stops: no more steps than with the larger threshold
    assert np.all(np.asarray(strict["n_steps"]) <= np.asarray(lax["n_steps"]))
    assert np.mean(np.asarray(strict["n_steps"])) < np.mean(np.asarray(lax["n_steps"]))


@pytest.mark.parametrize(
    ("max_tree_depth", "method"), [(1, "vectorized"), (4, "vectorized"), (4, "sequential")]
)
def test_steps_and_tree_depth_stay_within_their_bounds(max_tree_depth, method):
    rng = np.random.default_rng(max_tree_depth)
    eps = np.exp(rng.uniform(np.log(0.02), np.log(3.0), N)).astype(np.float32)
    x0 = _exact(N, 5)
    if method == "vectorized":
        info = _run("nuts", x0, eps, METRICS["dense"], seed=7, setting=max_tree_depth)[1]
    else:  # one chain at a time: the unbatched implementation

        def one(a):
            key, x, e = a
            return nuts_step(
                key, _state(gaussian, x), gaussian, e, jnp.asarray(METRICS["dense"]),
                max_tree_depth=max_tree_depth,
            )[1]  # fmt: skip

        keys = jax.random.split(jax.random.PRNGKey(7), 1000)
        args = (keys, jnp.asarray(x0[:1000]), jnp.asarray(eps[:1000]))
        info = jax.jit(lambda a: jax.lax.map(one, a))(args)
    depth = _check_steps(info, max_tree_depth)
    if max_tree_depth > 1:
        assert np.any(depth == max_tree_depth) and np.any(depth < max_tree_depth)


@pytest.mark.parametrize("batch", [1, 3])
def test_masked_and_looped_checks_take_the_same_trajectories(batch, monkeypatch):
    """Testing every checkpoint row at once (masked) and only the rows that close (a
    loop) are two forms of one criterion: on a 40-dim Gaussian with scales over a
    factor 4 (an identity metric: sub-trajectories turn at different lengths), 150
    transitions of one chain and of a vmap of chains take the same steps and tree
    depths, to rounding of the positions."""
    dim = 40
    scales = jnp.linspace(0.5, 2.0, dim, dtype=jnp.float32)

    def fn(x):
        return -0.5 * jnp.sum((x / scales) ** 2)

    def chain(key):
        def body(state, k):
            state, info = nuts_step(k, state, fn, 0.25, jnp.ones(dim))
            return state, (state[0], info["n_steps"], info["tree_depth"], info["diverging"])

        return jax.lax.scan(body, _state(fn, jnp.ones(dim)), jax.random.split(key, 150))[1]

    keys = jax.random.split(jax.random.PRNGKey(11), batch)
    runs = {}
    for masked in (True, False):
        bound = dim if masked else dim - 1
        monkeypatch.setattr(hamiltonian, "_MASKED_MAX_DIM", bound)
        monkeypatch.setattr(hamiltonian, "_MASKED_MAX_DIM_BATCHED", bound)
        f = jax.vmap(chain) if batch > 1 else lambda k: chain(k[0])
        runs[masked] = jax.tree.map(np.asarray, jax.jit(f)(keys))
    (x1, *path1), (x2, *path2) = runs[True], runs[False]
    for a, b in zip(path1, path2, strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.mean(path1[1]) > 3  # tree depths: many sub-trajectories close and are tested
    np.testing.assert_allclose(x1, x2, rtol=0, atol=1e-4)


# -- whitening -------------------------------------------------------------------------
RHO = 0.99
NARROW = np.array([[1.0, RHO * 3.0], [RHO * 3.0, 9.0]])  # sds 1 and 3, correlation 0.99
NARROW_PREC = np.linalg.inv(NARROW)


def narrow(x):
    return -0.5 * x @ jnp.asarray(NARROW_PREC, jnp.float32) @ x


@functools.cache
def _narrow_chain(eps, dense):
    imm = jnp.asarray(NARROW if dense else np.diag(NARROW), jnp.float32)

    def chain(key, x0):
        def body(state, k):
            state, info = nuts_step(k, state, narrow, eps, imm)
            return state, (state[0], info["n_steps"])

        return jax.lax.scan(body, _state(narrow, x0), jax.random.split(key, 1000))[1]

    return jax.jit(chain)


def test_a_dense_metric_equal_to_the_covariance_gives_near_independent_draws():
    x0 = jnp.asarray(_exact(1, 6, NARROW)[0])
    draws, steps = _narrow_chain(1.0, True)(jax.random.PRNGKey(0), x0)
    draws = np.asarray(draws, np.float64)
    for k in range(2):
        ess = float(az.ess(draws[None, :, k]))
        assert ess > 0.5 * len(draws), (k, ess)
    assert np.mean(np.asarray(steps)) < 8  # an isotropic target: short trajectories
    # the same target with its diagonal only: stable only with small steps, long trees
    diag_draws, diag_steps = _narrow_chain(0.1, False)(jax.random.PRNGKey(0), x0)
    assert np.mean(np.asarray(diag_steps)) > 3 * np.mean(np.asarray(steps))
    diag_ess = float(az.ess(np.asarray(diag_draws, np.float64)[None, :, 0]))
    assert diag_ess < 0.5 * len(draws), diag_ess  # and still correlated draws


# -- the step-size search -------------------------------------------------------------
TARGET = 0.8


def _replay(key, x0, eps0, imm, num_trials):
    """Acceptances exp(H0 - H) of the trials, one leapfrog step each, in NumPy."""
    direction = None
    eps, out = eps0, []
    for i in range(num_trials):
        p = _momenta(key[None], hamiltonian._TRIAL + i, imm)[0]
        _, _, h0, h1 = _np_leapfrog(x0, p, eps, imm, 1)
        out.append((eps, np.exp(min(h0 - h1, 700.0)) if np.isfinite(h1) else 0.0))
        if direction is None:
            direction = 2.0 if out[0][1] > TARGET else 0.5
        eps *= direction
    return out


@functools.cache
def _search(max_iterations=100):
    return jax.jit(lambda k, s, e, m: find_step_size(k, s, gaussian, e, m, TARGET, max_iterations))


@pytest.mark.parametrize("metric", sorted(METRICS))
@pytest.mark.parametrize("eps0", [1e-4, 0.3, 1.0, 1e3])
def test_find_step_size_stops_where_the_acceptance_first_crosses_the_target(metric, eps0):
    imm = METRICS[metric]
    checked = 0
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        x0 = _exact(1, 10 + seed)[0]
        eps, n = _search()(key, _state(gaussian, jnp.asarray(x0)), eps0, jnp.asarray(imm))
        eps, n = float(eps), int(n)
        trials = _replay(key, x0.astype(np.float64), eps0, imm, n)
        accept = [a for _, a in trials]
        if any(abs(a - TARGET) < 1e-3 for a in accept):
            continue  # too close to call in float32
        assert n >= 2
        np.testing.assert_allclose(eps, trials[-1][0], rtol=1e-6)  # the last trial's size
        above = accept[0] > TARGET
        assert all((a > TARGET) == above for a in accept[:-1]), accept  # not crossed before
        assert (accept[-1] > TARGET) != above, accept  # crossed at the last trial
        if eps0 == 1e-4:
            assert above and eps > eps0
        if eps0 == 1e3:
            assert not above and eps < eps0
        checked += 1
    assert checked >= 2


def test_find_step_size_limits():
    x0 = jnp.asarray([0.3, -0.2], jnp.float32)
    key = jax.random.PRNGKey(0)
    # at most max_iterations trials: from 1e-6, always accepted, three trials double twice
    eps, n = _search(3)(key, _state(gaussian, x0), 1e-6, jnp.ones(2))
    assert int(n) == 3
    np.testing.assert_allclose(float(eps), 4e-6, rtol=1e-6)
    # a flat density accepts every step: doubling stops at the first size of at least 1e7
    flat = jax.jit(lambda k, s: find_step_size(k, s, lambda x: 0.0 * jnp.sum(x), 1.0, jnp.ones(2)))
    eps, n = flat(key, (x0, jnp.float32(0.0), jnp.zeros(2)))
    assert float(eps) == 2.0**24 and int(n) == 25
