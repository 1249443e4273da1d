"""``fit()``: VI's host loop, maximising a particle bound with optax in compiled chunks.

The chunks are :mod:`sluice.vi.chunk`'s program; this loop validates the
arguments before anything is traced, runs the chunks through
:func:`~sluice.runtime.loop.pipelined` (MCMC's loop too) and raises
:class:`FitError` when a chunk comes back with a non-finite step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from sluice._checks import check_count, check_int
from sluice._jax.tree import PyTree, path_name
from sluice.model import Model, as_model
from sluice.runtime.loop import pipelined
from sluice.runtime.progress import ChunkProgress
from sluice.stats._layout import element_labels
from sluice.vi.chunk import FitProgram, FitState, fit_program, import_optax
from sluice.vi.families import Family, get_family
from sluice.vi.particles import BOUNDS

if TYPE_CHECKING:
    import optax

__all__ = ["Fit", "FitError", "FitInfo", "fit"]

DEFAULT_LEARNING_RATE = 1e-2
DEFAULT_CHUNK_SIZE = 100


class FitError(ValueError):
    """A step of :func:`fit` produced a non-finite ELBO, gradient or parameter.

    Attributes
    ----------
    step
        Index of the failing step.
    parameters
        Names of the parameters whose gradient (or update) was not finite,
        e.g. ``"loc of beta[3]"``.
    params
        The family's parameters before the failing step (host arrays).
    elbo
        The ELBO trace of the steps before the failing one.
    """

    def __init__(
        self, message: str, step: int, parameters: list[str], params: Any, elbo: np.ndarray
    ) -> None:
        super().__init__(message)
        self.step = step
        self.parameters = parameters
        self.params = params
        self.elbo = elbo


@dataclasses.dataclass
class FitInfo:
    """Settings and timings of a fit."""

    family: str
    particles: int
    steps: int
    chunk_size: int
    particle_chunk_size: int | None
    bound: str
    seed: int
    optimizer: optax.GradientTransformation
    seconds: float = 0.0

    @property
    def num_chunks(self) -> int:
        return -(-self.steps // self.chunk_size)


# -- the result ------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False, repr=False)
class Fit:
    """A fitted variational approximation.

    Attributes
    ----------
    params
        The family's fitted parameters (e.g. :class:`MeanFieldParams`), as
        host arrays, in the model's flat unconstrained space.
    elbo
        ``(steps,)`` ELBO estimate at each step, before that step's update.
    family, model, info
        The :class:`Family`, the :class:`sluice.Model` and the :class:`FitInfo`.
    """

    model: Model
    family: Family
    params: Any
    elbo: np.ndarray
    info: FitInfo
    _program: FitProgram

    def mean(self) -> PyTree:
        """The mean of ``q`` in unconstrained space, as a parameter pytree like ``init``."""
        return self.model.flatten().unravel(jnp.asarray(self.family.mean(self.params)))

    def _groups(self, num_samples: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
        check_count("num_samples", num_samples)
        check_int("seed", seed)
        flat = self.model.flatten()
        key = _root_key(seed)
        out = self._program.run("sample", flat.consts, self.params, key, static=(num_samples,))
        return jax.device_get(out)

    def sample(self, num_samples: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
        """Independent draws from ``q``, ``{name: ndarray (num_samples, *shape)}``, as
        :func:`sluice.vi.sample` with the key ``PRNGKey(seed)``."""
        return self._groups(num_samples, seed)["posterior"]

    def to_arviz(self, num_samples: int = 1000, seed: int = 0) -> Any:
        """An ``arviz.InferenceData`` of ``num_samples`` draws from ``q`` as one chain.

        Groups: ``posterior``, ``log_likelihood`` (when the model defines it)
        and ``observed_data`` (when the model has it).
        """
        import arviz as az

        from sluice.io.arviz import constant_dataset, dataset

        model = self.model
        data = {}
        for group, values in self._groups(num_samples, seed).items():
            one_chain = {name: np.asarray(v)[None] for name, v in values.items()}
            data[group] = dataset(one_chain, model.dims, model.coords)
        if model.observed_data:  # ArviZ's default dims ({name}_dim_{i})
            data["observed_data"] = constant_dataset(model.observed_data, None, None)
        idata = az.InferenceData(**data)
        idata.posterior.attrs.update(
            inference="vi",
            family=self.family.name,
            particles=self.info.particles,
            steps=self.info.steps,
        )
        return idata

    def summary(self, num_samples: int = 4000, seed: int = 0, **kwargs: Any) -> Any:
        """A pandas DataFrame of ``arviz.summary`` over draws from ``q`` (``kind="stats"``)."""
        import arviz as az

        kwargs.setdefault("kind", "stats")
        return az.summary(self.to_arviz(num_samples, seed), **kwargs)

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Fit({i.family}, {i.particles} particles x {i.steps} steps, "
            f"final ELBO {self.elbo[-1]:.4g}, {i.seconds:.2f}s)"
        )


# -- the host loop -----------------------------------------------------------------------------


def fit(
    model: Model | Callable,
    *,
    init: Any = None,
    family: str | Family = "meanfield",
    particles: int = 32,
    steps: int = 1000,
    optimizer: optax.GradientTransformation | None = None,
    seed: int = 0,
    progress: bool = True,
    bound: str = "elbo",
    particle_chunk_size: int | None = None,
    chunk_size: int | None = None,
) -> Fit:
    """Fit a variational approximation by stochastic optimisation of the ELBO.

    Each step estimates the bound and its gradient with ``particles``
    particles (see :func:`sluice.vi.elbo`) and applies one optax update.

    Parameters
    ----------
    model, init
        As in :func:`sluice.sample`; ``init`` is where ``q`` is centred at the
        start (a function ``init(rng_key)`` is called with ``PRNGKey(0)``).
    family
        ``"meanfield"`` (default), ``"fullrank"``, or a family object such as
        ``sluice.vi.fullrank(init_scale=1.0)``.
    particles
        Particles per step (``K``); gradient noise falls as ``1/sqrt(K)``.
    steps
        Optimisation steps.
    optimizer
        An optax ``GradientTransformation`` (minimising ``-ELBO``); default
        ``optax.adam(1e-2)``.
    seed
        Step ``t`` draws its particles from ``fold_in(PRNGKey(seed), t)``.
    progress
        Show a progress bar (only on a terminal).
    bound
        ``"elbo"`` or ``"iwae"`` (importance-weighted, ``K`` particles).
    particle_chunk_size
        As in :func:`sluice.vi.elbo`.
    chunk_size
        Steps per compiled chunk (default ``min(steps, 100)``). The fit does
        not depend on it.

    Returns
    -------
    Fit

    Raises
    ------
    FitError
        When a step's ELBO, gradient or updated parameters are not finite.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice import vi
    >>> result = vi.fit(lambda x: -0.5 * jnp.sum((x - 3.0) ** 2), init=jnp.zeros(2),
    ...                 particles=16, steps=800, optimizer=None, progress=False)
    >>> [round(float(m), 1) for m in result.mean()]
    [3.0, 3.0]
    >>> result.sample(100)["x"].shape
    (100, 2)
    """
    check_count("particles", particles)
    check_count("steps", steps)
    check_int("seed", seed)
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    if particle_chunk_size is not None:
        check_count("particle_chunk_size", particle_chunk_size)
    if chunk_size is not None:
        check_count("chunk_size", chunk_size)
    optax = import_optax()
    optimizer_key: Any = optimizer
    if optimizer is None:
        optimizer = optax.adam(DEFAULT_LEARNING_RATE)
        optimizer_key = ("optax.adam", DEFAULT_LEARNING_RATE)
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"optimizer must be an optax GradientTransformation (e.g. optax.adam(1e-2)), "
            f"got {optimizer!r}"
        )
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True or False, got {progress!r}")
    family = get_family(family)
    model = as_model(model, init)
    point = model.example_point()
    loc, _ = ravel_pytree(point)
    if not np.all(np.isfinite(np.asarray(loc))):
        raise ValueError(f"init must be finite, got {point!r}")

    particles, steps, seed = int(particles), int(steps), int(seed)
    chunk = min(chunk_size or DEFAULT_CHUNK_SIZE, steps)
    program = fit_program(
        model, family, optimizer, optimizer_key, particles, particle_chunk_size, bound, chunk
    )
    consts = model.flatten().consts
    root = _root_key(seed)
    state = program.run("init", loc)
    info = FitInfo(
        family=family.name,
        particles=particles,
        steps=steps,
        chunk_size=chunk,
        particle_chunk_size=particle_chunk_size,
        bound=bound,
        seed=seed,
        optimizer=optimizer,
    )
    trace = np.full(steps, np.nan, dtype=np.dtype(loc.dtype))
    t0 = time.perf_counter()
    with ChunkProgress("vi", steps, chunk, 1, progress) as bar:

        def dispatch(start: int) -> tuple[FitState, jax.Array]:
            nonlocal state
            state, elbo_chunk = program.run("advance", consts, state, root, start, steps)
            return state, elbo_chunk

        def finish(start: int, result: tuple[FitState, jax.Array]) -> None:
            p_state, p_elbo = result
            n = min(chunk, steps - start)
            p_elbo, failed = jax.device_get((p_elbo, p_state.failure.step))
            trace[start : start + n] = p_elbo[:n]
            if failed >= 0:
                raise _fit_error(model, family, p_state, trace, int(failed))
            bar.advance(n, elbo=float(np.mean(trace[start : start + n])))

        pipelined(range(0, steps, chunk), dispatch, finish)
    info.seconds = time.perf_counter() - t0
    return Fit(model, family, jax.device_get(state.params), trace, info, program)


def _root_key(seed: int) -> Any:
    """``PRNGKey(seed)``, built on the host for seeds in ``[0, 2**31)`` (an eager key
    is a program call)."""
    if 0 <= seed < 2**31:  # PRNGKey(seed) is [0, seed]
        return np.asarray([0, seed], np.uint32)
    return jax.random.PRNGKey(seed)


def _non_finite_entries(finite: Any, coordinates: list[str]) -> list[str]:
    """Names like ``loc of beta[3]`` for the False entries of a params-shaped bool pytree."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(finite)[0]:
        field = path_name(path) or "params"
        leaf = np.asarray(leaf)
        for idx in np.argwhere(~leaf):
            if all(leaf.shape[a] == len(coordinates) for a in range(leaf.ndim)):
                out.append(f"{field} of {', '.join(coordinates[i] for i in idx)}")
            else:
                out.append(f"{field}[{', '.join(map(str, idx))}]")
    return out


