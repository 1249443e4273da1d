"""Peak memory of a run into a store against no sink, on a model outside bench/'s others.

Two leaves, ``a`` (200,000 elements, scales log-spaced over [e^-2, e^2]) and ``b``
(50,000 elements, scales linear over [0.5, 3], centred at 1); 4 chains, static
HMC (8 leapfrog steps), 30 warmup iterations and 40 draws in chunks of 20, the
default statistics, the summary read. One fresh process per sink.

    PYTHONPATH=src python bench/studies/store_memory_two_leaves.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time


def one(sink: str) -> None:
    import jax.numpy as jnp
    import numpy as np

    import sluice

    scales_a = jnp.exp(jnp.linspace(-2.0, 2.0, 200_000))
    scales_b = jnp.linspace(0.5, 3.0, 50_000)

    def log_density(p):
        return (-0.5 * jnp.sum((p["a"] / scales_a) ** 2)
                - 0.5 * jnp.sum(((p["b"] - 1.0) / scales_b) ** 2))  # fmt: skip

    init = {"a": jnp.zeros(200_000), "b": jnp.zeros(50_000)}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store = sluice.ZarrSink(os.path.join(tmp, "run.zarr")) if sink == "zarr" else None
        run = sluice.sample(log_density, init=init, chains=4, warmup=30, draws=40, chunk_size=20,
                            sink=store, kernel=sluice.hmc(num_integration_steps=8),
                            progress=False, seed=4)  # fmt: skip
        mean = run.stats["summary"]["mean"]
        nan = int(sum(np.isnan(v).sum() for v in mean.values()))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"sink {sink:4s}  wall {time.perf_counter() - t0:5.1f} s  warmup "
              f"{run.info.warmup_seconds:5.1f} s  peak {peak:5.2f} GiB  NaN means {nan}")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(sys.argv[1])
    else:
        for sink in ("zarr", "none"):
            subprocess.run([sys.executable, __file__, sink], check=True)
