"""Kernel-level cost of NUTS transitions: time per gradient over the in-loop gradient floor.

For one model and fixed, pre-adapted parameters (step size, diagonal inverse
mass matrix), each kernel runs ``jit(lax.scan(step))`` over ``--steps``
transitions of one chain (or ``vmap`` over ``--chains`` chains). Its cost is
reported as the *overhead*: seconds / (gradients x floor), the floor being the
seconds of one gradient in ``jit(lax.scan(value_and_grad))`` measured right
before, in the same process. Repetitions alternate kernels; medians printed.

    PYTHONPATH=src python bench/studies/nuts_kernels.py logreg_small --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from targets import make_target


def flat_target(model: str):
    """``(log-density of a flat (dim,) vector, initial point)``: a model of ``bench/targets.py``."""
    target = make_target(model)
    ((name, init),) = target.init.items()
    return (lambda x: target.logdensity_fn({name: x})), init


def tuned_params(model: str):
    path = f"/tmp/sluice_nuts_params_{model}.npz"
    if os.path.exists(path):
        z = np.load(path)
        return jnp.asarray(z["eps"]), jnp.asarray(z["imm"]), jnp.asarray(z["x"])
    import sluice

    fn, x0 = flat_target(model)
    run = sluice.sample(fn, init=x0, kernel=sluice.nuts(mass_matrix="diag"), chains=1,
                        warmup=1000, draws=20, progress=False, seed=1)  # fmt: skip
    eps, imm = run.info.step_size[0], run.info.inverse_mass_matrix[0]
    (draws,) = run.draws.values()  # one array, named after the log-density's argument
    x = np.asarray(draws[0, -1])
    np.savez(path, eps=eps, imm=imm, x=x)
    return jnp.asarray(eps), jnp.asarray(imm), jnp.asarray(x)


def floor_seconds(fn, x, batch=None, length=5000):
    vg = jax.value_and_grad(fn)
    if batch:
        vg = jax.vmap(vg)
        x = jnp.broadcast_to(x, (batch, *x.shape))

    def body(c, _):
        x, t = c
        v, g = vg(x)
        return (x + 1e-6 * g, t + jnp.sum(v)), None

    loop = jax.jit(lambda x: jax.lax.scan(body, (x, 0.0), length=length)[0])
    jax.block_until_ready(loop(x))
    reps = [_time(lambda: loop(x)) for _ in range(3)]
    wall = min(r[0] for r in reps)
    cpu = min(r[1] for r in reps)
    return wall / (length * (batch or 1)), cpu / (length * (batch or 1))


def _time(f):
    """(wall, process CPU) seconds of ``f()``; CPU time is less sensitive to other processes."""
    t, c = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(f())
    return time.perf_counter() - t, time.process_time() - c, out


def kernels(fn, max_tree_depth=10):
    """name -> step(key, (x, logp, g), eps, imm) -> ((x, logp, g), n_steps)."""
    out = {}

    import blackjax.mcmc.nuts as bj_nuts

    bj = bj_nuts.build_kernel()

    def blackjax_step(key, state, eps, imm):
        from blackjax.mcmc.hmc import HMCState

        s, info = bj(key, HMCState(*state), fn, eps, imm, max_tree_depth)
        return tuple(s), info.num_integration_steps

    out["blackjax"] = blackjax_step

    from numpyro.infer.hmc_util import (
        IntegratorState,
        build_tree,
        euclidean_kinetic_energy,
        velocity_verlet,
    )

    pot = lambda x: -fn(x)  # noqa: E731
    _, vv_update = velocity_verlet(pot, euclidean_kinetic_energy)

    def numpyro_step(key, state, eps, imm):
        x, logp, g = state
        k1, k2 = jax.random.split(key)
        r = jax.random.normal(k1, x.shape) / jnp.sqrt(imm)
        vv = IntegratorState(x, r, -logp, -g)
        tree = build_tree(
            vv_update, euclidean_kinetic_energy, vv, imm, eps, k2, max_tree_depth=max_tree_depth
        )
        return (
            (tree.z_proposal, -tree.z_proposal_pe, -tree.z_proposal_grad),
            tree.num_proposals,
        )

    out["numpyro"] = numpyro_step

    import sluice.mcmc.hamiltonian as hamiltonian

    def sluice_step(key, state, eps, imm):
        s, info = hamiltonian.nuts_step(key, state, fn, eps, imm, max_tree_depth=max_tree_depth)
        return tuple(s), info["n_steps"]

    out["sluice"] = sluice_step
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chains", type=int, default=0, help="vmap over this many chains (0: one)")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    fn, _ = flat_target(args.model)
    eps, imm, x = tuned_params(args.model)
    logp, g = jax.value_and_grad(fn)(x)
    ks = kernels(fn)
    if args.only:
        ks = {k: v for k, v in ks.items() if any(o in k for o in args.only.split(","))}
    batch = args.chains or None

    def runner(step):
        def one(key, state):
            def body(s, k):
                s, n = step(k, s, eps, imm)
                return s, n

            s, n = jax.lax.scan(body, state, jax.random.split(key, args.steps))
            return s, jnp.sum(n)

        if batch:
            one = jax.vmap(one)
        return jax.jit(one)

    state = (x, logp, g)
    keys = jax.random.PRNGKey(0)
    if batch:
        state = jax.tree.map(lambda a: jnp.broadcast_to(a, (batch, *a.shape)), state)
        keys = jax.random.split(keys, batch)
    compiled, compile_s = {}, {}
    for name, step in ks.items():
        f = runner(step)
        t = time.perf_counter()
        compiled[name] = f.lower(keys, state).compile()
        compile_s[name] = time.perf_counter() - t
    wall = {k: [] for k in ks}
    cpu = {k: [] for k in ks}
    floors = []
    grads = {}
    for rep in range(args.reps):
        names = list(ks)[rep % len(ks) :] + list(ks)[: rep % len(ks)]
        for name in names:
            floors.append(floor_seconds(fn, x, batch))
            dt, dc, (_, n) = _time(lambda f=compiled[name]: f(keys, state))
            grads[name] = int(np.sum(n))
            wall[name].append(dt / grads[name])
            cpu[name].append(dc / grads[name])
    fw = min(f[0] for f in floors)
    fc = min(f[1] for f in floors)
    print(
        f"model={args.model} eps={float(eps):.4g} steps={args.steps} chains={batch or 1} "
        f"floor {fw * 1e6:.2f}us wall {fc * 1e6:.2f}us cpu load={os.getloadavg()[0]:.1f}"
    )
    for name in ks:
        print(
            f"{name:24s} overhead min-wall {min(wall[name]) / fw:6.2f}  min-cpu "
            f"{min(cpu[name]) / fc:6.2f}  med-cpu {statistics.median(cpu[name]) / fc:6.2f}  "
            f"grads/transition {grads[name] / (args.steps * (batch or 1)):6.1f}  "
            f"compile {compile_s[name]:5.1f}s"
        )


if __name__ == "__main__":
    main()
