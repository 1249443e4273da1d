"""Inverse mass matrices (metrics) of the Euclidean HMC family, and the low-rank fit.

Three forms, each a pytree of arrays for one chain: diagonal, a ``(dim,)``
array; dense, a ``(dim, dim)`` array; low rank plus diagonal, :class:`LowRank`.
:func:`factor` gives the ``L`` with ``L L' = M^{-1}`` of the whitened integrator
(:mod:`sluice.mcmc.hamiltonian`) and :func:`to_x`, :func:`to_y`, :func:`grad_y`
apply it; :func:`fit_low_rank` fits the low-rank form (nutpie's: Seyboldt,
Carlson & Carpenter 2026, arXiv:2603.18845). docs/architecture.md ("Kernels")
gives the algebra, the fit and the measurements behind its choices.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from sluice._jax.batching import batched_by

__all__ = [
    "CUTOFF",
    "LowRank",
    "LowRankFactor",
    "factor",
    "fit_low_rank",
    "grad_y",
    "identity_low_rank",
    "to_x",
    "to_y",
]


# A U of more entries is applied by dots that a cond skips where no direction was kept
# (see _sym).
SKIP_ELEMENTS = 4096
CUTOFF = 2.0  # eigenvalues within [1 / CUTOFF, CUTOFF] are left to the diagonal (docstring)


class LowRank(NamedTuple):
    """``M^{-1} = D^{1/2} (I + U (diag(values) - I) U') D^{1/2}`` (docs/architecture.md).

    Batched along leading axes (chains) like any pytree of arrays.
    """

    diagonal: jax.Array  # (..., dim): D
    vectors: jax.Array  # (..., dim, rank): U, orthonormal columns where values != 1
    values: jax.Array  # (..., rank): eigenvalues in the scaled space; 1 = unused

    def dense(self) -> jax.Array:
        """The ``(..., dim, dim)`` inverse mass matrix (for inspection)."""
        u, lam = self.vectors, self.values
        inner = jnp.einsum("...ik,...k,...jk->...ij", u, lam - 1.0, u)
        eye = jnp.eye(u.shape[-2], dtype=u.dtype)
        s = jnp.sqrt(self.diagonal)
        return s[..., :, None] * (eye + inner) * s[..., None, :]


class LowRankFactor(NamedTuple):
    """``L = D^{1/2} S`` of a :class:`LowRank` metric, ready to apply."""

    scale: jax.Array  # (dim,): sqrt(D)
    vectors: jax.Array  # (dim, rank): U
    up: jax.Array  # (rank,): sqrt(values) - 1 (S)
    down: jax.Array  # (rank,): 1 / sqrt(values) - 1 (S^{-1})


def identity_low_rank(dim: int, rank: int, dtype) -> LowRank:
    """The identity as a :class:`LowRank` metric (every eigenvalue one)."""
    return LowRank(jnp.ones(dim, dtype), jnp.zeros((dim, rank), dtype), jnp.ones(rank, dtype))


def factor(inverse_mass_matrix):
    """``L`` with ``L L' = M^{-1}``: square root (diagonal), Cholesky factor (dense),
    or a :class:`LowRankFactor`."""
    if isinstance(inverse_mass_matrix, LowRank):
        root = jnp.sqrt(inverse_mass_matrix.values)
        return LowRankFactor(
            jnp.sqrt(inverse_mass_matrix.diagonal),
            inverse_mass_matrix.vectors,
            root - 1.0,
            1.0 / root - 1.0,
        )
    if inverse_mass_matrix.ndim == 1:
        return jnp.sqrt(inverse_mass_matrix)
    return jnp.linalg.cholesky(inverse_mass_matrix)


def _sym(f: LowRankFactor, coefficient: jax.Array, z: jax.Array) -> jax.Array:
    """``(I + U diag(coefficient) U') z``.

    Two ``dot`` ops (on XLA:CPU they compile as fast as broadcast products and sums,
    and run faster); for a ``U`` of at least :data:`SKIP_ELEMENTS` entries, inside a
    branch skipped where every coefficient is zero."""
    u = f.vectors

    def apply(z):
        return z + u @ (coefficient * (z @ u))

    if u.size < SKIP_ELEMENTS:
        return apply(z)
    return jax.lax.cond(jnp.any(coefficient != 0), apply, lambda z: z, z)


def to_x(f, y: jax.Array) -> jax.Array:
    """``L y``."""
    if isinstance(f, LowRankFactor):
        return f.scale * _sym(f, f.up, y)
    return f * y if f.ndim == 1 else f @ y


def to_y(f, x: jax.Array) -> jax.Array:
    """``L^{-1} x``."""
    if isinstance(f, LowRankFactor):
        return _sym(f, f.down, x / f.scale)
    if f.ndim == 1:
        return x / f
    return jax.scipy.linalg.solve_triangular(f, x, lower=True)


def grad_y(f, g: jax.Array) -> jax.Array:
    """``L' g``: the gradient in whitened coordinates."""
    if isinstance(f, LowRankFactor):
        return _sym(f, f.up, f.scale * g)
    return f * g if f.ndim == 1 else f.T @ g


def fit_low_rank(
    positions, gradients, valid, diagonal, rank: int, **settings
) -> tuple[LowRank, jax.Array]:
    """nutpie's low-rank metric from ``(n, dim)`` draws and gradients (docs/architecture.md),
    and its misfit.

    ``valid`` (``(n,)`` bool) marks the rows that hold draws; ``diagonal`` is
    the Fisher diagonal ``D`` of the window; ``settings``: ``cutoff``, ``gamma``
    of :func:`_fit_low_rank`. The metric has ``rank`` columns; if the fit is not
    finite, every eigenvalue is one (the diagonal alone).

    The misfit is the largest ``1 / corr(u'x, u'g)^2`` over the kept directions
    ``u`` of the window's draws and gradients (0 where none is kept): 1 where the
    gradient along ``u`` is linear in the position, as the fit assumes (a Gaussian
    along ``u``), and ``k`` where only ``1 / k`` of its variance is. Integration by
    parts gives ``cov(u'x, u'g) = -1`` for any posterior, so in population it is
    also ``var(u'x) var(u'g)``, the square of the ratio of the draws' scale along
    ``u`` to the scale that the gradients there imply.

    Under ``vmap`` the chains are fitted one after the other (``lax.map``): jaxlib's
    batched SVD on CPU hangs with several CPU devices running at once.
    """

    def one(positions, gradients, valid, diagonal, _consts):
        return _fit_low_rank(positions, gradients, valid, diagonal, rank, **settings)

    def one_by_one(*args):
        return jax.lax.map(lambda a: one(*a, ()), args[:-1])

    return batched_by(one, one_by_one)(positions, gradients, valid, diagonal, ())


def _fit_low_rank(
    positions: jax.Array,
    gradients: jax.Array,
    valid: jax.Array,
    diagonal: jax.Array,
    rank: int,
    cutoff: float = CUTOFF,
    gamma: float = 1e-5,
) -> tuple[LowRank, jax.Array]:
    """:func:`fit_low_rank` for one chain. ``gamma`` regularises both covariances
    by ``n * gamma`` (nutpie's ``gamma``), in the scaled space."""
    dtype = positions.dtype
    n = jnp.maximum(jnp.sum(valid), 1).astype(dtype)
    weight = valid.astype(dtype)[:, None]
    scale = jnp.sqrt(diagonal)

    def centred(a):
        mean = jnp.sum(a * weight, axis=0) / n
        return (a - mean) * weight

    x = centred(positions) / scale  # (n, dim): D^{-1/2} (x - mean)
    g = centred(gradients) * scale  # (n, dim): D^{1/2} (g - mean)
    # An orthonormal basis of the span of the draws (their right singular vectors);
    # directions the draws do not span (singular values ~0) are left out: unit
    # variance for both draws and gradients there, so their eigenvalue is one.
    _, singular, vt = jnp.linalg.svd(x, full_matrices=False)  # vt: (m, dim), m = min(n, dim)
    used = singular > singular[0] * jnp.finfo(dtype).eps ** 0.5
    basis = vt.T * used
    # C = P'P / n + ridge (nutpie's n * gamma) is A'A with A = [P / sqrt(n); sqrt(ridge)],
    # so its square roots come from singular values of A, never from eigenvalues of a
    # product: with fewer draws than dimensions C_g tracks C_x sample by sample, and
    # C_g^(1/2) C_x C_g^(1/2) has about the square of their condition, beyond float32.
    root_ridge = jnp.diag(jnp.where(used, jnp.sqrt(n * gamma), 1.0).astype(dtype))
    a_x = jnp.concatenate([x @ basis / jnp.sqrt(n), root_ridge])  # (n + m, m)
    a_g = jnp.concatenate([g @ basis / jnp.sqrt(n), root_ridge])
    _, s_g, v_g = jnp.linalg.svd(a_g, full_matrices=False)  # C_g = v_g' diag(s_g^2) v_g
    # Sigma = C_g^{-1} # C_x = C_g^{-1/2} (C_g^{1/2} C_x C_g^{1/2})^{1/2} C_g^{-1/2}, with
    # C_g^{1/2} C_x C_g^{1/2} = R'R for R = A_x C_g^{1/2}
    _, s_r, v_r = jnp.linalg.svd(a_x @ ((v_g.T * s_g) @ v_g), full_matrices=False)
    inv_root_g = (v_g.T / s_g) @ v_g
    sigma = inv_root_g @ ((v_r.T * s_r) @ v_r) @ inv_root_g
    values, vectors = jnp.linalg.eigh(0.5 * (sigma + sigma.T))
    values = jnp.maximum(values, jnp.finfo(dtype).tiny)
    log_values = jnp.log(values)
    keep = min(rank, basis.shape[1])
    order = jnp.argsort(-jnp.abs(log_values))[:keep]
    chosen = values[order]
    chosen = jnp.where(jnp.abs(log_values[order]) > jnp.log(cutoff), chosen, 1.0)
    u = basis @ vectors[:, order]  # (dim, keep)
    if keep < rank:  # fewer directions than the rank: pad with unused ones
        u = jnp.pad(u, ((0, 0), (0, rank - keep)))
        chosen = jnp.pad(chosen, (0, rank - keep), constant_values=1.0)
    finite = jnp.all(jnp.isfinite(u)) & jnp.all(jnp.isfinite(chosen))
    xu, gu = x @ u, g @ u  # (n, rank): the draws and gradients along each direction
    inverse_r2 = jnp.sum(xu**2, axis=0) * jnp.sum(gu**2, axis=0) / jnp.sum(xu * gu, axis=0) ** 2
    misfit = jnp.max(jnp.where(chosen != 1.0, inverse_r2, 0.0), initial=0.0)
    fitted = LowRank(
        diagonal,
        jnp.where(finite, u, 0.0).astype(dtype),
        jnp.where(finite, chosen, 1.0).astype(dtype),
    )
    return fitted, jnp.where(finite, misfit, 0.0).astype(dtype)
