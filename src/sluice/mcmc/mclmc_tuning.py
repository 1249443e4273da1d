"""MCLMC's tuner one iteration at a time, as a :class:`~sluice.mcmc.kernel.Warmup`.

The rule is the first two stages of Robnik, De Luca, Silverstein & Seljak
(2023) as BlackJAX's ``mclmc_find_L_and_step_size`` runs them, rewritten to
advance with the chunk engine's warmup iterations rather than as one scan:

* stage 1 (the first 3/7 of the warmup): the step size ``eps`` from the
  energy error ``dE`` of each step. MCLMC's energy error per dimension has
  variance ``Var[dE] / d ~ eps^6``; each step gives the estimate
  ``xi = dE^2 / (d * v)`` of the ratio to the target ``v`` (``desired_energy_var``,
  5e-4), weighted by ``w = exp(-(log xi / 9)^2 / 2)`` (estimates far from the
  target count less), and ``eps = (sum w xi / eps^6 / sum w)^(-1/6)`` over an
  exponentially decaying window of ~150 steps;
* stage 2 (the next 3/7): the same, and the draws' variances, weighted by the
  step size; at its end the inverse mass matrix becomes the variances and
  ``L = sqrt(d)`` (or, with a given mass matrix, ``L = sqrt(sum var)``);
* the last 1/7 re-tunes the step size for the new metric, as BlackJAX does
  after its diagonal preconditioning.

A step with a non-finite energy error is refused by the kernel and caps the
step size at 0.8 times the current one. BlackJAX's third stage (``L`` from
the effective sample size of stored draws) needs the draws of a whole stage
at once and is not run.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.mcmc.kernel import Warmup

__all__ = ["MCLMCTuning", "schedule", "warmup"]

DESIRED_ENERGY_VAR = 5e-4
TRUST_IN_ESTIMATE = 1.5
NUM_EFFECTIVE_SAMPLES = 150


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


def schedule(num_warmup: int) -> np.ndarray:
    """``[end of stage 1, end of stage 2]`` for a warmup of ``num_warmup`` iterations."""
    return np.asarray([round(3 * num_warmup / 7), round(6 * num_warmup / 7)], np.int32)


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
        )
        return state, jnp.int32(0)

    def update(rng_key, state, iteration, schedule, kstate, stats, logdensity_fn):
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
        return jax.lax.cond(ends, precondition, lambda s: s, state), jnp.int32(0)

    def params(state: MCLMCTuning) -> dict[str, Any]:
        out = dict(fixed)
        for name in tuned:
            out[name] = getattr(state, name)
        return out

    return Warmup(schedule, init, update, params, params)
