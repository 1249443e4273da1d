"""Per-draw cost of sluice's default streaming statistics against a NUTS draw.

Measures, in one process:

1. the default statistics' update (``sluice.stats.streaming.summary``, all the draws
   of a chunk at once, as the engine runs it) over ``--micro-draws`` draws of a ``--dim``-element vector, minus the same scan without
   statistics: the statistics' cost per draw and chain;
2. ``sluice.sample`` of a ``--dim``-dimensional standard Gaussian with NUTS,
   ``--chains`` chains and ``sink=None``, with ``default_stats=False`` and with
   the default statistics,
   the two alternated ``--reps`` times in this process: the cost of a NUTS draw
   and the end-to-end overhead (medians of the sampling phase's wall time).

The micro benchmark reports the minimum over ``--reps`` repetitions; ``--micro-only``
runs it alone, ``--window`` sets the rows the update processes at once.
The state's memory per element (one chain) is printed too.

``--defaults DIMS`` measures instead what a user gets: ``sluice.sample`` of a
standard Gaussian of each dimension in DIMS, 4 chains, ``--warmup`` (1,000)
warmup iterations and ``--draws`` (1,000) draws, ``sink=None``, every other
setting sluice's default (chunk
size, chain method, progress on), with the default statistics and without
(``default_stats=False``), each run a fresh process, the two alternated
``--reps`` times: medians of the ``sample`` call's wall time, of its sampling
phase and of its compile time, and the medians of the paired ratios.
``--cache DIR`` runs them with JAX's persistent compilation cache in DIR,
warmed by one round that is not counted. ``--variants`` names the variants:
``statistics``, ``none`` and ``statistics-blockN``, the default statistics with
their update run by blocks of N elements on the CPU (``streaming.CPU_UPDATE_BLOCK``;
a large N: the whole state at once up to N elements), ``until`` (an ``until`` that
is never met: the summary read at every chunk) and ``until-quick`` (the same with
the summary's programs compiled for a quick compile, ``Plan.repeated_readout`` off).

Run: ``PYTHONPATH=src python bench/stats_overhead.py --dim 1000``;
``PYTHONPATH=src python bench/stats_overhead.py --defaults 1000,100000 --reps 3``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import sluice
from sluice import stats
from sluice.stats import streaming
from sluice.stats.base import block_update

CHAIN_METHOD = ["?"]


def _timed(fn, reps: int) -> tuple[float, float]:
    """(min CPU seconds, min wall seconds) of ``fn()`` over ``reps`` runs (after one warm run)."""
    fn()
    cpu, wall = np.inf, np.inf
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu = min(cpu, time.process_time() - c0)
        wall = min(wall, time.perf_counter() - w0)
    return cpu, wall


def micro(dim: int, draws: int, reps: int, statistic: stats.Statistic) -> dict[str, float]:
    """Per-draw cost of ``statistic.update`` in a compiled scan, one chain.

    The state is donated, as the engine donates its carry to the compiled chunk
    (otherwise the first step copies the whole state, a per-call cost).
    """
    xs = jax.random.normal(jax.random.PRNGKey(0), (draws, dim))
    # a statistic with a pilot starts from pilot draws (stacked), the others from one draw
    example = {"x": xs[: statistic.pilot]} if statistic.pilot else {"x": xs[0]}
    update = block_update(statistic)

    def scan_stats(state, xs):  # the chunk's draws at once, as the engine updates
        return update(state, {"x": xs}, xs.shape[0])

    def scan_plain(acc, xs):  # the same scan, touching each draw once
        return jax.lax.scan(lambda a, x: (a + x, None), acc, xs)[0]

    with_stats = jax.jit(scan_stats, donate_argnums=0)
    without = jax.jit(scan_plain, donate_argnums=0)
    states = [statistic.init(example) for _ in range(reps + 1)]
    accs = [jnp.zeros(dim) for _ in range(reps + 1)]
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(states[0]))
    t_with = _timed(lambda: jax.block_until_ready(with_stats(states.pop(), xs)), reps)
    t_without = _timed(lambda: jax.block_until_ready(without(accs.pop(), xs)), reps)
    return {
        "cpu_us": (t_with[0] - t_without[0]) / draws * 1e6,
        "wall_us": (t_with[1] - t_without[1]) / draws * 1e6,
        "bytes_per_element": nbytes / dim,
    }


def log_density_of(model: str, dim: int):
    """``gaussian``: a standard Gaussian (the cheapest gradient there is: the worst
    case for the statistics' relative cost); ``logreg``: a logistic regression with
    ``dim`` coefficients and ``dim`` data points (a typical model of that size)."""
    if model == "gaussian":
        return lambda x: -0.5 * jnp.sum(x**2)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(dim, dim)) / np.sqrt(dim), jnp.float32)
    beta = rng.normal(size=dim)
    y = jnp.asarray(rng.random(dim) < 1 / (1 + np.exp(-np.asarray(x) @ beta)), jnp.float32)

    def log_density(b):
        logits = x @ b
        return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(b**2)

    return log_density


def nuts_pair(
    dim: int,
    draws: int,
    reps: int,
    chains: int,
    statistic: stats.Statistic,
    model: str = "gaussian",
) -> dict[str, dict[str, float]]:
    """Sampling time per draw and chain of NUTS on ``model`` without and with
    ``statistic``, the two alternated ``reps`` times in this process (after one
    compiling run of each): medians and minima of the wall and CPU times."""
    log_density = log_density_of(model, dim)

    # the diagonal metric: the cheapest NUTS step, the worst case for the statistics' share
    kwargs = dict(init=jnp.zeros(dim), chains=chains, warmup=200, draws=draws, sink=None,
                  progress=False, seed=1, chunk_size=draws, default_stats=False,
                  mass_matrix="diag")  # fmt: skip
    times: dict[str, dict[str, list]] = {k: {"wall": [], "cpu": []} for k in ("base", "stats")}
    gradients = 0.0
    for rep in range(reps + 1):  # the first round compiles
        for name in ("base", "stats"):
            extra = {"stats": {"summary_variant": statistic}} if name == "stats" else {}
            c0 = time.process_time()
            run = sluice.sample(log_density, **kwargs, **extra)
            c1 = time.process_time()
            CHAIN_METHOD[:] = [run.info.chain_method]
            if rep == 0:
                continue
            # sampling phase only: wall from the run's own timer, CPU scaled by its share
            share = run.info.sampling_seconds / max(run.info.total_seconds, 1e-12)
            n = draws * chains
            times[name]["wall"].append(run.info.sampling_seconds / n * 1e6)
            times[name]["cpu"].append((c1 - c0) * share / n * 1e6)
            gradients = run.info.num_gradients / n
    out = {}
    for name, t in times.items():
        out[name] = {
            "wall_us": float(np.median(t["wall"])),
            "wall_min_us": float(np.min(t["wall"])),
            "cpu_us": float(np.median(t["cpu"])),
            "gradients": gradients,
        }
    return out


VARIANTS = ("statistics", "none")  # --defaults: the default statistics, and none
# --variants may add "statistics-blockN": the default statistics with the update run by
# blocks of N elements on the CPU (streaming.CPU_UPDATE_BLOCK), N large: one block;
# "until": with an `until` never met (the summary read at every chunk), and "until-quick":
# the same with its readings compiled for a quick compile (Plan.repeated_readout off)
BLOCK_VARIANT = "statistics-block"


def one_default(dim: int, variant: str, seed: int, warmup: int,
                draws: int) -> dict[str, float | int | str]:  # fmt: skip
    """One ``sluice.sample`` at the defaults (a child process of ``--defaults``)."""
    if variant.startswith(BLOCK_VARIANT):
        streaming.CPU_UPDATE_BLOCK = int(variant[len(BLOCK_VARIANT):])
    until = None
    if variant.startswith("until"):  # read at every chunk, never met: the whole run
        until = sluice.converged(ess_bulk=1e12)
        if variant == "until-quick":  # its readings compiled for a quick compile
            from sluice.runtime import plan

            plan.REPEATED_READOUT_ELEMENTS = 2**62
    t0 = time.perf_counter()
    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(dim), chains=4,
                        warmup=warmup, draws=draws, sink=None, seed=seed, until=until,
                        default_stats="auto" if variant != "none" else False)  # fmt: skip
    wall = time.perf_counter() - t0
    info = run.info
    return {"dim": dim, "variant": variant, "seed": seed, "warmup": warmup, "draws": draws,
            "wall_s": wall,
            "sampling_s": info.sampling_seconds, "compile_s": info.compile_seconds,
            "warmup_s": info.warmup_seconds, "chunk_size": info.chunk_size,
            "chain_method": info.chain_method}  # fmt: skip


def defaults(dims: list[int], reps: int, warmup: int, draws: int, json_path: str | None,
             cache: str | None = None, variants: tuple[str, ...] = VARIANTS) -> None:  # fmt: skip
    """``--defaults``: fresh processes, the variants alternated, medians and paired ratios.
    ``cache``: JAX's persistent compilation cache in that folder, filled by one round
    that is not counted (what a user's second run of a script gets)."""
    import os

    import areas
    from harness import median, run_each

    extra = lambda rep: ("--seed", str(rep + 1), "--warmup", str(warmup), "--draws", str(draws))  # noqa: E731
    if cache:
        os.environ.update({"JAX_COMPILATION_CACHE_DIR": cache,
                           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})  # fmt: skip
        run_each(__file__, 1, [str(d) for d in dims], variants, extra)
    records = run_each(__file__, reps, [str(d) for d in dims], variants, extra)
    rows = []
    for dim in dims:
        runs = {v: [r for r in records if r["dim"] == dim and r["variant"] == v] for v in variants}
        for variant, rs in runs.items():
            row = {"dim": dim, "variant": variant, "runs": len(rs), "warmup": warmup, "draws": draws,
                   "compile_cache": "warm" if cache else "none",
                   "chunk_size": rs[0]["chunk_size"], "chain_method": rs[0]["chain_method"]}  # fmt: skip
            for key in ("wall_s", "compile_s", "warmup_s", "sampling_s"):
                row[key] = median([r[key] for r in rs])
            if variant != "none":
                pairs = list(zip(rs, runs["none"], strict=True))
                row["sampling_ratio"] = median(
                    [a["sampling_s"] / b["sampling_s"] for a, b in pairs]
                )
                row["wall_ratio"] = median([a["wall_s"] / b["wall_s"] for a, b in pairs])
            rows.append(row)
    areas.emit("stats-defaults", rows, json_path, records=records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--micro-draws", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--model", choices=("gaussian", "logreg"), default="gaussian")
    parser.add_argument("--window", type=int, default=None,
                        help="rows the default statistics' update processes at once "
                        "(default: the library's choice for --dim)")  # fmt: skip
    parser.add_argument("--micro-only", action="store_true", help="the update alone, no NUTS")
    parser.add_argument("--defaults", default=None, metavar="DIMS",
                        help="comma-separated dimensions: sluice.sample at its defaults, "
                        "fresh processes (see the module docstring)")  # fmt: skip
    parser.add_argument("--json", default=None, help="--defaults: write every record here")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="--defaults: statistics, none, statistics-blockN, until, until-quick "
                        "(comma-separated)")  # fmt: skip
    parser.add_argument("--one", nargs=2, metavar=("DIM", "VARIANT"), default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1000, help="--defaults: warmup iterations")
    parser.add_argument(
        "--cache",
        default=None,
        metavar="DIR",
        help="--defaults: JAX's persistent compilation cache in DIR, warmed first",
    )
    args = parser.parse_args()
    if args.one:
        from harness import emit_result

        emit_result(one_default(int(args.one[0]), args.one[1], args.seed, args.warmup,
                                args.draws))  # fmt: skip
        return
    if args.defaults:
        dims = [int(d) for d in args.defaults.split(",")]
        variants = tuple(args.variants.split(","))
        if "none" not in variants:
            parser.error(f"--variants must include none (the ratios' baseline), got {args.variants!r}")
        defaults(dims, args.reps, args.warmup, args.draws, args.json, args.cache, variants)
        return
    if args.window is not None:  # every model takes this window
        streaming.SMALL, streaming.SMALL_WINDOW = 2**62, args.window
    statistic = streaming.summary(args.draws, chunk_size=args.draws, pilot=128)
    m = micro(args.dim, args.micro_draws, args.reps, statistic)
    if args.micro_only:
        window = streaming.window_rows(args.dim)
        print(f"dim={args.dim} window={window} statistics update (scan, 1 chain, "
              f"{args.micro_draws} draws): {m['wall_us']:.2f} us/draw wall, "
              f"{m['wall_us'] / args.dim * 1e3:.1f} ns per element and draw")  # fmt: skip
        return
    pair = nuts_pair(args.dim, args.draws, args.reps, args.chains, statistic, args.model)
    base, full = pair["base"], pair["stats"]
    print(f"model={args.model} dim={args.dim} draws={args.draws} chains={args.chains} "
          f"backend={jax.default_backend()} chain_method={CHAIN_METHOD[0]}")  # fmt: skip
    print(
        f"statistics update (scan, 1 chain, {args.micro_draws} draws): "
        f"{m['cpu_us']:.2f} us/draw CPU ({m['wall_us']:.2f} wall)"
    )
    print(f"state memory: {m['bytes_per_element']:.0f} bytes per element per chain")
    print(f"NUTS draw (median of {args.reps}, alternated): {base['wall_us']:.1f} us wall "
          f"(min {base['wall_min_us']:.1f}), {base['cpu_us']:.1f} us CPU, "
          f"{base['gradients']:.1f} gradients/draw")  # fmt: skip
    print(f"NUTS draw + statistics: {full['wall_us']:.1f} us wall (min {full['wall_min_us']:.1f}), "
          f"{full['cpu_us']:.1f} us CPU")  # fmt: skip
    print(f"ratio (micro) statistics / NUTS draw: {m['wall_us'] / base['wall_us']:.1%}")
    print(f"overhead (end to end, sampling time): {full['wall_us'] / base['wall_us'] - 1:+.1%} wall "
          f"(medians; minima {full['wall_min_us'] / base['wall_min_us'] - 1:+.1%}), "
          f"{full['cpu_us'] / base['cpu_us'] - 1:+.1%} CPU")  # fmt: skip


if __name__ == "__main__":
    main()
