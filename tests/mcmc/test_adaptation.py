"""Window adaptation: the schedule, the metric estimators, dual averaging, and whole warmups.

The whole-warmup tests drive the adaptation the way the engine's warmup step
does (kernel step, adaptation update, step-size search at window ends), in
one ``jit(lax.scan)`` per chain, and feed it kernel states (positions and
gradients) or positions only.
"""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.mcmc.adaptation import window_adaptation, window_schedule
from sluice.mcmc.kernels import KernelParams, KernelState

Z = 4.5


def _ends(schedule):
    return [int(e) for e in schedule.window_ends if e >= 0]


@pytest.mark.parametrize(
    ("num_warmup", "buffers", "start", "end", "ends"),
    [
        (1000, (), 10, 850, [19, 39, 79, 159, 319, 849]),  # terminal buffer: 15%
        (1000, (10, 10, 50), 10, 950, [19, 39, 79, 159, 319, 949]),
        (1000, (75, 25, 50), 75, 950, [99, 149, 249, 449, 949]),  # Stan's windows
        (150, (), 10, 100, [19, 39, 99]),
        (60, (), 9, 54, [53]),  # buffers do not fit: 15 % / 75 % / 10 %
        (19, (), 19, 19, []),  # too short: step size only
    ],
)
def test_window_schedule(num_warmup, buffers, start, end, ends):
    schedule = window_schedule(num_warmup, *buffers)
    assert (int(schedule.slow_start), int(schedule.slow_end)) == (start, end)
    assert _ends(schedule) == ends
    if ends:  # windows tile the slow phase, each at least as long as the one before
        lengths = np.diff([start - 1, *ends])
        assert ends[-1] == end - 1 and np.all(np.diff(lengths[:-1]) >= 0)


def _feed(adapt, points, schedule, acceptance=0.8):
    """Update the adaptation with ``points`` (kernel states or positions), one per iteration."""
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *points)

    def step(state, tp):
        t, point = tp
        return adapt.update(state, t, schedule, point, jnp.float32(acceptance))[0], None

    state = adapt.init(points[0], 0.5)
    return jax.jit(lambda s: jax.lax.scan(step, s, (jnp.arange(len(points)), stacked))[0])(state)


def test_gradient_metric_is_exact_for_a_gaussian_even_from_transient_draws():
    """sqrt(var(x) / var(g)) = sigma^2 for g = -(x - mu) / sigma^2, whatever the draws."""
    sigma = np.array([0.1, 1.0, 30.0], np.float32)
    mu = np.array([5.0, -1.0, 0.0], np.float32)
    # a drifting, non-stationary sequence (as early warmup draws are)
    t = np.arange(30, dtype=np.float32)[:, None]
    xs = mu + sigma * (0.1 * t + np.sin(t * np.array([1.0, 2.3, 0.7], np.float32)))
    points = [
        KernelState(jnp.asarray(x), jnp.float32(0.0), jnp.asarray(-(x - mu) / sigma**2)) for x in xs
    ]
    schedule = window_schedule(1000)  # first window: iterations 10..19
    state = _feed(window_adaptation(), points, schedule)
    n = 10
    expected = n / (n + 5) * sigma**2 + 1e-3 * 5 / (n + 5)
    np.testing.assert_allclose(state.inverse_mass_matrix, expected, rtol=1e-4)
    # with the gradient estimator off (or positions only), the window's variance (Stan)
    window = xs[10:20]
    stan = n / (n + 5) * window.var(0, ddof=1) + 1e-3 * 5 / (n + 5)
    off = _feed(window_adaptation(gradient_metric=False), points, schedule)
    np.testing.assert_allclose(off.inverse_mass_matrix, stan, rtol=1e-4)
    positions = _feed(window_adaptation(), [p.position for p in points], schedule)
    np.testing.assert_allclose(positions.inverse_mass_matrix, stan, rtol=1e-4)


