"""Reading the closed diagnostics: every output of ``az.summary`` and more.

:func:`read_flat` turns a closed :class:`~sluice.stats.fused.FusedState` of
the three parts (:mod:`sluice.stats.parts`) into flat ``(D, ...)`` arrays:
mean, sd and extrema and split R-hat from the moments; quantiles, HDI and
rank R-hat from the histograms; ESS and MCSE from the lag states, their
variance terms (ArviZ's within-chain ``W`` and between-chain ``B``) from the
moments and, for the rank-normalised and tail targets, to first order from
the histograms (:func:`rank_parts`, :func:`tail_variance`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from sluice.stats._layout import flatten
from sluice.stats._numerics import blom_scores, compensated_value, cumsum_rows, rhat_from_summaries
from sluice.stats.autocorrelation import BULK, TAIL_HI, TAIL_LO, Y
from sluice.stats.effective_size import (
    EssTarget,
    direct,
    ess_from_lags,
    exact_mean_acov,
    exact_proxy_acov,
    proxy,
    squared_deviation,
    tail_proxy,
)
from sluice.stats.fused import FusedState, heavy_elements
from sluice.stats.histogram import (
    HistogramSettings,
    bucket_scores,
    counts_hdi,
    counts_quantile,
    interp_rows,
    levels,
    unpack_comoment,
    value_edges,
)

__all__ = ["rank_parts", "read_flat", "tail_variance"]


def read_flat(state: FusedState, parts: dict[str, Any], settings: Any) -> dict[str, jax.Array]:
    """All outputs, as flat ``(D, ...)`` arrays, from a closed state (``parts``: its
    part states by name; ``settings``: :class:`~sluice.stats.convergence.DiagnosticsSettings`)."""
    mo = parts["moments"]
    dtype = mo.middle.dtype
    pilot = flatten(state.pilot, dtype)
    total = mo.total_count.astype(dtype)
    s1 = compensated_value(mo.total_sum)
    mu = s1 / total  # pooled mean of y = x - c
    m2 = (mo.total_sumsq.hi - mo.total_sum.hi * mu) + (mo.total_sumsq.lo - mo.total_sum.lo * mu)
    m2 = jnp.maximum(m2, 0.0)
    sd = jnp.sqrt(m2 / (total - 1.0))
    poison = jnp.where(state.consistent, 0.0, jnp.nan)  # pilots differed: no valid result
    out: dict[str, jax.Array] = {
        "mean": pilot + mu + poison, "sd": sd + poison, "min": mo.xmin + poison, "max": mo.xmax + poison,
    }  # fmt: skip
    if settings.num_draws is None:
        m = jnp.asarray(1.0, dtype)
        n = total
    else:
        m = mo.split_count.astype(dtype)
        n = jnp.where(mo.split_min == mo.split_max, mo.split_min, jnp.nan).astype(dtype)
    chains = state.num_chains
    bad = jnp.isnan(mo.xmin) | jnp.isnan(mo.xmax) | jnp.isnan(mu) | ~state.consistent
    constant = (mo.xmin == mo.xmax) & ~bad
    enough = n >= 2.0  # ArviZ: at least 4 draws per chain
    w_y = mo.within_sum / m
    b_y = jnp.where(m > 1, mo.half_mean_m2 / (m - 1.0), 0.0)
    heavy = heavy_elements(state.pilot, settings.max_elements)

    def h(a: jax.Array) -> jax.Array:
        """The elements that have histograms and lags."""
        return a if heavy is None else a[heavy]

    def clean(value, constant_value=None, heavy_only=True):
        """ArviZ's NaN and constant-chain conventions (on heavy elements by default)."""
        b, c = (h(bad), h(constant)) if heavy_only else (bad, constant)
        value = jnp.where(b[(...,) + (None,) * (value.ndim - 1)] | ~enough, jnp.nan, value)
        if constant_value is not None:
            value = jnp.where(c & enough, constant_value, value)
        return value

    heavy_out: dict[str, jax.Array] = {}
    if settings.num_draws is not None:
        r = clean(rhat_from_summaries(m, n, w_y, b_y), heavy_only=False)
        out["r_hat_split"] = jnp.where(chains >= 2, r, jnp.nan)
    s_split = m * n
    lag, ls = parts.get("lags"), settings.lags
    hist, hs = parts.get("histogram"), settings.histogram
    hmu, hsd = h(mu), h(sd)
    targets: dict[str, EssTarget] = {}
    if lag is not None:
        exact = exact_mean_acov(lag, h(w_y), n, m) if ls.max_lag > 0 else None
        targets["mean"] = EssTarget(direct(Y), Y, h(w_y), h(b_y), exact)
        if ls.block_sizes:
            # (x - mu)^2: variance terms from the split chains' moments about the pooled mean
            s2 = compensated_value(mo.total_sumsq)
            s3 = compensated_value(mo.total_sum3)
            s4 = compensated_value(mo.total_sum4)
            m4 = h(s4 - 4 * mu * s3 + 6 * mu**2 * s2 - 4 * mu**3 * s1 + total * mu**4)
            sw, sw2, sa, sa2, swa = (h(mo.c2_w[:, i]) for i in range(5))
            t1 = sw - 2 * hmu * sa + m * hmu**2
            t2 = (
                sw2
                + 4 * hmu**2 * sa2
                + m * hmu**4
                - 4 * hmu * swa
                + 2 * hmu**2 * sw
                - 4 * hmu**3 * sa
            )
            b_c2 = jnp.maximum(t2 - t1 * t1 / m, 0.0) / (m - 1.0)
            w_c2 = (m4 * (s_split / total) - n * t2) / (m * (n - 1.0))
            targets["sd"] = EssTarget(squared_deviation(hmu), Y, w_c2, b_c2, None)
    if hist is not None:
        hpilot = h(pilot)
        lo, hi = value_edges(hist.floor, hist.top, hpilot, h(mo.xmin), h(mo.xmax), hs.spec)
        counts = hist.counts[0]
        nan_rows = h(bad)[:, None]
        # every fixed quantile level needed below, in one call
        fixed = (*settings.probs, 0.5, 0.025, 0.075, 0.925, 0.975)
        q_all = counts_quantile(counts, (lo, hi), jnp.asarray(fixed, dtype))
        q_fixed = {p: q_all[:, i] for i, p in enumerate(fixed)}
        if settings.probs:
            heavy_out["quantiles"] = jnp.where(nan_rows, jnp.nan, q_all[:, : len(settings.probs)])
        if settings.hdi_prob is not None:
            heavy_out["hdi"] = jnp.where(
                nan_rows, jnp.nan, counts_hdi(counts, (lo, hi), settings.hdi_prob)
            )
        if settings.num_draws is not None:
            rank = rank_parts(hist, counts, lo, hi, hpilot, n, m, hs, dtype, q_fixed[0.5])
            for name, key in (("bulk", "r_hat_bulk"), ("fold", "r_hat_folded")):
                r = rhat_from_summaries(m, n, rank[f"w_{name}"], rank[f"b_{name}"])
                heavy_out[key] = jnp.where(chains >= 2, clean(r), jnp.nan)
            heavy_out["r_hat"] = jnp.maximum(heavy_out["r_hat_bulk"], heavy_out["r_hat_folded"])
            if lag is not None and ls.proxies and ls.block_sizes:

                def exact(feature, w):  # proxies with exact lags (the bulk, then the tails)
                    if feature - BULK >= ls.proxy_lags:
                        return None
                    return exact_proxy_acov(lag, feature, w, n)

                w_z, b_z = rank["w_bulk"], rank["b_bulk"]
                target = proxy(lag, BULK, w_z, n)
                targets["bulk"] = EssTarget(target, BULK, w_z, b_z, exact(BULK, w_z))
                for feature, p in ((TAIL_LO, 0.05), (TAIL_HI, 0.95)):
                    q_pm = (q_fixed[round(p - 0.025, 3)], q_fixed[round(p + 0.025, 3)])
                    w_i, b_i = tail_variance(counts, hist, n, m, p, q_pm, hs, dtype)
                    target = tail_proxy(feature, w_i, n, ls.num_pooled)
                    targets[f"tail{feature}"] = EssTarget(
                        target, feature, w_i, b_i, exact(feature, w_i)
                    )
    if targets:
        results = dict(
            zip(targets, ess_from_lags(lag, list(targets.values()), n, m, ls), strict=True)
        )
        res = results["mean"]
        heavy_out["ess_mean"] = clean(res.ess, s_split)
        heavy_out["ess_mean_resolution"] = res.resolution
        heavy_out["mcse_mean"] = clean(hsd / jnp.sqrt(heavy_out["ess_mean"]), 0.0)
        if "sd" in results:
            ess_sd = clean(results["sd"].ess, s_split)
            evar = h(m2) / total
            varvar = (m4 / total - evar * evar) / ess_sd
            heavy_out["ess_sd"] = ess_sd
            heavy_out["mcse_sd"] = clean(jnp.sqrt(varvar / evar / 4.0))
        if "bulk" in results:
            heavy_out["ess_bulk"] = clean(results["bulk"].ess, s_split)
            heavy_out["ess_bulk_resolution"] = results["bulk"].resolution
            lo_res, hi_res = results[f"tail{TAIL_LO}"], results[f"tail{TAIL_HI}"]
            heavy_out["ess_tail"] = clean(jnp.minimum(lo_res.ess, hi_res.ess), s_split)
            heavy_out["ess_tail_resolution"] = jnp.maximum(lo_res.resolution, hi_res.resolution)
    for key, value in heavy_out.items():
        if heavy is not None:  # elements without histograms or lags: NaN (0 for resolutions)
            fill = 0 if jnp.issubdtype(value.dtype, jnp.integer) else jnp.nan
            full = jnp.full((pilot.shape[0], *value.shape[1:]), fill, value.dtype)
            value = full.at[heavy].set(value)
        out[key] = value
    return out


