"""Trace and compile time of the chunk program: vectorized, sequential and auto chains.

Each measurement is a fresh process that samples a PyMC model of
``bench/pymc_models.py`` through ``sluice.sample(sluice.from_pymc(model))``, or
(``demo``) the 10-coefficient logistic regression of ``sluice demo``
(4 chains on JAX's CPU devices, 1,000 warmup + 1,000 draws), every program
compiled in the foreground (``SLUICE_BACKGROUND_COMPILE=0``). ``auto`` is the
default ``chain_method``; ``sequential/default-emitters`` is ``sequential`` with
XLA's default emitters (``SLUICE_CLASSIC_EMITTER_RUN_BYTES=0``); *chose* says what it chose and with which XLA:CPU
emitters the chunk program compiled (``classic`` for a run small enough to be
compile-bound, see ``sluice.runtime.plan._run_traffic``). *trace* is JAX's
longest trace of the run, *compile* XLA's longest compile: both the chunk
program's. The variants' order rotates at every repetition; rows are medians.

Commands::

    python bench/chunk_trace.py                    # eight schools, 3 runs a variant
    python bench/chunk_trace.py --models eight_schools,radon,demo --reps 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import emit_result, median, run_each

# "sequential/default-emitters": sequential chains with XLA's default emitters, which a
# run this short would not take (SLUICE_CLASSIC_EMITTER_RUN_BYTES=0): the classic emitters' gain
METHODS = ("vectorized", "sequential", "sequential/default-emitters", "auto")


def one(model_name: str, variant: str) -> dict[str, Any]:
    os.environ["SLUICE_BACKGROUND_COMPILE"] = "0"
    method, _, emitters = variant.partition("/")
    if emitters == "default-emitters":  # read when sluice is imported
        os.environ["SLUICE_CLASSIC_EMITTER_RUN_BYTES"] = "0"
    import jax
    import jax.monitoring

    if model_name != "demo":  # PyMC's graphs are float64
        jax.config.update("jax_enable_x64", True)
    events: dict[str, list[float]] = {"trace": [], "compile": []}

    def listener(event: str, seconds: float, **_: Any) -> None:
        if event == "/jax/core/compile/jaxpr_trace_duration":
            events["trace"].append(seconds)
        elif event == "/jax/core/compile/backend_compile_duration":
            events["compile"].append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listener)
    import sluice
    from sluice._jax import compile as programs

    if model_name == "demo":
        from sluice.apps.datasets import logistic_regression_model

        model = logistic_regression_model()
    else:
        from pymc_models import build

        model = sluice.from_pymc(build(model_name)[0])
    options = []
    real = programs.fill

    def fill(pending: Any, **how: Any) -> Any:
        key = pending.entry[0]
        if isinstance(key, tuple) and key[0] == "mcmc.chunk" and key[1].startswith("advance"):
            options.append(how.get("options"))
        return real(pending, **how)

    programs.fill = fill
    t0 = time.perf_counter()
    run = sluice.sample(model, draws=1000, warmup=1000, chains=4, seed=1, progress=False,
                        chain_method=method)  # fmt: skip
    emitters = (
        "classic" if options and options[0] == programs.CLASSIC_EMITTER_OPTIONS else "default"
    )
    return {
        "model": model_name,
        "chain_method": variant,
        "chose": f"{run.info.chain_method}, {emitters}",
        "trace_s": max(events["trace"]),
        "compile_s": max(events["compile"]),
        "wall_s": time.perf_counter() - t0,
        "sampling_s": run.info.sampling_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="eight_schools")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", default=None, help="write every record here")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "METHOD"), default=None)
    args = parser.parse_args(argv)
    if args.one:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        emit_result(one(*args.one))
        return 0
    records = run_each(__file__, args.reps, args.models.split(","), METHODS, lambda rep: ())
    rows = []
    for model in args.models.split(","):
        for method in METHODS:
            rs = [r for r in records if r["model"] == model and r["chain_method"] == method]
            rows.append({"model": model, "chain_method": method, "runs": len(rs),
                         "chose": rs[0]["chose"],
                         **{k: median([r[k] for r in rs])
                            for k in ("trace_s", "compile_s", "sampling_s", "wall_s")}})  # fmt: skip
    areas.emit("chunk-trace", rows, args.json, records=records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
