"""Whose warmup, whose sampler: sluice's and BlackJAX's NUTS crossed on an Inference Gym target.

When sluice fails a target that BlackJAX passes, the difference is in the warmup
(the step size and metric it hands over) or in the sampler (the NUTS transition).
For each seed this study runs four combinations, 4 chains x 1,000 warmup + ``--draws``
draws, float32, every chain on one core after another:

* ``bj/bj``: BlackJAX's window adaptation, then BlackJAX's NUTS: the benchmark's
  ``blackjax-1core`` run, with its keys;
* ``bj/sl``: BlackJAX's warmup (its step size, metric and last position per chain),
  then sluice's NUTS transition (:func:`sluice.mcmc.hamiltonian.nuts_step`), with
  the same sampling keys;
* ``sl/sl``: ``sluice.sample`` at its defaults: the benchmark's ``sluice`` run;
* ``sl/bj``: sluice's warmup (``run.info.step_size``, ``run.info.inverse_mass_matrix``,
  and the first draw as the start), then BlackJAX's NUTS.

Each run is judged by the benchmark's rule (every |z| of the means and sds under the
Bonferroni bound, the smallest bulk ESS at least 100), and one JSON line per run gives
the element with the largest |z|, the mean step size and the divergences; then the
pass counts.

    SLUICE_CPU_DEVICES=1 PYTHONPATH=src python bench/studies/gym_cross.py \\
        --target sv_log_small --seeds 0-9

``--key-offset 100`` runs another ten with the keys of seeds 100-109;
``--divergent-target none`` gives sluice's warmup ``divergent_target_accept=None``
(it never raises its target after divergences; docs/kernels.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def blackjax_warmup(t: dict[str, Any], keys: Any, num_warmup: int) -> tuple[Any, Any, Any]:
    """Per chain: BlackJAX's last warmup position, step size and inverse mass matrix."""
    import blackjax
    import jax

    def one(key: Any) -> Any:
        warmup = blackjax.window_adaptation(
            blackjax.nuts, t["logdensity"], target_acceptance_rate=0.8, max_num_doublings=10
        )
        (state, params), _ = warmup.run(key, t["init"], num_warmup)
        return state.position, params["step_size"], params["inverse_mass_matrix"]

    return jax.jit(lambda k: jax.lax.map(one, k))(keys)


def blackjax_draws(t: dict[str, Any], start: tuple[Any, Any, Any], keys: Any, n: int) -> Any:
    """``n`` draws per chain of BlackJAX's NUTS from ``start``: positions, steps, divergences."""
    import blackjax
    import jax

    def one(args: Any) -> Any:
        position, step_size, imm, key = args
        nuts = blackjax.nuts(t["logdensity"], step_size, imm, max_num_doublings=10)

        def step(state: Any, k: Any) -> Any:
            state, info = nuts.step(k, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent)

        return jax.lax.scan(step, nuts.init(position), jax.random.split(key, n))[1]

    return jax.jit(lambda *a: jax.lax.map(one, a))(*start, keys)


def sluice_draws(t: dict[str, Any], start: tuple[Any, Any, Any], keys: Any, n: int) -> Any:
    """As :func:`blackjax_draws`, with sluice's NUTS transition."""
    import jax

    from sluice.mcmc import hamiltonian

    def one(args: Any) -> Any:
        position, step_size, imm, key = args

        def step(state: Any, k: Any) -> Any:
            state, info = hamiltonian.nuts_step(k, state, t["logdensity"], step_size, imm)
            return state, (state[0], info["n_steps"], info["diverging"])

        state = (position, *jax.value_and_grad(t["logdensity"])(position))
        return jax.lax.scan(step, state, jax.random.split(key, n))[1]

    return jax.jit(lambda *a: jax.lax.map(one, a))(*start, keys)


