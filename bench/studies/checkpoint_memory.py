"""Peak memory of a run that checkpoints into a store, against the same run without a sink.

Static HMC (8 leapfrog steps) on a ``--dim``-dimensional standard Gaussian, 4
chains, ``--warmup`` warmup iterations and ``--draws`` draws in chunks of
``--chunk-size``, the default statistics, each run in a fresh process (peak RSS
from ``getrusage``): into a ``sluice.ZarrSink`` (a checkpoint after every chunk,
the draws kept) and with ``sink=None``. A checkpointed chunk's statistics are
saved while the next chunk samples, so the run must not hold the saved states and
the next chunk's at once (docs/architecture.md, "The host loop"). Both runs read
their summary (a store's run reads it to keep it in the store).

    PYTHONPATH=src python bench/studies/checkpoint_memory.py --dim 250000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from harness import emit_result, peak_rss_bytes, run_isolated

CHAINS = 4


def one(sink: str, dim: int, warmup: int, draws: int, chunk: int) -> dict:
    import jax.numpy as jnp

    import sluice

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(dim), chains=CHAINS,
                      warmup=warmup, draws=draws, chunk_size=chunk,
                      sink=sluice.ZarrSink(os.path.join(tmp, "run.zarr")) if sink == "zarr" else None,
                      kernel=sluice.hmc(num_integration_steps=8), progress=False, seed=1)  # fmt: skip
        assert run.stats  # the summary: a store's run reads it before it returns, to keep it
        wall = time.perf_counter() - t0
    return {"sink": sink, "dim": dim, "wall_s": wall, "warmup_s": run.info.warmup_seconds,
            "sampling_s": run.info.sampling_seconds, "peak_bytes": peak_rss_bytes()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=250_000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--chunk-size", type=int, default=20)
    ap.add_argument("--sinks", default="zarr,none")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        emit_result(one(args.one, args.dim, args.warmup, args.draws, args.chunk_size))
        return
    print(f"{args.dim:,} elements, {CHAINS} chains, {args.warmup} warmup + {args.draws} draws, "
          f"chunks of {args.chunk_size}, static HMC, the default statistics")  # fmt: skip
    for sink in args.sinks.split(","):
        r = run_isolated(__file__, ["--one", sink, "--dim", str(args.dim), "--warmup",
                                    str(args.warmup), "--draws", str(args.draws),
                                    "--chunk-size", str(args.chunk_size)])  # fmt: skip
        per = r["peak_bytes"] / (CHAINS * args.dim)
        print(f"sink {sink:5s}  wall {r['wall_s']:6.1f} s  (warmup {r['warmup_s']:5.1f} s, "
              f"sampling {r['sampling_s']:5.1f} s)  peak {r['peak_bytes'] / 2**30:5.2f} GiB"
              f"  ({per:,.0f} B per element and chain)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
