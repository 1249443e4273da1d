"""What sluice's chunk engine costs around a BlackJAX kernel: time per gradient, same parameters.

``blackjax.nuts`` with one fixed step size and diagonal inverse mass matrix
(from a short sluice warmup of the model), one chain started at the same point,
``--draws`` transitions: BlackJAX's own loop (``jax.lax.scan`` of
``nuts.step``, the positions stacked as its output) against the same kernel
in sluice's engine (``sluice.kernels.from_blackjax(blackjax.nuts,
warmup=None, ...)``, the draws kept in memory, one chunk and ten chunks).
BlackJAX's loop runs twice: as its users write it, the model's arrays closed
over and so compiled in as constants; and with them as the program's
arguments, as sluice passes a model's data (so that new data of the same
shapes reuses the compiled program). The second is the like-for-like
measure of the engine itself; the first adds what XLA gains from constant
data (on the Gaussian, whose gradient is two elementwise products, several
percent). The random keys differ between the loops and the engine, so
trajectories differ: the figure is the sampling time per gradient
evaluation, each variant timed ``--reps`` times in turn in one process after
its compile, medians reported, and the ratios to both loops.

    PYTHONPATH=src python bench/engine_cost.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import areas


def measure(model: str, draws: int, reps: int) -> list[dict]:
    import blackjax
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from targets import make_target

    import sluice
    from sluice._jax.closure import closure_convert

    target = make_target(model)
    flat, unravel = ravel_pytree(target.init)

    def logdensity(x):
        return target.logdensity_fn(unravel(x))

    diag = sluice.nuts(mass_matrix="diag")  # an array BlackJAX's NUTS takes
    tuned = sluice.sample(logdensity, init=flat, kernel=diag, chains=1, warmup=300, draws=1,
                          progress=False)  # fmt: skip
    x0 = jnp.asarray(tuned.draws["x"][0, -1])
    step_size = float(tuned.info.step_size[0])
    imm = np.asarray(tuned.info.inverse_mass_matrix[0])

    def scan(logdensity_fn, key, x):  # BlackJAX's loop, as its users write it
        nuts = blackjax.nuts(logdensity_fn, step_size=step_size, inverse_mass_matrix=imm)

        def body(state, k):
            state, info = nuts.step(k, state)
            return state, (state.position, info.num_integration_steps)

        _, (xs, steps) = jax.lax.scan(body, nuts.init(x), jax.random.split(key, draws))
        return xs, jnp.sum(steps)

    loop = jax.jit(lambda key, x: scan(logdensity, key, x))
    # the same loop with the model's arrays as the program's arguments, as sluice passes
    # them (so that new data of the same shapes reuses the program), not as constants
    converted, consts, _ = closure_convert(logdensity, x0)
    loop_args = jax.jit(lambda key, x, consts: scan(lambda z: converted(consts, z), key, x))

    def blackjax_loop(fn, *args) -> callable:
        def run(rep: int) -> tuple[float, int]:
            t0 = time.perf_counter()
            _xs, steps = jax.block_until_ready(fn(jax.random.PRNGKey(rep), x0, *args))
            return time.perf_counter() - t0, int(steps)

        return run

    kernel = sluice.kernels.from_blackjax(
        blackjax.nuts, warmup=None, step_size=step_size, inverse_mass_matrix=imm
    )

    def in_sluice(chunk: int) -> callable:
        def run(rep: int) -> tuple[float, int]:
            r = sluice.sample(logdensity, init=x0, kernel=kernel, chains=1, warmup=0,
                              draws=draws, chunk_size=chunk, chain_method="sequential",
                              seed=rep, progress=False)  # fmt: skip
            return r.info.sampling_seconds, int(r.info.num_gradients)

        return run

    variants = {
        "blackjax loop": blackjax_loop(loop),
        "blackjax loop, data as arguments": blackjax_loop(loop_args, consts),
        "sluice engine, 1 chunk": in_sluice(draws),
        "sluice engine, 10 chunks": in_sluice(draws // 10),
    }
    for fn in variants.values():  # compile
        fn(10_000)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(reps):
        for name, fn in variants.items():
            seconds, grads = fn(rep)
            times[name].append(seconds / grads * 1e6)
    base = statistics.median(times["blackjax loop"])
    base_args = statistics.median(times["blackjax loop, data as arguments"])
    return [
        {
            "model": model,
            "dim": int(flat.size),
            "variant": name,
            "us_per_grad": statistics.median(values),
            "ratio": statistics.median(values) / base,
            "ratio_args": statistics.median(values) / base_args,
            "reps": reps,
        }
        for name, values in times.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", type=lambda s: s.split(","), default=["logreg_large", "gaussian"]
    )
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    rows = [row for model in args.models for row in measure(model, args.draws, args.reps)]
    print(f"blackjax.nuts, fixed parameters, 1 chain x {args.draws} transitions; "
          f"medians of {args.reps} repetitions.\n")  # fmt: skip
    areas.emit("engine-cost", rows, args.json)


if __name__ == "__main__":
    main()
