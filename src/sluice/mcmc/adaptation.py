"""Window adaptation of step size and mass matrix (Stan's scheme, shorter early windows).

Stan's schedule with buffers of 10 / 10 / 15% of the warmup, dual averaging of
the step size, and at each window's end a new metric: the Fisher diagonal, the
draws' variance or covariance, or nutpie's low rank plus diagonal. Everything
is written for one chain and one warmup step, and a warmup of any length
compiles once. docs/architecture.md ("Kernels") gives the schedule, the
estimators and why they differ from Stan's.

References: Hoffman & Gelman (2014), JMLR 15, §3.2 (dual averaging); Stan
Reference Manual, "HMC algorithm parameters"; Seyboldt, Carlson & Carpenter
(2026), arXiv:2603.18845.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice.mcmc import metric

__all__ = [
    "AdaptationState",
    "Schedule",
    "WindowAdaptation",
    "window_schedule",
]

MAX_WINDOWS = 32
WINDOW_DRAWS = 128  # draws (and gradients) a low-rank fit uses: the last of its window
# Dual-averaging iterations after a restart before its divergences count (its first
# iterations try step sizes far from the one it settles on).
SETTLE = 50


class Schedule(NamedTuple):
    """Where the slow windows are, as arrays (so a new warmup length does not recompile)."""

    slow_start: jax.Array  # () int32: first step of the first slow window
    slow_end: jax.Array  # () int32: one past the last step of the last slow window
    window_ends: jax.Array  # (MAX_WINDOWS,) int32: last step of each slow window, -1 padded


FINAL_BUFFER_SHARE = 0.15  # the terminal buffer's share of the warmup (docs/architecture.md)
MIN_FINAL_BUFFER = 50


def window_schedule(
    num_warmup: int,
    initial_buffer: int = 10,
    first_window: int = 10,
    final_buffer: int | None = None,
) -> Schedule:
    """Adaptation windows for ``num_warmup`` steps (Stan's rule; Stan's sizes are 75 / 25 / 50).

    ``final_buffer=None``: :data:`FINAL_BUFFER_SHARE` of the warmup, at least
    :data:`MIN_FINAL_BUFFER` iterations (docs/architecture.md, "Kernels").

    Examples
    --------
    >>> s = window_schedule(1000)
    >>> int(s.slow_start), int(s.slow_end), [int(e) for e in s.window_ends if e >= 0]
    (10, 850, [19, 39, 79, 159, 319, 849])
    """
    if final_buffer is None:
        final_buffer = max(MIN_FINAL_BUFFER, int(FINAL_BUFFER_SHARE * num_warmup))
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
    return Schedule(np.int32(start), np.int32(end), padded)  # host arrays: no eager op


class AdaptationState(NamedTuple):
    """Window adaptation state of one chain."""

    log_step_size: jax.Array  # () float: step size used at the next step
    log_step_size_avg: jax.Array  # () float: dual-averaging iterate average
    da_count: jax.Array  # () int32: dual-averaging iterations since the last restart
    avg_error: jax.Array  # () float: running mean of target_accept - acceptance
    mu: jax.Array  # () float: shrinkage point log(10 * step_size0)
    target_accept: jax.Array  # () float: the dual averaging's target
    divergences: jax.Array  # () int32: divergent transitions of the current slow window
    #                         at a step no larger than the dual averaging's average,
    #                         after its first SETTLE iterations
    count: jax.Array  # () int32: draws in the current slow window
    mean: jax.Array  # (dim,) float: Welford mean of the current window
    m2: jax.Array  # (dim,) or (dim, dim) float: Welford sum of squares / co-moments
    grad_mean: jax.Array  # (dim,) float: Welford mean of the gradients (diagonal metric)
    grad_m2: jax.Array  # (dim,) float: Welford sum of squares of the gradients
    inverse_mass_matrix: Any  # (dim,), (dim, dim) or a metric.LowRank: metric in use
    window: jax.Array | None  # (WINDOW_DRAWS, 2, dim): last positions and gradients
    #                           of the window, a ring (low rank; None otherwise)


class WindowAdaptation(NamedTuple):
    """Dual averaging for the step size, windowed Welford for the metric.

    ``init(point, step_size) -> state``;
    ``update(state, t, schedule, point, acceptance_rate, end_windows=True,
    diverging=False) -> (state, window_ended)``, which with ``end_windows=False``
    leaves a window's end to ``end_window(state, t, schedule, run_divergences=0) ->
    (state, window_ended)``, called after it (the new metric; ``run_divergences``:
    ``state.divergences`` summed over the run's chains, which raises the target of
    the terminal buffer where positive);
    ``restart(state, step_size) -> state`` after a window end (new step size);
    ``params(state) -> (step_size, inverse_mass_matrix)`` to use at the next step;
    ``final(state) -> (step_size, inverse_mass_matrix)`` for sampling.

    ``point`` is the chain's kernel state (a ``KernelState``) or its position alone.
    """

    init: Callable
    update: Callable
    restart: Callable
    params: Callable
    final: Callable
    end_window: Callable


def _split(point) -> tuple[jax.Array, jax.Array | None]:
    """``(position, gradient or None)`` of a position array or a kernel state."""
    if hasattr(point, "logdensity_grad"):
        return point.position, point.logdensity_grad
    return point, None


def _dual_averaging_start(log_eps: jax.Array) -> dict[str, jax.Array]:
    """The dual averaging's fields, (re)started at the step size ``exp(log_eps)``."""
    return {
        "log_step_size": log_eps,
        "log_step_size_avg": jnp.zeros_like(log_eps),
        "da_count": jnp.int32(0),
        "avg_error": jnp.zeros_like(log_eps),
        "mu": jnp.log(10.0).astype(log_eps.dtype) + log_eps,
    }


