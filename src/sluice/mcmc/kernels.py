"""sluice's own kernels, NUTS and static HMC, behind the interface of :mod:`sluice.mcmc.protocol`.

Both are frozen, hashable descriptions (their settings) whose pure methods
work on one chain's flat vector. The transitions are sluice's own
(:mod:`sluice.mcmc.hamiltonian`), written for the chunk engine. Their warmup
(:meth:`warmup`) is Stan's window adaptation (:mod:`sluice.mcmc.adaptation`)
with Stan's step-size search after each window, written to run in compiled
chunks.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sluice.mcmc import hamiltonian
from sluice.mcmc.adaptation import WindowAdaptation, window_adaptation, window_schedule
from sluice.mcmc.protocol import Kernel, KernelParams, KernelState, Warmup

__all__ = [
    "HMC",
    "MASS_MATRICES",
    "NUTS",
    "get_kernel",
    "hmc",
    "kernel_from_config",
    "nuts",
    "window_warmup",
]


MASS_MATRICES = ("auto", "diag", "dense", "low_rank")
# mass_matrix="auto": the low-rank metric up to this many elements (its warmup ring and
# each window's fit grow with them; docs/kernels.md), the diagonal beyond.
LOW_RANK_MAX_DIM = 10_000


@dataclasses.dataclass(frozen=True)
class _HMCFamily:
    target_accept: float = 0.8
    dense_mass: bool = False
    divergence_threshold: float = 1000.0
    initial_step_size: float = 1.0
    mass_matrix: str = "auto"
    max_rank: int = 16
    divergent_target_accept: float | None = 0.95

    def __post_init__(self) -> None:
        if not _is_number(self.target_accept) or not 0.0 < self.target_accept < 1.0:
            raise ValueError(
                f"target_accept must be a number in (0, 1), got {self.target_accept!r}"
            )
        if not isinstance(self.dense_mass, bool | np.bool_):
            raise TypeError(f"dense_mass must be True or False, got {self.dense_mass!r}")
        if self.mass_matrix not in MASS_MATRICES:
            raise ValueError(
                f"mass_matrix must be one of {list(MASS_MATRICES)}, got {self.mass_matrix!r}"
            )
        if self.dense_mass and self.mass_matrix == "low_rank":
            raise ValueError("dense_mass=True and mass_matrix='low_rank' contradict each other")
        # dense_mass=True (NumPyro's and PyMC's name) is mass_matrix="dense"; keep both in step
        dense = bool(self.dense_mass) or self.mass_matrix == "dense"
        object.__setattr__(self, "dense_mass", dense)
        object.__setattr__(self, "mass_matrix", "dense" if dense else self.mass_matrix)
        if not (isinstance(self.max_rank, int) and 1 <= self.max_rank):
            raise ValueError(f"max_rank must be a positive int, got {self.max_rank!r}")
        d = self.divergent_target_accept
        if d is not None and not (_is_number(d) and 0.0 < d < 1.0):
            raise ValueError(
                f"divergent_target_accept must be None or a number in (0, 1), got {d!r}"
            )
        for name in ("divergence_threshold", "initial_step_size"):
            value = getattr(self, name)
            if not _is_number(value) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    def init(
        self, position: jax.Array, logdensity_fn: Callable, rng_key: jax.Array | None = None
    ) -> KernelState:
        del rng_key  # a deterministic start
        logdensity, grad = jax.value_and_grad(logdensity_fn)(position)
        return KernelState(position, logdensity, grad)

    @property
    def _low_rank(self) -> dict[str, Any]:
        if self.mass_matrix == "low_rank":
            return {"low_rank": self.max_rank}
        if self.mass_matrix == "auto":
            return {"low_rank": self.max_rank, "low_rank_max_dim": LOW_RANK_MAX_DIM}
        return {}

    def adaptation(self) -> WindowAdaptation:
        return window_adaptation(
            self.target_accept,
            self.dense_mass,
            divergent_target_accept=self.divergent_target_accept,
            **self._low_rank,
        )

    def warmup(self) -> Warmup:
        """Stan's window adaptation; the step size is searched anew (Stan's
        ``init_stepsize``) at the start and after each slow window's new metric."""
        return window_warmup(
            self.target_accept,
            self.dense_mass,
            self.initial_step_size,
            divergent_target_accept=self.divergent_target_accept,
            **self._low_rank,
        )

    def to_config(self) -> dict[str, Any]:
        """A JSON-able description: ``{"name": "nuts", "max_tree_depth": 10, ...}``."""
        return {"name": self.name, **dataclasses.asdict(self)}

    def stats_shapes(self, dtype: Any) -> dict[str, jax.ShapeDtypeStruct]:
        """Shapes of the sample statistics :meth:`step` returns, for positions of
        ``dtype``, without tracing a transition (which costs ~0.1 s for NUTS)."""
        real, count, flag = (jax.ShapeDtypeStruct((), t) for t in (dtype, jnp.int32, jnp.bool_))
        names = {"lp": real, "acceptance_rate": real, "step_size": real}
        if self.name == "nuts":
            names["tree_depth"] = count
        return {**names, "n_steps": count, "diverging": flag, "energy": real}

    def step(
        self, rng_key: jax.Array, state: KernelState, logdensity_fn: Callable, params: KernelParams
    ) -> tuple[KernelState, dict[str, jax.Array]]:
        # the transition (hamiltonian's) with this kernel's trajectory setting
        (position, logdensity, grad), info = self._transition()(
            rng_key,
            state,
            logdensity_fn,
            params.step_size,
            params.inverse_mass_matrix,
            divergence_threshold=self.divergence_threshold,
        )
        step_size = jnp.asarray(params.step_size, logdensity.dtype)
        info = {**info, "lp": logdensity, "step_size": step_size}
        # the statistics stats_shapes declares, in its order
        stats = {name: info[name] for name in self.stats_shapes(logdensity.dtype)}
        return KernelState(position, logdensity, grad), stats

    def find_step_size(
        self, rng_key: jax.Array, state: KernelState, logdensity_fn: Callable, params: KernelParams
    ) -> tuple[jax.Array, jax.Array]:
        """Stan's ``init_stepsize`` heuristic: double or halve until one leapfrog
        step's acceptance crosses 0.8. Returns ``(step_size, num_gradients)``."""
        return hamiltonian.find_step_size(
            rng_key, state, logdensity_fn, params.step_size, params.inverse_mass_matrix
        )


