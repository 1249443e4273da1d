"""Stan-style window adaptation of step size and mass matrix, as pure functions.

The schedule (Stan's, as in the Stan reference manual §15.2): an initial fast
buffer (step size only), slow windows that double in length (step size and
mass matrix; the mass matrix is re-estimated and the step size re-initialised
at the end of each), and a terminal fast buffer. Defaults 75 / 25 / 50; when
they do not fit, 15 % / 75 % / 10 %; under 20 warmup steps only the step size
is adapted.

Everything here is written for one chain and one warmup step so that the
engine can scan over steps in chunks and batch over chains. The schedule is a
function of the absolute step index ``t`` and a small fixed-size array of
window ends, so a warmup of any length compiles once.

References
----------
Hoffman & Gelman (2014), "The No-U-Turn Sampler", §3.2 (dual averaging).
Stan Development Team, Stan Reference Manual, "HMC algorithm parameters".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "AdaptationState",
    "Schedule",
    "WindowAdaptation",
    "window_schedule",
]

MAX_WINDOWS = 32


class Schedule(NamedTuple):
    """Where the slow windows are, as arrays (so a new warmup length does not recompile)."""

    slow_start: jax.Array  # () int32: first step of the first slow window
    slow_end: jax.Array  # () int32: one past the last step of the last slow window
    window_ends: jax.Array  # (MAX_WINDOWS,) int32: last step of each slow window, -1 padded


def window_schedule(
    num_warmup: int, initial_buffer: int = 75, first_window: int = 25, final_buffer: int = 50
) -> Schedule:
    """Stan's adaptation windows for ``num_warmup`` steps."""
    ends: list[int] = []
    if num_warmup < 20:
        start = end = num_warmup
    else:
        if initial_buffer + first_window + final_buffer > num_warmup:
            initial_buffer = int(0.15 * num_warmup)
            final_buffer = int(0.1 * num_warmup)
            first_window = num_warmup - initial_buffer - final_buffer
        start, end = initial_buffer, num_warmup - final_buffer
        # As Stan's windowed_adaptation::compute_next_window: windows double,
        # and one is stretched to the terminal buffer when the window after
        # it would not fit.
        window = first_window
        ends.append(start + window - 1)
        while ends[-1] != end - 1:
            window *= 2
            last = ends[-1] + window
            if last != end - 1 and last + 2 * window >= end:
                last = end - 1
            ends.append(last)
    if len(ends) > MAX_WINDOWS:  # pragma: no cover - needs > 2**32 steps
        raise ValueError(f"num_warmup={num_warmup} needs more than {MAX_WINDOWS} windows")
    padded = np.full(MAX_WINDOWS, -1, np.int32)
    padded[: len(ends)] = ends
    return Schedule(jnp.int32(start), jnp.int32(end), jnp.asarray(padded))


class AdaptationState(NamedTuple):
    """Window adaptation state of one chain."""

    log_step_size: jax.Array  # () float: step size used at the next step
    log_step_size_avg: jax.Array  # () float: dual-averaging iterate average
    da_count: jax.Array  # () int32: dual-averaging iterations since the last restart
    avg_error: jax.Array  # () float: running mean of target_accept - acceptance
    mu: jax.Array  # () float: shrinkage point log(10 * step_size0)
    count: jax.Array  # () int32: draws in the current slow window
    mean: jax.Array  # (dim,) float: Welford mean of the current window
    m2: jax.Array  # (dim,) or (dim, dim) float: Welford sum of squares / co-moments
    inverse_mass_matrix: jax.Array  # (dim,) or (dim, dim) float: metric in use


class WindowAdaptation(NamedTuple):
    """Dual averaging for the step size, windowed Welford for the metric.

    ``init(position, step_size) -> state``;
    ``update(state, t, schedule, position, acceptance_rate) -> (state, window_ended)``;
    ``restart(state, step_size) -> state`` after a window end (new step size);
    ``params(state) -> (step_size, inverse_mass_matrix)`` to use at the next step;
    ``final(state) -> (step_size, inverse_mass_matrix)`` for sampling.
    """

    init: Callable
    update: Callable
    restart: Callable
    params: Callable
    final: Callable


