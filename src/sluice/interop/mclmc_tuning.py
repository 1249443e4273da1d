"""MCLMC's tuner one iteration at a time, as a :class:`~sluice.mcmc.protocol.Warmup`.

The three stages of Robnik, De Luca, Silverstein & Seljak (2023) as BlackJAX's
``mclmc_find_L_and_step_size`` runs them, advanced by the chunk engine's warmup
iterations rather than as three scans, stage 3 streaming autocovariances
(:class:`Autocovariances`) instead of storing draws. docs/kernels.md
("BlackJAX") gives the schedule and the estimators.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.mcmc.protocol import Warmup

__all__ = ["MCLMCTuning", "schedule", "warmup"]

DESIRED_ENERGY_VAR = 5e-4
TRUST_IN_ESTIMATE = 1.5
NUM_EFFECTIVE_SAMPLES = 150
L_FACTOR = 0.4  # BlackJAX's l_factor: L = L_FACTOR * eps * tau
LAGS = 64  # stage 3's autocovariance lags


class MCLMCTuning(NamedTuple):
    L: jax.Array  # ()
    step_size: jax.Array  # ()
    inverse_mass_matrix: jax.Array  # (dim,)
    step_size_max: jax.Array  # ()
    time: jax.Array  # () decayed sum of weights
    x_average: jax.Array  # () decayed sum of weights * xi / eps^6
    weight: jax.Array  # () sum of the variance weights (stage 2)
    mean: jax.Array  # (dim,)
    m2: jax.Array  # (dim,)
    lags: Autocovariances  # stage 3


class Autocovariances(NamedTuple):
    """Stage 3's sums over the draws ``y_t = x_t - x_0`` of the stage (``t = 0..n-1``)."""

    count: jax.Array  # () int32: n
    shift: jax.Array  # (dim,) x_0
    total: jax.Array  # (dim,) sum_t y_t
    total2: jax.Array  # (dim,) sum_t y_t^2
    head: jax.Array  # (LAGS, dim) y_0 .. y_(LAGS-1)
    ring: jax.Array  # (LAGS, dim) the last LAGS draws, most recent first
    products: jax.Array  # (LAGS, dim) sum_t y_t y_(t-k), k = 1..LAGS


def schedule(num_warmup: int) -> np.ndarray:
    """``[end of stage 1, end of stage 2, start of stage 3, end of warmup]`` for a warmup
    of ``num_warmup`` iterations."""
    n = num_warmup
    return np.asarray([round(3 * n / 10), round(6 * n / 10), round(7 * n / 10), n], np.int32)


def autocovariances_init(x: jax.Array) -> Autocovariances:
    zeros = jnp.zeros((LAGS, x.shape[0]), x.dtype)
    return Autocovariances(jnp.int32(0), x, jnp.zeros_like(x), jnp.zeros_like(x), zeros, zeros,
                           zeros)  # fmt: skip


def autocovariances_add(a: Autocovariances, x: jax.Array) -> Autocovariances:
    """``a`` after the stage's next draw ``x``."""
    shift = jnp.where(a.count == 0, x, a.shift)
    y = x - shift
    seen = (jnp.arange(LAGS) < a.count).astype(x.dtype)[:, None]  # ring[k-1] is y_(t-k)
    row = jnp.minimum(a.count, LAGS - 1)
    head = jnp.where(a.count < LAGS, jax.lax.dynamic_update_index_in_dim(a.head, y, row, 0), a.head)
    return Autocovariances(
        count=a.count + 1,
        shift=shift,
        total=a.total + y,
        total2=a.total2 + y * y,
        head=head,
        ring=jnp.concatenate([y[None], a.ring[:-1]], axis=0),
        products=a.products + seen * a.ring * y,
    )


