"""Variational families: bundles of pure functions of ONE flat point.

A :class:`Family` is a NamedTuple of pure functions over a small parameter
NamedTuple, for one point ``x`` of shape ``(dim,)`` in the model's unconstrained
space; particles are added with ``jax.vmap`` (docs/vi.md, "Families and their
parameters"). Nothing in here prints, writes or reads the clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Family", "FullRankParams", "MeanFieldParams", "fullrank", "meanfield"]

_LOG_2PI = math.log(2.0 * math.pi)


class Family(NamedTuple):
    """A variational family as a bundle of pure functions of one flat point.

    ``P`` below is the family's parameter NamedTuple (e.g. :class:`MeanFieldParams`).
    """

    name: str  # short label, e.g. "meanfield"
    init: Callable[[jax.Array], Any]  # loc (dim,) -> P: q centred at loc
    sample: Callable[[jax.Array, Any], jax.Array]  # (rng_key, P) -> x (dim,), reparameterised
    log_prob: Callable[[Any, jax.Array], jax.Array]  # (P, x (dim,)) -> () log q(x)
    entropy: Callable[[Any], jax.Array] | None  # P -> () closed-form entropy, or None
    mean: Callable[[Any], jax.Array]  # P -> (dim,) mean of q
    scale_tril: Callable[[Any], jax.Array]  # P -> (dim, dim) Cholesky factor of q's covariance
    key: Hashable | None = None  # a description of the settings: equal keys share programs

    @property
    def cache_key(self) -> Hashable:
        """What identifies this family's programs: ``key``, else its functions."""
        if self.key is not None:
            return self.key
        return ("functions", self.name, self.init, self.sample, self.log_prob, self.entropy,
                self.mean, self.scale_tril)  # fmt: skip


class MeanFieldParams(NamedTuple):
    """Parameters of :func:`meanfield`."""

    loc: jax.Array  # (dim,) float: mean of each coordinate
    log_scale: jax.Array  # (dim,) float: log standard deviation of each coordinate


class FullRankParams(NamedTuple):
    """Parameters of :func:`fullrank`: covariance ``L L^T`` with ``L`` lower triangular."""

    loc: jax.Array  # (dim,) float: mean
    log_diag: jax.Array  # (dim,) float: log of L's diagonal (L's diagonal is positive)
    off_diag: jax.Array  # (dim, dim) float: strictly lower triangle = L below the diagonal;
    # its diagonal and upper triangle are unused (zero gradient)


def _check_init_scale(init_scale: float) -> float:
    ok = isinstance(init_scale, int | float) and not isinstance(init_scale, bool)
    if not ok or not math.isfinite(init_scale) or init_scale <= 0:
        raise ValueError(f"init_scale must be a positive finite number, got {init_scale!r}")
    return float(init_scale)


def _log_normal(z: jax.Array, log_diag: jax.Array) -> jax.Array:
    """``log N(x | loc, L L^T)`` from ``z = L^-1 (x - loc)`` and ``log diag L``."""
    return -0.5 * jnp.sum(z**2) - jnp.sum(log_diag) - 0.5 * z.shape[-1] * _LOG_2PI


def _entropy(log_diag: jax.Array) -> jax.Array:
    """The entropy of ``N(loc, L L^T)`` from ``log diag L``."""
    return jnp.sum(log_diag) + 0.5 * log_diag.shape[-1] * (1.0 + _LOG_2PI)