def window_adaptation(
    target_accept: float = 0.8,
    dense_mass: bool = False,
    t0: float = 10.0,
    gamma: float = 0.05,
    kappa: float = 0.75,
) -> WindowAdaptation:
    """Stan's window adaptation for one chain (see the module docstring)."""

    def init(position: jax.Array, step_size: jax.Array) -> AdaptationState:
        dim = position.shape[0]
        dtype = position.dtype
        eye = jnp.ones(dim, dtype) if not dense_mass else jnp.eye(dim, dtype=dtype)
        log_eps = jnp.log(jnp.asarray(step_size, dtype))
        return AdaptationState(
            log_step_size=log_eps,
            log_step_size_avg=jnp.zeros((), dtype),
            da_count=jnp.int32(0),
            avg_error=jnp.zeros((), dtype),
            mu=jnp.log(10.0).astype(dtype) + log_eps,
            count=jnp.int32(0),
            mean=jnp.zeros(dim, dtype),
            m2=jnp.zeros_like(eye),
            inverse_mass_matrix=eye,
        )

    def _dual_averaging(state: AdaptationState, acceptance_rate: jax.Array) -> AdaptationState:
        dtype = state.log_step_size.dtype
        acceptance_rate = jnp.where(jnp.isfinite(acceptance_rate), acceptance_rate, 0.0)
        count = state.da_count + 1
        n = count.astype(dtype)
        eta = 1.0 / (n + t0)
        avg_error = (1.0 - eta) * state.avg_error + eta * (target_accept - acceptance_rate)
        log_eps = state.mu - jnp.sqrt(n) / gamma * avg_error
        weight = n ** (-kappa)
        log_eps_avg = weight * log_eps + (1.0 - weight) * state.log_step_size_avg
        return state._replace(
            log_step_size=log_eps.astype(dtype),
            log_step_size_avg=log_eps_avg.astype(dtype),
            da_count=count,
            avg_error=avg_error.astype(dtype),
        )

    def _welford(state: AdaptationState, position: jax.Array) -> AdaptationState:
        count = state.count + 1
        delta = position - state.mean
        mean = state.mean + delta / count.astype(position.dtype)
        if dense_mass:
            m2 = state.m2 + jnp.outer(position - mean, delta)
        else:
            m2 = state.m2 + delta * (position - mean)
        return state._replace(count=count, mean=mean, m2=m2)

    def _end_window(state: AdaptationState) -> AdaptationState:
        n = state.count.astype(state.mean.dtype)
        covariance = state.m2 / jnp.maximum(n - 1.0, 1.0)
        # Stan's regularisation: shrink towards 1e-3 * I with weight 5 / (n + 5).
        shrunk = (n / (n + 5.0)) * covariance
        if dense_mass:
            shrunk = shrunk + 1e-3 * (5.0 / (n + 5.0)) * jnp.eye(
                state.mean.shape[0], dtype=shrunk.dtype
            )
        else:
            shrunk = shrunk + 1e-3 * (5.0 / (n + 5.0))
        return state._replace(
            count=jnp.int32(0),
            mean=jnp.zeros_like(state.mean),
            m2=jnp.zeros_like(state.m2),
            inverse_mass_matrix=shrunk.astype(state.mean.dtype),
        )

    def update(
        state: AdaptationState,
        t: jax.Array,
        schedule: Schedule,
        position: jax.Array,
        acceptance_rate: jax.Array,
    ) -> tuple[AdaptationState, jax.Array]:
        state = _dual_averaging(state, acceptance_rate)
        in_slow = (t >= schedule.slow_start) & (t < schedule.slow_end)
        state = jax.lax.cond(in_slow, _welford, lambda s, _: s, state, position)
        window_ended = jnp.any(t == schedule.window_ends)
        state = jax.lax.cond(window_ended, _end_window, lambda s: s, state)
        return state, window_ended

    def restart(state: AdaptationState, step_size: jax.Array) -> AdaptationState:
        log_eps = jnp.log(step_size).astype(state.log_step_size.dtype)
        return state._replace(
            log_step_size=log_eps,
            log_step_size_avg=jnp.zeros_like(log_eps),
            da_count=jnp.int32(0),
            avg_error=jnp.zeros_like(log_eps),
            mu=jnp.log(10.0).astype(log_eps.dtype) + log_eps,
        )

    def params(state: AdaptationState) -> tuple[jax.Array, jax.Array]:
        return jnp.exp(state.log_step_size), state.inverse_mass_matrix

    def final(state: AdaptationState) -> tuple[jax.Array, jax.Array]:
        # Before any dual-averaging step the average is undefined: keep the current size.
        log_eps = jnp.where(state.da_count > 0, state.log_step_size_avg, state.log_step_size)
        return jnp.exp(log_eps), state.inverse_mass_matrix

    return WindowAdaptation(init, update, restart, params, final)
