"""Time from sample(default_stats=True) to a summary table, logistic regression 100 x 10.

Run from the root of a checkout (or a worktree of an older commit):
    PYTHONPATH=src python bench/results/2026-11-30-c/latency_check.py LABEL
With LABEL "notrim", sluice._jax.memory.release (where it exists) is turned off.
"""

import sys
import time

sys.path.insert(0, "bench")
from targets import make_target

import sluice

if sys.argv[1] == "notrim":
    from sluice._jax import memory as _memory

    _memory.release = lambda: False
t = make_target("logreg_small")
t0 = time.perf_counter()
run = sluice.sample(t.logdensity_fn, init=t.init, chains=4, warmup=1000, draws=1000,
                    chain_method="sequential", default_stats=True, progress=False)  # fmt: skip
t1 = time.perf_counter()
run.summary()
t2 = time.perf_counter()
print(sys.argv[1], f"sample {t1 - t0:.2f} summary {t2 - t1:.2f} total {t2 - t0:.2f} "
      f"compile {run.info.compile_seconds:.2f}")  # fmt: skip
