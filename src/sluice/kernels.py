"""MCMC kernels behind one small interface, for one chain on a flat vector.

A kernel is a frozen, hashable description (its settings) with pure methods:

* ``init(position, logdensity_fn) -> state``
* ``step(rng_key, state, logdensity_fn, params) -> (state, stats)`` where
  ``params`` is :class:`KernelParams` and ``stats`` is a dict of per-draw
  sample statistics under ArviZ's names;
* ``adaptation()`` returns the warmup scheme (:mod:`sluice.adaptation`).

Transitions come from BlackJAX (multinomial iterative NUTS, static HMC); the
warmup is sluice's own (:mod:`sluice.adaptation`) so that it runs in compiled
chunks with progress, and stores no per-step trace. BlackJAX is imported when
a kernel is first traced, not with sluice: importing it starts a JAX backend,
and ``sluice.distributed.initialize()`` must be able to run after
``import sluice``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sluice.adaptation import WindowAdaptation, window_adaptation

__all__ = [
    "HMC",
    "NUTS",
    "Kernel",
    "KernelParams",
    "KernelState",
    "get_kernel",
    "hmc",
    "kernel_from_config",
    "kernel_to_config",
    "nuts",
]


class KernelState(NamedTuple):
    """State of an HMC-family chain (the fields of BlackJAX's ``HMCState``)."""

    position: jax.Array  # (dim,) float
    logdensity: jax.Array  # () float
    logdensity_grad: jax.Array  # (dim,) float


class KernelParams(NamedTuple):
    """Tuned parameters of an HMC-family kernel for one chain."""

    step_size: jax.Array  # () float
    inverse_mass_matrix: jax.Array  # (dim,) diagonal, or (dim, dim) dense


@dataclasses.dataclass(frozen=True)
class _HMCFamily:
    target_accept: float = 0.8
    dense_mass: bool = False
    divergence_threshold: float = 1000.0
    initial_step_size: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.target_accept < 1.0:
            raise ValueError(f"target_accept must be in (0, 1), got {self.target_accept!r}")
        if not self.initial_step_size > 0:
            raise ValueError(f"initial_step_size must be positive, got {self.initial_step_size!r}")

    def init(self, position: jax.Array, logdensity_fn: Callable) -> KernelState:
        logdensity, grad = jax.value_and_grad(logdensity_fn)(position)
        return KernelState(position, logdensity, grad)

    def adaptation(self) -> WindowAdaptation:
        return window_adaptation(self.target_accept, self.dense_mass)

    def find_step_size(
        self, rng_key: jax.Array, state: KernelState, logdensity_fn: Callable, params: KernelParams
    ) -> tuple[jax.Array, jax.Array]:
        """Stan's ``init_stepsize`` heuristic: double or halve until one leapfrog
        step's acceptance crosses 0.8. Returns ``(step_size, num_gradients)``."""
        import blackjax.mcmc.integrators as bj_integrators
        import blackjax.mcmc.metrics as bj_metrics

        metric = bj_metrics.default_metric(params.inverse_mass_matrix)
        integrator = bj_integrators.velocity_verlet(logdensity_fn, metric.kinetic_energy)
        log_target = jnp.log(0.8)

        def delta_h(i: jax.Array, step_size: jax.Array) -> jax.Array:
            momentum = metric.sample_momentum(jax.random.fold_in(rng_key, i), state.position)
            start = bj_integrators.IntegratorState(
                state.position, momentum, state.logdensity, state.logdensity_grad
            )
            end = integrator(start, step_size)
            h0 = -state.logdensity + metric.kinetic_energy(momentum)
            h1 = -end.logdensity + metric.kinetic_energy(end.momentum)
            return jnp.where(jnp.isfinite(h1), h0 - h1, -jnp.inf)

        step_size = params.step_size
        first = delta_h(0, step_size)
        direction = jnp.where(first > log_target, 1.0, -1.0).astype(step_size.dtype)

        def cond(carry: Any) -> jax.Array:
            i, eps, dh = carry
            crossed = jnp.where(direction > 0, dh <= log_target, dh >= log_target)
            return (~crossed) & (i < 100) & (eps > 1e-8) & (eps < 1e7)

        def body(carry: Any) -> Any:
            i, eps, _ = carry
            eps = eps * jnp.where(direction > 0, 2.0, 0.5).astype(eps.dtype)
            return i + 1, eps, delta_h(i, eps)

        # Like Stan, keep the first size at which the acceptance crossed 0.8.
        i, eps, _ = jax.lax.while_loop(cond, body, (jnp.int32(1), step_size, first))
        return eps, i


@dataclasses.dataclass(frozen=True)
class NUTS(_HMCFamily):
    """The No-U-Turn sampler (multinomial, iterative; BlackJAX's transition).

    Parameters
    ----------
    target_accept
        Target of the step-size adaptation (Stan's ``adapt_delta``), default 0.8.
    max_tree_depth
        Maximum number of trajectory doublings, default 10 (at most 1023 steps).
    dense_mass
        Adapt a dense mass matrix instead of a diagonal one.
    divergence_threshold
        Energy error above which a transition is divergent.

    References
    ----------
    Hoffman & Gelman (2014); Betancourt (2017), "A Conceptual Introduction to
    Hamiltonian Monte Carlo".
    """

    max_tree_depth: int = 10
    name = "nuts"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.max_tree_depth, int) and 1 <= self.max_tree_depth <= 30):
            raise ValueError(
                f"max_tree_depth must be an int in [1, 30], got {self.max_tree_depth!r}"
            )

    def step(
        self, rng_key: jax.Array, state: KernelState, logdensity_fn: Callable, params: KernelParams
    ) -> tuple[KernelState, dict[str, jax.Array]]:
        import blackjax.mcmc.nuts as bj_nuts

        kernel = bj_nuts.build_kernel(divergence_threshold=self.divergence_threshold)
        state, info = kernel(
            rng_key,
            state,
            logdensity_fn,
            params.step_size,
            params.inverse_mass_matrix,
            self.max_tree_depth,
        )
        state = KernelState(*state)
        stats = {
            "lp": state.logdensity,
            "acceptance_rate": info.acceptance_rate,
            "step_size": params.step_size,
            "tree_depth": jnp.asarray(info.num_trajectory_expansions, jnp.int32),
            "n_steps": jnp.asarray(info.num_integration_steps, jnp.int32),
            "diverging": info.is_divergent,
            "energy": info.energy,
        }
        return state, stats