def rank_parts(
    hist, counts, lo, hi, pilot, n, m, hs: HistogramSettings, dtype, median
) -> dict[str, jax.Array]:
    """Within (W) and between (var of chain means) terms of ArviZ's rank-normalised R-hat."""
    total = jnp.sum(counts, axis=1).astype(dtype)
    nb = counts.astype(dtype)
    z = bucket_scores(counts, dtype)
    # folded: buckets ordered by distance of their centre from the pooled median
    dist = jnp.abs(0.5 * (lo + hi) - median[:, None])
    order = jnp.argsort(dist, axis=1, stable=True)
    n_sorted = jnp.take_along_axis(nb, order, axis=1)
    c_sorted = cumsum_rows(n_sorted)
    rank_sorted = c_sorted - n_sorted + (n_sorted + 1.0) / 2.0
    rank_fold = (
        jnp.zeros_like(rank_sorted).at[jnp.arange(nb.shape[0])[:, None], order].set(rank_sorted)
    )
    zf = blom_scores(rank_fold, total[:, None])
    # continuous versions of both score functions, for slopes at the chain quantiles
    xs = jnp.concatenate([lo[:, :1], hi], axis=1)
    cum = jnp.concatenate([jnp.zeros_like(total)[:, None], cumsum_rows(nb)], axis=1)

    def cdf(x):
        return interp_rows(x, xs, cum)

    def z_bulk(x):
        return blom_scores(cdf(x) + 0.5, total[:, None])

    def z_fold(x):
        d = jnp.abs(x - median[:, None])
        return blom_scores(
            cdf(median[:, None] + d) - cdf(median[:, None] - d) + 0.5, total[:, None]
        )

    k = hs.num_levels
    qbar = pilot[:, None] + hist.quantile_mean  # (D, K)
    first = 2 * qbar[:, :1] - qbar[:, 1:2]
    last = 2 * qbar[:, -1:] - qbar[:, -2:-1]
    ext = jnp.concatenate([first, qbar, last], axis=1)
    cov = unpack_comoment(hist.quantile_comoment, k)
    scale = (m * n) / total  # pooled counts include the middle draws of odd num_draws
    out = {}
    for name, scores, fn in (("bulk", z, z_bulk), ("fold", zf, z_fold)):
        zk = fn(ext)
        width = ext[:, 2:] - ext[:, :-2]
        slope = jnp.where(
            width > 0, (zk[:, 2:] - zk[:, :-2]) / jnp.where(width > 0, width, 1.0), 0.0
        )
        g = slope / k
        gcg = jnp.einsum("di,dij,dj->d", g, cov, g)
        zsum = jnp.sum(nb * scores, axis=1) * scale
        z2sum = jnp.sum(nb * scores * scores, axis=1) * scale
        zbar = zsum / (m * n)
        sum_means_sq = m * zbar * zbar + gcg
        out[f"w_{name}"] = (z2sum - n * sum_means_sq) / (m * (n - 1.0))
        out[f"b_{name}"] = gcg / (m - 1.0)
    return out


def tail_variance(counts, hist, n, m, p: float, q_pm, hs: HistogramSettings, dtype):
    """W and var(chain means) of the indicator ``x <= q_p`` (delta method on chain quantiles).

    ``q_pm``: the pooled quantiles at ``p -/+ 0.025`` (the density at ``q_p``).
    """
    total = jnp.sum(counts, axis=1).astype(dtype)
    h = 0.025
    density = 2 * h / jnp.maximum(q_pm[1] - q_pm[0], jnp.finfo(dtype).tiny)
    k = hs.num_levels
    lv = jnp.asarray(levels(k), dtype)
    diag = jnp.diagonal(unpack_comoment(hist.quantile_comoment, k), axis1=1, axis2=2)  # (D, K)
    var_q = (
        interp_rows(jnp.full((diag.shape[0], 1), p, dtype), jnp.broadcast_to(lv, diag.shape), diag)[
            :, 0
        ]
        / m
    )
    var_pop = density**2 * var_q
    pbar = (jnp.floor(p * (total - 1.0)) + 1.0) / total
    within = n / (n - 1.0) * (pbar - pbar * pbar - var_pop)
    between = var_pop * m / (m - 1.0)
    return within, between
