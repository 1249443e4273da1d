"""Convergence diagnostics of ArviZ 0.23, computed while sampling.

One fused statistic (:func:`sluice.stats.fused.fuse`) of three parts
(:mod:`sluice.stats.parts`) keeps, per chain and per scalar element of a draw:

* split moments (exact): counts, compensated sums of ``y = x - c`` and ``y^2``
  per split half, pooled sums of ``y^3`` and ``y^4``, exact extremes
  (:mod:`sluice.stats.split_moments`);
* histograms per split half on the pilot grid (:mod:`sluice.stats.histogram`);
* lag states (:mod:`sluice.stats.autocorrelation`, :mod:`sluice.stats.effective_size`).

This module holds their settings and the public factories; the outputs are
read by :mod:`sluice.stats.readout`.

The split follows ArviZ: with ``num_draws`` ``N`` per chain, draws
``0 .. N//2 - 1`` form the first half and ``N - N//2 .. N - 1`` the second;
for odd ``N`` the middle draw belongs to neither (it still counts in the
mean, sd, quantiles and histograms, as ArviZ's pooled statistics do).

``merge`` *closes* the chains it is given (folds each split half into
between-chain summaries: Chan states of the half means, summed centred
autocovariances, pooled histograms, and a Chan state of the halves'
quantiles) and adds the closed parts; ``finalize`` closes and reads:

==================  ===================================================  =========
output              definition (ArviZ 0.23)                               accuracy
==================  ===================================================  =========
``mean``, ``sd``    pooled, ``ddof=1``                                    exact
``r_hat_split``     ``az.rhat(method="split")``                           exact
``ess_mean``        ``az.ess(method="mean")``                             exact if Geyer stops within ``max_lag``
``mcse_mean``       ``az.mcse(method="mean")``                            as ``ess_mean``
``r_hat``           ``az.rhat()`` (rank-normalised, folded)               ~1e-3 (grid + first order)
``ess_bulk``        ``az.ess(method="bulk")``                             few % (<10% on NUTS, N >= 1000)
``ess_tail``        ``az.ess(method="tail")``                             10-35% on NUTS, N >= 1000 (rough below)
``mcse_sd``         ``az.mcse(method="sd")``                              few % (N >= 1000)
``quantiles``       ``np.quantile`` (linear)                              far below MCSE
``hdi``             ``az.hdi`` (narrowest interval)                       within MCSE
==================  ===================================================  =========

Per-chain values come from ``finalize`` of one chain's state (R-hat is NaN
for one chain, as in ArviZ), pooled values from a merged state.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sluice._jax import compile as programs
from sluice.stats._layout import unflatten
from sluice.stats.autocorrelation import LagSettings
from sluice.stats.base import Statistic
from sluice.stats.fused import FusedState, Geometry, Part, fuse
from sluice.stats.grid import GridSpec
from sluice.stats.histogram import HistogramSettings
from sluice.stats.parts import histogram_part, lags_part, moments_part
from sluice.stats.readout import read_flat

PyTree = Any

__all__ = [
    "DiagnosticsSettings",
    "diagnostics",
    "ess",
    "hdi",
    "mcse",
    "quantiles",
    "rhat",
    "summary_statistics",
]


class DiagnosticsSettings(NamedTuple):
    """Static settings of the fused diagnostics statistic (built by the factories)."""

    num_draws: int | None  # draws per chain (None: no split, single half)
    histogram: HistogramSettings | None  # None: no quantiles, rank R-hat, bulk/tail ESS
    lags: LagSettings | None  # None: no ESS / MCSE
    probs: tuple[float, ...]  # quantile levels reported
    hdi_prob: float | None  # HDI mass reported (None: no HDI)
    max_elements: int | None  # histograms and lags for at most this many elements per quantity


def _check_num_draws(num_draws: Any) -> None:
    if not isinstance(num_draws, int | np.integer) or isinstance(num_draws, bool) or num_draws < 1:
        raise ValueError(f"num_draws must be a positive integer, got {num_draws!r}")


def _check_probs(name: str, probs: Any) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in probs)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of probabilities, got {probs!r}") from None
    if not values or any(not (0.0 <= p <= 1.0) for p in values):
        raise ValueError(f"{name} must be a non-empty sequence of numbers in [0, 1], got {probs!r}")
    return values


def _check_prob(name: str, prob: Any) -> float:
    if (
        isinstance(prob, bool)
        or not isinstance(prob, int | float | np.floating)
        or not 0.0 < prob <= 1.0
    ):
        raise ValueError(f"{name} must be a number in (0, 1], got {prob!r}")
    return float(prob)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_max_elements(max_elements: Any) -> int | None:
    if max_elements is None:
        return None
    if (
        isinstance(max_elements, bool)
        or not isinstance(max_elements, int | np.integer)
        or max_elements < 1
    ):
        raise ValueError(f"max_elements must be a positive integer or None, got {max_elements!r}")
    return int(max_elements)


def histogram_settings(
    mantissa_bits: int = 5, binades: int = 8, pilot_draws: int = 16, floor_offset: int = 0,
    num_levels: int = 12,
) -> HistogramSettings:  # fmt: skip
    """Validated :class:`~sluice.stats.histogram.HistogramSettings` (see :mod:`sluice.stats.grid`)."""
    spec = GridSpec.checked(mantissa_bits, binades)
    if isinstance(pilot_draws, bool) or not isinstance(pilot_draws, int) or pilot_draws < 1:
        raise ValueError(f"pilot_draws must be a positive integer, got {pilot_draws!r}")
    if isinstance(floor_offset, bool) or not isinstance(floor_offset, int) or abs(floor_offset) > 8:
        raise ValueError(f"floor_offset must be an integer in [-8, 8], got {floor_offset!r}")
    if isinstance(num_levels, bool) or not isinstance(num_levels, int) or not 2 <= num_levels <= 64:
        raise ValueError(f"num_levels must be an integer in [2, 64], got {num_levels!r}")
    return HistogramSettings(spec, pilot_draws, floor_offset, num_levels)


def lag_settings(
    num_draws: int,
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    proxies: bool = True,
    reference_draw: int | None = None,
    min_blocks: int = 32,
    pilot_draws: int = 16,
    proxy_lags: int | None = None,
) -> LagSettings:
    """Validated :class:`~sluice.stats.autocorrelation.LagSettings`."""
    if isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0:
        raise ValueError(f"max_lag must be a non-negative integer, got {max_lag!r}")
    try:
        sizes = tuple(block_sizes)
    except TypeError:
        raise ValueError(
            f"block_sizes must be a sequence of integers, got {block_sizes!r}"
        ) from None
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes) or any(
        b2 % b1 or b2 <= b1 for b1, b2 in itertools.pairwise(sizes)
    ):
        raise ValueError(
            "block_sizes must be increasing positive integers, each a multiple of the previous, "
            f"got {block_sizes!r}"
        )
    if block_lags is None:  # the finest level 4 lags (it runs most often), the others 8
        block_lags = tuple(4 if i == 0 else 8 for i in range(len(sizes)))
    lags = (block_lags,) * len(sizes) if isinstance(block_lags, int | np.integer) else block_lags
    try:
        lags = tuple(lags)
    except TypeError:
        raise ValueError(
            f"block_lags must be a positive integer or one per block size, got {block_lags!r}"
        ) from None
    if len(lags) != len(sizes) or any(
        isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in lags
    ):
        raise ValueError(
            f"block_lags must be a positive integer or one per block size, got {block_lags!r}"
        )
    lags = tuple(int(v) for v in lags)
    if max_lag == 0 and not sizes:
        raise ValueError("give max_lag > 0 or some block_sizes: the ESS needs lags")
    if isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or min_blocks < 4:
        raise ValueError(f"min_blocks must be an integer >= 4, got {min_blocks!r}")
    if reference_draw is None:
        reference_draw = min(max(num_draws // 16, 2 * pilot_draws), max(num_draws // 2 - 1, 0))
    if (
        isinstance(reference_draw, bool)
        or not isinstance(reference_draw, int)
        or reference_draw < 0
    ):
        raise ValueError(f"reference_draw must be a non-negative integer, got {reference_draw!r}")
    if proxy_lags is None:  # bulk and tails: block means alone are noisy on antithetic chains
        proxy_lags = 3
    if proxy_lags not in (0, 1, 3):
        raise ValueError(f"proxy_lags must be 0, 1 or 3, got {proxy_lags!r}")
    if not proxies or max_lag == 0:
        proxy_lags = 0
    half = num_draws // 2
    return LagSettings(
        max_lag, sizes, lags, proxies, reference_draw, half, min_blocks, proxy_lags,
        num_draws - half,
    )  # fmt: skip


def _build(
    num_draws: int | None,
    *,
    histogram: bool,
    lags: bool,
    proxies: bool,
    probs: tuple[float, ...] = (),
    hdi_prob: float | None = None,
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    reference_draw: int | None = None,
    proxy_lags: int | None = None,
    mantissa_bits: int = 5,
    binades: int = 8,
    pilot_draws: int = 16,
    num_levels: int = 12,
    max_elements: int | None = None,
) -> DiagnosticsSettings:
    if num_draws is not None:
        _check_num_draws(num_draws)
    hs = (
        histogram_settings(mantissa_bits, binades, pilot_draws, num_levels=num_levels)
        if histogram
        else None
    )
    ls = None
    if lags:
        ls = lag_settings(
            num_draws, max_lag, block_sizes, block_lags, proxies=proxies,
            reference_draw=reference_draw, pilot_draws=pilot_draws, proxy_lags=proxy_lags,
        )  # fmt: skip
    return DiagnosticsSettings(
        num_draws, hs, ls, probs, hdi_prob, _check_max_elements(max_elements)
    )


def _parts(settings: DiagnosticsSettings) -> dict[str, Part]:
    parts = {"moments": moments_part(settings.num_draws)}
    if settings.histogram is not None:
        parts["histogram"] = histogram_part(settings.histogram, settings.num_draws)
    if settings.lags is not None:
        parts["lags"] = lags_part(settings.lags, settings.histogram, settings.num_draws)
    return parts


def _fused(settings: DiagnosticsSettings) -> tuple:
    """``(init, update, merge, finalize_flat)`` of the fused parts for ``settings``."""
    geometry = Geometry(settings.num_draws, settings.max_elements)
    return fuse(_parts(settings), geometry, lambda state, parts: read_flat(state, parts, settings))


def _init(settings: DiagnosticsSettings, example: PyTree) -> FusedState:
    return _fused(settings)[0](example)


def _update(settings: DiagnosticsSettings, state: FusedState, draw: PyTree) -> FusedState:
    return _fused(settings)[1](state, draw)


# Called on concrete states they compile once per settings and shapes (sluice's program
# cache, fast options when small); under an outer jit (the engine's programs) inlined.
def _merge(a: FusedState, b: FusedState, *, settings: DiagnosticsSettings) -> FusedState:
    return programs.eager(("diagnostics.merge", settings), _fused(settings)[2], a, b)


def _finalize_flat(state: FusedState, *, settings: DiagnosticsSettings) -> dict[str, jax.Array]:
    return programs.eager(("diagnostics.finalize", settings), _fused(settings)[3], state)


def _statistic(
    settings: DiagnosticsSettings, output: str, select: Callable[[PyTree, dict], Any]
) -> Statistic:
    # statistics that differ only in their outputs share init / update / merge (and so
    # their compiled programs); finalize reads the outputs this one reports
    core = settings._replace(probs=(), hdi_prob=None)

    def finalize(state: FusedState) -> Any:
        return select(state.pilot, _finalize_flat(state, settings=settings))

    return Statistic(
        functools.partial(_init, core),
        functools.partial(_update, core),
        functools.partial(_merge, settings=core),
        finalize,
        ("diagnostics", settings, output),
    )


def _one(key: str) -> Callable[[PyTree, dict], PyTree]:
    return lambda pilot, flat: unflatten(pilot, flat[key])


def _all(settings: DiagnosticsSettings) -> Callable[[PyTree, dict], dict[str, PyTree]]:
    """Every output as a tree, plus the settings a table needs (interval levels)."""

    def select(pilot: PyTree, flat: dict) -> dict[str, Any]:
        out: dict[str, Any] = {k: unflatten(pilot, v) for k, v in flat.items()}
        if settings.probs:
            out["quantile_levels"] = jnp.asarray(settings.probs)
        if settings.hdi_prob is not None:
            out["hdi_prob"] = jnp.asarray(settings.hdi_prob)
        return out

    return select


def diagnostics(
    num_draws: int,
    *,
    probs: tuple[float, ...] = (0.03, 0.5, 0.97),
    hdi_prob: float | None = 0.94,
    histogram: bool = True,
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    reference_draw: int | None = None,
    proxy_lags: int | None = None,
    max_elements: int | None = 4096,
    mantissa_bits: int = 5,
    binades: int = 8,
    pilot_draws: int = 16,
    num_levels: int = 12,
) -> Statistic:
    """All diagnostics of ``az.summary`` (and more) for every scalar element of a draw.

    Parameters
    ----------
    num_draws
        Draws per chain: fixes ArviZ's split halves.
    probs
        Quantile levels reported under ``"quantiles"`` (empty: none).
    hdi_prob
        Mass of the highest-density interval (``None``: none).
    histogram
        Keep histograms: quantiles, HDI, rank R-hat and the bulk / tail ESS
        need them. Without, the exact moment and lag outputs remain.
    max_lag
        Exact lags of the draws: ``ess_mean`` equals ArviZ's whenever Geyer's
        sequence stops within them (typical for NUTS, whose autocorrelation
        time is a few draws); ``ess_mean_resolution`` is 1 then. On antithetic
        chains (ESS above the draws, common with NUTS) the sequence stops where
        noise first turns a pair of lags negative, often past lag 8 (see
        docs/statistics.md).
    proxy_lags
        The bulk and tail proxies with exact lags up to ``max_lag`` too: 3 (the
        bulk and both tails, default), 1 (the bulk) or 0 (block levels only).
        Each costs about as much per draw as the exact lags of the draws (the
        tails' two: ~9 us per draw on a 1000-element model inside NUTS); with
        block means alone the tail ESS of short NUTS runs is rough (4 x 1,000
        draws of a Gaussian: 11.9% rms off ArviZ's, against 7.9%).
    block_sizes, block_lags
        Block levels (:mod:`sluice.stats.autocorrelation`) and their lags (one
        number, or one per level): they cover lags up to the last level's
        ``block_lags * block_size`` draws; ``ess_*_resolution`` gives
        the block size used (0: no level ended Geyer's sequence, the value is
        a truncated, upward-biased estimate).
    reference_draw
        Draw at which each chain fixes its first half's reference quantiles
        for the bulk and tail proxies (default ``num_draws // 16``).
    max_elements
        Histograms and lags (everything but mean, sd, extrema and split R-hat)
        for at most this many elements of each named quantity (the first ones,
        C order); the others report NaN there. ``None``: all elements.
    mantissa_bits, binades, pilot_draws, num_levels
        The histogram grid (:mod:`sluice.stats.grid`) and the number of chain
        quantile levels summarised for the between-chain terms.

    Returns
    -------
    Statistic
        ``finalize`` gives ``{output: tree}``, trees shaped like a draw
        (``quantiles`` and ``hdi`` add a trailing axis); outputs: ``mean``,
        ``sd``, ``min``, ``max``, ``r_hat_split`` and, per options,
        ``quantiles``, ``hdi``, ``r_hat`` (rank), ``r_hat_bulk``,
        ``r_hat_folded``, ``ess_mean``, ``ess_bulk``, ``ess_tail``,
        ``ess_sd``, ``mcse_mean``, ``mcse_sd``, ``ess_*_resolution``; and the
        arrays ``quantile_levels`` and ``hdi_prob`` (the settings, for tables).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.diagnostics(num_draws=200)
    >>> draws = jax.random.normal(jax.random.PRNGKey(0), (2, 200, 3))
    >>> example = {"x": draws[0, 0]}  # the same example (pilot) for every chain
    >>> @jax.jit
    ... def run(chain):
    ...     body = lambda st, x: (s.update(st, {"x": x}), None)
    ...     return jax.lax.scan(body, s.init(example), chain)[0]
    >>> out = s.finalize(s.merge(run(draws[0]), run(draws[1])))
    >>> out["r_hat"]["x"].shape, bool(jnp.all(jnp.abs(out["r_hat"]["x"] - 1) < 0.05))
    ((3,), True)
    """
    probs = _check_probs("probs", probs) if probs else ()
    if hdi_prob is not None:
        hdi_prob = _check_prob("hdi_prob", hdi_prob)
    settings = _build(
        num_draws, histogram=histogram, lags=True, proxies=histogram,
        probs=probs if histogram else (), hdi_prob=hdi_prob if histogram else None,
        max_lag=max_lag, block_sizes=block_sizes, block_lags=block_lags,
        reference_draw=reference_draw, proxy_lags=proxy_lags, mantissa_bits=mantissa_bits,
        binades=binades,
        pilot_draws=pilot_draws, num_levels=num_levels, max_elements=max_elements,
    )  # fmt: skip
    return _statistic(settings, "all", _all(settings))


def summary_statistics(num_draws: int, *, hdi_prob: float = 0.94, **options: Any) -> Statistic:
    """The default diagnostics behind a summary table (see :func:`sluice.stats.summary_table`).

    :func:`diagnostics` with quantiles at ``(1 - hdi_prob)/2, 0.5, (1 + hdi_prob)/2``
    (the equal-tailed interval) and the HDI of mass ``hdi_prob``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    hdi_prob
        Interval mass, as ``az.summary(hdi_prob=...)``.
    **options
        Passed to :func:`diagnostics` (``max_lag``, ``max_elements``, ...).

    Returns
    -------
    Statistic

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.summary_statistics(num_draws=100)
    >>> chain = jax.random.normal(jax.random.PRNGKey(1), (100, 2))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"b": x}), None),
    ...                      s.init({"b": chain[0]}), chain)[0]
    >>> stats.summary_table(s.finalize(state)).index.tolist()
    ['b[0]', 'b[1]']
    """
    p = _check_prob("hdi_prob", hdi_prob)
    return diagnostics(num_draws, probs=((1 - p) / 2, 0.5, (1 + p) / 2), hdi_prob=p, **options)


def rhat(num_draws: int, *, method: str = "rank", **histogram_options: Any) -> Statistic:
    """R-hat of every element, as ``az.rhat(method=method)``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    method
        ``"rank"`` (ArviZ's default: max of the rank-normalised split R-hat
        and its folded version; approximate, from histograms) or ``"split"``
        (classic split R-hat; exact).
    **histogram_options
        ``mantissa_bits``, ``binades``, ``pilot_draws``, ``num_levels``,
        ``max_elements`` (see :func:`diagnostics`).

    Returns
    -------
    Statistic
        ``finalize`` gives a tree shaped like a draw: NaN for one chain (as ArviZ).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.rhat(num_draws=100, method="split")
    >>> chains = jax.random.normal(jax.random.PRNGKey(2), (2, 100))
    >>> run = jax.jit(lambda c: jax.lax.scan(lambda st, x: (s.update(st, {"a": x}), None),
    ...                                      s.init({"a": chains[0, 0]}), c)[0])
    >>> r = s.finalize(s.merge(run(chains[0]), run(chains[1])))["a"]
    >>> bool(0.98 < r < 1.05)
    True
    """
    _check_choice("method", method, ("rank", "split"))
    settings = _build(
        num_draws, histogram=method == "rank", lags=False, proxies=False, **histogram_options
    )
    return _statistic(
        settings,
        "r_hat" if method == "rank" else "r_hat_split",
        _one("r_hat" if method == "rank" else "r_hat_split"),
    )


def ess(
    num_draws: int,
    *,
    method: str = "bulk",
    max_lag: int = 16,
    block_sizes: tuple[int, ...] = (8, 32, 128, 512),
    block_lags: int | tuple[int, ...] | None = None,
    **options: Any,
) -> Statistic:
    """Effective sample size of every element, as ``az.ess(method=method)``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    method
        ``"bulk"`` (ArviZ's default; rank-normalised), ``"tail"`` (min over the
        5% and 95% quantile indicators), ``"mean"`` (exact whenever Geyer's
        truncation falls within ``max_lag``) or ``"sd"`` (of ``(x - mean)^2``,
        as used by ``mcse(method="sd")``).
    max_lag, block_sizes, block_lags
        The lags (see :func:`diagnostics`). Raise ``max_lag`` for chains whose
        autocorrelation time is long (``ess_mean`` stays exact up to it).
    **options
        Histogram options of :func:`diagnostics` (for ``bulk`` and ``tail``),
        ``reference_draw`` and ``max_elements``.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree shaped like a draw.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.ess(num_draws=400, method="mean")
    >>> chain = jax.random.normal(jax.random.PRNGKey(3), (400,))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"m": x}), None),
    ...                      s.init({"m": chain[0]}), chain)[0]
    >>> bool(200 < s.finalize(state)["m"] < 800)
    True
    """
    _check_choice("method", method, ("bulk", "tail", "mean", "sd"))
    rank = method in ("bulk", "tail")
    settings = _build(
        num_draws, histogram=rank, lags=True, proxies=rank, max_lag=max_lag,
        block_sizes=block_sizes, block_lags=block_lags, **options,
    )  # fmt: skip
    return _statistic(settings, f"ess_{method}", _one(f"ess_{method}"))


def mcse(num_draws: int, *, method: str = "mean", **options: Any) -> Statistic:
    """Monte Carlo standard error of the mean or sd of every element, as ``az.mcse``.

    Parameters
    ----------
    num_draws
        Draws per chain.
    method
        ``"mean"`` (``sd / sqrt(ess_mean)``) or ``"sd"`` (delta method on the
        ESS of ``(x - mean)^2``).
    **options
        Lag options of :func:`ess`.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree shaped like a draw.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.mcse(num_draws=400)
    >>> chain = jax.random.normal(jax.random.PRNGKey(4), (400,))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"m": x}), None),
    ...                      s.init({"m": chain[0]}), chain)[0]
    >>> bool(0.03 < s.finalize(state)["m"] < 0.08)
    True
    """
    _check_choice("method", method, ("mean", "sd"))
    settings = _build(num_draws, histogram=False, lags=True, proxies=False, **options)
    return _statistic(settings, f"mcse_{method}", _one(f"mcse_{method}"))


def quantiles(probs: tuple[float, ...], **histogram_options: Any) -> Statistic:
    """Quantiles of every element, as ``np.quantile`` (linear interpolation) on all draws.

    Read from a histogram on the pilot grid (:mod:`sluice.stats.grid`); the
    error is far below the quantiles' Monte Carlo error.

    Parameters
    ----------
    probs
        Levels in ``[0, 1]``.
    **histogram_options
        ``mantissa_bits``, ``binades``, ``pilot_draws``, ``max_elements``.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree whose leaves have a trailing axis of ``len(probs)``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.quantiles((0.1, 0.5, 0.9))
    >>> draws = jax.random.permutation(jax.random.PRNGKey(0), jnp.linspace(0.0, 1.0, 1001))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"u": x}), None),
    ...                      s.init({"u": draws[0]}), draws)[0]
    >>> [round(float(v), 2) for v in s.finalize(state)["u"]]
    [0.1, 0.5, 0.9]
    """
    values = _check_probs("probs", probs)
    settings = _build(
        None, histogram=True, lags=False, proxies=False, probs=values, **histogram_options
    )
    return _statistic(settings, "quantiles", _one("quantiles"))


def hdi(prob: float = 0.94, **histogram_options: Any) -> Statistic:
    """Highest-density interval of every element, as ``az.hdi(hdi_prob=prob)``.

    The narrowest interval holding ``floor(prob * S)`` of the ``S`` draws, read
    from a histogram (:func:`quantiles`).

    Parameters
    ----------
    prob
        Mass of the interval.
    **histogram_options
        As :func:`quantiles`.

    Returns
    -------
    Statistic
        ``finalize`` gives a tree whose leaves have a trailing axis ``(lower, upper)``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from sluice import stats
    >>> s = stats.hdi(0.5)
    >>> draws = jax.random.uniform(jax.random.PRNGKey(0), (4000,)) ** 2  # density 1 / (2 sqrt(u))
    >>> state = jax.lax.scan(lambda st, x: (s.update(st, {"u": x}), None),
    ...                      s.init({"u": draws[0]}), draws)[0]
    >>> [round(float(v), 1) for v in s.finalize(state)["u"]]
    [0.0, 0.2]
    """
    p = _check_prob("prob", prob)
    settings = _build(
        None, histogram=True, lags=False, proxies=False, hdi_prob=p, **histogram_options
    )
    return _statistic(settings, "hdi", _one("hdi"))
