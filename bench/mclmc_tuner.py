"""MCLMC's tuner in sluice's engine against BlackJAX's own: the tuned L and step size, ESS per gradient.

Unadjusted MCLMC (``blackjax.mclmc``, the isokinetic McLachlan integrator: two
gradients per step), 4 chains one after another, 1,000 tuning steps and 1,000
draws per chain, float32:

* ``sluice``: ``sluice.kernels.from_blackjax(blackjax.mclmc)``, the ``"mclmc"``
  warmup inside the chunk engine (:mod:`sluice.interop.mclmc_tuning`);
* ``blackjax``: BlackJAX's ``mclmc_find_L_and_step_size`` (diagonal
  preconditioning, its default fractions, ``num_steps=3000`` so that its three
  stages take the same 1,000 steps), then a ``lax.scan`` of 1,000 steps with
  the tuned parameters; each chain from its own key.

Every chain starts at the model's initial point. *min ESS_bulk* is ArviZ's
over the parameters, the 4 chains pooled; *ESS/grad* divides it by the
sampling gradients (2 per draw); *L* and *step size* are the medians over the
chains (sluice: the one value of each chain, read from the run's tuned
parameters). One row per seed (``--seeds``, default 0, 1, 2): ESS moves by
about 15% between seeds.

    PYTHONPATH=src python bench/mclmc_tuner.py [--models gaussian,logreg_large] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import areas

CHAINS, TUNE, DRAWS = 4, 1000, 1000


def measure(model: str, seed: int) -> list[dict]:
    import sluice  # noqa: I001 (first: it gives JAX's CPU backend a device per core)

    import arviz as az
    import blackjax
    import jax
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from targets import make_target

    target = make_target(model)
    flat, unravel = ravel_pytree(target.init)

    def logdensity(x):
        return target.logdensity_fn(unravel(x))

    def min_ess(draws: np.ndarray) -> float:  # (chains, draws, dim)
        return float(np.min(az.ess(az.convert_to_dataset({"x": draws}), method="bulk")["x"]))

    rows = []
    t0 = time.perf_counter()
    run = sluice.sample(logdensity, init=flat, kernel=sluice.kernels.from_blackjax(blackjax.mclmc),
                        chains=CHAINS, warmup=TUNE, draws=DRAWS, chain_method="sequential",
                        seed=seed, progress=False)  # fmt: skip
    wall = time.perf_counter() - t0
    draws = np.asarray(run.draws["x"], np.float64)
    params = run.info.params
    ess = min_ess(draws)
    rows.append({
        "model": model, "dim": int(flat.size), "seed": seed, "tuner": "sluice",
        "min_ess_bulk": ess,
        "ess_per_grad": ess / (2 * CHAINS * DRAWS),
        "L": float(np.median(np.asarray(params["L"]))) if "L" in params else None,
        "step_size": float(np.median(np.asarray(params["step_size"])))
        if "step_size" in params else None,
        "wall_s": wall,
    })  # fmt: skip

    kernel = blackjax.mcmc.mclmc.build_kernel()

    @jax.jit
    def blackjax_chain(key):
        k_init, k_tune, k_run = jax.random.split(key, 3)
        state = blackjax.mcmc.mclmc.init(flat, logdensity, k_init)
        state, tuned, _ = blackjax.mclmc_find_L_and_step_size(
            kernel, num_steps=3 * TUNE, state=state, rng_key=k_tune, logdensity_fn=logdensity,
        )  # fmt: skip
        sampler = blackjax.mclmc(logdensity, L=tuned.L, step_size=tuned.step_size,
                                 inverse_mass_matrix=tuned.inverse_mass_matrix)  # fmt: skip

        def body(s, k):
            s, _ = sampler.step(k, s)
            return s, s.position

        _, xs = jax.lax.scan(body, state, jax.random.split(k_run, DRAWS))
        return xs, tuned.L, tuned.step_size

    t0 = time.perf_counter()
    out = [blackjax_chain(jax.random.fold_in(jax.random.PRNGKey(seed), c)) for c in range(CHAINS)]
    draws = np.stack([np.asarray(xs, np.float64) for xs, _, _ in out])
    wall = time.perf_counter() - t0
    ess = min_ess(draws)
    rows.append({
        "model": model, "dim": int(flat.size), "seed": seed, "tuner": "blackjax",
        "min_ess_bulk": ess,
        "ess_per_grad": ess / (2 * CHAINS * DRAWS),
        "L": float(np.median([float(L) for _, L, _ in out])),
        "step_size": float(np.median([float(e) for _, _, e in out])),
        "wall_s": wall,
    })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", type=lambda s: s.split(","), default=["gaussian", "logreg_large"]
    )
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    rows = [row for model in args.models for seed in args.seeds for row in measure(model, seed)]
    areas.emit("mclmc-tuner", rows, args.json)


if __name__ == "__main__":
    main()