@dataclasses.dataclass(frozen=True)
class NUTS(_HMCFamily):
    """The No-U-Turn sampler (multinomial, iterative; :func:`sluice.mcmc.hamiltonian.nuts_step`).

    Parameters
    ----------
    target_accept
        Target of the step-size adaptation (Stan's ``adapt_delta``), default 0.8.
    divergent_target_accept
        The target of the warmup's terminal buffer, default 0.95 (or ``target_accept``
        where larger), when any chain of the run diverged in the last slow window
        at a step no larger than the one its adaptation was settling on; ``None``:
        ``target_accept`` throughout (docs/kernels.md, "Divergences in the warmup").
    max_tree_depth
        Maximum number of trajectory doublings, default 10 (at most 1023 steps).
    dense_mass
        Adapt a dense mass matrix instead of a diagonal one (``mass_matrix="dense"``).
    divergence_threshold
        Energy error above which a transition is divergent.
    mass_matrix
        ``"auto"`` (default): ``"low_rank"`` for a posterior of 2 to
        ``LOW_RANK_MAX_DIM`` (10,000) elements, ``"diag"`` otherwise and in a
        CPU run too short to repay the low-rank metric's compile; ``"diag"``
        (:mod:`sluice.mcmc.adaptation`); ``"dense"``: the draws' covariance
        (Stan's); ``"low_rank"``: the diagonal plus up to ``max_rank``
        directions fitted as nutpie does (:mod:`sluice.mcmc.metric`), or the
        diagonal metric's variance where the last window's draws are far from
        Gaussian along a fitted direction (docs/kernels.md).
    max_rank
        Most directions of a low-rank metric, default 16.

    References
    ----------
    Hoffman & Gelman (2014); Betancourt (2017), "A Conceptual Introduction to
    Hamiltonian Monte Carlo"; Seyboldt, Carlson & Carpenter (2026),
    arXiv:2603.18845 (the low-rank metric).
    """

    max_tree_depth: int = 10
    name = "nuts"
    lockstep = 1.5  # vectorized chains double in lock step: each doubling lasts the longest
    bookkeeping_bytes_per_dim = 100  # ~25 float32 passes per leapfrog step

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.max_tree_depth, int) and 1 <= self.max_tree_depth <= 30):
            raise ValueError(
                f"max_tree_depth must be an int in [1, 30], got {self.max_tree_depth!r}"
            )

    def _transition(self) -> Callable:
        return functools.partial(hamiltonian.nuts_step, max_tree_depth=self.max_tree_depth)


@dataclasses.dataclass(frozen=True)
class HMC(_HMCFamily):
    """Static HMC with ``num_integration_steps`` leapfrog steps (:func:`sluice.mcmc.hamiltonian.hmc_step`)."""

    num_integration_steps: int = 10
    name = "hmc"
    lockstep = 1.0  # every chain takes the same number of steps
    bookkeeping_bytes_per_dim = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.num_integration_steps, int) and self.num_integration_steps >= 1):
            raise ValueError(
                f"num_integration_steps must be a positive int, got {self.num_integration_steps!r}"
            )

    def _transition(self) -> Callable:
        steps = self.num_integration_steps
        return functools.partial(hamiltonian.hmc_step, num_integration_steps=steps)


