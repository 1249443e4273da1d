"""MCMC kernels behind one small interface, for one chain on a flat vector.

A kernel is a frozen, hashable description (its settings) with pure methods:

* ``init(position, logdensity_fn) -> state``
* ``step(rng_key, state, logdensity_fn, params) -> (state, stats)`` where
  ``params`` is :class:`KernelParams` and ``stats`` is a dict of per-draw
  sample statistics under ArviZ's names;
* ``adaptation()`` returns the warmup scheme (:mod:`sluice.adaptation`).

The transitions are sluice's own (:mod:`sluice.hamiltonian`): an iterative
multinomial NUTS and static HMC written for the chunk engine (no copy of the
trajectory per step, inline random numbers, and a batched implementation for
vectorized chains). They follow BlackJAX's and NumPyro's NUTS in distribution
and cost fewer operations per gradient; ``bench/nuts_kernels.py`` measures
this. The warmup is sluice's own too (:mod:`sluice.adaptation`), so that it
runs in compiled chunks with progress and stores no per-step trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sluice import hamiltonian
from sluice.adaptation import WindowAdaptation, window_adaptation

__all__ = [
    "HMC",
    "NUTS",
    "Kernel",
    "KernelParams",
    "KernelState",
    "choose_chain_method",
    "get_kernel",
    "hmc",
    "kernel_from_config",
    "kernel_to_config",
    "nuts",
]


class KernelState(NamedTuple):
    """State of an HMC-family chain: a position, its log-density and gradient."""

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

    def stats_shapes(self, dtype: Any) -> dict[str, jax.ShapeDtypeStruct]:
        """Shapes of the sample statistics :meth:`step` returns, for positions of
        ``dtype``, without tracing a transition (which costs ~0.1 s for NUTS)."""
        real, count, flag = (jax.ShapeDtypeStruct((), t) for t in (dtype, jnp.int32, jnp.bool_))
        names = {"lp": real, "acceptance_rate": real, "step_size": real}
        if self.name == "nuts":
            names["tree_depth"] = count
        return {**names, "n_steps": count, "diverging": flag, "energy": real}

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
    """The No-U-Turn sampler (multinomial, iterative; :func:`sluice.hamiltonian.nuts_step`).

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
        (position, logdensity, grad), info = hamiltonian.nuts_step(
            rng_key,
            state,
            logdensity_fn,
            params.step_size,
            params.inverse_mass_matrix,
            max_tree_depth=self.max_tree_depth,
            divergence_threshold=self.divergence_threshold,
        )
        state = KernelState(position, logdensity, grad)
        stats = {
            "lp": logdensity,
            "acceptance_rate": info["acceptance_rate"],
            "step_size": jnp.asarray(params.step_size, logdensity.dtype),
            "tree_depth": info["tree_depth"],
            "n_steps": info["n_steps"],
            "diverging": info["diverging"],
            "energy": info["energy"],
        }
        return state, stats


@dataclasses.dataclass(frozen=True)
class HMC(_HMCFamily):
    """Static HMC with ``num_integration_steps`` leapfrog steps (:func:`sluice.hamiltonian.hmc_step`)."""

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
        (position, logdensity, grad), info = hamiltonian.hmc_step(
            rng_key,
            state,
            logdensity_fn,
            params.step_size,
            params.inverse_mass_matrix,
            num_integration_steps=self.num_integration_steps,
            divergence_threshold=self.divergence_threshold,
        )
        state = KernelState(position, logdensity, grad)
        stats = {
            "lp": logdensity,
            "acceptance_rate": info["acceptance_rate"],
            "step_size": jnp.asarray(params.step_size, logdensity.dtype),
            "n_steps": info["n_steps"],
            "diverging": info["diverging"],
            "energy": info["energy"],
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


# -- sequential or vectorized chains ---------------------------------------------
# Constants of the cost model of choose_chain_method, fitted to the issue-8
# benchmark on CPU (bench/nuts_chain_method.py): the fixed cost of one gradient
# evaluation in XLA:CPU operations, in bytes of memory traffic that take as
# long; NUTS's own traffic per leapfrog step and dimension (about 25 float32
# passes: position, momentum, gradient, momentum sum, candidate, checkpoints);
# and how much longer vectorized NUTS chains run than the average chain (they
# advance in lock step, so each doubling lasts as long as its longest chain).
_OVERHEAD_BYTES = 64 * 1024
_BOOKKEEPING_BYTES_PER_DIM = 100
_LOCKSTEP = {"nuts": 1.5, "hmc": 1.0}


def choose_chain_method(
    flat_model: Any, kernel: Kernel, devices: list[jax.Device], chains_per_device: int
) -> str:
    """``"vectorized"`` or ``"sequential"`` chains for ``chain_method="auto"``.

    On accelerators: vectorized. On CPU, a cost model of one leapfrog step per
    chain, in bytes of memory traffic, with ``b_1`` and ``b_C`` the bytes one
    gradient and a ``vmap`` of ``C = chains_per_device`` gradients access (XLA's
    cost analysis of the lowered, not compiled, gradient), ``o`` the fixed cost
    of a gradient's operations, ``k = 100 dim`` NUTS's own traffic and ``W``
    the lock-step factor (1.5 for NUTS, 1 for static HMC)::

        sequential:  o + b_1 + k
        vectorized:  W (o + b_C + C k) / C

    Vectorized wins when the chains share data that a batched gradient reads
    once (``b_C << C b_1``: a regression's design matrix) or when a gradient is
    so small that its fixed cost dominates; sequential wins when every chain's
    traffic is its own (a high-dimensional Gaussian). The inputs are shapes and
    a compiler estimate, not timings, so every process of a multi-process run
    makes the same choice. Measured (issue 8, 4 chains, CPU): vectorized /
    sequential time 0.42 (logistic 100 x 10), 0.47 (logistic 10,000 x 100),
    2.5 (10,000-dim Gaussian); the model picks the faster one in all three.
    """
    if devices[0].platform != "cpu":
        return "vectorized"
    if chains_per_device <= 1:
        return "sequential"
    num = chains_per_device
    point = jax.ShapeDtypeStruct((flat_model.dim,), flat_model.dtype)
    consts = jax.tree.map(
        lambda c: jax.ShapeDtypeStruct(jnp.shape(c), jnp.result_type(c)), flat_model.consts
    )
    batch = jax.ShapeDtypeStruct((num, flat_model.dim), flat_model.dtype)
    value_and_grad = jax.value_and_grad(flat_model.logdensity_fn, argnums=1)
    one = jax.jit(value_and_grad).lower(consts, point).cost_analysis()
    many = jax.jit(jax.vmap(value_and_grad, in_axes=(None, 0))).lower(consts, batch).cost_analysis()
    own = _BOOKKEEPING_BYTES_PER_DIM * flat_model.dim if kernel.name == "nuts" else 0
    sequential = _OVERHEAD_BYTES + one["bytes accessed"] + own
    vectorized = (
        _LOCKSTEP[kernel.name] * (_OVERHEAD_BYTES + many["bytes accessed"] + num * own) / num
    )
    return "vectorized" if vectorized < sequential else "sequential"
