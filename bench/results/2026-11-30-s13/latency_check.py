import sys, time, os
sys.path.insert(0, "/work/main/bench")
import jax, sluice
_memory = None
if sys.argv[1] == "notrim":
    pass
from targets import make_target
t = make_target("logreg_small")
t0 = time.perf_counter()
run = sluice.sample(t.logdensity_fn, init=t.init, chains=4, warmup=1000, draws=1000, chain_method="sequential", default_stats=True, progress=False)
t1 = time.perf_counter()
run.summary()
t2 = time.perf_counter()
print(sys.argv[1], f"sample {t1-t0:.2f} summary {t2-t1:.2f} total {t2-t0:.2f} compile {run.info.compile_seconds:.2f}")