def window_adaptation(
    target_accept: float = 0.8,
    dense_mass: bool = False,
    t0: float = 10.0,
    gamma: float = 0.05,
    kappa: float = 0.75,
    gradient_metric: bool = True,
    low_rank: int = 0,
    low_rank_max_dim: int | None = None,
    final_variance: bool = True,
    divergent_target_accept: float | None = None,
) -> WindowAdaptation:
    """Window adaptation for one chain (docs/architecture.md, "Kernels").

    ``gradient_metric=False`` keeps Stan's variance estimator even when the
    gradients are given (about the diagonal metric); ``final_variance=False``
    keeps the Fisher diagonal in the last window too, and a low-rank fit there
    however far from Gaussian (:func:`sluice.mcmc.metric.fit_low_rank`'s
    misfit). ``divergent_target_accept``: the target of the terminal buffer (at least
    ``target_accept``) after a last slow window whose chains diverged at the step
    size they were settling on (``run_divergences > 0`` at its end; docs/kernels.md,
    "Divergences in the warmup"); ``None``: ``target_accept`` throughout.
    ``low_rank=k > 0``: a low-rank plus diagonal metric with at most
    ``k`` directions (needs the gradients). ``low_rank_max_dim`` makes it a preference
    (``mass_matrix="auto"``): a position of more elements, or of one, or a point
    given without its gradient, takes the diagonal (``state.window`` is then ``None``).
    """
    if low_rank and (dense_mass or not gradient_metric):
        raise ValueError("a low-rank metric is fitted from gradients, on a diagonal")

    def init(point, step_size: jax.Array) -> AdaptationState:
        position, grad = _split(point)
        dim = position.shape[0]
        dtype = position.dtype
        eye = jnp.ones(dim, dtype) if not dense_mass else jnp.eye(dim, dtype=dtype)
        fitted = bool(low_rank) and (
            low_rank_max_dim is None or (grad is not None and 2 <= dim <= low_rank_max_dim)
        )
        imm = metric.identity_low_rank(dim, low_rank, dtype) if fitted else eye
        return AdaptationState(
            **_dual_averaging_start(jnp.log(jnp.asarray(step_size, dtype))),
            target_accept=jnp.asarray(target_accept, dtype),
            divergences=jnp.int32(0),
            count=jnp.int32(0),
            mean=jnp.zeros(dim, dtype),
            m2=jnp.zeros_like(eye),
            grad_mean=jnp.zeros(dim, dtype),
            grad_m2=jnp.zeros(dim, dtype),
            inverse_mass_matrix=imm,
            window=jnp.zeros((WINDOW_DRAWS, 2, dim), dtype) if fitted else None,
        )

    def _dual_averaging(state: AdaptationState, acceptance_rate: jax.Array) -> AdaptationState:
        dtype = state.log_step_size.dtype
        acceptance_rate = jnp.where(jnp.isfinite(acceptance_rate), acceptance_rate, 0.0)
        count = state.da_count + 1
        n = count.astype(dtype)
        eta = 1.0 / (n + t0)
        avg_error = (1.0 - eta) * state.avg_error + eta * (state.target_accept - acceptance_rate)
        log_eps = state.mu - jnp.sqrt(n) / gamma * avg_error
        weight = n ** (-kappa)
        log_eps_avg = weight * log_eps + (1.0 - weight) * state.log_step_size_avg
        return state._replace(
            log_step_size=log_eps.astype(dtype),
            log_step_size_avg=log_eps_avg.astype(dtype),
            da_count=count,
            avg_error=avg_error.astype(dtype),
        )

    def _welford(state: AdaptationState, point) -> AdaptationState:
        position, grad = _split(point)
        count = state.count + 1
        n = count.astype(position.dtype)
        if dense_mass:
            delta = position - state.mean
            mean = state.mean + delta / n
            m2 = state.m2 + jnp.outer(position - mean, delta)
            return state._replace(count=count, mean=mean, m2=m2)
        if grad is None or not gradient_metric:
            grad = state.grad_mean  # kept at zero: no gradient statistics
        # positions and gradients updated as one (2, dim) array, one operation
        values = jnp.stack([position, grad])
        means = jnp.stack([state.mean, state.grad_mean])
        delta = values - means
        means = means + delta / n
        m2s = jnp.stack([state.m2, state.grad_m2]) + delta * (values - means)
        return state._replace(
            count=count, mean=means[0], m2=m2s[0], grad_mean=means[1], grad_m2=m2s[1]
        )

    def _end_window(
        state: AdaptationState, window: jax.Array | None, last: jax.Array
    ) -> AdaptationState:
        n = state.count.astype(state.mean.dtype)
        regulariser = jnp.eye(state.mean.shape[0], dtype=state.m2.dtype) if dense_mass else 1.0

        def shrunk(estimate):
            # Stan's regularisation: shrink towards 1e-3 * I with weight 5 / (n + 5).
            estimate = (n / (n + 5.0)) * estimate + 1e-3 * (5.0 / (n + 5.0)) * regulariser
            return estimate.astype(state.mean.dtype)

        variance = state.m2 / jnp.maximum(n - 1.0, 1.0)  # the draws' (co)variance
        estimate = variance
        if gradient_metric and not dense_mass:
            # sqrt(var(x) / var(g)) where the gradients were recorded and vary
            # (the (n - 1) normalisations cancel); the variance elsewhere.
            has_grad = state.grad_m2 > 0
            if final_variance and window is None:
                has_grad = has_grad & ~last
            fisher = jnp.sqrt(state.m2 / jnp.where(has_grad, state.grad_m2, 1.0))
            estimate = jnp.where(has_grad, fisher, estimate)
        new = shrunk(estimate)
        if window is not None:  # a low-rank metric
            valid = jnp.arange(window.shape[0]) < state.count  # the rows that hold draws
            new, misfit = metric.fit_low_rank(
                window[:, 0], window[:, 1], valid, new, low_rank, cutoff=metric.CUTOFF
            )
            if final_variance:
                # The metric the draws are made with gives way to the diagonal metric's
                # (the draws' variance) where the fit's premise fails: along a kept
                # direction less than 1 / CUTOFF^2 of the gradient's variance is linear
                # in the position (docs/kernels.md, "Mass matrices").
                fallback = last & (misfit > metric.CUTOFF**2)
                new = metric.LowRank(
                    jnp.where(fallback, shrunk(variance), new.diagonal),
                    new.vectors,
                    jnp.where(fallback, 1.0, new.values).astype(new.values.dtype),
                )
        return state._replace(
            divergences=jnp.int32(0),
            count=jnp.int32(0),
            mean=jnp.zeros_like(state.mean),
            m2=jnp.zeros_like(state.m2),
            grad_mean=jnp.zeros_like(state.grad_mean),
            grad_m2=jnp.zeros_like(state.grad_m2),
            inverse_mass_matrix=new,
        )

    def update(
        state: AdaptationState,
        t: jax.Array,
        schedule: Schedule,
        point,
        acceptance_rate: jax.Array,
        end_windows: bool = True,
        diverging: jax.Array | bool = False,
    ) -> tuple[AdaptationState, jax.Array]:
        # The ring stays out of the conds' results: XLA copies an operand that a
        # branch returns unchanged, and the ring is the state's largest array.
        window, state = state.window, state._replace(window=None)
        in_slow = (t >= schedule.slow_start) & (t < schedule.slow_end)
        # a divergence at the step the dual averaging is settling on, or a smaller one
        counted = (
            in_slow
            & jnp.asarray(diverging)
            & (state.da_count >= SETTLE)
            & (state.log_step_size <= state.log_step_size_avg)
        )
        state = state._replace(divergences=state.divergences + counted.astype(jnp.int32))
        state = _dual_averaging(state, acceptance_rate)
        if window is not None:  # a low-rank metric
            position, grad = _split(point)
            if grad is None:
                raise ValueError("a low-rank metric needs the kernel state's gradient")
            slot = state.count % window.shape[0]
            old = jax.lax.dynamic_index_in_dim(window, slot, 0, keepdims=False)
            row = jnp.where(in_slow, jnp.stack([position, grad]), old)
            window = jax.lax.dynamic_update_index_in_dim(window, row, slot, 0)
        state = jax.lax.cond(in_slow, _welford, lambda s, _: s, state, point)
        state = state._replace(window=window)
        if not end_windows:
            return state, jnp.bool_(False)
        return end_window(state, t, schedule)

    def end_window(
        state: AdaptationState, t: jax.Array, schedule: Schedule, run_divergences: Any = 0
    ) -> tuple[AdaptationState, jax.Array]:
        """The new metric where ``t`` ends a slow window (``state`` unchanged elsewhere),
        and after the last one the terminal buffer's target."""
        window, state = state.window, state._replace(window=None)
        window_ended = jnp.any(t == schedule.window_ends)
        last = t == schedule.slow_end - 1
        state = jax.lax.cond(window_ended, _end_window, lambda s, *_: s, state, window, last)
        if divergent_target_accept is not None:
            raised = jnp.maximum(state.target_accept, divergent_target_accept)
            raise_ = last & (jnp.asarray(run_divergences) > 0)
            target = jnp.where(raise_, raised, state.target_accept)
            state = state._replace(target_accept=target.astype(state.target_accept.dtype))
        return state._replace(window=window), window_ended

    def restart(state: AdaptationState, step_size: jax.Array) -> AdaptationState:
        log_eps = jnp.log(step_size).astype(state.log_step_size.dtype)
        return state._replace(**_dual_averaging_start(log_eps))

    def params(state: AdaptationState) -> tuple[jax.Array, jax.Array]:
        return jnp.exp(state.log_step_size), state.inverse_mass_matrix

    def final(state: AdaptationState) -> tuple[jax.Array, jax.Array]:
        # Before any dual-averaging step the average is undefined: keep the current size.
        log_eps = jnp.where(state.da_count > 0, state.log_step_size_avg, state.log_step_size)
        return jnp.exp(log_eps), state.inverse_mass_matrix

    return WindowAdaptation(init, update, restart, params, final, end_window)
