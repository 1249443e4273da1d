"""Sequential or vectorized chains on CPU: a cost model of one step's memory traffic."""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp

from sluice.mcmc.protocol import Kernel

__all__ = ["choose_chain_method", "gradient_bytes", "step_bytes"]

# The fixed cost of one gradient evaluation in XLA:CPU operations, in bytes of memory
# traffic that take as long, fitted on CPU (bench/studies/nuts_chain_method.py).
_OVERHEAD_BYTES = 64 * 1024
_GRADIENT_BYTES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gradient_bytes(flat_model: Any, batch: int | None = None) -> float:
    """Bytes one gradient (``batch=None``) or a ``vmap`` of ``batch`` gradients of the
    model's log density access: XLA's cost analysis of the lowered, not compiled,
    program (remembered per model)."""
    cache = _GRADIENT_BYTES.setdefault(flat_model, {})
    if batch not in cache:
        consts = jax.tree.map(
            lambda c: jax.ShapeDtypeStruct(jnp.shape(c), jnp.result_type(c)), flat_model.consts
        )
        shape = (flat_model.dim,) if batch is None else (batch, flat_model.dim)
        point = jax.ShapeDtypeStruct(shape, flat_model.dtype)
        fn = jax.value_and_grad(flat_model.logdensity_fn, argnums=1)
        if batch is not None:
            fn = jax.vmap(fn, in_axes=(None, 0))
        cache[batch] = float(jax.jit(fn).lower(consts, point).cost_analysis()["bytes accessed"])
    return cache[batch]


def step_bytes(flat_model: Any, kernel: Kernel) -> float:
    """One step of one chain as bytes of memory traffic: the sequential cost of
    :func:`choose_chain_method`, ``o + b_1 + k``."""
    own = kernel.bookkeeping_bytes_per_dim * flat_model.dim
    return _OVERHEAD_BYTES + gradient_bytes(flat_model) + own


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

    The inputs are shapes and a compiler estimate, not timings, so every process
    of a multi-process run makes the same choice (docs/architecture.md).
    """
    if devices[0].platform != "cpu":
        return "vectorized"
    if chains_per_device <= 1:
        return "sequential"
    num = chains_per_device
    own = kernel.bookkeeping_bytes_per_dim * flat_model.dim
    vectorized = kernel.lockstep * (_OVERHEAD_BYTES + gradient_bytes(flat_model, num) + num * own)
    return "vectorized" if vectorized / num < step_bytes(flat_model, kernel) else "sequential"
