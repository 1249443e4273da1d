"""A summary table like ``az.summary`` from finalized streaming diagnostics.

pandas is imported when a table is made, not when this module is.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from sluice.stats._layout import element_labels

__all__ = ["summary_table"]

_ROUNDING = {"ess_bulk": 0, "ess_tail": 0, "r_hat": 2}  # ArviZ's default decimals (others: 3)


def _percent(p: float) -> str:
    """ArviZ's label of a level: ``0.03 -> "3%"`` (settings stored in float32 included)."""
    return f"{100 * round(float(p), 6):g}%"


def summary_table(result: dict[str, Any], *, interval: str = "hdi", round_to: Any = None) -> Any:
    """A pandas DataFrame of a finalized summary (streaming or exact statistics).

    One row per scalar element, named as ``az.summary`` does (``beta[0]``,
    ``x[0, 1]``, ``sigma``); the columns of ``az.summary``: ``mean``, ``sd``,
    two interval columns, ``mcse_mean``, ``mcse_sd``, ``ess_bulk``,
    ``ess_tail``, ``r_hat``.

    Parameters
    ----------
    result
        ``{output: tree}`` from ``finalize`` of :func:`sluice.stats.streaming.summary`
        (the default statistics of a run), :func:`summary_statistics` or
        :func:`diagnostics`, for a merged state (pooled over chains).
    interval
        ``"hdi"``: the highest-density interval (``hdi_3%``, ``hdi_97%`` for
        mass 0.94, like ``az.summary``), read from the histograms (the
        narrowest window over the histogram's order statistics);
        ``"eti"``: the equal-tailed interval from the outer quantiles
        (``eti_3%``, ``eti_97%``, like ``az.summary(stat_focus="median")``).
    round_to
        ``None``: ArviZ's default rounding (3 decimals; ``ess_*`` 0; ``r_hat`` 2);
        ``"none"``: no rounding; an integer: that many decimals.

    Returns
    -------
    pandas.DataFrame

    Examples
    --------
    >>> import jax
    >>> from sluice import stats
    >>> s = stats.streaming.summary(100)
    >>> chains = jax.random.normal(jax.random.PRNGKey(0), (2, 116, 2, 2))
    >>> pilot = chains[:, :16].reshape(-1, 2, 2)  # stands in for the final warmup draws
    >>> states = [s.update_block(s.init(pilot), c[16:], 100) for c in chains]
    >>> table = stats.summary_table(s.finalize(s.merge(*states)))
    >>> table.index.tolist()
    ['x[0, 0]', 'x[0, 1]', 'x[1, 0]', 'x[1, 1]']
    >>> table.columns.tolist()
    ['mean', 'sd', 'hdi_3%', 'hdi_97%', 'mcse_mean', 'mcse_sd', 'ess_bulk', 'ess_tail', 'r_hat']
    """
    import pandas as pd

    if interval not in ("hdi", "eti"):
        raise ValueError(f"interval must be 'hdi' or 'eti', got {interval!r}")
    if not isinstance(result, dict) or "mean" not in result:
        raise TypeError(
            "result must be the finalized dict of sluice.stats.summary_statistics "
            f"(with a 'mean' entry), got {type(result).__name__}"
        )
    result = jax.device_get(result)
    template = result["mean"]
    labels = element_labels(template)

    def flat(tree: Any) -> np.ndarray:
        leaves = jax.tree.leaves(tree)
        n_template = [np.size(x) for x in jax.tree.leaves(template)]
        parts = [np.asarray(x).reshape(n, -1) for x, n in zip(leaves, n_template, strict=True)]
        return np.concatenate(parts, axis=0) if parts else np.zeros((0, 1))

    def column(name: str) -> np.ndarray:
        if name not in result:
            return np.full(len(labels), np.nan)
        return flat(result[name])[:, 0]

    columns: dict[str, np.ndarray] = {"mean": column("mean"), "sd": column("sd")}
    if interval == "hdi":
        if "hdi" not in result:
            raise ValueError(
                "result has no 'hdi': build it with hdi_prob set, or use interval='eti'"
            )
        bounds = flat(result["hdi"])
        prob = float(result.get("hdi_prob", 0.94))
        lo_name, hi_name = f"hdi_{_percent((1 - prob) / 2)}", f"hdi_{_percent((1 + prob) / 2)}"
    else:
        if "quantiles" not in result or "quantile_levels" not in result:
            raise ValueError("result has no quantiles: build it with summary_statistics")
        levels = np.asarray(result["quantile_levels"])
        q = flat(result["quantiles"])
        bounds = q[:, [0, -1]]
        lo_name, hi_name = f"eti_{_percent(levels[0])}", f"eti_{_percent(levels[-1])}"
    columns[lo_name] = bounds[:, 0]
    columns[hi_name] = bounds[:, 1]
    for name in ("mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat"):
        columns[name] = column(name)
    table = pd.DataFrame(columns, index=labels)
    if round_to is None:
        table = table.round({c: _ROUNDING.get(c, 3) for c in table.columns})
    elif isinstance(round_to, str):
        if round_to.lower() != "none":
            raise ValueError(f"round_to must be None, 'none' or an integer, got {round_to!r}")
    elif isinstance(round_to, int) and not isinstance(round_to, bool):
        table = table.round(round_to)
    else:
        raise ValueError(f"round_to must be None, 'none' or an integer, got {round_to!r}")
    return table
