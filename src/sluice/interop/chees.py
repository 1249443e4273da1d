"""ChEES: a warmup across chains for jittered HMC (Hoffman, Radul & Sountsov 2021).

Every chain runs HMC with one step size and one trajectory length (BlackJAX's
``dynamic_hmc``), tuned at every warmup iteration over all chains of the run, so
every chain holds the same state; a warmup of any length compiles once.
docs/kernels.md ("BlackJAX") describes the updates.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.mcmc.protocol import Warmup

__all__ = ["ChEESState", "jittered_steps", "next_key", "warmup"]

TARGET_ACCEPT = 0.651
LEARNING_RATE = 0.025
CLIP = 0.35
BETA1, BETA2 = 0.9, 0.999
T0, GAMMA, KAPPA = 10.0, 0.05, 0.75  # dual averaging (Hoffman & Gelman 2014, §3.2)
MAX_STEPS = 1000  # L <= MAX_STEPS * eps


class ChEESState(NamedTuple):
    log_step_size: jax.Array
    log_step_size_avg: jax.Array  # the moving average draws use
    mu: jax.Array  # dual averaging's shrinkage point
    h_bar: jax.Array
    da_count: jax.Array  # () int32
    log_length: jax.Array
    log_length_avg: jax.Array
    adam_m: jax.Array
    adam_v: jax.Array
    count: jax.Array  # () int32: updates so far
    inverse_mass_matrix: jax.Array  # (dim,)


def jittered_steps(rng_key: jax.Array, steps: jax.Array) -> jax.Array:
    """``ceil(u * steps)``, ``u ~ U(0, 1)``: dynamic HMC's number of leapfrog steps."""
    u = jax.random.uniform(rng_key, (), jnp.float32)
    return jnp.maximum(1, jnp.ceil(u * steps)).astype(jnp.int32)


def next_key(rng_key: jax.Array) -> jax.Array:
    """The next transition's jitter key (dynamic HMC's ``next_random_arg_fn``)."""
    return jax.random.split(rng_key)[1]


