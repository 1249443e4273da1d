r"""Monte Carlo bounds over particles: the ELBO and the importance-weighted bound.

Particle ``i`` is drawn with ``jax.random.fold_in(rng_key, i)``, so a bound and its
gradient depend only on ``rng_key`` and ``num_particles``, not on whether the particles
are evaluated all at once, in rematerialised chunks (the memory of one chunk, gradient
included) or one by one (docs/vi.md, "The particle-key contract"). Nothing in here
prints, writes or reads the clock.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from sluice._checks import check_count
from sluice.model import Model
from sluice.vi.families import Family

__all__ = ["BOUNDS", "elbo", "log_weights", "sample"]

BOUNDS = ("elbo", "iwae")


def _target(model: Model | Callable[[jax.Array], jax.Array]) -> tuple[Callable, Callable, Any]:
    """``(logdensity_fn, draws_fn, consts)``: the model as functions of ``(consts, x)``
    with ``x`` one flat ``(dim,)`` point."""
    if isinstance(model, Model):
        flat = model.flatten()
        return flat.logdensity_fn, flat.draws_fn, flat.consts
    if callable(model):
        return lambda _, x: model(x), lambda _, x: {"x": x}, ()
    raise TypeError(
        f"model must be a sluice.Model or a log-density of one flat point, got {model!r}"
    )


def _check_particles(num_particles: Any, particle_chunk_size: Any, bound: Any) -> None:
    """Static arguments are Python values: check them when the function is traced."""
    check_count("num_particles", num_particles)
    size = particle_chunk_size
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        raise ValueError(
            f"particle_chunk_size must be a positive integer or None, got {particle_chunk_size!r}"
        )
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")


def _over_particles(
    rng_key: jax.Array,
    num_particles: int,
    particle_chunk_size: int | None,
    one_fn: Callable[[jax.Array], jax.Array],
    reduce_fn: Callable[[jax.Array], jax.Array],
    combine_fn: Callable[[jax.Array, jax.Array], jax.Array],
) -> jax.Array:
    """``reduce_fn`` of ``one_fn(fold_in(rng_key, i))`` over all particles ``i``.

    ``reduce_fn`` maps per-particle values to a partial result and the
    associative ``combine_fn`` merges two. Full chunks run in a rematerialised
    ``lax.scan``; the remainder runs as one more, smaller, vmapped chunk, so no
    particle is padded or masked.
    """

    def chunk(indices: jax.Array) -> jax.Array:
        return reduce_fn(_particles(one_fn, rng_key, indices))

    if particle_chunk_size is None or particle_chunk_size >= num_particles:
        return chunk(jnp.arange(num_particles))
    size = particle_chunk_size
    num_full, rest = divmod(num_particles, size)

    @jax.checkpoint
    def body(partial: jax.Array, start: jax.Array) -> tuple[jax.Array, None]:
        return combine_fn(partial, chunk(start + jnp.arange(size))), None

    first = chunk(jnp.arange(size))
    starts = size * jnp.arange(1, num_full)
    partial, _ = jax.lax.scan(body, first, starts)
    if rest:
        partial = combine_fn(partial, chunk(num_full * size + jnp.arange(rest)))
    return partial


def _particles(
    one_fn: Callable[[jax.Array], jax.Array], rng_key: jax.Array, indices: jax.Array
) -> jax.Array:
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(rng_key, indices)
    return jax.vmap(one_fn)(keys)


def _log_weight_fn(
    logdensity_fn: Callable[[Any, jax.Array], jax.Array], consts: Any, family: Family, params: Any
) -> Callable[[jax.Array], jax.Array]:
    """``key -> log p(x) - log q(x)`` for the particle ``x`` drawn with ``key``."""

    def log_weight(key: jax.Array) -> jax.Array:
        x = family.sample(key, params)
        return logdensity_fn(consts, x) - family.log_prob(params, x)

    return log_weight


def _bound(
    logdensity_fn: Callable[[Any, jax.Array], jax.Array],
    consts: Any,
    family: Family,
    params: Any,
    rng_key: jax.Array,
    num_particles: int,
    particle_chunk_size: int | None,
    bound: str,
) -> jax.Array:
    """The bound for a target given as ``logdensity_fn(consts, x)`` (the compiled fit calls this)."""
    over = functools.partial(_over_particles, rng_key, num_particles, particle_chunk_size)
    if bound == "elbo" and family.entropy is not None:

        def log_p(key: jax.Array) -> jax.Array:
            return logdensity_fn(consts, family.sample(key, params))

        return over(log_p, jnp.sum, jnp.add) / num_particles + family.entropy(params)
    log_weight = _log_weight_fn(logdensity_fn, consts, family, params)
    if bound == "elbo":
        return over(log_weight, jnp.sum, jnp.add) / num_particles
    lse = over(log_weight, jax.scipy.special.logsumexp, jnp.logaddexp)
    return lse - math.log(num_particles)


def elbo(
    model: Model | Callable[[jax.Array], jax.Array],
    family: Family,
    params: Any,
    rng_key: jax.Array,
    num_particles: int,
    particle_chunk_size: int | None = None,
    bound: str = "elbo",
) -> jax.Array:
    r"""Monte Carlo estimate of the evidence lower bound (or the IWAE bound).

    With particles :math:`x_i = T(\epsilon_i; \lambda)` reparameterised from
    :math:`\epsilon_i` drawn with ``fold_in(rng_key, i)``, and
    :math:`\log w_i = \log p(x_i) - \log q_\lambda(x_i)`:

    .. math::

        \widehat{\mathrm{ELBO}} = \frac{1}{K} \sum_{i<K} \log p(x_i) + H[q_\lambda]

        \widehat{\mathrm{IWAE}} = \log \frac{1}{K} \sum_{i<K} w_i

    The ELBO uses the family's closed-form entropy :math:`H` when it has one,
    otherwise :math:`-\log q_\lambda(x_i)` per particle; the IWAE bound
    tightens towards :math:`\log Z` as :math:`K` grows [2]_. The function is
    pure (under ``jit``, ``num_particles``, ``particle_chunk_size`` and
    ``bound`` are static).

    Parameters
    ----------
    model
        A :class:`sluice.Model`, or a log-density of ONE flat point ``x`` of
        shape ``(dim,)``. For a Model, ``x`` is the flattened unconstrained
        parameter (see :meth:`sluice.Model.flatten`).
    family, params
        The variational family (e.g. ``sluice.vi.meanfield()``) and its parameters.
    rng_key, num_particles
        Particle ``i < K = num_particles`` is drawn with ``fold_in(rng_key, i)``.
    particle_chunk_size
        Evaluate the particles this many at a time (``None``: all at once).
        The estimate does not depend on it beyond float summation order;
        memory, including that of the gradient, scales with it.
    bound
        ``"elbo"`` or ``"iwae"`` (importance-weighted).

    Returns
    -------
    jax.Array
        A scalar.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import vi
    >>> log_p = lambda x: -0.5 * jnp.sum(x**2)            # N(0, I), unnormalised
    >>> family = vi.meanfield()
    >>> params = family.init(jnp.ones(2))
    >>> key = jax.random.PRNGKey(0)
    >>> a = vi.elbo(log_p, family, params, key, num_particles=1000)
    >>> b = vi.elbo(log_p, family, params, key, num_particles=1000, particle_chunk_size=64)
    >>> bool(jnp.allclose(a, b))
    True
    >>> g = jax.grad(vi.elbo, argnums=2)(log_p, family, params, key, 1000)
    >>> g.loc.shape
    (2,)

    References
    ----------
    .. [1] Kucukelbir, A., Tran, D., Ranganath, R., Gelman, A. and Blei, D. M.
       (2017). Automatic differentiation variational inference. JMLR 18(14).
    .. [2] Burda, Y., Grosse, R. and Salakhutdinov, R. (2016). Importance
       weighted autoencoders. ICLR.
    """
    _check_particles(num_particles, particle_chunk_size, bound)
    logdensity_fn, _, consts = _target(model)
    return _bound(
        logdensity_fn, consts, family, params, rng_key, num_particles, particle_chunk_size, bound
    )


def log_weights(
    model: Model | Callable[[jax.Array], jax.Array],
    family: Family,
    params: Any,
    rng_key: jax.Array,
    num_particles: int,
    particle_chunk_size: int | None = None,
) -> jax.Array:
    r"""Per-particle log importance weights :math:`\log p(x_i) - \log q_\lambda(x_i)`.

    Same particles as :func:`elbo` for the same key (particle ``i`` from
    ``fold_in(rng_key, i)``). Useful for diagnostics (e.g. Pareto-smoothed
    importance sampling of the fit) and for the standard error of a bound.

    Parameters
    ----------
    model, family, params, rng_key, num_particles, particle_chunk_size
        As in :func:`elbo`.

    Returns
    -------
    jax.Array
        ``(num_particles,)``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import vi
    >>> family = vi.meanfield(init_scale=1.0)
    >>> log_p = lambda x: family.log_prob(family.init(jnp.zeros(2)), x)   # q itself
    >>> w = vi.log_weights(log_p, family, family.init(jnp.zeros(2)), jax.random.PRNGKey(1), 5)
    >>> bool(jnp.allclose(w, 0.0, atol=1e-6))
    True
    """
    _check_particles(num_particles, particle_chunk_size, "elbo")
    logdensity_fn, _, consts = _target(model)
    log_weight = _log_weight_fn(logdensity_fn, consts, family, params)
    chunk = functools.partial(_particles, log_weight, rng_key)  # of a vector of indices
    if particle_chunk_size is None or particle_chunk_size >= num_particles:
        return chunk(jnp.arange(num_particles))
    num_full = num_particles // particle_chunk_size * particle_chunk_size
    full = jax.lax.map(chunk, jnp.arange(num_full).reshape(-1, particle_chunk_size))
    return jnp.concatenate([full.reshape(-1), chunk(jnp.arange(num_full, num_particles))])


def sample(
    model: Model | Callable[[jax.Array], jax.Array],
    family: Family,
    params: Any,
    rng_key: jax.Array,
    num_samples: int,
) -> dict[str, jax.Array]:
    """Draws from ``q`` mapped through the model's transform to named quantities.

    Draw ``i`` uses ``fold_in(rng_key, i)``, like particle ``i`` of
    :func:`elbo`; the names are those of the MCMC draws of the same model
    (``"x"`` for a log-density of one flat point).

    Parameters
    ----------
    model, family, params, rng_key
        As in :func:`elbo`.
    num_samples
        Number of draws.

    Returns
    -------
    dict
        ``{name: (num_samples, *shape)}``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, sluice
    >>> from sluice import vi
    >>> model = sluice.Model(lambda p: -0.5 * p["log_s"] ** 2, init={"log_s": jnp.zeros(())},
    ...                      transform=lambda p: {"s": jnp.exp(p["log_s"])})
    >>> family = vi.meanfield()
    >>> draws = vi.sample(model, family, family.init(jnp.zeros(1)), jax.random.PRNGKey(0), 4)
    >>> draws["s"].shape
    (4,)
    """
    check_count("num_samples", num_samples)
    _, draws_fn, consts = _target(model)
    return _draws(draws_fn, consts, family, params, rng_key, num_samples)


def _draws(
    draws_fn: Callable[[Any, jax.Array], dict[str, jax.Array]],
    consts: Any,
    family: Family,
    params: Any,
    rng_key: jax.Array,
    num_samples: int,
) -> dict[str, jax.Array]:
    """:func:`sample` for a model given as ``draws_fn(consts, x)`` (the fit result calls this)."""

    def one(i: jax.Array) -> dict[str, jax.Array]:
        return draws_fn(consts, family.sample(jax.random.fold_in(rng_key, i), params))

    return jax.vmap(one)(jnp.arange(num_samples))
