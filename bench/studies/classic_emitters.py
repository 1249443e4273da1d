"""XLA:CPU's classic emitters against its default (fusion) emitters for the chunk program.

Fresh processes, the two alternated per model and seed: ``sluice.sample`` at its
defaults (4 chains x (1,000 warmup + 1,000 draws)) with
``SLUICE_CLASSIC_EMITTER_RUN_BYTES=0`` (XLA's default emitters for every run) and
``=2**62`` (the classic emitters for every run). The models are runs past
``SMALL_RUN_BYTES`` (8 GiB of expected gradient traffic): PyMC models of
``bench/pymc_models.py`` through ``sluice.from_pymc``, and ``bench/targets.py``'s
10,000 x 100 logistic regression and 10,000-dim Gaussian. Per model, medians of
the seeds: the chunk program's compile, warmup, sampling, the ``sample`` call's
wall, and the worst bulk ESS (equal when the emitters give the same draws).

    PYTHONPATH=src python bench/studies/classic_emitters.py --seeds 3,4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {"default": "0", "classic": str(2**62)}
MODELS = ("linear", "logistic_well", "logistic", "poisson", "hier_logistic",
          "stochastic_volatility", "logreg_large", "gaussian")  # fmt: skip


def _model(name: str):
    import sluice

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
    if name in ("logreg_large", "gaussian"):  # bench/targets.py's
        from targets import make_target

        target = make_target(name)
        return sluice.Model(target.logdensity_fn, init=target.init), list(target.init)
    from pymc_models import build

    model, free = build(name)
    return sluice.from_pymc(model, log_likelihood=False), free


def one(name: str, seed: int) -> dict:
    import arviz as az
    import numpy as np

    import sluice

    model, free = _model(name)
    t0 = time.perf_counter()
    run = sluice.sample(model, chains=4, warmup=1000, draws=1000, seed=seed, progress=False)
    wall = time.perf_counter() - t0
    draws = {k: np.asarray(v) for k, v in run.draws.items() if k in free}
    ess = az.ess(az.convert_to_dataset(draws), method="bulk")
    info = run.info
    return {
        "compile": info.compile_seconds,
        "warmup": info.warmup_seconds,
        "sampling": info.sampling_seconds,
        "wall": wall,
        "min_ess": min(float(ess[v].min()) for v in ess.data_vars),
        "chain_method": info.config.chain_method,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seeds", default="3,4")
    args = ap.parse_args()
    rows = {}
    for seed in map(int, args.seeds.split(",")):
        for i, name in enumerate(args.models.split(",")):
            order = list(VARIANTS) if (seed + i) % 2 == 0 else list(VARIANTS)[::-1]
            for variant in order:
                env = {**os.environ, "SLUICE_CLASSIC_EMITTER_RUN_BYTES": VARIANTS[variant]}
                out = subprocess.run([sys.executable, __file__, "--one", name, str(seed)],
                                     env=env, capture_output=True, text=True, check=True)  # fmt: skip
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows.setdefault((name, variant), []).append(row)
                print(json.dumps({"model": name, "variant": variant, "seed": seed, **row}),
                      file=sys.stderr, flush=True)  # fmt: skip
    print("| model | chains | emitters | runs | compile s | warmup s | sampling s | wall s | "
          "min ESS bulk | wall classic / default |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        med = {v: {k: statistics.median(r[k] for r in rows[(name, v)]) for k in
                   ("compile", "warmup", "sampling", "wall", "min_ess")} for v in VARIANTS}  # fmt: skip
        for v in VARIANTS:
            m = med[v]
            ratio = (
                f"{med['classic']['wall'] / med['default']['wall']:.2f}" if v == "classic" else ""
            )
            print(f"| {name} | {rows[(name, v)][0]['chain_method']} | {v} | {len(rows[(name, v)])} | "
                  f"{m['compile']:.2f} | {m['warmup']:.2f} | {m['sampling']:.2f} | {m['wall']:.2f} | "
                  f"{m['min_ess']:.0f} | {ratio} |")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one(sys.argv[2], int(sys.argv[3]))))
    else:
        main()
