"""The kernel interface of the chunk engine: what any MCMC kernel provides.

The chunk (:mod:`sluice.mcmc.chunk`) knows kernels through :class:`Kernel` only;
docs/architecture.md ("Kernels") describes how sluice's and other libraries'
kernels implement it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Kernel", "KernelParams", "KernelState", "Warmup", "constant_warmup"]


class KernelState(NamedTuple):
    """State of an HMC-family chain: a position, its log-density and gradient."""

    position: jax.Array  # (dim,) float
    logdensity: jax.Array  # () float
    logdensity_grad: jax.Array  # (dim,) float


class KernelParams(NamedTuple):
    """Tuned parameters of an HMC-family kernel for one chain."""

    step_size: jax.Array  # () float
    inverse_mass_matrix: jax.Array  # (dim,) diagonal, or (dim, dim) dense


class Warmup(NamedTuple):
    """How a kernel tunes its parameters: pure functions of one chain and one iteration.

    * ``schedule(num_warmup)``: host arrays (NumPy) that the warmup steps read,
      built once per run (Stan's windows, say); traced, so a new warmup length
      does not recompile;
    * ``init(rng_key, kernel_state, logdensity_fn) -> (state, num_gradients)``;
    * ``update(rng_key, state, iteration, schedule, kernel_state, stats,
      logdensity_fn) -> (state, num_gradients)`` after the kernel's step at
      warmup ``iteration``;
    * ``params(state)``: the parameters the next step uses;
    * ``final(state)``: the parameters every draw uses (taken at the last
      warmup iteration);
    * ``across_chains``: ``update`` takes one more argument, ``mean(x)``, the
      mean of ``x`` over every chain of the run (ChEES, say); such a warmup
      needs vectorized chains;
    * ``window_end``: ``None``, or ``window_end(rng_key, state, iteration,
      schedule, kernel_state, logdensity_fn) -> (state, num_gradients)``, the
      work at the end of an adaptation window (a new metric, a step-size
      search), which ``update`` then leaves to it: the engine ends a chunk at
      each iteration of ``schedule.window_ends`` (``-1`` where none) and runs
      ``window_end`` there in a program of its own, so that the chunk program,
      which the run waits for, compiles without it (docs/architecture.md,
      "Kernels"). ``rng_key`` is the one ``update`` gets at that iteration;
    * ``pooled``: ``None``, or ``pooled(state) -> number`` of one chain, summed
      over every real chain of the run before each window end and given to
      ``window_end`` as one more argument (sluice's NUTS counts its chains'
      divergences there); any chain method, on any number of devices.

    A kernel's statistics whose names start with ``_`` reach ``update`` only.
    """

    schedule: Callable[[int], Any]
    init: Callable[..., tuple[Any, jax.Array]]
    update: Callable[..., tuple[Any, jax.Array]]
    params: Callable[[Any], Any]
    final: Callable[[Any], Any]
    across_chains: bool = False
    window_end: Callable[..., tuple[Any, jax.Array]] | None = None
    pooled: Callable[[Any], jax.Array] | None = None


@runtime_checkable
class Kernel(Protocol):
    """An MCMC kernel: a hashable object (its settings) with pure functions for ONE chain.

    In the shape of BlackJAX's ``SamplingAlgorithm``, on a flat ``(dim,)`` position:

    * ``init(position, logdensity_fn, rng_key) -> state``; the state has
      ``position``, ``logdensity`` and ``logdensity_grad`` (checked to be finite);
      ``rng_key`` is the chain's own (MCLMC draws its first momentum with it);
    * ``step(rng_key, state, logdensity_fn, params) -> (state, stats)``, with
      ``stats`` per-draw sample statistics under ArviZ's names, among them
      ``n_steps`` (gradient evaluations), ``diverging`` and ``acceptance_rate``;
    * ``warmup() -> Warmup``: how the kernel tunes its ``params`` during warmup;
    * ``stats_shapes(dtype)``: the shapes of ``stats`` for positions of ``dtype``;
    * ``to_config()``: a JSON-able description (``{"name": ..., settings}``).
    """

    name: str
    # chain_method="auto"'s cost model (sluice.mcmc.chain_method):
    lockstep: float  # how much longer vectorized chains run than the average chain
    bookkeeping_bytes_per_dim: int  # the kernel's own memory traffic per step and dimension

    def init(
        self, position: jax.Array, logdensity_fn: Callable, rng_key: jax.Array | None = None
    ) -> Any: ...

    def step(
        self, rng_key: jax.Array, state: Any, logdensity_fn: Callable, params: Any
    ) -> tuple[Any, dict[str, jax.Array]]: ...

    def warmup(self) -> Warmup: ...

    def stats_shapes(self, dtype: Any) -> dict[str, jax.ShapeDtypeStruct]: ...

    def to_config(self) -> dict[str, Any]: ...


def constant_warmup(params: Any) -> Warmup:
    """A warmup that tunes nothing: ``params`` throughout (fixed parameters, or a kernel
    that adapts inside its own state, as NumPyro's do)."""

    def init(rng_key, kstate, logdensity_fn):
        return (), jnp.int32(0)

    def update(rng_key, state, iteration, schedule, kstate, stats, logdensity_fn):
        return state, jnp.int32(0)

    return Warmup(
        lambda num_warmup: np.int32(num_warmup), init, update, lambda s: params, lambda s: params
    )
