"""The window adaptation's terminal buffer: Stan's 50 iterations against 15% of warmup.

After the last metric update only the step size adapts (dual averaging,
restarted at ``log(10 eps)``); its final value is the iterates' weighted
average. Over Stan's 50 iterations that average still carries the restart's
transient; nutpie gives its step size a final window that is a fraction of
tuning instead. Each measurement runs ``sluice.pymc.sample`` (4 chains x
1,000 tuning + 1,000 draws) on a PyMC model of ``bench/pymc_models.py`` with
the schedule's terminal buffer set to ``--buffers`` (``"15%"``: 15% of warmup,
at least 50) and reports, per model and buffer over ``--seeds`` seeds
(medians), the smallest bulk ESS over every scalar of the free variables
(ArviZ), the gradients per draw and their ratio, ESS per 1,000 gradients.

    PYTHONPATH=src python bench/terminal_buffer.py --models eight_schools,radon
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import emit_result, run_each

MODELS = ("eight_schools", "radon", "logistic", "stochastic_volatility")


def one(model_name: str, buffer: str, seeds: int) -> dict[str, Any]:
    import arviz as az
    import numpy as np
    import pymc_models

    import sluice
    import sluice.mcmc.kernels as kernels
    from sluice.mcmc import adaptation

    def schedule(num_warmup: int) -> Any:
        final = max(50, int(0.15 * num_warmup)) if buffer == "15%" else int(buffer)
        return adaptation.window_schedule(num_warmup, final_buffer=final)

    kernels.window_schedule = schedule  # what the NUTS kernel's warmup reads
    model, free = pymc_models.build(model_name)
    ess, steps = [], []
    for seed in range(1, seeds + 1):
        with model:
            idata = sluice.pymc.sample(1000, tune=1000, chains=4, random_seed=seed,
                                       progressbar=False)  # fmt: skip
        per = az.ess(idata.posterior[free], method="bulk")
        ess.append(min(float(per[v].min()) for v in free))
        steps.append(float(idata.sample_stats["n_steps"].mean()))
    grads = [s * 4000 for s in steps]
    return {
        "model": model_name, "buffer": buffer, "seeds": seeds,
        "min_ess_bulk": float(np.median(ess)), "grads_per_draw": float(np.median(steps)),
        "ess_per_1000_grads": float(np.median([1000 * e / g for e, g in zip(ess, grads, strict=True)])),
        "min_ess_runs": [round(e) for e in ess],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--buffers", default="50,15%")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "BUFFER"), default=None)
    args = parser.parse_args(argv)
    if args.one:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        emit_result(one(*args.one, args.seeds))
        return 0
    seeds = ("--seeds", str(args.seeds))
    rows = run_each(__file__, 1, args.models.split(","), args.buffers.split(","), lambda _: seeds)
    for row in rows:  # against the model's first buffer
        first = next(r for r in rows if r["model"] == row["model"])
        row["vs_first"] = row["ess_per_1000_grads"] / first["ess_per_1000_grads"]
    areas.emit("terminal-buffer", rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
