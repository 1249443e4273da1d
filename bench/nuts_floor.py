"""The least a NUTS leapfrog step can cost, against the gradient floor.

The overhead of a sampler is its time per gradient over the in-loop gradient's
(``bench/mcmc.py``). This script measures what the overhead of *any* NUTS would be if it did
nothing but the work the algorithm cannot skip, each variant a hand-fused
``jit(lax.scan(...))`` over ``--steps`` steps of one chain, on a fixed,
pre-adapted step size and diagonal inverse mass matrix:

* ``gradient``: ``value_and_grad`` and a tiny move of the point (the floor of
  ``bench/harness.py`` and ``bench/nuts_kernels.py``);
* ``leapfrog``: the floor plus the drift and the kick (kick-drift-kick with
  consecutive kicks merged): what static HMC costs per gradient;
* ``nuts minimum``: the leapfrog plus what every NUTS leaf needs: the energy
  ``|p|^2/2``, the log-sum of weights, one uniform (precomputed here, free),
  the candidate kept by a select on (x, g), the running momentum sum, one
  U-turn check against one checkpoint (two dot products), and a checkpoint
  row written every other step. A real NUTS checks up to ``depth``
  checkpoints at some leaves and merges subtrees; those are left out, so this
  is below any real implementation.

Alongside, sluice's NUTS on the same parameters (``hamiltonian.nuts_step``,
scanned over transitions), and BlackJAX's. Variants alternate ``--reps``
times; medians of the per-gradient time over the gradient floor.

    PYTHONPATH=src python bench/nuts_floor.py --models logreg_small,gaussian --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
import nuts_kernels
import nuts_targets


def _loops(fn, x0, eps, imm, steps: int) -> dict:
    """name -> (jitted loop of ``steps`` leapfrog-like steps, gradients per call)."""
    vg = jax.value_and_grad(fn)
    sq = jnp.sqrt(imm)

    def gradient(x):
        def body(c, _):
            x, t = c
            v, g = vg(x)
            return (x + 1e-6 * g, t + v), None

        return jax.lax.scan(body, (x, 0.0), length=steps)[0]

    def leapfrog(x):
        _, g0 = vg(x)

        def body(c, _):
            x, ph, t = c  # momentum half a step ahead (whitened: p ~ N(0, I))
            x = x + eps * sq * ph
            v, g = vg(x)
            ph = ph + eps * sq * g
            return (x, ph, t + v), None

        ph = jnp.ones_like(x) + 0.5 * eps * sq * g0
        return jax.lax.scan(body, (x, ph, 0.0), length=steps)[0]

    def nuts_minimum(x):
        v0, g0 = vg(x)
        us = jnp.log(jax.random.uniform(jax.random.key(0), (steps,)))

        def body(c, logu):
            x, ph, g, px, pg, psum, ckpt, lw, n = c
            x = x + eps * sq * ph
            v, g = vg(x)
            gy = sq * g
            p = ph + 0.5 * eps * gy
            ph = p + 0.5 * eps * gy
            energy = -v + 0.5 * jnp.dot(p, p)
            lw_new = jnp.logaddexp(lw, -energy)
            take = logu < -energy - lw_new
            px = jnp.where(take, x, px)
            pg = jnp.where(take, g, pg)
            psum = psum + p
            q = psum - 0.5 * p
            rho = q - ckpt[1]
            turning = (jnp.dot(ckpt[0], rho) <= 0) | (jnp.dot(p, rho) <= 0)
            ckpt = jnp.where((n & 1) == 0, jnp.stack([p, q]), ckpt)
            # a turn would end the subtree; here it only feeds the result so it is not removed
            lw_new = jnp.where(turning, lw_new - 1e-30, lw_new)
            return (x, ph, g, px, pg, psum, ckpt, lw_new, n + 1), None

        p0 = jnp.ones_like(x)
        z = jnp.zeros_like(x)
        init = (x, p0 + 0.5 * eps * sq * g0, g0, x, g0, z, jnp.stack([z, z]), -v0, 0)
        return jax.lax.scan(body, init, us)[0]

    return {name: (jax.jit(f), steps) for name, f in
            {"gradient": gradient, "leapfrog": leapfrog, "nuts minimum": nuts_minimum}.items()}  # fmt: skip


def _kernel_loops(fn, eps, imm, transitions: int) -> dict:
    """name -> jitted ``(key, state) -> (state, gradients)`` over ``transitions`` NUTS steps."""
    out = {}
    for name, step in nuts_kernels.kernels(fn).items():
        if name not in ("sluice", "blackjax"):
            continue

        def one(key, state, step=step):
            def body(s, k):
                return step(k, s, eps, imm)

            s, n = jax.lax.scan(body, state, jax.random.split(key, transitions))
            return s, jnp.sum(n)

        out[f"{name} NUTS"] = jax.jit(one)
    return out


def _seconds(f) -> tuple[float, object]:
    t = time.perf_counter()
    out = jax.block_until_ready(f())
    return time.perf_counter() - t, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="logreg_small,gaussian")
    parser.add_argument("--steps", type=int, default=20_000, help="leapfrog steps per loop call")
    parser.add_argument("--transitions", type=int, default=300, help="NUTS transitions per call")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; jax {jax.__version__}; medians of {args.reps}")
    print("| model | variant | us per gradient | over the gradient floor |")
    print("|---|---|---:|---:|")
    for model in args.models.split(","):
        fn, _ = nuts_targets.make(model)
        eps, imm, x = nuts_kernels.tuned_params(model)
        loops = _loops(fn, x, eps, imm, args.steps)
        kernels = _kernel_loops(fn, eps, imm, args.transitions)
        state = (x, *jax.value_and_grad(fn)(x))
        key = jax.random.PRNGKey(0)
        calls = {name: (lambda f=f, x=x: f(x), n) for name, (f, n) in loops.items()}
        for name, f in kernels.items():
            calls[name] = (lambda f=f, key=key, state=state: f(key, state), None)
        times: dict[str, list[float]] = {name: [] for name in calls}
        for rep in range(args.reps + 1):  # round 0 compiles
            for name, (call, n) in calls.items():
                seconds, out = _seconds(call)
                grads = n if n is not None else int(out[1])
                if rep:
                    times[name].append(seconds / grads)
        floor = statistics.median(times["gradient"])
        for name, values in times.items():
            m = statistics.median(values)
            print(f"| {model} | {name} | {m * 1e6:.3f} | {m / floor:.2f} |", flush=True)


if __name__ == "__main__":
    main()