def test_last_window_takes_the_variance_and_earlier_ones_the_fisher_diagonal():
    """The draws are made with the last window's metric: the draws' variance there (Stan's),
    which a heavy tail or a funnel's neck cannot shrink as it does the Fisher diagonal."""
    rng = np.random.default_rng(1)
    sigma = np.array([0.5, 2.0], np.float32)
    xs = (sigma * rng.standard_t(3, size=(60, 2))).astype(np.float32)  # heavy tails
    grads = -xs / sigma**2  # a Gaussian's gradients: the Fisher diagonal is sigma^2 exactly
    points = [
        KernelState(jnp.asarray(x), jnp.float32(0.0), jnp.asarray(g))
        for x, g in zip(xs, grads, strict=True)
    ]
    schedule = window_schedule(60)  # one window, iterations 9..53: the last
    n = 45
    stan = n / (n + 5) * xs[9:54].var(0, ddof=1) + 1e-3 * 5 / (n + 5)
    fisher = n / (n + 5) * np.sqrt(xs[9:54].var(0) / grads[9:54].var(0)) + 1e-3 * 5 / (n + 5)
    state = _feed(window_adaptation(), points, schedule)
    np.testing.assert_allclose(state.inverse_mass_matrix, stan, rtol=1e-4)
    kept = _feed(window_adaptation(final_variance=False), points, schedule)
    np.testing.assert_allclose(kept.inverse_mass_matrix, fisher, rtol=1e-4)


ROTATION = np.array([[1.0, -1.0], [1.0, 1.0]]) / np.sqrt(2.0)  # 45 degrees


def _rotated(w, grad_w):
    """Draws and gradients of a posterior in ``w`` seen through :data:`ROTATION`."""
    r = ROTATION.astype(np.float32)
    return w @ r.T, grad_w @ r.T  # x = R w; grad_x = R^{-T} grad_w = R grad_w


def _low_rank_last_window(xs, grads):
    points = [
        KernelState(jnp.asarray(x), jnp.float32(0.0), jnp.asarray(g))
        for x, g in zip(xs, grads, strict=True)
    ]
    schedule = window_schedule(60)  # one window, iterations 9..53: the last
    return _feed(window_adaptation(low_rank=2), points, schedule).inverse_mass_matrix


def test_a_low_rank_fit_far_from_gaussian_gives_way_to_the_variance_in_the_last_window():
    """A kept direction along which the gradient is not linear in the position (here a
    Cauchy coordinate's) makes the last window's metric the draws' variance, as
    mass_matrix="diag" has it; a Gaussian's keeps its fitted directions."""
    rng = np.random.default_rng(3)
    n = 45
    w = np.stack([10.0 * rng.standard_cauchy(60), rng.normal(size=60)], 1).astype(np.float32)
    grad_w = np.stack([-2.0 * w[:, 0] / (100.0 + w[:, 0] ** 2), -w[:, 1]], 1)
    xs, grads = _rotated(w, grad_w.astype(np.float32))
    # the independent check of the premise: along the Cauchy axis the gradient is far
    # from linear in the position (numpy's correlation of the window's draws)
    assert np.corrcoef(w[9:54, 0], grad_w[9:54, 0])[0, 1] ** 2 < 0.25
    stan = n / (n + 5) * xs[9:54].var(0, ddof=1) + 1e-3 * 5 / (n + 5)
    heavy = _low_rank_last_window(xs, grads)
    np.testing.assert_allclose(heavy.diagonal, stan, rtol=1e-4)
    np.testing.assert_array_equal(heavy.values, 1.0)  # no direction kept

    w = (np.array([10.0, 1.0], np.float32) * rng.normal(size=(60, 2))).astype(np.float32)
    xs, grads = _rotated(w, -w / np.array([100.0, 1.0], np.float32))
    fisher = n / (n + 5) * np.sqrt(xs[9:54].var(0) / grads[9:54].var(0)) + 1e-3 * 5 / (n + 5)
    gaussian = _low_rank_last_window(xs, grads)
    np.testing.assert_allclose(gaussian.diagonal, fisher, rtol=1e-4)
    assert np.any(np.asarray(gaussian.values) != 1.0)
    # the fitted metric is the Gaussian's covariance R diag(100, 1) R'
    expected = ROTATION @ np.diag([100.0, 1.0]) @ ROTATION.T
    np.testing.assert_allclose(gaussian.dense(), expected, rtol=0.02)


def test_dense_metric_is_the_window_covariance():
    rng = np.random.default_rng(0)
    xs = rng.multivariate_normal(np.zeros(3), [[1, 0.5, 0], [0.5, 2, 0.3], [0, 0.3, 1]], 30)
    xs = xs.astype(np.float32)
    state = _feed(window_adaptation(dense_mass=True), list(jnp.asarray(xs)), window_schedule(1000))
    n = 10
    expected = n / (n + 5) * np.cov(xs[10:20].T) + 1e-3 * 5 / (n + 5) * np.eye(3)
    np.testing.assert_allclose(state.inverse_mass_matrix, expected, rtol=1e-4, atol=1e-6)


