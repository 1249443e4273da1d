"""A million parameters on one machine: the complete summary of a 1,000,000-dim model.

NUTS on a 1,000,000-dim Gaussian (scales in [e^-1, e]), 4 chains, ``sink=None``,
200 warmup iterations and 1,000 draws, default statistics (every element): wall
time of each phase, peak RSS of the process, the state's size, and how many
elements have a NaN in any of mean, sd, HDI, MCSE, bulk/tail ESS or R-hat
(none, for a complete summary), with the worst R-hat and lowest ESS.

Run: ``python -m bench stats-scale/million`` (over an hour on two cores; not part of
``python -m bench all``).
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
from harness import peak_rss_bytes

import sluice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--kernel", choices=["nuts", "hmc"], default="nuts")
    parser.add_argument("--chunk-size", type=int, default=None, help="default: sluice's")
    parser.add_argument("--json", default=None)
    parser.add_argument("--progress", action="store_true", help="a line per chunk on stderr")
    args = parser.parse_args()
    scales = jnp.exp(jnp.linspace(-1.0, 1.0, args.dim))
    model = sluice.Model(lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2),
                         init={"x": jnp.zeros(args.dim)})  # fmt: skip
    t0 = time.perf_counter()
    kernel = sluice.kernels.hmc() if args.kernel == "hmc" else sluice.kernels.nuts()
    run = sluice.sample(model, kernel=kernel, chains=args.chains, warmup=args.warmup,
                        draws=args.draws, chunk_size=args.chunk_size, sink=None,
                        progress=args.progress, seed=0)  # fmt: skip
    t1 = time.perf_counter()
    sampling_rss = peak_rss_bytes()
    table = run.summary(round_to="none")
    t2 = time.perf_counter()
    state = run._stats_states["summary"]
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    columns = ["mean", "sd", "hdi_3%", "hdi_97%", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail",
               "r_hat"]  # fmt: skip
    nan_rows = int(table[columns].isna().any(axis=1).sum())
    info = run.info
    result = {
        "dim": args.dim, "chains": args.chains, "warmup": args.warmup, "draws": args.draws,
        "kernel": args.kernel,
        "chunk_size": info.chunk_size, "sample_seconds": t1 - t0,
        "compile_seconds": info.compile_seconds, "warmup_seconds": info.warmup_seconds,
        "sampling_seconds": info.sampling_seconds, "summary_seconds": t2 - t1,
        "peak_rss_gb": peak_rss_bytes() / 2**30, "peak_rss_sampling_gb": sampling_rss / 2**30,
        "state_bytes_per_element_chain": state_bytes / (args.dim * args.chains),
        "rows": len(table), "rows_with_nan": nan_rows,
        "max_r_hat": float(table["r_hat"].max()), "min_ess_bulk": float(table["ess_bulk"].min()),
        "min_ess_tail": float(table["ess_tail"].min()),
        "grads_per_draw": info.num_gradients / (args.chains * args.draws),
        "backend": jax.default_backend(),
    }  # fmt: skip
    for k, v in result.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    print("elements with NaN:", nan_rows, "of", len(table))
    print(table.describe().loc[["mean", "min", "max"], ["ess_bulk", "ess_tail", "r_hat"]])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
