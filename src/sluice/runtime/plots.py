"""A picture of convergence for a model too big to read as a table.

:func:`plot_convergence` draws, from the streamed summary alone, the
distribution of R-hat and of bulk and tail ESS over every element with the
usual thresholds marked (R-hat 1.01; ESS 100 per chain, Vehtari et al. 2021),
and lists the worst few elements; where draws are kept it adds their rank
plots (one histogram of the pooled ranks per chain: flat when the chains mix).
``run.plot()`` and ``sluice plot run.zarr`` call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from sluice.runtime.diagnostics import MAX_R_HAT, MIN_ESS_PER_CHAIN
from sluice.stats._layout import element_labels

__all__ = ["plot_convergence", "worst_elements"]


def _flat(result: dict[str, Any], key: str) -> np.ndarray:
    leaves = [np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(result[key])]
    return np.concatenate(leaves) if leaves else np.zeros(0)


def worst_elements(result: dict[str, Any], count: int = 5) -> list[tuple[str, dict[str, float]]]:
    """The ``count`` elements furthest from convergence: highest R-hat (unknown first),
    ties broken by the lowest bulk ESS; ``[(label, {r_hat, ess_bulk, ess_tail})]``."""
    labels = element_labels(jax.device_get(result["mean"]))
    r_hat, bulk, tail = (_flat(result, k) for k in ("r_hat", "ess_bulk", "ess_tail"))
    order = np.lexsort((np.nan_to_num(bulk, nan=-1.0), -np.nan_to_num(r_hat, nan=np.inf)))
    columns = {"r_hat": r_hat, "ess_bulk": bulk, "ess_tail": tail}
    return [(labels[i], {k: float(v[i]) for k, v in columns.items()}) for i in order[:count]]


def _label_index(template: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """label -> (quantity, index) for the rank plots' lookups into kept draws."""
    out = {}
    for name, leaf in template.items():
        for index in np.ndindex(*np.shape(leaf)):  # a scalar: one index, ()
            out[f"{name}[{', '.join(str(i) for i in index)}]" if index else name] = (name, index)
    return out


def _rank_histograms(ax: Any, draws: np.ndarray, label: str) -> None:
    chains, n = draws.shape
    ranks = np.argsort(np.argsort(draws.ravel(), kind="stable"), kind="stable").reshape(chains, n)
    bins = np.linspace(0, chains * n, min(20, max(n // 5, 2)) + 1)
    for c in range(chains):
        counts, _ = np.histogram(ranks[c], bins=bins)
        ax.step(bins[:-1], counts, where="post", label=f"chain {c}", lw=1)
    ax.axhline(n / (len(bins) - 1), color="k", ls=":", lw=1)
    ax.set_title(f"ranks of {label}", fontsize=9)
    ax.set_yticks([])


def plot_convergence(
    result: dict[str, Any],
    *,
    chains: int,
    draws: dict[str, Any] | None = None,
    worst: int = 4,
    path: str | Path | None = None,
    title: str = "",
) -> Any:
    """Histograms of R-hat and bulk/tail ESS over every element, thresholds marked, the
    worst ``worst`` elements listed, and their rank plots when ``draws`` (``{name:
    array (chain, draw, ...)}``) are given. Saved to ``path`` when given; returns the
    matplotlib Figure.

    Examples
    --------
    >>> import jax.numpy as jnp, sluice
    >>> m = sluice.Model(lambda p: -0.5 * jnp.sum(p["x"] ** 2), init={"x": jnp.zeros(50)})
    >>> run = sluice.sample(m, chains=2, warmup=50, draws=100, sink=None, progress=False)
    >>> figure = run.plot()  # from the streamed statistics alone
    >>> [ax.get_title().split(":")[0] for ax in figure.axes[:3]]
    ['R-hat', 'bulk ESS', 'tail ESS']
    """
    import matplotlib.pyplot as plt

    r_hat, bulk, tail = (_flat(result, k) for k in ("r_hat", "ess_bulk", "ess_tail"))
    worst_list = worst_elements(result, worst)
    ranks = worst if draws is not None else 0
    columns = max(4, ranks)
    figure, axes = plt.subplots(
        2 if ranks else 1, columns, figsize=(3.6 * columns, 6.4 if ranks else 3.2),
        squeeze=False,
    )  # fmt: skip
    top = axes[0]
    ess_line = MIN_ESS_PER_CHAIN * chains
    for ax, values, name, line, side in (
        (top[0], r_hat, "R-hat", MAX_R_HAT, "above"),
        (top[1], bulk, "bulk ESS", ess_line, "below"),
        (top[2], tail, "tail ESS", ess_line, "below"),
    ):
        known = values[np.isfinite(values)]
        unknown = values.size - known.size
        if known.size:
            ax.hist(known, bins=60, color="0.4", log=known.size > 1000)
        ax.axvline(line, color="C3", ls="--", lw=1.2)
        failing = np.count_nonzero(known > line if side == "above" else known < line)
        ax.set_title(
            f"{name}: {failing:,} of {values.size:,} {side} {line:g}"
            + (f", {unknown:,} unknown" if unknown else ""),
            fontsize=9,
        )
        ax.set_ylabel("elements")
    top[3].axis("off")
    lines = [f"{label}\n  R-hat {v['r_hat']:.3f}, ESS bulk {v['ess_bulk']:.0f}, "
             f"tail {v['ess_tail']:.0f}" for label, v in worst_list]  # fmt: skip
    top[3].text(0, 1, "worst elements\n" + "\n".join(lines), fontsize=8, va="top",
                transform=top[3].transAxes, family="monospace")  # fmt: skip
    for ax in top[4:]:
        ax.axis("off")
    if ranks:
        where = _label_index(jax.device_get(result["mean"]))
        for ax, (label, _) in zip(axes[1], worst_list, strict=False):
            if label not in where or where[label][0] not in draws:
                ax.axis("off")
                continue
            name, index = where[label]
            values = np.asarray(draws[name][(slice(None), slice(None), *index)], np.float64)
            _rank_histograms(ax, values, label)
        axes[1][0].legend(fontsize=7)
        for ax in axes[1][len(worst_list) :]:
            ax.axis("off")
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
    return figure