def schedule(num_warmup: int) -> np.ndarray:
    """The iterations at whose end the metric is re-estimated."""
    return np.asarray([num_warmup // 4 - 1, num_warmup // 2 - 1], np.int32)


def warmup(initial_step_size: float) -> Warmup:
    """ChEES as a cross-chain :class:`Warmup` (``update`` takes the engine's ``mean``)."""

    def params(state: ChEESState) -> dict[str, Any]:
        eps = jnp.exp(state.log_step_size)
        return _params(eps, jnp.exp(state.log_length), state.inverse_mass_matrix)

    def final(state: ChEESState) -> dict[str, Any]:
        eps = jnp.exp(state.log_step_size_avg)
        return _params(eps, jnp.exp(state.log_length_avg), state.inverse_mass_matrix)

    def init(rng_key, kstate, logdensity_fn):
        x = kstate.position
        log_eps = jnp.log(jnp.asarray(initial_step_size, x.dtype))
        zero = jnp.zeros((), x.dtype)
        state = ChEESState(
            log_step_size=log_eps,
            log_step_size_avg=log_eps,
            mu=jnp.log(10.0).astype(x.dtype) + log_eps,
            h_bar=zero,
            da_count=jnp.int32(0),
            log_length=log_eps,  # one step's length to start
            log_length_avg=log_eps,
            adam_m=zero,
            adam_v=zero,
            count=jnp.int32(0),
            inverse_mass_matrix=jnp.ones_like(x),
        )
        return state, jnp.int32(0)

    def update(rng_key, state, iteration, schedule, kstate, stats, logdensity_fn, mean):
        x0, x1, p1 = stats["_initial"], stats["_proposal"], stats["_momentum"]
        dtype = x1.dtype
        accept = jnp.asarray(stats["acceptance_rate"], dtype)
        ok = jnp.logical_not(stats["diverging"]) & jnp.isfinite(accept)
        accept = jnp.where(ok, accept, 0.0)
        okf = ok.astype(dtype)
        # step size: dual averaging on the harmonic mean of the acceptance rates
        inverse = jnp.where(ok, 1.0 / jnp.maximum(accept, 1e-10), 0.0)
        harmonic = mean(okf) / jnp.maximum(mean(inverse), 1e-10)
        t = (state.da_count + 1).astype(dtype)
        h_bar = (1 - 1 / (t + T0)) * state.h_bar + (TARGET_ACCEPT - harmonic) / (t + T0)
        log_eps = state.mu - jnp.sqrt(t) / GAMMA * h_bar
        weight = t**-KAPPA
        log_eps_avg = weight * log_eps + (1 - weight) * state.log_step_size_avg
        # trajectory length: Adam ascent on ChEES, whitened by the metric
        imm = state.inverse_mass_matrix
        scale = jnp.sqrt(imm)
        w = accept * okf
        m1 = mean(w * x1) / jnp.maximum(mean(w), 1e-10)
        m0 = mean(x0)
        c1, c0 = (x1 - m1) / scale, (x0 - m0) / scale
        velocity = p1 * imm / scale
        duration = stats["n_steps"].astype(dtype) * jnp.exp(state.log_step_size)
        g = duration * (jnp.dot(c1, c1) - jnp.dot(c0, c0)) * jnp.dot(c1, velocity)
        g = jnp.where(ok, g, 0.0)
        grad = mean(w * g) / jnp.maximum(mean(w), 1e-10)
        grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
        n = (state.count + 1).astype(dtype)
        adam_m = BETA1 * state.adam_m + (1 - BETA1) * grad
        adam_v = BETA2 * state.adam_v + (1 - BETA2) * grad**2
        step = (
            LEARNING_RATE * (adam_m / (1 - BETA1**n)) / (jnp.sqrt(adam_v / (1 - BETA2**n)) + 1e-8)
        )
        log_length = state.log_length + jnp.clip(step, -CLIP, CLIP)
        avg = n**-0.5
        log_length_avg = (1 - avg) * state.log_length_avg + avg * log_length
        # L between one step and MAX_STEPS steps of the current step size
        log_length = jnp.clip(log_length, log_eps, log_eps + np.log(MAX_STEPS))
        log_length_avg = jnp.clip(log_length_avg, log_eps_avg, log_eps_avg + np.log(MAX_STEPS))
        state = ChEESState(log_eps, log_eps_avg, state.mu, h_bar, state.da_count + 1,
                           log_length, log_length_avg, adam_m, adam_v, state.count + 1,
                           imm)  # fmt: skip

        def new_metric(s: ChEESState) -> ChEESState:
            # sqrt(var x / var g) across chains: the Fisher diagonal, exact for Gaussians
            x, g = kstate.position, kstate.logdensity_grad
            var_x = mean(x * x) - mean(x) ** 2
            var_g = mean(g * g) - mean(g) ** 2
            fisher = jnp.sqrt(jnp.maximum(var_x, 0) / jnp.maximum(var_g, 1e-30))
            good = jnp.isfinite(fisher) & (fisher > 0)
            new = jnp.where(good, fisher, s.inverse_mass_matrix).astype(dtype)
            # the step size and length keep their scale relative to the new metric's
            shift = 0.5 * jnp.log(jnp.mean(new) / jnp.mean(s.inverse_mass_matrix))
            eps = s.log_step_size + shift
            return s._replace(
                inverse_mass_matrix=new,
                log_step_size=eps,
                log_step_size_avg=eps,
                mu=jnp.log(10.0).astype(dtype) + eps,
                h_bar=jnp.zeros_like(s.h_bar),
                da_count=jnp.int32(0),
                log_length=s.log_length + shift,
                log_length_avg=s.log_length_avg + shift,
            )

        ends = jnp.any(iteration == schedule)
        return jax.lax.cond(ends, new_metric, lambda s: s, state), jnp.int32(0)

    return Warmup(schedule, init, update, params, final, across_chains=True)


def _params(step_size: jax.Array, length: jax.Array, imm: jax.Array) -> dict[str, Any]:
    steps = jnp.maximum(length / step_size, 1.0)
    return {
        "step_size": step_size,
        "inverse_mass_matrix": imm,
        "integration_steps_params": (steps,),
    }
