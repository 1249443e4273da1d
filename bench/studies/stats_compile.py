"""Compile and run time of the default statistics' programs, per XLA options.

Each option set is measured in a fresh process (XLA and LLVM warm up on the
first compile of a process, which would favour later sets): the default
summary (``sluice.stats.streaming.summary``) of ``--dim`` elements, states filled by ``--draws``
updates, then ``jit(merge).lower(...).compile(compiler_options=...)`` and
``compile(finalize)``, each timed, then the fastest of 3 calls of each. The
largest relative difference of the finalized values against XLA's defaults
is printed too (the options change rounding, not results).

    PYTHONPATH=src python bench/studies/stats_compile.py --dim 1000 [--dim 10000]

``sluice._jax.compile`` compiles statistics' programs with its fast options (the
second set) when their arguments and results hold at most
``FAST_COMPILE_BYTES``.

``--program update`` measures instead the update program the engine runs once per
sampling chunk (``chains_update`` of 4 chains' states with a chunk of 100 draws
each), its compile and its run per element-draw, which ``sluice.runtime.plan``
weighs to choose its options (``CLASSIC_STATISTICS_ELEMENT_DRAWS``):

    PYTHONPATH=src python bench/studies/stats_compile.py --program update --dim 300 --dim 1000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

OPTION_SETS = {
    "XLA defaults": {},
    "sluice fast (O0, no fusion emitters)": {
        "xla_backend_optimization_level": 0,
        "xla_cpu_use_fusion_emitters": False,
    },
    "O0 only": {"xla_backend_optimization_level": 0},
    "classic emitters": {"xla_cpu_use_fusion_emitters": False},
}
CHAINS, CHUNK = 4, 100  # --program update


def measure_update(dim: int, draws: int, options: dict) -> dict:
    import jax
    import jax.numpy as jnp

    from sluice.stats import streaming
    from sluice.stats.base import chains_update

    statistic = streaming.summary(max(draws, CHUNK), chunk_size=CHUNK)
    one = statistic.init(jax.random.normal(jax.random.key(0), (statistic.pilot * CHAINS, dim)))
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (CHAINS, *x.shape)), one)
    chunk = jax.random.normal(jax.random.key(1), (CHAINS, CHUNK, dim))
    count = jnp.int32(CHUNK)
    lowered = jax.jit(chains_update(statistic)).lower(states, chunk, count)
    start = time.perf_counter()
    executable = lowered.compile(compiler_options=options or None)
    out = {"update_compile_s": time.perf_counter() - start}
    states = executable(states, chunk, count)
    runs = []
    for _ in range(6):
        start = time.perf_counter()
        states = jax.block_until_ready(executable(states, chunk, count))
        runs.append(time.perf_counter() - start)
    out["update_ns_per_element_draw"] = min(runs) / (CHAINS * CHUNK * dim) * 1e9
    return out


def measure(dim: int, draws: int, options: dict) -> dict:
    import jax
    import numpy as np

    from sluice.stats import streaming

    statistic = streaming.summary(draws)
    xs = jax.random.normal(jax.random.key(0), (draws, dim))

    @jax.jit
    def fill(xs):
        def body(state, x):
            return statistic.update(state, {"a": x}), None

        pilot = {"a": xs[: statistic.pilot]}  # pooled rows: the reference's pilot
        return jax.lax.scan(body, statistic.init(pilot), xs)[0]

    state = fill(xs)
    out: dict = {}
    for name, fn, args in (
        ("merge", statistic.merge, (state, state)),
        ("finalize", statistic.finalize, (state,)),
    ):
        lowered = jax.jit(fn).lower(*args)
        start = time.perf_counter()
        executable = lowered.compile(compiler_options=options or None)
        out[f"{name}_compile_s"] = time.perf_counter() - start
        runs = []
        for _ in range(4):
            start = time.perf_counter()
            result = jax.block_until_ready(executable(*args))
            runs.append(time.perf_counter() - start)
        out[f"{name}_run_ms"] = min(runs[1:]) * 1e3
    leaves = jax.tree.leaves(result)
    out["values"] = np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in leaves]).tolist()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, action="append")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--program", choices=("merge-finalize", "update"), default="merge-finalize")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        dim, options = json.loads(args.one)
        fn = measure_update if args.program == "update" else measure
        print(json.dumps(fn(dim, args.draws, options)))
        return
    import numpy as np

    if args.program == "update":
        print("| dim | options | update compile s | update run ns per element-draw |")
        print("|---:|---|---:|---:|")
        for dim in args.dim or [1000]:
            for label, options in OPTION_SETS.items():
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", json.dumps([dim, options]),
                     "--draws", str(args.draws), "--program", "update"],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                print(f"| {dim} | {label} | {r['update_compile_s']:.2f} | "
                      f"{r['update_ns_per_element_draw']:.1f} |", flush=True)  # fmt: skip
        return

    print("| dim | options | merge compile s | finalize compile s | merge run ms | finalize run ms | max rel. diff |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|")
    for dim in args.dim or [1000]:
        base = None
        for label, options in OPTION_SETS.items():
            proc = subprocess.run(
                [sys.executable, __file__, "--one", json.dumps([dim, options]),
                 "--draws", str(args.draws)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            base = base or r["values"]
            values, reference = np.asarray(r["values"]), np.asarray(base)
            diff = float(np.nanmax(np.abs(values - reference)
                                   / np.maximum(np.abs(reference), 1e-30), initial=0.0))  # fmt: skip
            print(
                f"| {dim} | {label} | {r['merge_compile_s']:.2f} | {r['finalize_compile_s']:.2f} | "
                f"{r['merge_run_ms']:.1f} | {r['finalize_run_ms']:.1f} | {diff:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