def test_dual_averaging_finds_the_target_acceptance():
    adapt = window_adaptation(target_accept=0.8)
    schedule = window_schedule(0)
    state = adapt.init(jnp.zeros(2), 1.0)

    def step(state, t):
        eps, _ = adapt.params(state)
        acceptance = jnp.exp(-eps)  # decreasing in the step size; 0.8 at eps = -log 0.8
        return adapt.update(state, t, schedule, jnp.zeros(2), acceptance)[0], None

    state, _ = jax.lax.scan(step, state, jnp.arange(2000))
    eps, _ = adapt.final(state)
    assert abs(float(eps) + np.log(0.8)) < 0.02


# -- whole warmups ----------------------------------------------------------------
def _warmup(fn, x0, num_warmup, key, buffers=(), feed="state", kernel=None):
    """One chain's warmup as the engine runs it; returns (kernel state, params, gradients).

    ``key`` may have a leading chain axis (then the chains are vmapped).
    """
    kernel = kernel or sluice.nuts(mass_matrix="diag")  # the diagonal estimators under test
    adapt = kernel.adaptation()
    schedule = window_schedule(num_warmup, *buffers)

    def as_point(kstate):
        return kstate if feed == "state" else kstate.position

    def run(key):
        kstate = kernel.init(x0, fn)
        astate = adapt.init(as_point(kstate), kernel.initial_step_size)
        eps, n0 = kernel.find_step_size(
            jax.random.fold_in(key, 2**30), kstate, fn, KernelParams(*adapt.params(astate))
        )
        astate = adapt.restart(astate, eps)

        def body(carry, i):
            kstate, astate, grads = carry
            key_i, aux = jax.random.split(jax.random.fold_in(key, i))
            kstate, stats = kernel.step(key_i, kstate, fn, KernelParams(*adapt.params(astate)))
            astate, ended = adapt.update(
                astate, i, schedule, as_point(kstate), stats["acceptance_rate"]
            )

            def new_step_size(a):
                e, n = kernel.find_step_size(aux, kstate, fn, KernelParams(*adapt.params(a)))
                return adapt.restart(a, e), n

            astate, extra = jax.lax.cond(ended, new_step_size, lambda a: (a, jnp.int32(0)), astate)
            return (kstate, astate, grads + stats["n_steps"] + extra), None

        (kstate, astate, grads), _ = jax.lax.scan(
            body, (kstate, astate, n0 + 1), jnp.arange(num_warmup)
        )
        return kstate, KernelParams(*adapt.final(astate)), grads

    return jax.jit(run if key.ndim == 1 else jax.vmap(run))(key)


def _badly_scaled(dim, seed=0):
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.uniform(np.log(0.1), np.log(10.0), dim)).astype(np.float32)
    return scales, lambda x: -0.5 * jnp.sum((x / scales) ** 2)


def test_warmup_with_gradients_finds_the_metric_with_fewer_gradients_than_stans_windows():
    scales, fn = _badly_scaled(200)
    x0 = jnp.zeros(200)
    ours = _warmup(fn, x0, 400, jax.random.PRNGKey(0))
    stan = _warmup(fn, x0, 400, jax.random.PRNGKey(0), buffers=(75, 25, 50), feed="position")
    # the gradient estimator is exact on a Gaussian: the early windows' metrics are the
    # variances, so the chain reaches its typical set with far fewer gradients
    assert int(ours[2]) < 0.6 * int(stan[2]), (int(ours[2]), int(stan[2]))
    # the last window's metric is the variance of its draws (Stan's) and as rough as
    # Stan's: a log error of sqrt(2 / ESS) per element, ~0.1 for ~200 effective draws
    error = np.abs(np.log(np.asarray(ours[1].inverse_mass_matrix) / scales**2))
    assert np.median(error) < 0.2 and error.max() < 0.6, (np.median(error), error.max())