@dataclasses.dataclass(frozen=True)
class HMC(_HMCFamily):
    """Static Hamiltonian Monte Carlo with ``num_integration_steps`` leapfrog steps."""

    num_integration_steps: int = 10
    name = "hmc"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.num_integration_steps, int) and self.num_integration_steps >= 1):
            raise ValueError(
                f"num_integration_steps must be a positive int, got {self.num_integration_steps!r}"
            )

    def step(
        self, rng_key: jax.Array, state: KernelState, logdensity_fn: Callable, params: KernelParams
    ) -> tuple[KernelState, dict[str, jax.Array]]:
        import blackjax.mcmc.hmc as bj_hmc

        kernel = bj_hmc.build_kernel(divergence_threshold=self.divergence_threshold)
        state, info = kernel(
            rng_key,
            state,
            logdensity_fn,
            params.step_size,
            params.inverse_mass_matrix,
            self.num_integration_steps,
        )
        state = KernelState(*state)
        stats = {
            "lp": state.logdensity,
            "acceptance_rate": info.acceptance_rate,
            "step_size": params.step_size,
            "n_steps": jnp.asarray(info.num_integration_steps, jnp.int32),
            "diverging": info.is_divergent,
            "energy": info.energy,
        }
        return state, stats


Kernel = NUTS | HMC


def nuts(**settings: Any) -> NUTS:
    """A :class:`NUTS` kernel, e.g. ``sluice.nuts(target_accept=0.9, max_tree_depth=8)``."""
    return NUTS(**settings)


def hmc(**settings: Any) -> HMC:
    """An :class:`HMC` kernel, e.g. ``sluice.hmc(num_integration_steps=20)``."""
    return HMC(**settings)


def get_kernel(kernel: str | Kernel, **overrides: Any) -> Kernel:
    """Resolve ``"nuts"`` / ``"hmc"`` / a kernel object, applying non-None overrides."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if isinstance(kernel, str):
        factories = {"nuts": NUTS, "hmc": HMC}
        if kernel not in factories:
            raise ValueError(
                f"kernel must be one of {sorted(factories)} or a kernel object, got {kernel!r}"
            )
        cls = factories[kernel]
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"kernel {kernel!r} has no setting(s) {sorted(unknown)}")
        return cls(**overrides)
    if isinstance(kernel, NUTS | HMC):
        return dataclasses.replace(kernel, **overrides) if overrides else kernel
    raise TypeError(f"kernel must be 'nuts', 'hmc' or a kernel object, got {kernel!r}")


def kernel_to_config(kernel: Kernel) -> dict[str, Any]:
    """A JSON-able description: ``{"name": "nuts", "max_tree_depth": 10, ...}``."""
    return {"name": kernel.name, **dataclasses.asdict(kernel)}


def kernel_from_config(config: dict[str, Any]) -> Kernel:
    """The inverse of :func:`kernel_to_config`."""
    settings = dict(config)
    return get_kernel(settings.pop("name"), **settings)