def _fit_error(
    model: Model, family: Family, state: FitState, trace: np.ndarray, step: int
) -> FitError:
    """The error for the first non-finite step, with the last finite parameters attached
    (a failing step is never applied, so ``state`` holds them)."""
    failure = jax.device_get(state.failure)
    coordinates = element_labels(model.example_point())  # of the flat vector, e.g. beta[3]
    bad_grad = _non_finite_entries(failure.grad_finite, coordinates)
    bad_update = _non_finite_entries(failure.update_finite, coordinates)
    elbo = float(failure.elbo)
    parts = [f"the variational fit stopped at step {step}:"]
    if not math.isfinite(elbo):
        parts.append(f"the ELBO estimate is {elbo};")
    if bad_grad:
        parts.append(f"the ELBO gradient is not finite for {_listing(bad_grad)}.")
        parameters = bad_grad
    elif bad_update:
        parts.append(f"the optimizer's update made {_listing(bad_update)} non-finite.")
        parameters = bad_update
    else:
        parameters = []
    params = jax.device_get(state.params)
    if step == 0:
        flat = model.flatten()
        value = float(flat.logdensity_fn(flat.consts, jnp.asarray(family.mean(params))))
        parts.append(f"log_density at the initial mean is {value}.")
    parts.append(
        "The log density must be finite wherever q puts mass: write constrained parameters "
        "in unconstrained form (e.g. log of a scale); otherwise lower the learning rate, "
        "use more particles, or start from a better init. The last finite parameters are "
        "in this error's .params."
    )
    return FitError(" ".join(parts), step, parameters, params, trace[:step].copy())


def _listing(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")