def integrated_time(a: Autocovariances) -> jax.Array:
    """``(dim,)`` the integrated autocorrelation time of each coordinate, ``n / ESS``,
    by the rule of BlackJAX's (and Stan's) single-chain ``effective_sample_size`` over
    lags ``0..LAGS``: Geyer's initial positive sequence of pair sums, made monotone,
    with the even lag after the last positive pair; NaN for a coordinate that does
    not move."""
    dtype = a.total.dtype
    n = a.count.astype(dtype)
    k = jnp.arange(1, LAGS + 1, dtype=dtype)[:, None]
    mean = a.total / n
    first = jnp.cumsum(a.head, axis=0)  # sums of the first k draws
    last = jnp.cumsum(a.ring, axis=0)  # ... and of the last k (the ring is most recent first)
    # n acov_k = sum_(t>=k) (y_t - m)(y_(t-k) - m), with sum_(t>=k) y_t = total - first_k
    # and sum_(t<n-k) y_t = total - last_k
    acov = (a.products - mean * ((a.total - first) + (a.total - last)) + (n - k) * mean**2) / n
    acov0 = a.total2 / n - mean**2
    # rho_k = 1 - (acov0 n / (n - 1) - acov_k) / acov0, as BlackJAX has it for one chain
    rho = 1.0 - (acov0 * n / (n - 1.0) - acov) / acov0
    rho = jnp.concatenate([jnp.ones_like(acov0)[None], rho], axis=0)  # lags 0..LAGS
    rho = jnp.where(jnp.arange(LAGS + 1)[:, None] < a.count, rho, 0.0)  # lags the stage had
    even, odd = rho[0::2], rho[1::2]  # (LAGS/2 + 1, dim), (LAGS/2, dim)
    positive = jnp.cumprod(even[:-1] + odd > 0, axis=0).astype(bool)  # up to the first pair <= 0
    after = jnp.sum(positive, axis=0)  # the even lag after the last positive pair
    at_after = jnp.arange(even.shape[0])[:, None] == after
    keep_even = jnp.concatenate([positive, jnp.zeros_like(positive[:1])]) | (at_after & (even > 0))
    even = jnp.where(keep_even, even, 0.0)
    odd = jnp.concatenate([jnp.where(positive, odd, 0.0), jnp.zeros_like(odd[:1])])
    pair = even + odd
    running = jax.lax.cummin(pair, axis=0)
    previous = jnp.concatenate([pair[:1], running[:-1]])
    lowered = pair > previous  # monotone: a pair above the running minimum takes it
    even = jnp.where(lowered, running / 2, even)
    odd = jnp.where(lowered, running / 2, odd)
    tau = -1.0 + 2.0 * jnp.sum(even + odd, axis=0) - jnp.sum(jnp.where(at_after, even, 0.0), 0)
    tau = jnp.maximum(tau, 1.0 / jnp.log10(n))
    return jnp.where(acov0 > 0, tau, jnp.nan)


