"""Time per VI step on the demo model: sluice vs a particle loop vs NumPyro vs plain JAX.

The model is the JAX notebook's logistic regression (100 points, 10 features,
prior N(0, 10^2)); every contender fits a mean-field Gaussian with plain SGD
(step 0.01) from loc = 0, log_scale = 0, so all do the same arithmetic per
step up to how particles and keys are produced:

* ``sluice``: ``sluice.vi.fit`` as a user calls it (default 100 steps per
  compiled chunk; the timing includes the host loop and argument checks);
* ``sluice-seq``: the same with ``particle_chunk_size=1`` (particles one after
  another inside the compiled step: the "sequential particle loop");
* ``numpyro-vec`` / ``numpyro-seq``: NumPyro SVI with
  ``Trace_ELBO(num_particles=K, vectorize_particles=True/False)`` and an
  explicit mean-field guide, its steps fused in one jitted ``lax.scan`` (what
  ``SVI.run(progress_bar=False)`` does, jitted once so that no compile is timed);
* ``notebook``: the notebook's loop as written: a Python loop calling the jitted
  ``elbo_val_and_grad`` and ``normal_sample`` and updating on the host;
* ``jax-fused``: the notebook's step fused in a jitted ``lax.scan`` of 100 steps
  (sluice's default chunk), called ``steps / 100`` times: the floor.

sluice, ``jax-fused`` and ``notebook`` evaluate the same log joint (the demo
model's, :func:`sluice.apps.vi_demo.logistic_log_joint`); NumPyro evaluates its
``Normal`` prior and ``Bernoulli(logits=...)`` likelihood, which cost the same
kind of arithmetic.

Each contender is compiled and run once, then timed ``--reps`` times,
round-robin across contenders so that machine load drifts affect all alike;
the tables show medians (and, for shared machines, the best repetition) in ms
per step, and ratios.

Run ``python bench/vi_bench.py [--steps 1000 --reps 7 --particles 1 10 100 1000]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import jax
import jax.numpy as jnp
import numpy as np
import optax

from sluice import vi
from sluice.apps.datasets import logistic_regression_data
from sluice.apps.vi_demo import logistic_log_joint, logistic_regression_model

STEP_SIZE = 0.01
X, Y, _ = logistic_regression_data()
D = X.shape[1]


log_joint = logistic_log_joint(X, Y, prior_scale=10.0)  # the demo model's, for one beta


def notebook_elbo(loc: jax.Array, log_scale: jax.Array, epsilon: jax.Array) -> jax.Array:
    beta = loc + jnp.exp(log_scale) * epsilon
    return jnp.mean(jax.vmap(log_joint)(beta), 0) + jnp.sum(log_scale - 0.5 * np.log(2 * np.pi))


# -- contenders: each make_*(K, steps) returns run() that does `steps` steps and blocks ----------


def make_sluice(particles: int, steps: int, particle_chunk_size: int | None = None) -> Callable:
    model = logistic_regression_model(X, Y, prior_scale=10.0)
    family = vi.meanfield(init_scale=1.0)
    optimizer = _SGD

    def run() -> None:
        result = vi.fit(
            model,
            family=family,
            particles=particles,
            steps=steps,
            optimizer=optimizer,
            progress=False,
            particle_chunk_size=particle_chunk_size,
        )
        assert np.isfinite(result.elbo[-1])

    return run


_SGD = optax.sgd(STEP_SIZE)


def make_sluice_sequential(particles: int, steps: int) -> Callable:
    return make_sluice(particles, steps, particle_chunk_size=1)


def make_numpyro(particles: int, steps: int, vectorize: bool) -> Callable:
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import SVI, Trace_ELBO

    x, y = jnp.asarray(X), jnp.asarray(Y)

    def model() -> None:
        beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([D]).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=x @ beta), obs=y)

    def guide() -> None:
        loc = numpyro.param("loc", jnp.zeros(D))
        log_scale = numpyro.param("log_scale", jnp.zeros(D))
        numpyro.sample("beta", dist.Normal(loc, jnp.exp(log_scale)).to_event(1))

    svi = SVI(
        model,
        guide,
        numpyro.optim.SGD(STEP_SIZE),
        Trace_ELBO(num_particles=particles, vectorize_particles=vectorize),
    )

    @jax.jit
    def fused(state):  # what SVI.run(progress_bar=False) does, compiled once
        return jax.lax.scan(lambda s, _: svi.update(s), state, None, length=steps)

    def run() -> None:
        state = svi.init(jax.random.PRNGKey(0))
        state, losses = fused(state)
        assert np.isfinite(float(losses[-1]))

    return run


def make_notebook_loop(particles: int, steps: int) -> Callable:
    value_and_grad = jax.jit(jax.value_and_grad(notebook_elbo, argnums=(0, 1)))

    def normal_sample(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
        new_key, sub_key = jax.random.split(key)
        return new_key, jax.random.normal(sub_key, shape)

    normal_sample = jax.jit(normal_sample, static_argnums=(1,))

    def run() -> None:
        key = jax.random.PRNGKey(10003)
        loc, log_scale = jnp.zeros(D), jnp.zeros(D)
        for _ in range(steps):
            key, epsilon = normal_sample(key, (particles, D))
            value, (g_loc, g_log_scale) = value_and_grad(loc, log_scale, epsilon)
            loc += STEP_SIZE * g_loc
            log_scale += STEP_SIZE * g_log_scale
        assert np.isfinite(float(value))

    return run


def make_fused_jax(particles: int, steps: int, scan_length: int = 100) -> Callable:
    """The notebook's step in a jitted ``lax.scan``, called per ``scan_length`` steps.

    100 steps per call, like sluice's default chunk: on the 2-core test machine
    one 1000-step scan was ~30% slower per step than ten 100-step scans.
    """

    def step(carry, key):
        loc, log_scale = carry
        epsilon = jax.random.normal(key, (particles, D))
        value, (g_loc, g_log_scale) = jax.value_and_grad(notebook_elbo, argnums=(0, 1))(
            loc, log_scale, epsilon
        )
        return (loc + STEP_SIZE * g_loc, log_scale + STEP_SIZE * g_log_scale), value

    @jax.jit
    def fused(carry, key):
        return jax.lax.scan(step, carry, jax.random.split(key, scan_length))

    def run() -> None:
        carry = (jnp.zeros(D), jnp.zeros(D))
        key = jax.random.PRNGKey(10003)
        for k in range(-(-steps // scan_length)):
            carry, values = fused(carry, jax.random.fold_in(key, k))
        assert np.isfinite(float(values[-1]))

    return run


CONTENDERS: dict[str, Callable[[int, int], Callable]] = {
    "sluice": make_sluice,
    "sluice-seq": make_sluice_sequential,
    "numpyro-vec": lambda k, n: make_numpyro(k, n, True),
    "numpyro-seq": lambda k, n: make_numpyro(k, n, False),
    "notebook": make_notebook_loop,
    "jax-fused": make_fused_jax,
}


def measure(particles: int, steps: int, reps: int, names: list[str]) -> dict[str, list[float]]:
    """ms per step of each contender at this particle count, one entry per repetition."""
    runs = {}
    for name in names:
        run = CONTENDERS[name](particles, steps)
        run()  # compile and warm up
        runs[name] = run
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(reps):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - t0) / steps * 1e3)
    return times


def _tables(title: str, results: dict[int, dict[str, float]], names: list[str]) -> None:
    print(f"\n{title}: ms per step")
    print("| K | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for k, row in results.items():
        print(f"| {k} | " + " | ".join(f"{row[n]:.4f}" for n in names) + " |")
    if "sluice" not in names:
        return
    others = [n for n in names if n != "sluice"]
    print(f"\n{title}: ratios (> 1: sluice is faster; for jax-fused, sluice / floor)")
    header = [f"sluice/{n}" if n == "jax-fused" else f"{n}/sluice" for n in others]
    print("| K | " + " | ".join(header) + " |")
    print("|---" * (len(others) + 1) + "|")
    for k, row in results.items():
        cells = [
            row["sluice"] / row[n] if n == "jax-fused" else row[n] / row["sluice"] for n in others
        ]
        print(f"| {k} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


def main(argv: list[str] | None = None) -> dict[int, dict[str, list[float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--particles", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", nargs="+", choices=list(CONTENDERS), default=list(CONTENDERS))
    args = parser.parse_args(argv)

    print(
        f"# vi_bench {datetime.date.today()} | jax {jax.__version__} | "
        f"{platform.processor() or platform.machine()} | {os.cpu_count()} CPUs | "
        f"{jax.devices()[0].platform} | steps {args.steps}, reps {args.reps}"
    )
    times = {}
    for k in args.particles:
        times[k] = measure(k, args.steps, args.reps, args.only)
        medians = {n: statistics.median(v) for n, v in times[k].items()}
        print(f"K={k}: " + ", ".join(f"{n} {v:.4f}" for n, v in medians.items()), flush=True)
    _tables(
        "median",
        {k: {n: statistics.median(v) for n, v in t.items()} for k, t in times.items()},
        args.only,
    )
    # On a shared machine the fastest repetition is the least disturbed by other load.
    _tables(
        "best of reps", {k: {n: min(v) for n, v in t.items()} for k, t in times.items()}, args.only
    )
    return times


if __name__ == "__main__":
    main()
