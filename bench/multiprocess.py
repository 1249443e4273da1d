"""Throughput of 8 chains: 1 process on one core vs 2 processes on one core each.

The model is compute-bound (a logistic regression whose gradient dominates a
NUTS step). Each worker pins itself to one core (``os.sched_setaffinity``), so
the comparison is one core against two, through sluice's multi-process
engine. Throughput = chains x draws / the slowest process's sampling time.
Goal: 2 processes >= 1.7 x 1 process.

    python bench/multiprocess.py [--reps 3 --draws 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(args: argparse.Namespace) -> None:
    import sluice

    sluice.runtime.distributed.initialize()
    import jax

    os.sched_setaffinity(0, {jax.process_index() % os.cpu_count()})
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.points, args.features)).astype(np.float32)
    y = (rng.random(args.points) < 1 / (1 + np.exp(-x @ rng.normal(size=args.features)))).astype(
        np.float32
    )
    xj, sign = jnp.asarray(x), jnp.asarray(2 * y - 1)

    def log_density(beta):
        return -0.5 * jnp.sum(beta**2) - jnp.sum(jnp.logaddexp(0.0, -sign * (xj @ beta)))

    settings = dict(
        init=jnp.zeros(args.features),
        chains=8,
        warmup=args.warmup,
        draws=args.draws,
        chunk_size=args.draws // 4,
        seed=0,
        progress=False,
        sink=None,
        chain_method="sequential",
    )
    sluice.sample(log_density, **{**settings, "draws": args.draws // 4, "warmup": 20})  # compile
    run = sluice.sample(log_density, **settings)
    print(
        "RESULT "
        + json.dumps(
            {
                "process": jax.process_index(),
                "processes": jax.process_count(),
                "sampling_s": run.info.sampling_seconds,
                "gradients": run.info.num_gradients,
            }
        ),
        flush=True,
    )


def measure(processes: int, args: argparse.Namespace) -> float:
    cmd = [
        sys.executable,
        os.path.join(HERE, "multiprocess.py"),
        "--worker",
        "--draws",
        str(args.draws),
        "--warmup",
        str(args.warmup),
        "--points",
        str(args.points),
        "--features",
        str(args.features),
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "1"}
    if processes == 1:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    else:
        from sluice.runtime.launch import launch

        result = launch(cmd, processes, devices_per_process=1, env=env, echo=None, timeout=1800)
        if not result.ok:
            raise RuntimeError(result.describe_failure() + "\n" + "\n".join(result.outputs))
        out = "\n".join(result.outputs)
    rows = [
        json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT " in line
    ]
    return 8 * args.draws / max(r["sampling_s"] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--features", type=int, default=50)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    one, two = [], []
    for _ in range(args.reps):  # alternate so that drift in machine load hits both
        one.append(measure(1, args))
        two.append(measure(2, args))
    print(
        json.dumps(
            {
                "benchmark": "multiprocess-throughput",
                "chains": 8,
                "draws": args.draws,
                "model": f"logistic regression {args.points} x {args.features}",
                "draws_per_s_1_process": one,
                "draws_per_s_2_processes": two,
                "median_ratio": statistics.median(b / a for a, b in zip(one, two, strict=True)),
            }
        )
    )


if __name__ == "__main__":
    main()
