"""BlackJAX's samplers as chunk-engine kernels: :func:`from_blackjax`.

A BlackJAX ``SamplingAlgorithm`` factory is built inside the chunk on the model's
log-density, its parameters traced values, fixed or tuned by a warmup that runs
one iteration at a time inside the chunks. docs/kernels.md ("BlackJAX") gives
the warmups' defaults and the sample statistics' names.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from sluice.interop import chees, mclmc_tuning
from sluice.interop.kernel_settings import describe, digest, setting_key, stats_shapes
from sluice.mcmc.kernels import window_warmup
from sluice.mcmc.protocol import Warmup, constant_warmup

__all__ = ["BlackJAXKernel", "from_blackjax"]

WARMUPS = ("window", "step_size", "mclmc", "chees")
_TUNES = {
    "window": ("step_size", "inverse_mass_matrix"),
    "step_size": ("step_size",),
    "mclmc": ("L", "step_size", "inverse_mass_matrix"),
    "chees": ("step_size", "inverse_mass_matrix", "integration_steps_params"),
}
# the warmup each algorithm gets by default, and its target acceptance
_DEFAULT_WARMUP = {
    "nuts": ("window", 0.8),
    "hmc": ("window", 0.8),
    "dynamic_hmc": ("window", 0.8),
    "barker_proposal": ("window", 0.574),
    "adjusted_mclmc": ("window", 0.9),
    "adjusted_mclmc_dynamic": ("window", 0.9),
    "mala": ("step_size", 0.574),
    "mclmc": ("mclmc", None),
}


def from_blackjax(
    algorithm: Any,
    warmup: str | None = "auto",
    *,
    target_accept: float | None = None,
    dense_mass: bool = False,
    initial_step_size: float = 1.0,
    gradients_per_step: int | None = None,
    **params: Any,
) -> BlackJAXKernel:
    """A kernel for :func:`sluice.sample` from a BlackJAX sampling algorithm.

    Parameters
    ----------
    algorithm
        A BlackJAX ``SamplingAlgorithm`` factory: ``blackjax.nuts``,
        ``blackjax.hmc``, ``blackjax.mala``, ``blackjax.mclmc``,
        ``blackjax.adjusted_mclmc``, ``blackjax.barker_proposal``, ...
    warmup
        How the parameters left out are tuned: ``"window"``, ``"step_size"``,
        ``"mclmc"``, ``"chees"``, ``None`` (nothing tuned), or ``"auto"``: the
        algorithm's usual one (docs/kernels.md), ``None`` if the step size is given.
    target_accept
        The step-size adaptation's target (default 0.8 for the HMC family, 0.9
        for adjusted MCLMC, 0.574 for MALA and Barker).
    dense_mass
        Adapt a dense inverse mass matrix (``"window"``).
    initial_step_size
        Where the step-size search starts.
    gradients_per_step
        Gradient evaluations per integration step, when sluice cannot read it
        from the integrator (a custom one).
    **params
        The algorithm's parameters (``step_size=0.1``, ``num_integration_steps=
        16``, ``integrator=blackjax.mcmc.integrators.mclachlan``, ...); arrays
        are traced values, everything else is a compile-time setting.

    Examples
    --------
    >>> import blackjax, sluice
    >>> kernel = sluice.kernels.from_blackjax(blackjax.hmc, num_integration_steps=8)
    >>> kernel.name, kernel.warmup_name
    ('blackjax.hmc', 'window')
    """
    name = _algorithm_name(algorithm)
    try:
        signature = inspect.signature(algorithm.differentiable)
    except (TypeError, ValueError) as error:  # pragma: no cover - a C-level callable
        raise TypeError(f"cannot read the parameters of blackjax.{name}") from error
    accepted = list(signature.parameters)[1:]  # after logdensity_fn
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TypeError(f"{name} has no parameter(s) {unknown}; its parameters are {accepted}")
    default_warmup, default_target = _DEFAULT_WARMUP.get(name, (None, 0.8))
    if warmup == "auto":  # the usual warmup, unless the step size is given
        warmup = None if "step_size" in params else default_warmup
    if warmup is not None and warmup not in WARMUPS:
        raise ValueError(f"warmup must be one of {(*WARMUPS, None, 'auto')}, got {warmup!r}")
    if warmup is not None and "step_size" in params:
        raise ValueError(
            f"warmup={warmup!r} tunes step_size, so it cannot be given (step_size="
            f"{params['step_size']!r}); pass warmup=None to keep it fixed"
        )
    if warmup is not None and "step_size" not in accepted:
        raise ValueError(f"warmup={warmup!r} tunes step_size, which {name} does not take")
    if warmup == "chees":  # ChEES jitters dynamic HMC's trajectories (sluice.interop.chees)
        if name != "dynamic_hmc":
            raise ValueError(f"warmup='chees' runs blackjax.dynamic_hmc, not blackjax.{name}")
        for fixed in ("inverse_mass_matrix", "integration_steps_params"):
            if fixed in params:
                raise ValueError(f"warmup='chees' tunes {fixed}: do not pass it")
        params.setdefault("integration_steps_fn", chees.jittered_steps)
        params.setdefault("next_random_arg_fn", chees.next_key)
    tuned = tuple(p for p in _TUNES.get(warmup, ()) if p in accepted and p not in params)
    required = [
        p
        for p, spec in list(signature.parameters.items())[1:]
        if spec.default is inspect.Parameter.empty and spec.kind is not spec.VAR_KEYWORD
    ]
    if name == "adjusted_mclmc" and "num_integration_steps" not in params:
        required.append("num_integration_steps")  # None by default, needed all the same
    missing = [p for p in required if p not in params and p not in tuned]
    if missing:
        raise TypeError(
            f"{name} needs {missing}: pass them to from_blackjax"
            + ("" if warmup else " or choose a warmup that tunes them")
        )
    if target_accept is None:
        target_accept = default_target if default_target is not None else 0.8
    if not isinstance(target_accept, int | float) or not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be a number in (0, 1), got {target_accept!r}")
    if not isinstance(dense_mass, bool):
        raise TypeError(f"dense_mass must be True or False, got {dense_mass!r}")
    if not isinstance(initial_step_size, int | float) or not initial_step_size > 0:
        raise ValueError(f"initial_step_size must be a positive number, got {initial_step_size!r}")
    if gradients_per_step is None:
        integrator = params.get("integrator", signature.parameters.get("integrator"))
        if isinstance(integrator, inspect.Parameter):
            integrator = integrator.default
        gradients_per_step = _gradients_per_step(integrator) if integrator is not None else 1
    elif not isinstance(gradients_per_step, int) or gradients_per_step < 1:
        raise ValueError(f"gradients_per_step must be a positive int, got {gradients_per_step!r}")
    arrays, static = {}, {}
    for key, value in params.items():
        if isinstance(value, np.ndarray | jax.Array) and np.ndim(value) >= 1:
            arrays[key] = np.asarray(value)
        else:
            static[key] = value
    return BlackJAXKernel(
        algorithm=algorithm,
        name=f"blackjax.{name}",
        warmup_name=warmup,
        tuned=tuned,
        static=tuple(sorted(static.items())),
        arrays=tuple(sorted(arrays.items())),
        target_accept=float(target_accept),
        dense_mass=dense_mass,
        initial_step_size=float(initial_step_size),
        gradients_per_step=gradients_per_step,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class BlackJAXKernel:
    """A BlackJAX algorithm behind :class:`sluice.mcmc.protocol.Kernel` (see :func:`from_blackjax`).

    Equal settings compare (and hash) equal: the algorithm by identity, arrays
    by their bytes.
    """

    algorithm: Any
    name: str
    warmup_name: str | None
    tuned: tuple[str, ...]
    static: tuple[tuple[str, Any], ...]
    arrays: tuple[tuple[str, np.ndarray], ...]
    target_accept: float
    dense_mass: bool
    initial_step_size: float
    gradients_per_step: int
    lockstep: float = 1.5
    bookkeeping_bytes_per_dim: int = 100

    # -- identity ------------------------------------------------------------------
    def _identity(self) -> tuple:
        static = tuple((k, setting_key(v)) for k, v in self.static)
        arrays = tuple((k, digest(v)) for k, v in self.arrays)
        return (id(self.algorithm), self.name, self.warmup_name, self.tuned, static, arrays,
                self.target_accept, self.dense_mass, self.initial_step_size,
                self.gradients_per_step)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlackJAXKernel) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def to_config(self) -> dict[str, Any]:
        """A JSON-able description; code (the algorithm, an integrator) by its
        qualified name, arrays by their SHA-256. A store records it; a resumed
        run is given the kernel again and checked against it."""
        return {
            "name": self.name,
            "external": True,
            "warmup": self.warmup_name,
            "tuned": list(self.tuned),
            "static": {k: describe(v) for k, v in self.static},
            "arrays": {k: digest(v) for k, v in self.arrays},
            "target_accept": self.target_accept,
            "dense_mass": self.dense_mass,
            "initial_step_size": self.initial_step_size,
            "gradients_per_step": self.gradients_per_step,
        }

    # -- the kernel ------------------------------------------------------------------
    def _build(self, logdensity_fn: Callable, params: dict[str, jax.Array]) -> Any:
        return self.algorithm(logdensity_fn, **dict(self.static), **params)

    def init(
        self, position: jax.Array, logdensity_fn: Callable, rng_key: jax.Array | None = None
    ) -> Any:
        init = self.algorithm.init
        if len(inspect.signature(init).parameters) >= 3:  # MCLMC's momentum, dynamic HMC's
            if rng_key is None:
                rng_key = jax.random.PRNGKey(0)
            return init(position, logdensity_fn, rng_key)
        return init(position, logdensity_fn)

    def step(
        self, rng_key: jax.Array, state: Any, logdensity_fn: Callable, params: dict
    ) -> tuple[Any, dict[str, jax.Array]]:
        new, info = self._build(logdensity_fn, params).step(rng_key, state)
        dtype = state.position.dtype
        real = lambda x: jnp.asarray(x, dtype)  # noqa: E731
        fields = info._asdict() if hasattr(info, "_asdict") else {}
        steps = jnp.asarray(fields.get("num_integration_steps", 1), jnp.int32)
        stats = {
            "lp": real(new.logdensity),
            "acceptance_rate": real(fields.get("acceptance_rate", 1.0)),
            "n_steps": steps * self.gradients_per_step,
        }
        if "is_divergent" in fields:
            stats["diverging"] = jnp.asarray(fields["is_divergent"], jnp.bool_)
        elif "nonans" in fields:  # MCLMC: a step to a non-finite point is refused
            ok = jnp.asarray(fields["nonans"], jnp.bool_) & jnp.isfinite(new.logdensity)
            new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state)
            stats["diverging"] = jnp.logical_not(ok)
        else:
            stats["diverging"] = jnp.zeros((), jnp.bool_)
        if "energy" in fields:
            stats["energy"] = real(fields["energy"])
        if "num_trajectory_expansions" in fields:
            stats["tree_depth"] = jnp.asarray(fields["num_trajectory_expansions"], jnp.int32)
        if "energy_change" in fields:
            stats["energy_error"] = real(fields["energy_change"])
        step_size = params.get("step_size", dict(self.static).get("step_size"))
        if step_size is not None:
            stats["step_size"] = real(step_size)
        if self.warmup_name == "chees":  # for the warmup only (not recorded)
            stats["_initial"] = state.position
            stats["_proposal"] = fields["proposal"].position
            stats["_momentum"] = fields["proposal"].momentum
        return new, stats

    def stats_shapes(self, dtype: Any) -> dict[str, jax.ShapeDtypeStruct]:
        """Shapes of :meth:`step`'s statistics, from a traced step on a stand-in Gaussian."""
        dims = [a.shape[0] for _, a in self.arrays]
        return stats_shapes(self, dtype, dims[0] if dims else 2)  # MCLMC refuses one dimension

    # -- warmup ----------------------------------------------------------------------
    def warmup(self) -> Warmup:
        fixed = {k: jnp.asarray(v) for k, v in self.arrays}
        if self.warmup_name is None:
            return constant_warmup(fixed)
        if self.warmup_name == "mclmc":
            return mclmc_tuning.warmup(self.tuned, fixed)
        if self.warmup_name == "chees":
            return chees.warmup(self.initial_step_size)

        def to_params(step_size, inverse_mass_matrix):
            out = {**fixed, "step_size": step_size}
            if "inverse_mass_matrix" in self.tuned:
                out["inverse_mass_matrix"] = inverse_mass_matrix
            return out

        return window_warmup(
            self.target_accept,
            self.dense_mass,
            self.initial_step_size,
            to_params,
            step_size_only=self.warmup_name == "step_size",
        )


