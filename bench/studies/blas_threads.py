"""OpenBLAS's threads during a run: a warmup's window ends with one thread and with the default.

sluice holds OpenBLAS to one thread while a CPU run holds the cores
(``sluice._jax.cores.one_blas_thread``). This study samples a PyMC model of
``bench/pymc_models.py`` (``sluice.from_pymc`` + ``sluice.sample``, 4 chains x
1,000 + 1,000, ``mass_matrix="low_rank"``, chunks of 10 iterations) with that
limit and without it (OpenBLAS's default threads), alternated, ``--reps`` times
each after one run that compiles both. It prints, per mode, the medians of the
warmup's seconds, of the chunks holding a window end (where the low-rank fit's
SVDs run) and of the other warmup chunks, and a hash of the draws (equal in both
modes: the thread count changes no result here).

    PYTHONPATH=src python bench/studies/blas_threads.py --model radon_slopes
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import pymc_models

import sluice
from sluice._jax import cores
from sluice.mcmc.adaptation import window_schedule
from sluice.runtime import session

CHUNK = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="radon_slopes")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    model = sluice.from_pymc(pymc_models.build(args.model)[0], log_likelihood=False)
    ends = {int(e) // CHUNK * CHUNK for e in window_schedule(1000).window_ends if e >= 0}
    times: list[tuple[int, float]] = []
    advance = session.Session._advance

    def timed(self, carry, start, stop):
        t0 = time.perf_counter()
        out = advance(self, carry, start, stop)
        jax.block_until_ready(out[0])
        times.append((start, time.perf_counter() - t0))
        return out

    session.Session._advance = timed
    limit = cores.one_blas_thread
    modes = {"one thread": limit, "default": lambda devices: contextlib.nullcontext()}
    results: dict[str, list[tuple[float, float, float, str]]] = {m: [] for m in modes}
    for rep in range(args.reps + 1):  # the first round compiles
        for mode, context in modes.items():
            cores.one_blas_thread = context  # sluice.sample looks it up at each run
            times.clear()
            run = sluice.sample(model, chains=4, warmup=1000, draws=1000, seed=1, progress=False,
                                sink="memory", chunk_size=CHUNK, mass_matrix="low_rank")  # fmt: skip
            digest = hashlib.sha256(
                b"".join(np.asarray(v).tobytes() for v in run.draws.values())
            ).hexdigest()[:16]
            at_ends = [dt for s, dt in times if s < 1000 and s in ends]
            others = [dt for s, dt in times if s < 1000 and s not in ends]
            if rep:
                results[mode].append((run.info.warmup_seconds, statistics.median(at_ends),
                                      statistics.median(others), digest))  # fmt: skip
    cores.one_blas_thread = limit
    print(f"{args.model}: medians of {args.reps} runs, chunks of {CHUNK} iterations")
    for mode, rows in results.items():
        warmup, at_end, other = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"  {mode:10s}  warmup {warmup:.2f} s  window-end chunk {at_end * 1e3:.0f} ms  "
              f"other warmup chunk {other * 1e3:.0f} ms  draws {rows[0][3]}")  # fmt: skip


if __name__ == "__main__":
    main()