def warmup(tuned: tuple[str, ...], fixed: dict[str, jax.Array]) -> Warmup:
    """The tuner of ``tuned`` (a subset of ``L``, ``step_size``,
    ``inverse_mass_matrix``); ``fixed`` holds the given arrays."""
    decay = (NUM_EFFECTIVE_SAMPLES - 1.0) / (NUM_EFFECTIVE_SAMPLES + 1.0)

    def init(rng_key, kstate, logdensity_fn):
        x = kstate.position
        dim = x.shape[0]
        zero = jnp.zeros((), x.dtype)
        imm = fixed.get("inverse_mass_matrix", jnp.ones((dim,), x.dtype))
        state = MCLMCTuning(
            L=jnp.sqrt(jnp.asarray(dim, x.dtype)),
            step_size=0.25 * jnp.sqrt(jnp.asarray(dim, x.dtype)),
            inverse_mass_matrix=jnp.asarray(imm, x.dtype),
            step_size_max=jnp.asarray(jnp.inf, x.dtype),
            time=zero,
            x_average=zero,
            weight=zero,
            mean=jnp.zeros((dim,), x.dtype),
            m2=jnp.zeros((dim,), x.dtype),
            lags=autocovariances_init(x),
        )
        return state, jnp.int32(0)

    def update(rng_key, state, iteration, schedule, kstate, stats, logdensity_fn):
        held = state
        x = kstate.position
        dim = x.shape[0]
        ok = jnp.logical_not(stats["diverging"])
        energy_change = jnp.where(ok, stats["energy_error"], 0.0)
        step_size_max = jnp.where(ok, state.step_size_max, 0.8 * state.step_size)
        xi = jnp.square(energy_change) / (dim * DESIRED_ENERGY_VAR) + 1e-8
        w = jnp.exp(-0.5 * jnp.square(jnp.log(xi) / (6.0 * TRUST_IN_ESTIMATE)))
        x_average = decay * state.x_average + w * xi / jnp.power(state.step_size, 6.0)
        time = decay * state.time + w
        step_size = jnp.minimum(jnp.power(x_average / time, -1.0 / 6.0), step_size_max)
        in_stage2 = (iteration >= schedule[0]) & (iteration < schedule[1])
        vw = jnp.where(in_stage2 & ok, state.step_size, 0.0)  # BlackJAX's weight
        weight = state.weight + vw
        delta = x - state.mean
        mean = state.mean + jnp.where(weight > 0, vw / weight, 0.0) * delta
        m2 = state.m2 + vw * delta * (x - mean)
        state = state._replace(
            step_size=step_size.astype(x.dtype),
            step_size_max=step_size_max.astype(x.dtype),
            time=time,
            x_average=x_average,
            weight=weight,
            mean=mean,
            m2=m2,
        )

        def precondition(s: MCLMCTuning) -> MCLMCTuning:
            variances = s.m2 / jnp.maximum(s.weight, jnp.finfo(x.dtype).tiny)
            if "inverse_mass_matrix" in tuned:
                s = s._replace(inverse_mass_matrix=variances, L=jnp.sqrt(jnp.asarray(dim, x.dtype)))
            else:
                s = s._replace(L=jnp.sqrt(jnp.sum(variances)))
            # the step size is re-tuned for the new metric from a fresh average
            inf = jnp.asarray(jnp.inf, x.dtype)
            return s._replace(time=jnp.zeros_like(s.time), x_average=jnp.zeros_like(s.x_average),
                              step_size_max=inf)  # fmt: skip

        ends = (iteration == schedule[1] - 1) & (state.weight > 0)
        state = jax.lax.cond(ends, precondition, lambda s: s, state)

        # stage 3: the parameters held (the step size of its first iteration), the
        # autocovariances streamed, and L set from them at the last warmup iteration
        in_stage3 = iteration >= schedule[2]
        state = state._replace(
            step_size=jnp.where(in_stage3, held.step_size, state.step_size),
            step_size_max=jnp.where(in_stage3, held.step_size_max, state.step_size_max),
        )
        lags = jax.lax.fori_loop(
            0, in_stage3.astype(jnp.int32), lambda _, a: autocovariances_add(a, x), state.lags
        )
        state = state._replace(lags=lags)

        def set_length(s: MCLMCTuning) -> MCLMCTuning:
            tau = integrated_time(s.lags)
            finite = jnp.isfinite(tau)
            mean_tau = jnp.sum(jnp.where(finite, tau, 0.0)) / jnp.maximum(jnp.sum(finite), 1)
            length = L_FACTOR * s.step_size * mean_tau
            ok = jnp.any(finite) & jnp.isfinite(length) & (length > 0)
            return s._replace(L=jnp.where(ok, length, s.L).astype(x.dtype))

        last = (iteration == schedule[3] - 1) & (state.lags.count >= 2) & ("L" in tuned)
        return jax.lax.cond(last, set_length, lambda s: s, state), jnp.int32(0)

    def params(state: MCLMCTuning) -> dict[str, Any]:
        out = dict(fixed)
        for name in tuned:
            out[name] = getattr(state, name)
        return out

    return Warmup(schedule, init, update, params, params)
