"""MCMC kernels for :func:`sluice.sample`: sluice's own and other libraries'.

* :func:`nuts`, :func:`hmc`: sluice's NUTS and static HMC;
* :func:`from_blackjax`: any BlackJAX sampling algorithm (``blackjax.nuts``,
  ``blackjax.mala``, ``blackjax.mclmc``, ``blackjax.adjusted_mclmc``, ...)
  with its parameters fixed or tuned by a warmup run in the chunks;
* :func:`from_numpyro`: NumPyro's MCMC kernels (``NUTS``, ``HMC``, ``SA``,
  ``BarkerMH``) on the model's potential, with their own warmup.

Every kernel implements :class:`Kernel` (:mod:`sluice.mcmc.protocol`), so any of
them gets everything a run does (docs/kernels.md).

Examples
--------
>>> import blackjax, jax.numpy as jnp, sluice
>>> run = sluice.sample(
...     lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(3),
...     kernel=sluice.kernels.from_blackjax(blackjax.mala),
...     chains=2, warmup=200, draws=200, progress=False,
... )
>>> run.draws["x"].shape
(2, 200, 3)
"""

from __future__ import annotations

from typing import Any

from sluice.mcmc.kernels import HMC, NUTS, hmc, nuts
from sluice.mcmc.protocol import Kernel, KernelParams, KernelState, Warmup

__all__ = [
    "HMC",
    "NUTS",
    "Kernel",
    "KernelParams",
    "KernelState",
    "Warmup",
    "from_blackjax",
    "from_numpyro",
    "hmc",
    "nuts",
]


def from_blackjax(algorithm: Any, warmup: str | None = "auto", **settings: Any) -> Kernel:
    """A BlackJAX sampling algorithm as a kernel; see
    :func:`sluice.interop.blackjax_kernel.from_blackjax` for the settings."""
    try:
        import blackjax  # noqa: F401
    except ImportError as error:
        raise ImportError("from_blackjax needs BlackJAX: pip install 'sluice[blackjax]'") from error
    from sluice.interop.blackjax_kernel import from_blackjax as build

    return build(algorithm, warmup, **settings)


def from_numpyro(kernel_class: Any, **kernel_kwargs: Any) -> Kernel:
    """A NumPyro MCMC kernel class as a kernel; see
    :func:`sluice.interop.numpyro_kernel.from_numpyro`."""
    try:
        import numpyro  # noqa: F401
    except ImportError as error:
        raise ImportError("from_numpyro needs NumPyro: pip install 'sluice[numpyro]'") from error
    from sluice.interop.numpyro_kernel import from_numpyro as build

    return build(kernel_class, **kernel_kwargs)