def _algorithm_name(algorithm: Any) -> str:
    differentiable = getattr(algorithm, "differentiable", None)
    if differentiable is None or not hasattr(algorithm, "init"):
        raise TypeError(
            "algorithm must be a BlackJAX sampling algorithm such as blackjax.nuts or "
            f"blackjax.mala, got {algorithm!r}"
        )
    import blackjax  # the name users know it by: blackjax.<name> (its module's, of aliases)

    module = (getattr(differentiable, "__module__", "") or "").rsplit(".", 1)[-1]
    names = [name for name, value in vars(blackjax).items() if value is algorithm]
    return module if module in names or not names else names[0]


def _gradients_per_step(integrator: Callable) -> int:
    """Gradient evaluations per step of a BlackJAX integrator, from its coefficients
    (a palindrome ``b1, a1, b2, ..., b1``; the last gradient is reused)."""
    for cell in getattr(integrator, "__closure__", None) or ():
        contents = cell.cell_contents
        if (
            isinstance(contents, list | tuple)
            and contents
            and all(isinstance(c, float) for c in contents)
        ):
            return max(1, len(contents) // 2)
    raise ValueError(
        f"cannot tell how many gradients the integrator {integrator!r} evaluates per step; "
        "pass gradients_per_step= to from_blackjax"
    )
