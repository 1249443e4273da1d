"""Numerical kernels shared by the statistics (pure ``jax.numpy``; no state).

* compensated (TwoSum) accumulation, so that float32 sums over 10^7 draws keep
  their digits without ``jax_enable_x64``;
* Chan's merge of (count, mean, co-moment) summaries;
* the multi-chain ESS formula of ArviZ 0.23 written on summaries (chain
  means and variances, summed autocovariances) instead of draws, vectorised.

Shapes in docstrings: ``D`` is the number of scalar elements of a draw, ``L``
the number of lags.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "Compensated",
    "GeyerResult",
    "chan_merge",
    "compensated_add",
    "compensated_merge",
    "compensated_value",
    "cummax_rows",
    "cumsum_rows",
    "geyer_tau",
    "materialize",
    "row_add",
]


class Compensated(NamedTuple):
    """A float sum kept as an unevaluated pair ``hi + lo`` (Kahan/TwoSum).

    ``hi`` carries the rounded running sum and ``lo`` the rounding errors that
    ``hi`` lost, so the pair holds about twice the working precision: a float32
    pair is good to ~1e-14 relative over 10^8 additions, where a plain float32
    running sum drifts by ~1e-2.
    """

    hi: jax.Array  # (...,) working dtype: rounded sum
    lo: jax.Array  # (...,) working dtype: accumulated rounding errors of hi


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Knuth's TwoSum: ``s + e == a + b`` exactly, ``s = fl(a + b)``."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _renormalise(hi: jax.Array, lo: jax.Array) -> Compensated:
    """Fast2Sum of ``hi + lo`` (``|hi| >= |lo|``): keeps ``lo`` below half an ulp of ``hi``.

    Without it ``lo`` grows with the rounding errors it collects (to ~1e-3 of the
    sum after 10^7 float32 additions) and its own additions lose digits.
    """
    h = hi + lo
    return Compensated(h, lo - (h - hi))


def compensated_add(acc: Compensated, x: jax.Array) -> Compensated:
    """Add ``x`` to a compensated sum (elementwise)."""
    s, e = _two_sum(acc.hi, x)
    return _renormalise(s, acc.lo + e)


def compensated_merge(a: Compensated, b: Compensated) -> Compensated:
    """Sum of two compensated sums."""
    s, e = _two_sum(a.hi, b.hi)
    return _renormalise(s, a.lo + b.lo + e)


def compensated_value(acc: Compensated) -> jax.Array:
    """The sum rounded to the working precision."""
    return acc.hi + acc.lo


def compensated_zeros(shape: tuple[int, ...], dtype) -> Compensated:
    return Compensated(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def chan_merge(
    n_a: jax.Array,
    mean_a: jax.Array,
    comoment_a: jax.Array,
    n_b: jax.Array,
    mean_b: jax.Array,
    comoment_b: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Chan, Golub & LeVeque's merge of two (count, mean, co-moment) summaries.

    ``comoment`` is ``sum (v - mean)^2``, elementwise. Empty summaries (``n = 0``)
    are the identity.
    """
    n = n_a + n_b
    nf = jnp.maximum(n, 1).astype(mean_a.dtype)
    wa = n_a.astype(mean_a.dtype)
    wb = n_b.astype(mean_a.dtype)
    delta = mean_b - mean_a
    mean = mean_a + delta * (wb / nf)
    comoment = comoment_a + comoment_b + delta * delta * (wa * wb / nf)
    return n, mean, comoment


class GeyerResult(NamedTuple):
    """Outcome of Geyer's initial-sequence truncation on ``L + 1`` lags."""

    tau: jax.Array  # (...,) float: integrated autocorrelation time (before ArviZ's floor)
    terminated: jax.Array  # (...,) bool: the sequence stopped within the lags given
    last: jax.Array | None = None  # (...,) float: the last pair's monotone value (running min)


