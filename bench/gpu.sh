#!/usr/bin/env bash
# sluice vs NumPyro vs BlackJAX on one GPU, then a statistics-only run too
# large for any of them to store. Prepared for the device machine; run from
# the repository root:
#
#     bash bench/gpu.sh [OUT_DIR]        # about 8 minutes on an H200
#
# Needs a CUDA JAX (pip install -U "jax[cuda12]") and the bench extra
# (pip install -e ".[bench]"). Writes JSON records and a log to OUT_DIR
# (default bench/results/gpu-$(date +%F)); the tables print to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/results/gpu-$(date +%F)}"
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # measure memory as used, not preallocated

python - <<'EOF' | tee "$OUT/device.txt"
import jax
print("jax", jax.__version__, "backend", jax.default_backend(), jax.devices())
EOF

# 1. Many chains in lock step (vmap) on one accelerator: the GPU use case.
#    1024 chains x (500 warmup + 500 draws); ESS/s and memory, one rep each.
python bench/mcmc.py --chains 1024 --warmup 500 --draws 500 --reps 1 \
    --models logreg_small,logreg_large,gaussian \
    --variants sluice/vec,numpyro/vec,blackjax/vec \
    --json "$OUT/mcmc-1024-chains.json" 2>&1 | tee "$OUT/mcmc-1024-chains.txt"

# 2. Statistics only: a 1,000,000-dim Gaussian, 64 chains, sink=None, draws far
#    beyond what device or host could store (64 x 10,000 x 1e6 x 4 B = 2.5 TB).
python - <<'EOF' 2>&1 | tee "$OUT/stats-only-1m.txt"
import time

import jax
import jax.numpy as jnp

import sluice

dim, chains, draws = 1_000_000, 64, 10_000
run = sluice.sample(
    lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(dim), chains=chains, warmup=500,
    draws=draws, sink=None, max_tree_depth=6, progress=False,
)
i = run.info
stats = jax.devices()[0].memory_stats() or {}
print(f"dim={dim} chains={chains} draws={draws} compile={i.compile_seconds:.1f}s "
      f"warmup={i.warmup_seconds:.1f}s sampling={i.sampling_seconds:.1f}s "
      f"draws/s={chains * draws / i.sampling_seconds:.0f} "
      f"peak device memory={stats.get('peak_bytes_in_use', 0) / 2**30:.2f} GiB")
print(run.summary().head(5))
EOF
echo "records in $OUT"
