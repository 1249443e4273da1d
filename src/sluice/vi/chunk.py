"""The compiled chunk of a variational fit: ``chunk_size`` optimisation steps in one program.

Step ``t`` (absolute, from 0) draws its particles from ``fold_in(root_key, t)``,
so the fit does not depend on the chunk size. A short last chunk is masked, not
recompiled, and a non-finite step freezes the state and is recorded in
:class:`FitFailure` (docs/vi.md, "Chunking" and "Failures"). Nothing here
prints, writes or reads the clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp

from sluice._jax import compile as programs
from sluice._jax.tree import PyTree
from sluice.model import Model
from sluice.vi.families import Family
from sluice.vi.particles import _bound, _draws

if TYPE_CHECKING:
    import optax

__all__ = ["FitFailure", "FitProgram", "FitState", "fit_program", "import_optax"]


def import_optax() -> Any:
    """optax, or an ImportError that names the extra to install."""
    try:
        import optax
    except ImportError as error:
        raise ImportError(
            "sluice.vi.fit needs optax, which is not installed: pip install 'sluice[vi]'"
        ) from error
    return optax


class FitFailure(NamedTuple):
    """The first step whose ELBO, gradient or update was not finite."""

    step: jax.Array  # () int32: that step's index; -1 while every step was finite
    elbo: jax.Array  # () float: the ELBO estimate at that step (nan before a failure)
    grad_finite: Any  # like params, bool: which gradient entries were finite at that step
    update_finite: Any  # like params, bool: which updated parameter entries were finite


class FitState(NamedTuple):
    """What the optimisation carries from step to step (and from chunk to chunk)."""

    params: Any  # the family's parameters, e.g. MeanFieldParams of (dim,) float arrays
    opt_state: Any  # the optimizer's state for params
    failure: FitFailure  # the first non-finite step, if any


def _all_finite(tree: PyTree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _select(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def _make_advance(
    logdensity_fn: Callable[[Any, jax.Array], jax.Array],
    family: Family,
    optimizer: optax.GradientTransformation,
    particles: int,
    particle_chunk_size: int | None,
    bound: str,
    chunk_size: int,
) -> Callable:
    """``advance(consts, state, root_key, start, stop) -> (state, elbo (chunk_size,))``, jitted."""

    def loss(params: Any, consts: Any, rng_key: jax.Array) -> jax.Array:
        return -_bound(
            logdensity_fn, consts, family, params, rng_key, particles, particle_chunk_size, bound
        )

    def step(
        consts: Any, root_key: jax.Array, stop: jax.Array, state: FitState, t: jax.Array
    ) -> tuple[FitState, jax.Array]:
        value, grads = jax.value_and_grad(loss)(
            state.params, consts, jax.random.fold_in(root_key, t)
        )
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = import_optax().apply_updates(state.params, updates)
        finite = jnp.isfinite(value) & _all_finite(grads) & _all_finite(params)
        active = (t < stop) & (state.failure.step < 0)
        failure = FitFailure(
            step=t.astype(jnp.int32),
            elbo=-value,
            grad_finite=jax.tree.map(jnp.isfinite, grads),
            update_finite=jax.tree.map(jnp.isfinite, params),
        )
        new = FitState(
            params=_select(active & finite, params, state.params),
            opt_state=_select(active & finite, opt_state, state.opt_state),
            failure=_select(active & ~finite, failure, state.failure),
        )
        return new, -value

    def advance(
        consts: Any, state: FitState, root_key: jax.Array, start: jax.Array, stop: jax.Array
    ) -> tuple[FitState, jax.Array]:
        steps = start + jnp.arange(chunk_size, dtype=jnp.int32)
        return jax.lax.scan(lambda s, t: step(consts, root_key, stop, s, t), state, steps)

    return advance


def _make_init(family: Family, optimizer: optax.GradientTransformation) -> Callable:
    """``init(loc (dim,)) -> FitState``, jitted (one dispatch instead of many small ones)."""

    def init(loc: jax.Array) -> FitState:
        params = family.init(loc)
        return FitState(
            params=params,
            opt_state=optimizer.init(params),
            failure=FitFailure(
                step=jnp.asarray(-1, jnp.int32),
                elbo=jnp.asarray(jnp.nan, loc.dtype),
                grad_finite=jax.tree.map(lambda x: jnp.ones(x.shape, bool), params),
                update_finite=jax.tree.map(lambda x: jnp.ones(x.shape, bool), params),
            ),
        )

    return init


class FitProgram(NamedTuple):
    """A fit's programs (plain functions) and their compile-cache keys."""

    init: Callable  # loc (dim,) -> FitState, see _make_init
    advance: Callable  # see _make_advance
    sample: Callable  # (consts, params, rng_key, num_samples static) -> {group: {name: ...}}
    key: tuple  # what the programs are built from (model fingerprint and settings)

    def run(self, name: str, *args: Any, static: tuple = ()) -> Any:
        """Program ``name`` on ``args`` through the compile cache (:mod:`sluice._jax.compile`)."""
        fn = getattr(self, name)
        if static:
            fn = functools.partial(fn, *static)
        return programs.compiled((f"vi.{name}", *self.key, static), fn, args)(*args)


def fit_program(
    model: Model,
    family: Family,
    optimizer: optax.GradientTransformation,
    optimizer_key: Any,
    particles: int,
    particle_chunk_size: int | None,
    bound: str,
    chunk_size: int,
) -> FitProgram:
    """The programs of a fit. Two models with the same fingerprint differ only in their
    data, which the programs take as an argument, so they share compiled programs; so do
    families and optimizers with equal keys."""
    flat = model.flatten()
    key = (flat.fingerprint, family.cache_key, optimizer_key, particles, particle_chunk_size,
           bound, chunk_size)  # fmt: skip
    return FitProgram(
        init=_make_init(family, optimizer),
        advance=_make_advance(
            flat.logdensity_fn, family, optimizer, particles, particle_chunk_size, bound, chunk_size
        ),
        sample=_make_sample(flat, family),
        key=key,
    )


def _make_sample(flat: Any, family: Family) -> Callable:
    def groups(consts: Any, x: jax.Array) -> dict[str, dict[str, jax.Array]]:
        out = {"posterior": flat.draws_fn(consts, x)}
        if flat.log_likelihood_fn is not None:
            out["log_likelihood"] = flat.log_likelihood_fn(consts, x)
        return out

    def sample(num_samples: int, consts: Any, params: Any, rng_key: jax.Array) -> dict:
        return _draws(groups, consts, family, params, rng_key, num_samples)

    return sample