def geyer_tau(
    mean_acov: jax.Array, within_mean: jax.Array, var_plus: jax.Array, length: jax.Array
) -> GeyerResult:
    """ArviZ 0.23's ``_ess`` truncation, vectorised, from mean autocovariances.

    With ``rho_t = 1 - (W - mean_acov[t]) / var_plus`` (``rho_0 = 1``), pairs
    ``s_k = rho_2k + rho_2k+1`` are accepted while positive (initial positive
    sequence), replaced by their running minimum (initial monotone sequence),
    and ``tau = -1 + 2 sum_{k < K} s_k + rho_2K`` where ``K`` is the first pair
    that stops the sequence (its even term counted once when positive, as
    ArviZ and Stan do). This reproduces ArviZ's loop exactly whenever the pair
    that stops it lies within the lags given; otherwise ``terminated`` is False
    and ``tau`` sums all lags given (a truncated, downward-biased value).

    Parameters
    ----------
    mean_acov
        ``(..., L + 1)``: mean over chains of the biased autocovariances
        (divided by the chain length), lags ``0..L``.
    within_mean
        ``(...)``: ``W``, the mean of the ddof=1 chain variances.
    var_plus
        ``(...)``: ``(n - 1) / n * W + var_ddof1(chain means)``.
    length
        ``(...)`` or scalar: draws per chain ``n``; ArviZ stops pairs at
        ``t >= n - 3``.

    Returns
    -------
    GeyerResult
    """
    num_lags = mean_acov.shape[-1] - 1
    num_pairs = (num_lags - 1) // 2  # pairs k = 1..num_pairs use lags 2k, 2k + 1 <= L
    rho = 1.0 - (within_mean[..., None] - mean_acov) / var_plus[..., None]
    rho = rho.at[..., 0].set(1.0)
    even = rho[..., 0 : 2 * num_pairs + 1 : 2]  # rho_0, rho_2, ..., rho_{2 num_pairs}
    odd = rho[..., 1 : 2 * num_pairs + 2 : 2]
    s = even + odd  # (..., num_pairs + 1): pair sums s_0 .. s_num_pairs
    k = jnp.arange(num_pairs + 2)
    n = jnp.asarray(length, dtype=rho.dtype)[..., None]
    allowed = (2 * k - 1) < (n - 3)  # ArviZ's loop bound t < n - 3 with t = 2k - 1
    allowed = jnp.broadcast_to(allowed, s.shape[:-1] + allowed.shape[-1:])
    # Pair k >= 1 is processed iff allowed, available (lags given, not NaN) and every
    # earlier pair (0..k-1) was positive.
    positive = s > 0
    all_before = jnp.cumprod(
        jnp.concatenate([jnp.ones_like(positive[..., :1]), positive[..., :-1]], axis=-1), axis=-1
    ).astype(bool)
    kk = k[: num_pairs + 1]
    processed = (kk >= 1) & allowed[..., : num_pairs + 1] & all_before & ~jnp.isnan(s)
    k_last = jnp.max(jnp.where(processed, kk, 0), axis=-1)
    last_s = jnp.take_along_axis(s, k_last[..., None], axis=-1)[..., 0]
    next_allowed = jnp.take_along_axis(allowed, (k_last + 1)[..., None], axis=-1)[..., 0]
    # The loop ends by itself after pair k_last when that pair is not positive or the next
    # is out of bounds; otherwise it needs a pair beyond the lags given.
    terminated = (last_s <= 0) | ~next_allowed
    # Initial monotone sequence: accepted pairs 0..k_last-1 replaced by their running min.
    running_min = jax.lax.cummin(s, axis=s.ndim - 1)
    total = jnp.sum(jnp.where(kk < k_last[..., None], running_min, 0.0), axis=-1)
    last_even = jnp.take_along_axis(even, k_last[..., None], axis=-1)[..., 0]
    # The even term of pair k_last counts once: stored when that pair was accepted
    # (s >= 0), or by ArviZ's "improve estimation" step when positive (rho_0 = 1 if k_last = 0).
    keep_even = (last_s >= 0) | (last_even > 0)
    tau = -1.0 + 2.0 * total + jnp.where(keep_even, last_even, 0.0)
    last = jnp.take_along_axis(running_min, k_last[..., None], axis=-1)[..., 0]
    return GeyerResult(tau, terminated, last)


def _running(op: Any, start: Any, a: jax.Array) -> jax.Array:
    """``op`` accumulated along the rows of ``a`` ``(D, G)`` from ``start``, as a scan
    over the ``G`` columns (``start`` is ``op``'s identity: ``a`` is then read once,
    where XLA would compute a fused producer of ``a`` twice for a start of column 0)."""

    def step(acc, column):
        acc = op(acc, column)
        return acc, acc

    return jax.lax.scan(step, jnp.full_like(a[:, 0], start), a.T)[1].T


def cumsum_rows(a: jax.Array) -> jax.Array:
    """``jnp.cumsum(a, axis=1)`` of a ``(D, G)`` array, as a scan over the ``G`` columns.

    Same numbers (sequential sums); about 10x faster than ``jnp.cumsum`` on CPU for
    histogram-sized rows, which XLA lowers to a windowed reduction.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> cumsum_rows(jnp.asarray([[1, 2, 3], [4, 5, 6]])).tolist()
    [[1, 3, 6], [4, 9, 15]]
    """
    return _running(jnp.add, 0, a)


def cummax_rows(a: jax.Array) -> jax.Array:
    """``jax.lax.cummax(a, axis=1)`` of a ``(D, G)`` array, as a scan over the ``G``
    columns (the same values: a maximum is exact), which XLA:CPU runs several times
    faster than the windowed reduction it lowers ``cummax`` to.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> cummax_rows(jnp.asarray([[1, 3, 2], [4, 2, 6]])).tolist()
    [[1, 3, 3], [4, 4, 6]]
    """
    low = -jnp.inf if jnp.issubdtype(a.dtype, jnp.floating) else jnp.iinfo(a.dtype).min
    return _running(jnp.maximum, low, a)


def materialize(tree: Any) -> Any:
    """``tree`` computed once and kept (XLA would otherwise recompute a cheap elementwise
    producer inside every consumer): the output of a one-trip loop is a buffer."""
    return jax.lax.fori_loop(0, 1, lambda _, t: t, tree)


def row_add(a: jax.Array, i: jax.Array, v: jax.Array) -> jax.Array:
    """``a.at[i].add(v)`` for a traced scalar ``i`` as a dynamic slice update.

    On CPU, XLA runs ``scatter`` ops (what ``.at[i]`` lowers to) through a slow
    generic loop; a dynamic-update-slice is a plain in-place copy.
    """
    row = jax.lax.dynamic_index_in_dim(a, i, keepdims=False)
    return jax.lax.dynamic_update_index_in_dim(a, row + v, i, 0)
