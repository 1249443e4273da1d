"""Which runs raise their warmup's target after divergences, and what they end with.

sluice's NUTS raises the target of its warmup's terminal buffer to
``divergent_target_accept`` (0.95) when a chain of the run diverged in the last slow
window at a step no larger than the one its dual averaging was settling on
(docs/kernels.md, "Divergences in the warmup"). This study runs sluice at its
defaults (4 chains, 1,000 warmup + 1,000 draws) on Inference Gym targets
(``--gym``, names of ``bench/inference_gym.py``) and PyMC models (``--pymc``,
names of ``bench/pymc_models.py``, through ``sluice.from_pymc``), ``--seeds`` each,
in this process, and prints one JSON line per run: whether it raised, the
divergences after warmup, the mean step size; then each model's count of raised runs.

    PYTHONPATH=src python bench/studies/divergent_target.py \\
        --gym eight_schools,brownian,irt,lgcp --pymc eight_schools,gp,horseshoe --seeds 0-2
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "studies"))

CHAINS, WARMUP, DRAWS = 4, 1000, 1000


def _model(source: str, name: str, gym: Any) -> tuple[Any, dict[str, Any]]:
    """The model ``sluice.sample`` takes, and the keywords it needs (``gym``:
    ``bench/inference_gym.py``, the module)."""
    import sluice

    if source == "gym":
        t = gym.gym_target(name)
        return t["logdensity"], {"init": t["init"]}
    import pymc_models

    model, _ = pymc_models.build(name)
    return sluice.from_pymc(model), {}


def one(source: str, name: str, seed: int, gym: Any) -> dict[str, Any]:
    import numpy as np

    import sluice
    from sluice.runtime.diagnostics import raised_target

    model, kwargs = _model(source, name, gym)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sluice.DiagnosticWarning)
        run = sluice.sample(model, chains=CHAINS, warmup=WARMUP, draws=DRAWS, seed=seed,
                            progress=False, **kwargs)  # fmt: skip
    setting = run.info.config.kernel.target_accept
    raised = raised_target(run.info.target_accept, setting)
    return {
        "source": source,
        "model": name,
        "seed": seed,
        "raised": raised is not None,
        "target_accept": setting if raised is None else raised,
        "divergent": int(run.info.num_divergent),
        "step_size": round(float(np.mean(run.info.step_size)), 4),
        "grads": int(run.info.num_gradients),
    }


def main() -> None:
    import inference_gym as gym  # bench's, once: it takes the Gym package's name
    from gym_seeds import parse_seeds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gym", default="", help="Inference Gym targets, comma separated")
    parser.add_argument("--pymc", default="", help="PyMC models, comma separated")
    parser.add_argument("--seeds", default="0-2", help="'0-9' or '0,3,5'")
    args = parser.parse_args()
    runs = [("gym", n) for n in args.gym.split(",") if n] + [
        ("pymc", n) for n in args.pymc.split(",") if n
    ]
    counts: dict[str, list[int]] = {}
    for source, name in runs:
        for seed in parse_seeds(args.seeds):
            record = one(source, name, seed, gym)
            print(json.dumps(record), flush=True)
            tally = counts.setdefault(f"{source}:{name}", [0, 0])
            tally[0] += record["raised"]
            tally[1] += 1
    for key, (raised, total) in counts.items():
        print(f"{key:28s} raised {raised}/{total}")


if __name__ == "__main__":
    main()