def meanfield(init_scale: float = 0.1) -> Family:
    """The mean-field (diagonal) Gaussian family.

    .. math::

        q(x) = \\prod_{j=1}^{d} N(x_j \\mid \\mu_j, \\sigma_j^2), \\qquad
        \\sigma_j = \\exp(\\text{log\\_scale}_j),

        H[q] = \\sum_j \\log \\sigma_j + \\tfrac{d}{2} (1 + \\log 2\\pi).

    Parameters
    ----------
    init_scale
        Standard deviation of every coordinate at initialisation
        (``log_scale = log(init_scale)``).

    Returns
    -------
    Family
        With parameters :class:`MeanFieldParams`, keyed by its settings.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice.vi import meanfield
    >>> family = meanfield(init_scale=1.0)
    >>> params = family.init(jnp.zeros(3))
    >>> family.sample(jax.random.PRNGKey(0), params).shape
    (3,)
    >>> print(f"{float(family.entropy(params)):.4f}")  # 3/2 (1 + log 2 pi)
    4.2568
    """
    log_init_scale = math.log(_check_init_scale(init_scale))

    def init(loc: jax.Array) -> MeanFieldParams:
        loc = jnp.asarray(loc)
        return MeanFieldParams(loc=loc, log_scale=jnp.full_like(loc, log_init_scale))

    def sample(rng_key: jax.Array, params: MeanFieldParams) -> jax.Array:
        eps = jax.random.normal(rng_key, params.loc.shape, params.loc.dtype)
        return params.loc + jnp.exp(params.log_scale) * eps

    def log_prob(params: MeanFieldParams, x: jax.Array) -> jax.Array:
        return _log_normal((x - params.loc) * jnp.exp(-params.log_scale), params.log_scale)

    return Family(
        name="meanfield",
        init=init,
        sample=sample,
        log_prob=log_prob,
        entropy=lambda params: _entropy(params.log_scale),
        mean=lambda params: params.loc,
        scale_tril=lambda params: jnp.diag(jnp.exp(params.log_scale)),
        key=("meanfield", float(init_scale)),
    )


def _tril(params: FullRankParams) -> jax.Array:
    return jnp.tril(params.off_diag, -1) + jnp.diag(jnp.exp(params.log_diag))


def fullrank(init_scale: float = 0.1) -> Family:
    """The full-rank Gaussian family, parameterised by a Cholesky factor.

    .. math::

        q(x) = N(x \\mid \\mu, L L^\\top), \\qquad
        L = \\operatorname{tril}(\\text{off\\_diag}, -1)
            + \\operatorname{diag}(\\exp(\\text{log\\_diag})),

        H[q] = \\sum_j \\log L_{jj} + \\tfrac{d}{2} (1 + \\log 2\\pi).

    Parameters
    ----------
    init_scale
        As in :func:`meanfield` (``L`` starts as ``init_scale * I``).

    Returns
    -------
    Family
        With parameters :class:`FullRankParams`, keyed by its settings.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from sluice.vi import fullrank
    >>> family = fullrank(init_scale=2.0)
    >>> params = family.init(jnp.zeros(2))._replace(off_diag=jnp.array([[0.0, 0.0], [1.0, 0.0]]))
    >>> family.scale_tril(params)
    Array([[2., 0.],
           [1., 2.]], dtype=float32)
    """
    log_init_scale = math.log(_check_init_scale(init_scale))

    def init(loc: jax.Array) -> FullRankParams:
        loc = jnp.asarray(loc)
        d = loc.shape[-1]
        return FullRankParams(
            loc=loc,
            log_diag=jnp.full_like(loc, log_init_scale),
            off_diag=jnp.zeros((d, d), loc.dtype),
        )

    def sample(rng_key: jax.Array, params: FullRankParams) -> jax.Array:
        eps = jax.random.normal(rng_key, params.loc.shape, params.loc.dtype)
        return params.loc + _tril(params) @ eps

    def log_prob(params: FullRankParams, x: jax.Array) -> jax.Array:
        z = jax.scipy.linalg.solve_triangular(_tril(params), x - params.loc, lower=True)
        return _log_normal(z, params.log_diag)

    return Family(
        name="fullrank",
        init=init,
        sample=sample,
        log_prob=log_prob,
        entropy=lambda params: _entropy(params.log_diag),
        mean=lambda params: params.loc,
        scale_tril=_tril,
        key=("fullrank", float(init_scale)),
    )


FAMILIES: dict[str, Callable[[], Family]] = {"meanfield": meanfield, "fullrank": fullrank}


def get_family(family: str | Family) -> Family:
    """Resolve ``"meanfield"``, ``"fullrank"`` or a :class:`Family` (checked on the host)."""
    if isinstance(family, Family):
        return family
    if isinstance(family, str) and family in FAMILIES:
        return FAMILIES[family]()
    raise ValueError(
        f"family must be one of {sorted(FAMILIES)} or a sluice.vi.Family, got {family!r}"
    )
