"""Zarr store benchmarks: the sink's overhead, and a run larger than RAM.

overhead  Sampling time with ZarrSink vs the memory sink on a 10,000-dim
          Gaussian, alternated in one process (the compiled program is shared),
          several repetitions, median ratio. Goal: at most 1.10.
read      The cost of the checksums (sluice.io.integrity) on reading a finished
          store: `sluice.open` and every variable read, of a store of format 3
          and of the same store without its checksums (format 2: chunks without
          their CRC-32C, no manifest), alternated, medians. Goal: at most 1.10.
          Also the check a resume makes first (every committed chunk read once).
big       A run whose draws exceed this machine's RAM (default 50,000-dim,
          4 chains, 40,000 draws = 32 GB of float32 draws) in a fresh
          subprocess; reports peak RSS (goal: under 2 GB), wall time and the
          store's size on disk. The store is deleted afterwards unless --keep.

    python bench/store.py overhead [--dim 10000 --draws 2000 --reps 5]
    python bench/store.py read [--dim 1000 --draws 2000 --reps 5]
    python bench/store.py big [--dim 50000 --draws 40000 --out /tmp/big.zarr]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def gaussian(dim: int, seed: int = 0):
    import jax.numpy as jnp

    import sluice

    scales = np.exp(np.random.default_rng(seed).uniform(np.log(0.5), np.log(2.0), dim)).astype(
        np.float32
    )
    scales = jnp.asarray(scales)
    return sluice.Model(
        lambda x: -0.5 * jnp.sum((x / scales) ** 2),
        jnp.zeros(dim, jnp.float32),
        name=f"gaussian{dim}",
    )


def overhead(args: argparse.Namespace) -> dict:
    import sluice

    model = gaussian(args.dim)
    settings = dict(
        chains=args.chains,
        warmup=args.warmup,
        draws=args.draws,
        chunk_size=args.chunk_size,
        seed=1,
        progress=False,
        devices=None,
        default_stats=True,  # the same statistics for both sinks ("auto" differs by sink)
    )
    sluice.sample(model, **{**settings, "draws": args.chunk_size})  # compile outside the timings
    times: dict[str, list[float]] = {"memory": [], "zarr": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for kind in ("memory", "zarr") if rep % 2 == 0 else ("zarr", "memory"):
                sink = "memory" if kind == "memory" else sluice.ZarrSink(Path(tmp) / f"r{rep}.zarr")
                run = sluice.sample(model, sink=sink, **settings)
                times[kind].append(run.info.sampling_seconds)
                del run
                shutil.rmtree(Path(tmp) / f"r{rep}.zarr", ignore_errors=True)
    ratios = [z / m for z, m in zip(times["zarr"], times["memory"], strict=True)]
    draw_bytes = args.chains * args.draws * args.dim * 4
    return {
        "benchmark": "store-overhead",
        "dim": args.dim,
        "chains": args.chains,
        "draws": args.draws,
        "chunk_size": args.chunk_size,
        "draw_bytes": draw_bytes,
        "memory_sampling_s": times["memory"],
        "zarr_sampling_s": times["zarr"],
        "median_ratio_zarr_over_memory": statistics.median(ratios),
        "zarr_write_MB_per_s": draw_bytes / 1e6 / statistics.median(times["zarr"]),
    }


def read_cost(args: argparse.Namespace) -> dict:
    import sluice
    from sluice.io.store import ZarrSink

    def read(path: Path) -> float:
        t0 = time.perf_counter()
        idata = sluice.open(path)
        for group in idata.groups():
            for variable in idata[group].data_vars.values():
                variable.values  # noqa: B018 (read)
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"checked": [], "unchecked": [], "resume_check": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"checked": Path(tmp) / "checked.zarr", "unchecked": Path(tmp) / "unchecked.zarr"}
        sluice.sample(gaussian(args.dim), chains=args.chains, warmup=args.warmup,
                      draws=args.draws, chunk_size=args.chunk_size, seed=3,
                      sink=ZarrSink(paths["checked"]), progress=False)  # fmt: skip
        shutil.copytree(paths["checked"], paths["unchecked"])
        # as format 2 wrote it: chunks without their CRC-32C, no manifest (read unchecked)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.helpers.store_checks import as_older_format

        as_older_format(paths["unchecked"], 2)
        for path in paths.values():
            read(path)  # imports, and both in the page cache
        for rep in range(args.reps):
            for kind in ("checked", "unchecked") if rep % 2 == 0 else ("unchecked", "checked"):
                times[kind].append(read(paths[kind]))
            t0 = time.perf_counter()
            ZarrSink.open_existing(paths["checked"], writable=True)  # what resume checks
            times["resume_check"].append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in paths["checked"].rglob("*") if f.is_file())
    ratios = [c / u for c, u in zip(times["checked"], times["unchecked"], strict=True)]
    return {
        "benchmark": "store-read",
        "dim": args.dim,
        "chains": args.chains,
        "draws": args.draws,
        "chunk_size": args.chunk_size,
        "store_bytes": size,
        **{f"{kind}_s": values for kind, values in times.items()},
        "median_checked_s": statistics.median(times["checked"]),
        "median_unchecked_s": statistics.median(times["unchecked"]),
        "median_ratio_checked_over_unchecked": statistics.median(ratios),
        "median_resume_check_s": statistics.median(times["resume_check"]),
    }


def big_child(args: argparse.Namespace) -> dict:
    import sluice

    model = gaussian(args.dim)
    out = Path(args.out)
    t0 = time.perf_counter()
    run = sluice.sample(
        model,
        chains=args.chains,
        warmup=args.warmup,
        draws=args.draws,
        chunk_size=args.chunk_size,
        seed=2,
        sink=sluice.ZarrSink(out, overwrite=True),
        progress=args.progress,
    )
    wall = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {
        "benchmark": "store-big",
        "dim": args.dim,
        "chains": args.chains,
        "draws": args.draws,
        "chunk_size": run.info.chunk_size,
        "draw_bytes": args.chains * args.draws * args.dim * 4,
        "store_bytes": size,
        "wall_s": wall,
        "warmup_s": run.info.warmup_seconds,
        "sampling_s": run.info.sampling_seconds,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "ram_bytes": _ram_bytes(),
    }


def _ram_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return 0


def big(args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "big-child",
        "--dim",
        str(args.dim),
        "--chains",
        str(args.chains),
        "--draws",
        str(args.draws),
        "--warmup",
        str(args.warmup),
        "--out",
        args.out,
    ]
    if args.chunk_size:
        cmd += ["--chunk-size", str(args.chunk_size)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["overhead", "read", "big", "big-child"])
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "sluice-big.zarr"))
    parser.add_argument("--keep", action="store_true", help="keep the big store")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()
    if args.what == "overhead":
        args.dim, args.warmup = args.dim or 10_000, args.warmup or 300
        args.draws, args.chunk_size = args.draws or 2000, args.chunk_size or 200
        result = overhead(args)
    elif args.what == "read":
        args.dim, args.warmup = args.dim or 1000, args.warmup or 200
        args.draws, args.chunk_size = args.draws or 2000, args.chunk_size or 200
        result = read_cost(args)
    else:
        args.dim, args.warmup, args.draws = (
            args.dim or 50_000,
            args.warmup or 200,
            args.draws or 40_000,
        )
        result = big_child(args) if args.what == "big-child" else big(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
