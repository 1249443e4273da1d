"""Adapted step sizes and the acceptance they give: sluice against BlackJAX on a Gym target.

Both adapt to the same target acceptance (0.8) with Stan's windowed warmup;
this study prints, per chain, the step size each ends its warmup with, the mean
acceptance statistic over its 1,000 draws and its divergences, for an
Inference Gym target of ``bench/inference_gym.py`` (4 chains x (1,000 warmup +
1,000 draws), float32, the same seeds as that benchmark). A step size whose
draws accept well above the target is a conservative one; one whose chains
accept far below it has a chain stuck where the step is too large for the
posterior's curvature (a funnel's neck).

    PYTHONPATH=src python bench/studies/gym_acceptance.py sv_small --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import inference_gym  # bench/inference_gym.py

import sluice

CHAINS, WARMUP, DRAWS, TARGET_ACCEPT, MAX_DEPTH = 4, 1000, 1000, 0.8, 10


def sluice_run(t: dict, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    run = sluice.sample(t["logdensity"], init=t["init"], chains=CHAINS, warmup=WARMUP,
                        draws=DRAWS, seed=seed, progress=False)  # fmt: skip
    acceptance = np.asarray(run.sample_stats["acceptance_rate"]).mean(axis=1)
    divergent = int(np.asarray(run.sample_stats["diverging"]).sum())
    return np.ravel(run.info.step_size), acceptance, divergent


def blackjax_run(t: dict, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """As ``bench/inference_gym.py`` runs BlackJAX, keeping each draw's acceptance."""
    import blackjax

    def one_chain(keys: jax.Array):
        warmup = blackjax.window_adaptation(
            blackjax.nuts, t["logdensity"], target_acceptance_rate=TARGET_ACCEPT,
            max_num_doublings=MAX_DEPTH,
        )  # fmt: skip
        (state, params), _ = warmup.run(keys[0], t["init"], WARMUP)
        nuts = blackjax.nuts(t["logdensity"], params["step_size"], params["inverse_mass_matrix"],
                             max_num_doublings=MAX_DEPTH)  # fmt: skip

        def step(state, key):
            state, info = nuts.step(key, state)
            return state, (info.acceptance_rate, info.is_divergent)

        _, (accept, divergent) = jax.lax.scan(step, state, jax.random.split(keys[1], DRAWS))
        return params["step_size"], accept.mean(), divergent.sum()

    keys = jax.random.split(jax.random.key(seed), (CHAINS, 2))
    step, accept, divergent = jax.jit(lambda k: jax.lax.map(one_chain, k))(keys)
    return np.asarray(step), np.asarray(accept), int(np.asarray(divergent).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a target of bench/inference_gym.py (e.g. sv_small)")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    t = inference_gym.gym_target(args.target)
    for seed in (int(s) for s in args.seeds.split(",")):
        for name, fn in (("sluice", sluice_run), ("blackjax", blackjax_run)):
            step, accept, divergent = fn(t, seed)
            print(f"{args.target} seed {seed} {name:8s}: step size {np.round(step, 3)}, "
                  f"acceptance {np.round(accept, 3)}, divergent {divergent}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
