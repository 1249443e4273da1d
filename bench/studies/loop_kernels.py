"""XLA:CPU's small while loops as single kernels: NUTS per gradient, compile, whole runs.

XLA:CPU compiles a while loop into one kernel when the buffers its body touches
hold at most ``xla_cpu_small_while_loop_byte_threshold`` bytes (1 KB by default);
otherwise it dispatches each of the body's kernels in turn. This study measures
NUTS with XLA's default and with the bound raised to 1 GB
(``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1000000000``,
docs/kernels.md, "Speed"). Each measurement is a fresh process (XLA reads its
flags once per process), the two settings alternated.

``--kernel``: one chain's NUTS transitions alone (``sluice.mcmc.hamiltonian.nuts_step``
in a ``fori_loop`` of 600 transitions, step size and metric fixed, the chunk
program's XLA options), in microseconds per gradient (best of 3 runs), the
program's compile seconds, and the gradient alone in a ``fori_loop`` (the floor);
on Gaussians of 20 and 175 elements (float32) and, with ``--pymc``, PyMC models of
``bench/pymc_models.py`` (float64, their step size and diagonal metric from a
sluice warmup); with the diagonal metric and with a low-rank one of 16 columns
(three of them used), as ``mass_matrix="auto"`` takes up to 10,000 elements.

``--runs``: whole ``sluice.pymc.sample`` calls of ``bench/pymc_models.py`` (its
``--one`` measurement: wall from building the model to the InferenceData),
medians over ``--reps``.

    PYTHONPATH=src python bench/studies/loop_kernels.py --kernel --pymc radon_slopes
    PYTHONPATH=src python bench/studies/loop_kernels.py --runs eight_schools,radon_slopes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from harness import emit_result, run_isolated  # noqa: E402

TRANSITIONS = 600
BOUNDS = ("default", "1GB")
RAISED = "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1000000000"


def _gaussian(dim: int):
    import jax.numpy as jnp

    scales = jnp.linspace(0.5, 2.0, dim, dtype=jnp.float32)
    logdensity = lambda consts, x: -0.5 * jnp.sum((x / consts) ** 2)  # noqa: E731
    return logdensity, scales, jnp.zeros(dim, jnp.float32), jnp.ones(dim, jnp.float32), 0.4


def _pymc(name: str):
    import jax.numpy as jnp
    import numpy as np
    import pymc_models

    import sluice
    from sluice.model import FlatModel

    model = sluice.from_pymc(pymc_models.build(name)[0], log_likelihood=False)
    flat = FlatModel.from_model(model)
    tuned = sluice.sample(model, chains=1, warmup=1000, draws=10, seed=1, progress=False,
                          kernel=sluice.nuts(mass_matrix="diag"))  # fmt: skip
    imm = jnp.asarray(np.asarray(tuned.info.inverse_mass_matrix)[0], flat.dtype)
    x0 = jnp.zeros(flat.dim, flat.dtype)
    return flat.logdensity_fn, flat.consts, x0, imm, float(np.asarray(tuned.info.step_size)[0])


def kernel_child(target: str, form: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from sluice.mcmc import hamiltonian, metric

    logdensity, consts, x0, imm, eps = (
        _gaussian(int(target[5:])) if target.startswith("gauss") else _pymc(target)
    )
    if form == "low_rank":
        dim, rank = x0.shape[0], 16
        basis = np.linalg.qr(np.random.default_rng(0).normal(size=(dim, rank)))[0]
        values = np.ones(rank)
        values[:3] = [1.5, 0.7, 1.3]
        imm = metric.LowRank(imm, jnp.asarray(basis, x0.dtype), jnp.asarray(values, x0.dtype))
    options = {"xla_cpu_use_fusion_emitters": False}  # the chunk program's (loop_options)

    def transitions(key, x, consts):
        f = lambda x: logdensity(consts, x)  # noqa: E731
        state = (x, *jax.value_and_grad(f)(x))

        def body(i, carry):
            state, n = carry
            state, info = hamiltonian.nuts_step(jax.random.fold_in(key, i), state, f, eps, imm)
            return state, n + info["n_steps"]

        return jax.lax.fori_loop(0, TRANSITIONS, body, (state, 0))

    def gradients(x, consts):
        vg = jax.value_and_grad(lambda x: logdensity(consts, x))

        def body(_, carry):
            x, acc = carry
            v, g = vg(x)
            return x + 1e-6 * g, acc + v

        return jax.lax.fori_loop(0, 10_000, body, (x, jax.numpy.zeros((), x.dtype)))

    key = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    run = jax.jit(transitions).lower(key, x0, consts).compile(options)
    compile_s = time.perf_counter() - t0
    state, _ = run(key, x0, consts)  # from the target's bulk on
    x1 = jax.block_until_ready(state[0])
    best = float("inf")
    for rep in range(3):
        t0 = time.perf_counter()
        state, n = run(jax.random.PRNGKey(rep + 1), x1, consts)
        jax.block_until_ready(state)
        best = min(best, (time.perf_counter() - t0) / int(n))
    floor = jax.jit(gradients).lower(x1, consts).compile(options)
    jax.block_until_ready(floor(x1, consts))
    t0 = time.perf_counter()
    jax.block_until_ready(floor(x1, consts))
    floor_us = (time.perf_counter() - t0) / 10_000 * 1e6
    return {"target": target, "metric": form, "us_per_gradient": best * 1e6,
            "gradient_us": floor_us, "compile_s": compile_s,
            "gradients_per_transition": int(n) / TRANSITIONS}  # fmt: skip


def _with_bound(bound: str, script: str, args: list[str]) -> dict:
    saved = os.environ.get("XLA_FLAGS")
    flags = (saved or "").replace(RAISED, "").strip()
    os.environ["XLA_FLAGS"] = f"{flags} {RAISED}".strip() if bound == "1GB" else flags
    try:
        return run_isolated(script, args)
    finally:
        if saved is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", action="store_true")
    parser.add_argument("--pymc", default="", help="comma-separated PyMC models (--kernel)")
    parser.add_argument("--runs", default="", help="comma-separated PyMC models, whole runs")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("TARGET", "METRIC"), default=None)
    args = parser.parse_args()
    if args.child:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        emit_result(kernel_child(*args.child))
        return
    if args.kernel:
        targets = ["gauss20", "gauss175", *filter(None, args.pymc.split(","))]
        print("target        metric    bound     us/grad  gradient us  compile s  grads/transition")
        for target in targets:
            for form in ("diag", "low_rank"):
                for bound in BOUNDS:
                    r = _with_bound(bound, __file__, ["--child", target, form])
                    print(f"{target:13s} {form:9s} {bound:7s} {r['us_per_gradient']:8.2f} "
                          f"{r['gradient_us']:11.2f} {r['compile_s']:10.2f} "
                          f"{r['gradients_per_transition']:10.1f}", flush=True)  # fmt: skip
    script = os.path.join(HERE, "..", "pymc_models.py")
    for model in filter(None, args.runs.split(",")):
        walls: dict[str, list[float]] = {b: [] for b in BOUNDS}
        sampling: dict[str, list[float]] = {b: [] for b in BOUNDS}
        for rep in range(args.reps):
            for bound in BOUNDS[rep % 2 :] + BOUNDS[: rep % 2]:  # alternated
                r = _with_bound(bound, script, ["--one", model, "sluice"])
                walls[bound].append(r["wall_s"])
                sampling[bound].append(r["sampling_s"])
        for bound in BOUNDS:
            print(f"{model:22s} bound={bound:8s} wall {statistics.median(walls[bound]):6.2f} s  "
                  f"sampling {statistics.median(sampling[bound]):6.2f} s  "
                  f"(medians of {args.reps})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