def judge(bench: Any, t: dict[str, Any], z: Any, steps: Any, divergent: Any) -> dict[str, Any]:
    import jax
    import numpy as np
    from scipy import stats

    x = np.asarray(jax.jit(jax.vmap(jax.vmap(t["constrained"])))(z), np.float64)
    z_mean, z_sd, ess = bench.z_scores(x, t)
    bound = float(stats.norm.isf(bench.FAMILY_ERROR / (2 * 2 * x.shape[-1])))
    worst = np.maximum(np.abs(z_mean), np.abs(z_sd))
    el = int(np.nanargmax(worst))
    return {
        "passed": bool(np.nanmax(worst) < bound and np.min(ess) >= bench.MIN_ESS),
        "max_z": round(float(np.nanmax(worst)), 2),
        "min_ess_bulk": round(float(np.min(ess))),
        "grads": int(np.sum(steps)),
        "divergent": int(np.sum(divergent)),
        "worst_element": el,
        "worst_sd": round(float(x[..., el].std(ddof=1)), 4),
        "truth_sd": round(float(t["sd"][el]), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="sv_log_small")
    parser.add_argument("--seeds", default="0-9", help="'0-9' or '0,3,5'")
    parser.add_argument("--draws", type=int, default=1000, help="per chain, after 1,000 warmup")
    parser.add_argument("--key-offset", type=int, default=0,
                        help="run seed s with the keys of seed s + OFFSET: another sample of runs")  # fmt: skip
    parser.add_argument("--divergent-target", default=None,
                        help="sluice's divergent_target_accept: a number, or 'none'")  # fmt: skip
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import inference_gym as bench
    import jax
    import jax.numpy as jnp
    import numpy as np
    from gym_seeds import parse_seeds  # beside this script

    import sluice  # before the target starts JAX's backend

    t = bench.gym_target(args.target)
    chains, n = bench.CHAINS, args.draws
    kernel = sluice.nuts()  # the defaults, or:
    if args.divergent_target is not None:
        value = None if args.divergent_target == "none" else float(args.divergent_target)
        kernel = sluice.nuts(divergent_target_accept=value)
    lines = []
    for seed in parse_seeds(args.seeds):
        key_seed = seed + args.key_offset
        keys = jax.random.split(jax.random.key(key_seed), (chains, 2))  # as run_blackjax's
        bj_start = blackjax_warmup(t, keys[:, 0], bench.WARMUP)
        run = sluice.sample(t["logdensity"], init=t["init"], chains=chains, warmup=bench.WARMUP,
                            draws=n, seed=key_seed, kernel=kernel, progress=False)  # fmt: skip
        (sl_z,) = (np.asarray(v) for v in run.draws.values())
        if np.ndim(run.info.inverse_mass_matrix) != 2:
            raise SystemExit(f"sluice chose a {run.info.config.kernel.mass_matrix!r} metric here; "
                             "the cross needs a diagonal one")  # fmt: skip
        sl_start = (
            jnp.asarray(sl_z[:, 0]),
            jnp.asarray(np.ravel(run.info.step_size)),
            jnp.asarray(run.info.inverse_mass_matrix),
        )
        stats = run.sample_stats
        results = {
            "bj/bj": blackjax_draws(t, bj_start, keys[:, 1], n),
            "bj/sl": sluice_draws(t, bj_start, keys[:, 1], n),
            "sl/sl": (sl_z, np.asarray(stats["n_steps"]), np.asarray(stats["diverging"])),
            "sl/bj": blackjax_draws(t, sl_start, keys[:, 1], n),
        }
        for pair, (z, steps, divergent) in results.items():
            start = bj_start if pair.startswith("bj") else sl_start
            line = {"pair": pair, "target": args.target, "seed": key_seed,
                    **judge(bench, t, np.asarray(z), steps, divergent),
                    "step_size": round(float(np.mean(start[1])), 3)}  # fmt: skip
            lines.append(line)
            print(json.dumps(line), flush=True)
    for pair in ("bj/bj", "bj/sl", "sl/sl", "sl/bj"):
        runs = [x for x in lines if x["pair"] == pair]
        print(f"{args.target:16s} warmup/sampler {pair}: passed {sum(x['passed'] for x in runs)}"
              f"/{len(runs)}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
