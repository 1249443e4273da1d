"""``sluice demo``: chunked NUTS on the JAX notebook's logistic regression."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]


def main(
    out_dir: str | os.PathLike = "sluice-demo",
    *,
    chains: int = 4,
    warmup: int = 1000,
    draws: int = 2000,
    num_chunks: int = 8,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Sample the demo model in ``num_chunks`` chunks, print the summary, write a PNG.

    Returns ``{"run": Run, "summary": DataFrame, "figure": path}``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import sluice
    from sluice.apps.cli import print_table
    from sluice.apps.datasets import (
        logistic_regression_data,
        logistic_regression_model,
        notebook_log_joint,
    )

    data = logistic_regression_data()
    model = dataclasses.replace(  # with the notebook's log_joint(beta), unchanged
        logistic_regression_model(data), log_density=notebook_log_joint(data)
    )
    print(
        f"sluice demo: logistic regression, {data.x.shape[0]} points x {data.x.shape[1]} features "
        f"(JAX 'autobatching log-densities' notebook data), {chains} chains, {warmup} warmup + "
        f"{draws} draws in {num_chunks} chunks"
    )
    run = sluice.sample(
        model,
        chains=chains,
        warmup=warmup,
        draws=draws,
        num_chunks=num_chunks,
        seed=seed,
        progress=progress,
    )
    summary = run.summary()
    print_table(summary)
    info = run.info
    print(
        f"\ncompile {info.compile_seconds:.1f}s, warmup {info.warmup_seconds:.2f}s, "
        f"sampling {info.sampling_seconds:.2f}s "
        f"({info.num_chunks} chunks of {info.chunk_size} draws), {info.num_divergent} divergent, "
        f"{info.num_gradients / max(info.sampling_seconds, 1e-9):,.0f} gradients/s while sampling"
    )

    beta = run.draws["beta"].reshape(-1, data.x.shape[1])
    mean = beta.mean(axis=0)
    low, high = np.quantile(beta, [0.03, 0.97], axis=0)
    order = np.argsort(data.true_beta)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.errorbar(
        data.true_beta[order],
        mean[order],
        yerr=[mean[order] - low[order], high[order] - mean[order]],
        fmt="o",
        capsize=3,
        label="posterior mean and 94% interval (sluice NUTS)",
    )
    lim = 1.1 * float(np.max(np.abs(np.concatenate([data.true_beta, low, high]))))
    ax.plot([-lim, lim], [-lim, lim], "k--", lw=1, label="estimate = truth")
    ax.set(
        xlabel="true coefficient",
        ylabel="estimated coefficient",
        xlim=(-lim, lim),
        ylim=(-lim, lim),
        title=f"Logistic regression: {chains} chains x {draws} draws in {info.num_chunks} chunks",
    )
    ax.legend(loc="upper left")
    fig.tight_layout()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "logistic_regression.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"figure: {path}")
    return {"run": run, "summary": summary, "figure": path}
