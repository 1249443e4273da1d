"""NumPyro's MCMC kernels as chunk-engine kernels: :func:`from_numpyro`.

A NumPyro kernel class (``numpyro.infer.NUTS``, ``HMC``, ``SA``, ``BarkerMH``)
is built on the model's potential inside the chunk and advanced by its own
``sample``, one iteration at a time, with sluice's key: its warmup runs in its
state as under ``numpyro.infer.MCMC``. NumPyro fixes its warmup schedule when a
kernel is initialised, so a run specialises the kernel to its warmup length
(:meth:`NumPyroKernel.for_warmup`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sluice.interop.kernel_settings import describe, setting_key, stats_shapes
from sluice.mcmc.protocol import Warmup, constant_warmup

__all__ = ["NumPyroKernel", "NumPyroState", "from_numpyro"]


class NumPyroState(NamedTuple):
    """A NumPyro kernel's state, seen through the engine's names."""

    inner: Any  # HMCState, SAState, BarkerMHState

    @property
    def position(self) -> Any:
        return self.inner.z

    @property
    def logdensity(self) -> jax.Array:
        return -self.inner.potential_energy

    @property
    def logdensity_grad(self) -> jax.Array:
        grad = getattr(self.inner, "z_grad", None)
        return jnp.zeros_like(self.inner.z) if grad is None else -grad


def from_numpyro(kernel_class: Any, **kernel_kwargs: Any) -> NumPyroKernel:
    """A kernel for :func:`sluice.sample` from a NumPyro MCMC kernel class.

    Parameters
    ----------
    kernel_class
        ``numpyro.infer.NUTS``, ``HMC``, ``SA`` or ``BarkerMH`` (or another
        ``MCMCKernel`` that takes ``potential_fn``).
    **kernel_kwargs
        The class's settings (``target_accept_prob=0.9``, ``dense_mass=True``,
        ``max_tree_depth=8``, ...); not ``model`` or ``potential_fn``, which
        come from the run's model.

    Examples
    --------
    >>> import numpyro, sluice
    >>> sluice.kernels.from_numpyro(numpyro.infer.NUTS, target_accept_prob=0.9).name
    'numpyro.NUTS'
    """
    import inspect

    from numpyro.infer.mcmc import MCMCKernel

    if not (isinstance(kernel_class, type) and issubclass(kernel_class, MCMCKernel)):
        raise TypeError(
            "kernel_class must be a NumPyro MCMC kernel class such as numpyro.infer.NUTS, "
            f"got {kernel_class!r}"
        )
    accepted = inspect.signature(kernel_class).parameters
    if "potential_fn" not in accepted:
        raise TypeError(f"{kernel_class.__name__} does not take a potential_fn")
    for name in ("model", "potential_fn"):
        if name in kernel_kwargs:
            raise TypeError(
                f"from_numpyro builds {kernel_class.__name__} on the run's model: "
                f"do not pass {name}="
            )
    unknown = sorted(set(kernel_kwargs) - set(accepted))
    if unknown:
        raise TypeError(f"{kernel_class.__name__} has no setting(s) {unknown}")
    kernel_class(potential_fn=lambda z: 0.0, **kernel_kwargs)  # its own checks, now
    return NumPyroKernel(kernel_class, tuple(sorted(kernel_kwargs.items())))


@dataclasses.dataclass(frozen=True, eq=False)
class NumPyroKernel:
    """A NumPyro kernel class behind :class:`sluice.mcmc.protocol.Kernel` (see :func:`from_numpyro`).

    Equal settings compare (and hash) equal: arrays by their bytes, code by identity.
    """

    kernel_class: Any
    settings: tuple[tuple[str, Any], ...]
    num_warmup: int | None = None  # set by the run (for_warmup)
    lockstep: float = 1.5
    bookkeeping_bytes_per_dim: int = 100

    def _identity(self) -> tuple:
        settings = tuple((k, setting_key(v)) for k, v in self.settings)
        return (self.kernel_class, settings, self.num_warmup)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NumPyroKernel) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def name(self) -> str:
        return f"numpyro.{self.kernel_class.__name__}"

    def for_warmup(self, num_warmup: int) -> NumPyroKernel:
        """This kernel for a run of ``num_warmup`` warmup iterations."""
        return dataclasses.replace(self, num_warmup=int(num_warmup))

    def to_config(self) -> dict[str, Any]:
        """A JSON-able description (code by its qualified name)."""
        return {
            "name": self.name,
            "external": True,
            "settings": {k: describe(v) for k, v in self.settings},
            "num_warmup": self.num_warmup,
        }

    def _built(self, logdensity_fn: Callable, rng_key: jax.Array, position: jax.Array):
        """A fresh NumPyro kernel on ``logdensity_fn``, initialised at ``position``
        (NumPyro's ``sample`` needs the closures its ``init`` makes)."""
        if self.num_warmup is None:
            raise ValueError(
                f"{self.name} has no warmup length: it is set by sluice.sample "
                "(kernel.for_warmup(num_warmup) outside a run)"
            )
        with warnings.catch_warnings():  # from_numpyro let NumPyro warn once already
            warnings.simplefilter("ignore", UserWarning)
            kernel = self.kernel_class(
                potential_fn=lambda z: -logdensity_fn(z), **dict(self.settings)
            )
        state = kernel.init(rng_key, self.num_warmup, position, (), {})
        return kernel, state

    def init(
        self, position: jax.Array, logdensity_fn: Callable, rng_key: jax.Array | None = None
    ) -> NumPyroState:
        key = jax.random.PRNGKey(0) if rng_key is None else rng_key
        return NumPyroState(self._built(logdensity_fn, key, position)[1])

    def step(
        self, rng_key: jax.Array, state: NumPyroState, logdensity_fn: Callable, params: Any
    ) -> tuple[NumPyroState, dict[str, jax.Array]]:
        kernel, _ = self._built(logdensity_fn, rng_key, state.position)  # traced, then unused
        inner = kernel.sample(state.inner._replace(rng_key=rng_key), (), {})
        new = NumPyroState(inner)
        dtype = new.position.dtype
        fields = inner._asdict()
        stats = {
            "lp": jnp.asarray(new.logdensity, dtype),
            "acceptance_rate": jnp.asarray(fields.get("accept_prob", 1.0), dtype),
            "diverging": jnp.asarray(fields.get("diverging", False), jnp.bool_),
            "n_steps": jnp.asarray(fields.get("num_steps", 1 if "z_grad" in fields else 0),
                                   jnp.int32),
        }  # fmt: skip
        if "energy" in fields:
            stats["energy"] = jnp.asarray(fields["energy"], dtype)
        step_size = getattr(fields.get("adapt_state"), "step_size", None)
        if step_size is not None:
            stats["step_size"] = jnp.asarray(step_size, dtype)
        return new, stats

    def stats_shapes(self, dtype: Any) -> dict[str, jax.ShapeDtypeStruct]:
        """Shapes of :meth:`step`'s statistics, from a traced step on a stand-in Gaussian."""
        return stats_shapes(self if self.num_warmup is not None else self.for_warmup(1), dtype)

    def warmup(self) -> Warmup:
        """NumPyro adapts inside its own state: sluice's warmup only counts iterations."""
        return constant_warmup(())