@pytest.mark.parametrize("feed", ["state", "position"])
def test_posterior_after_warmup_is_right(feed):
    """Warmup (either feed) then sampling recovers a badly scaled and skewed posterior."""
    scales = np.array([0.05, 1.0, 20.0], np.float32)

    def fn(x):  # two Gaussians and z = log(lam), lam ~ Gamma(3, rate 2)
        return -0.5 * jnp.sum((x[:2] / scales[:2]) ** 2) + 3.0 * x[2] - 2.0 * jnp.exp(x[2])

    kernel = sluice.nuts()
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    kstate, params, _ = _warmup(fn, jnp.zeros(3), 300, keys, feed=feed)

    def sample(kstate, key, params):
        def body(s, k):
            s, _ = kernel.step(k, s, fn, params)
            return s, s.position

        return jax.lax.scan(body, kstate, jax.random.split(key, 1000))[1]

    draws = jax.jit(jax.vmap(sample))(kstate, jax.random.split(jax.random.PRNGKey(1), 4), params)
    draws = np.asarray(draws, np.float64)
    values = {
        "x0": (draws[..., 0], 0.0, 0.05),
        "x1": (draws[..., 1], 0.0, 1.0),
        "lam": (np.exp(draws[..., 2]), 1.5, np.sqrt(3.0) / 2.0),
    }
    for name, (x, mean, sd) in values.items():
        assert abs(x.mean() - mean) <= Z * float(az.mcse(x, method="mean")), name
        assert abs(x.std(ddof=1) - sd) <= Z * float(az.mcse(x, method="sd")), name
        assert float(az.rhat(x)) < 1.01, name


def test_divergences_at_the_settled_step_raise_the_terminal_buffers_target():
    """A divergence counts in a slow window after the dual averaging's first SETTLE
    iterations and at a step no larger than its average; the last window's end raises
    the target where the run's count is positive, no other window's end does, and the
    count starts again at each window's end."""
    from sluice.mcmc.adaptation import SETTLE

    schedule = window_schedule(1000)  # slow windows 10-849, the last from 320
    adapt = window_adaptation(target_accept=0.8, divergent_target_accept=0.95)
    state = adapt.init(jnp.zeros(2), 0.5)._replace(
        da_count=jnp.int32(SETTLE), log_step_size=jnp.float32(-2.0)
    )
    settled = state._replace(log_step_size_avg=jnp.float32(-1.9))  # the step below its average

    def count(state, t=500, diverging=True):
        new, _ = adapt.update(state, t, schedule, jnp.zeros(2), jnp.float32(0.5),
                              end_windows=False, diverging=diverging)  # fmt: skip
        return int(new.divergences) - int(state.divergences)

    assert count(settled) == 1
    assert count(settled, diverging=False) == 0
    assert count(settled, t=900) == 0  # the terminal buffer
    assert count(settled, t=5) == 0  # the initial buffer
    assert count(settled._replace(da_count=jnp.int32(SETTLE - 1))) == 0  # not settled yet
    assert count(settled._replace(log_step_size_avg=jnp.float32(-2.1))) == 0  # a larger step

    def target(state, t, run_divergences, adapt=adapt):
        new, ended = adapt.end_window(state, t, schedule, run_divergences)
        assert bool(ended) and int(new.divergences) == 0
        return float(new.target_accept)

    state = settled._replace(divergences=jnp.int32(3))
    assert target(state, 849, 3) == pytest.approx(0.95)
    assert target(state, 849, 0) == pytest.approx(0.8)  # no chain of the run diverged
    assert target(state, 319, 3) == pytest.approx(0.8)  # not the last window
    off = window_adaptation(target_accept=0.8)
    assert target(state, 849, 3, off) == pytest.approx(0.8)
    higher = window_adaptation(target_accept=0.97, divergent_target_accept=0.95)
    assert target(higher.init(jnp.zeros(2), 0.5), 849, 3, higher) == pytest.approx(0.97)


def test_a_raised_target_is_the_dual_averagings():
    """After the raise, dual averaging settles where the acceptance meets 0.95."""
    adapt = window_adaptation(target_accept=0.8, divergent_target_accept=0.95)
    schedule = window_schedule(0)
    state = adapt.init(jnp.zeros(2), 1.0)._replace(target_accept=jnp.float32(0.95))

    def step(state, t):
        eps, _ = adapt.params(state)
        return adapt.update(state, t, schedule, jnp.zeros(2), jnp.exp(-eps))[0], None

    state, _ = jax.lax.scan(step, state, jnp.arange(2000))
    eps, _ = adapt.final(state)
    assert abs(float(eps) + np.log(0.95)) < 0.01
