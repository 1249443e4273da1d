"""ESS of sluice's NUTS against BlackJAX's (and NumPyro's) over several seeds.

One seed per run makes a sampler's ESS a single draw of its noise (two
samplers of equal efficiency can differ by 20% in min ESS_bulk on one seed).
This runs each sampler with seeds ``0 .. --seeds - 1`` (same
settings as ``bench/mcmc.py``: 4 chains, 1000 warmup + 1000 draws, sequential
chains) and prints, per run, the min and mean over parameters of ArviZ's
ess_bulk and the gradients spent sampling, then medians and means over seeds.

Run: ``PYTHONPATH=src python bench/ess_seeds.py --model logreg_small --seeds 6``.
"""

from __future__ import annotations

import argparse
import os
import sys

import arviz as az
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CompileClock
from samplers import Settings, run_blackjax, run_numpyro, run_sluice
from targets import make_target

RUNNERS = {"sluice": run_sluice, "blackjax": run_blackjax, "numpyro": run_numpyro}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="logreg_small")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--samplers", default="sluice,blackjax")
    args = parser.parse_args()
    target = make_target(args.model)
    names = args.samplers.split(",")
    rows: dict[str, list[tuple[float, float, int]]] = {n: [] for n in names}
    for seed in range(args.seeds):
        for name in names:
            run = RUNNERS[name](target, Settings(seed=seed), CompileClock())
            ess = np.concatenate(
                [
                    np.ravel(az.ess(np.asarray(x).reshape(*x.shape[:2], -1).transpose(2, 0, 1)[k]))
                    for x in run.draws.values()
                    for k in range(int(np.prod(x.shape[2:])))
                ]
            )
            rows[name].append((float(ess.min()), float(ess.mean()), run.num_gradients))
            print(f"{name:9s} seed {seed}: ess_bulk min {ess.min():.0f} mean {ess.mean():.0f}, "
                  f"sampling gradients {run.num_gradients}", flush=True)  # fmt: skip
    print(f"\n{args.model}, {args.seeds} seeds:")
    for name, values in rows.items():
        v = np.array(values)
        print(f"{name:9s} min ess_bulk: median {np.median(v[:, 0]):.0f}; mean ess_bulk: mean "
              f"{v[:, 1].mean():.0f}; sampling gradients: mean {v[:, 2].mean():.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
