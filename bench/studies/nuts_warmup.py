"""Warmup strategies compared on one chain: gradients spent, and quality of the tuned sampler.

Mirrors the engine's warmup step (the NUTS kernel's ``warmup()``: kernel
step, adaptation update, step-size search at window ends) in one ``jit(lax.scan)`` per
chain, for a given adaptation setting and window schedule, then samples
``--draws`` draws with the tuned step size and metric. Reports warmup
gradients, sampling gradients per draw, and the minimum bulk ESS per
sampling gradient (so a cheap warmup that tunes badly shows up).

``--feed state`` passes the kernel state (position and gradient) to the
adaptation, as the engine does; ``--feed position`` passes the position only
(the metric is then the draws' variance, as in Stan).

    PYTHONPATH=src python bench/studies/nuts_warmup.py gaussian --chains 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import nuts_kernels

from sluice.mcmc import adaptation as adapt_mod
from sluice.mcmc.kernels import nuts
from sluice.mcmc.protocol import KernelParams


def run_chain(fn, x0, key, warmup, draws, schedule, adapt, feed, kernel):
    def warm(key):
        kstate = kernel.init(x0, fn)
        astate = adapt.init(
            kstate if feed == "state" else kstate.position, kernel.initial_step_size
        )
        params = KernelParams(*adapt.params(astate))
        eps, n0 = kernel.find_step_size(jax.random.fold_in(key, 10**6), kstate, fn, params)
        astate = adapt.restart(astate, eps)

        def body(carry, i):
            kstate, astate, grads = carry
            params = KernelParams(*adapt.params(astate))
            kstate, stats = kernel.step(jax.random.fold_in(key, i), kstate, fn, params)
            point = kstate if feed == "state" else kstate.position
            astate, ended = adapt.update(astate, i, schedule, point, stats["acceptance_rate"])

            def new_eps(a):
                e, n = kernel.find_step_size(
                    jax.random.fold_in(key, i + 2 * 10**6),
                    kstate,
                    fn,
                    KernelParams(*adapt.params(a)),
                )
                return adapt.restart(a, e), n

            astate, extra = jax.lax.cond(ended, new_eps, lambda a: (a, jnp.int32(0)), astate)
            return (kstate, astate, grads + stats["n_steps"] + extra), stats["tree_depth"]

        (kstate, astate, grads), depth = jax.lax.scan(
            body, (kstate, astate, n0 + 1), jnp.arange(warmup)
        )
        return kstate, KernelParams(*adapt.final(astate)), grads, depth

    def sample(key, kstate, params):
        def body(s, i):
            s, stats = kernel.step(jax.random.fold_in(key, i), s, fn, params)
            return s, (s.position, stats["n_steps"])

        return jax.lax.scan(body, kstate, jnp.arange(draws))[1]

    kstate, params, grads, depth = jax.jit(warm)(key)
    positions, steps = jax.jit(sample)(jax.random.fold_in(key, 7), kstate, params)
    return grads, np.asarray(depth), params, np.asarray(positions), np.asarray(steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--feed", default="state", choices=["state", "position"])
    ap.add_argument("--gradient-metric", type=int, default=1)
    ap.add_argument(
        "--buffers",
        default="10,10,50",
        help="initial buffer, first window, final buffer (Stan: 75,25,50)",
    )
    args = ap.parse_args()
    import arviz as az

    fn, x0 = nuts_kernels.flat_target(args.model)
    buffers = [int(b) for b in args.buffers.split(",")]
    schedule = adapt_mod.window_schedule(args.warmup, *buffers)
    adapt = adapt_mod.window_adaptation(gradient_metric=bool(args.gradient_metric))
    kernel = nuts()
    rows = []
    pos = []
    t = time.perf_counter()
    for c in range(args.chains):
        grads, depth, params, positions, steps = run_chain(
            fn,
            x0,
            jax.random.PRNGKey(1000 * args.seed + c),
            args.warmup,
            args.draws,
            schedule,
            adapt,
            args.feed,
            kernel,
        )
        pos.append(positions)
        rows.append((int(grads), float(steps.mean()), float(params.step_size), depth[:100].mean()))
        if os.environ.get("VERBOSE"):
            blocks = depth[: len(depth) // 50 * 50].reshape(-1, 50).mean(1)
            print("  depth per 50 warmup steps:", np.round(blocks, 1).tolist())
            print(
                "  final step size",
                float(params.step_size),
                "imm[:5]",
                np.asarray(params.inverse_mass_matrix)[:5],
            )
    ess = az.ess(az.convert_to_dataset({"x": np.stack(pos)}), method="bulk")
    ess_min = float(ess["x"].min())
    grads_warmup = sum(r[0] for r in rows)
    grads_per_draw = np.mean([r[1] for r in rows])
    ess_per_grad = ess_min / (grads_per_draw * args.draws * args.chains)
    print(
        f"{args.model} feed={args.feed} grad_metric={args.gradient_metric} "
        f"buffers={args.buffers}: warmup grads/chain {grads_warmup / args.chains:9.0f} "
        f"sampling grads/draw {grads_per_draw:6.1f} step {np.mean([r[2] for r in rows]):.3g} "
        f"early depth {np.mean([r[3] for r in rows]):.1f} min ESS {ess_min:7.0f} "
        f"ESS/1000 grads {1000 * ess_per_grad:6.2f} ({time.perf_counter() - t:.0f}s)"
    )


if __name__ == "__main__":
    main()
