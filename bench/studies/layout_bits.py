"""Does a run's layout change its draws? The same run on 1 and on 2 CPU devices, bit for bit.

Each layout runs in a fresh process that imports sluice before anything starts
JAX's backend (so ``SLUICE_CPU_DEVICES`` takes effect), samples an Inference
Gym target of ``bench/inference_gym.py`` (4 chains, ``--warmup`` warmup
iterations, 50 draws, ``--chain-method``) and saves its draws; this script
then prints, per chain, the first draw at which the layouts differ (-1: none)
and the largest difference there. The chain keys do not depend on the layout,
so a difference comes from the compiled program: another number of chains per
device is another program, which XLA may fuse and round differently.

    PYTHONPATH=src python bench/studies/layout_bits.py brownian_scales
    PYTHONPATH=src python bench/studies/layout_bits.py brownian_scales --warmup 100
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHAINS, DRAWS = 4, 50


def child(target: str, warmup: int, chain_method: str, out: str) -> None:
    import sluice  # first: before the target starts JAX's backend

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import inference_gym  # bench/inference_gym.py

    t = inference_gym.gym_target(target)
    run = sluice.sample(t["logdensity"], init=t["init"], chains=CHAINS, warmup=warmup,
                        draws=DRAWS, seed=2, chain_method=chain_method, progress=False)  # fmt: skip
    (z,) = (np.asarray(v) for v in run.draws.values())
    np.save(out, z)
    print(f"{sluice.cpu_devices()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--chain-method", default="sequential")
    parser.add_argument("--devices", default="1,2")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.target, args.warmup, args.chain_method, args.child)
        return
    draws = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.devices.split(","):
            out = os.path.join(tmp, f"{n}.npy")
            env = {**os.environ, "SLUICE_CPU_DEVICES": n, "PYTHONWARNINGS": "ignore"}
            cmd = [sys.executable, __file__, args.target, "--warmup", str(args.warmup),
                   "--chain-method", args.chain_method, "--child", out]  # fmt: skip
            subprocess.run(cmd, env=env, check=True, stderr=subprocess.DEVNULL)
            draws[n] = np.load(out)
    first, *others = draws
    for n in others:
        a, b = draws[first], draws[n]
        rows = []
        for c in range(CHAINS):
            differ = np.nonzero((a[c] != b[c]).any(-1))[0]
            at = int(differ[0]) if differ.size else -1
            gap = float(np.abs(a[c, at] - b[c, at]).max()) if differ.size else 0.0
            rows.append(f"chain {c}: draw {at} ({gap:.2g})")
        print(f"{args.target}, {args.chain_method}, warmup {args.warmup}, "
              f"{first} against {n} devices: " + "; ".join(rows))  # fmt: skip


if __name__ == "__main__":
    main()