def window_warmup(
    target_accept: float,
    dense_mass: bool,
    initial_step_size: float,
    to_params: Callable[[jax.Array, jax.Array], Any] = KernelParams,
    step_size_only: bool = False,
    low_rank: int = 0,
    low_rank_max_dim: int | None = None,
    divergent_target_accept: float | None = None,
) -> Warmup:
    """Stan's window adaptation of a step size and an inverse mass matrix, as a :class:`Warmup`.

    The step size is searched anew (Stan's ``init_stepsize``) at the start and after
    each new metric; ``to_params(step_size, inverse_mass_matrix)`` makes the kernel's
    parameters. ``step_size_only``: no slow windows (for kernels such as MALA whose
    step size is not a leapfrog step's). ``low_rank``, ``low_rank_max_dim``: as in
    :func:`~sluice.mcmc.adaptation.window_adaptation`. ``divergent_target_accept``: the
    terminal buffer's target after divergences in the last slow window, counted over
    every chain of the run (the warmup's ``pooled``; docs/kernels.md, "Divergences in
    the warmup").
    """
    adapt = window_adaptation(
        target_accept,
        dense_mass,
        low_rank=low_rank,
        low_rank_max_dim=low_rank_max_dim,
        divergent_target_accept=divergent_target_accept,
    )

    def params(state):
        return to_params(*adapt.params(state))

    def restarted(rng_key, kstate, logdensity_fn, state):
        """``state`` restarted at a step size searched anew, and the gradients it took."""
        step_size, inverse_mass_matrix = adapt.params(state)
        x = (kstate.position, kstate.logdensity, kstate.logdensity_grad)
        step_size, num_grads = hamiltonian.find_step_size(
            rng_key, x, logdensity_fn, step_size, inverse_mass_matrix, target=0.8
        )
        return adapt.restart(state, step_size), num_grads

    def init(rng_key: jax.Array, kstate: Any, logdensity_fn: Callable):
        state = adapt.init(kstate, initial_step_size)
        if step_size_only:
            return adapt.restart(state, jnp.asarray(initial_step_size)), jnp.int32(0)
        return restarted(rng_key, kstate, logdensity_fn, state)

    def update(rng_key, state, iteration, schedule, kstate, stats, logdensity_fn):
        # a window's end is window_end's, in a program of its own: the metric's fit and
        # the step-size search (a second copy of the model's gradient) made the chunk
        # program compile ~0.5 s longer on PyMC's radon_slopes and logistic_well
        state, _ = adapt.update(
            state,
            iteration,
            schedule,
            kstate,
            stats["acceptance_rate"],
            end_windows=False,
            diverging=stats["diverging"],
        )
        return state, jnp.int32(0)

    def window_end(rng_key, state, iteration, schedule, kstate, logdensity_fn, run_divergences):
        state, window_ended = adapt.end_window(state, iteration, schedule, run_divergences)
        # Stan re-initialises the step size for the new metric. The low-rank ring stays
        # out of the cond (XLA would copy it).
        window, state = state.window, state._replace(window=None)
        state, n = jax.lax.cond(
            window_ended,
            lambda s: restarted(rng_key, kstate, logdensity_fn, s),
            lambda s: (s, jnp.int32(0)),
            state,
        )
        return state._replace(window=window), n

    def final(state):
        return to_params(*adapt.final(state))

    if step_size_only:  # no slow windows: nothing ends
        return Warmup(lambda num_warmup: window_schedule(0), init, update, params, final)
    pooled = lambda state: state.divergences  # noqa: E731
    return Warmup(
        window_schedule, init, update, params, final, window_end=window_end, pooled=pooled
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def nuts(**settings: Any) -> NUTS:
    """A :class:`NUTS` kernel, e.g. ``sluice.nuts(target_accept=0.9, max_tree_depth=8)``."""
    return NUTS(**settings)


def hmc(**settings: Any) -> HMC:
    """An :class:`HMC` kernel, e.g. ``sluice.hmc(num_integration_steps=20)``."""
    return HMC(**settings)


def get_kernel(kernel: str | Kernel, **overrides: Any) -> Kernel:
    """Resolve ``"nuts"`` / ``"hmc"`` / a kernel object, applying non-None overrides."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "dense_mass" in overrides and "mass_matrix" not in overrides:
        # dense_mass=False undoes a dense metric (only): both settings name it
        current = getattr(kernel, "mass_matrix", "auto")  # "nuts" / "hmc": the default
        fallback = "auto" if current == "dense" else current
        overrides["mass_matrix"] = "dense" if overrides["dense_mass"] else fallback
    if "mass_matrix" in overrides and "dense_mass" not in overrides:
        overrides["dense_mass"] = overrides["mass_matrix"] == "dense"
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
    if isinstance(kernel, Kernel):
        if not overrides:
            return kernel
        if not dataclasses.is_dataclass(kernel):
            raise TypeError(
                f"the settings {sorted(overrides)} apply to sluice's own kernels only; "
                f"set them on the kernel {kernel!r} itself"
            )
        return dataclasses.replace(kernel, **overrides)
    raise TypeError(f"kernel must be 'nuts', 'hmc' or a kernel object, got {kernel!r}")


def kernel_from_config(config: dict[str, Any]) -> Kernel:
    """The inverse of a kernel's ``to_config()``."""
    settings = dict(config)
    kernel = get_kernel(settings.pop("name"), **settings)
    # get_kernel leaves out None overrides ("not set"); a recorded None is a setting
    unset = {k: None for k, v in settings.items() if v is None}
    return dataclasses.replace(kernel, **unset) if unset else kernel
