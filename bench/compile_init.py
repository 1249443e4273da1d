"""The run's initialisation compiled for a quick compile: what it saves of a short run.

The programs of a run that execute once (sluice's init program: every chain's
first gradient and step-size search; the PyMC adapter's jittered start) compile
with XLA's quick options on CPU while the model's data and one draw are small
(``sluice._jax.compile.FAST_COMPILE_OPTIONS``). ``fast`` is sluice as shipped;
``xla-defaults`` sets ``SLUICE_FAST_COMPILE_BYTES=0`` (XLA's default options
for every program; the memory sink computes no streaming statistics, so the
init programs are the only ones it changes).

Each measurement is a fresh process that builds a PyMC model of
``bench/pymc_models.py`` and runs ``sluice.pymc.sample`` (4 chains, 1,000
tuning + 1,000 draws) to an InferenceData; the variants alternate. *init
compile* sums XLA's compile times in the main thread (the chunk program
compiles in a background thread meanwhile, and is counted apart as *chunk
compile*); *wall* is the ``sample`` call; *sampling* the sampling time sluice
reports.

Commands::

    python bench/compile_init.py                       # eight schools, radon, logistic
    python bench/compile_init.py --models eight_schools --reps 5
    python bench/compile_init.py --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import emit_result, median, run_each

MODELS = ("eight_schools", "radon", "logistic")
VARIANTS = ("fast", "xla-defaults")


def one(model_name: str, variant: str, seed: int) -> dict[str, Any]:
    if variant == "xla-defaults":
        os.environ["SLUICE_FAST_COMPILE_BYTES"] = "0"
    elif variant != "fast":
        raise ValueError(f"unknown variant {variant!r}; choose from {VARIANTS}")
    import jax.monitoring

    compiles: dict[str, float] = {"main": 0.0, "other": 0.0}

    def listener(event: str, seconds: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            side = "main" if threading.current_thread() is threading.main_thread() else "other"
            compiles[side] += seconds

    jax.monitoring.register_event_duration_secs_listener(listener)
    from pymc_models import build

    import sluice

    model, _ = build(model_name)
    t0 = time.perf_counter()
    with model:
        idata = sluice.pymc.sample(1000, tune=1000, chains=4, random_seed=seed,
                                   progressbar=False)  # fmt: skip
    wall = time.perf_counter() - t0
    return {
        "model": model_name,
        "variant": variant,
        "seed": seed,
        "wall_s": wall,
        "init_compile_s": compiles["main"],
        "chunk_compile_s": compiles["other"],
        "sampling_s": float(idata.posterior.attrs["sampling_time"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", default=None, help="write every record here")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "VARIANT"), default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.one:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        emit_result(one(*args.one, args.seed))
        return 0

    records = run_each(__file__, args.reps, args.models.split(","), VARIANTS)
    rows = []
    for model in args.models.split(","):
        group = {v: [r for r in records if r["model"] == model and r["variant"] == v]
                 for v in VARIANTS}  # fmt: skip
        base = median([r["wall_s"] for r in group["xla-defaults"]])
        for variant, rs in group.items():
            wall = median([r["wall_s"] for r in rs])
            rows.append({
                "model": model, "variant": variant, "runs": len(rs),
                "init_compile_s": median([r["init_compile_s"] for r in rs]),
                "chunk_compile_s": median([r["chunk_compile_s"] for r in rs]),
                "sampling_s": median([r["sampling_s"] for r in rs]),
                "wall_s": wall,
                "wall_vs_xla_defaults": wall / base if base else None,
            })  # fmt: skip
    areas.emit("compile-init", rows, args.json, records=records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
