"""Many short chains: ChEES across chains against NUTS per chain.

``--chains`` chains (default 1,024) of a ``--dim``-dimensional Gaussian with
scales log-spaced over [0.1, 10] (default 100 dimensions), vectorized, each
chain starting from its own point (standard normal), ``--warmup`` + ``--draws``
iterations, float32. Variants, each in a fresh process:

* ``nuts``: sluice's NUTS, each chain with its own Stan window adaptation;
* ``chees``: BlackJAX's ``dynamic_hmc`` through sluice with the ChEES warmup
  (``sluice.kernels.from_blackjax(blackjax.dynamic_hmc, warmup="chees")``),
  one step size, trajectory length and diagonal metric for all chains.

Reported: wall, compile and sampling seconds, gradients per draw per chain,
min bulk ESS over the parameters (ArviZ, pooled over all chains), ESS per
sampling gradient and per second, worst R-hat and nested R-hat (single chains
as superchains) from sluice's streamed summary.

    PYTHONPATH=src python bench/many_chains.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import areas
import harness

VARIANTS = ("nuts", "chees")


def measure(variant: str, args: argparse.Namespace) -> dict:
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import sluice

    scales = jnp.exp(jnp.linspace(jnp.log(0.1), jnp.log(10.0), args.dim))

    def log_density(x):
        return -0.5 * jnp.sum((x / scales) ** 2)

    if variant == "chees":
        import blackjax

        kernel = sluice.kernels.from_blackjax(blackjax.dynamic_hmc, warmup="chees")
    else:
        kernel = sluice.nuts()
    clock = harness.CompileClock()
    start, begin = clock.now(), time.perf_counter()
    run = sluice.sample(
        log_density, init=lambda key: jax.random.normal(key, (args.dim,)), kernel=kernel,
        chains=args.chains, warmup=args.warmup, draws=args.draws, chain_method="vectorized",
        default_stats=True, progress=False, seed=args.seed,
    )  # fmt: skip
    table = run.summary(round_to="none")
    wall = time.perf_counter() - begin
    info = run.info
    draws = {k: np.asarray(v) for k, v in run.draws.items()}
    ess = harness.min_ess_bulk(draws)
    num_draws = info.chains * info.draws
    compile_s = clock.seconds(start, clock.now())
    return {
        "variant": variant,
        "chains": info.chains,
        "dim": args.dim,
        "wall_s": wall,
        "compile_s": compile_s,
        "warmup_s": info.warmup_seconds,
        "sampling_s": info.sampling_seconds,
        "grads_per_draw": info.num_gradients / num_draws,
        "grads_warmup": int(info.num_gradients_warmup),
        "min_ess_bulk": ess,
        "ess_per_grad": ess / info.num_gradients,
        "ess_per_s_sampling": ess / info.sampling_seconds,
        "ess_per_s_total": ess / wall,
        "max_r_hat": float(table["r_hat"].max()),
        "max_nested_r_hat": float(table["nested_r_hat"].max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--one", metavar="VARIANT", help="internal: one measurement, as JSON")
    args = parser.parse_args()
    if args.one:
        harness.emit_result(measure(args.one, args))
        return
    passed = ["--chains", str(args.chains), "--dim", str(args.dim), "--warmup",
              str(args.warmup), "--draws", str(args.draws), "--seed", str(args.seed)]  # fmt: skip
    rows = [harness.run_isolated(__file__, [*passed, "--one", v]) for v in args.variants]
    print(
        f"Gaussian, dim {args.dim}, scales 0.1 to 10; {args.chains} chains x ({args.warmup} "
        f"warmup + {args.draws} draws), vectorized, a fresh process per row.\n"
    )
    areas.emit("many-chains", rows, args.json, settings=vars(args))


if __name__ == "__main__":
    main()
