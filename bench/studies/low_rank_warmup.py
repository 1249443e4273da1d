"""The low-rank metric after a short warmup, and the cost of its fits.

``--runs``: NUTS at sluice's defaults (4 chains, 1,000 draws) on a family of
correlated Gaussians, ``N(0, D + V V')`` with ``D`` log-uniform scales in
``[e^-2, e^2]`` and five directions ``V`` of variance ~900 (Woodbury
precision: a cheap gradient), for each dimension, warmup length and seed,
with ``mass_matrix="diag"`` and ``"low_rank"``, each run a fresh process: the
smallest bulk ESS (ArviZ) over the wall of the ``sample`` call, and the draws
in the warmup's last slow window, from which the low-rank metric is fitted
(:func:`final_window`).

``--poisson``: the same runs on a varying-slopes Poisson regression (82
elements, :func:`poisson_child`), a model of another family.

``--fit``: one chain's low-rank fit (:func:`sluice.mcmc.metric.fit_low_rank` on a
full ring of 128 draws and gradients) in milliseconds, and its first SVD alone,
by dimension; every chain fits at every slow window's end.

    PYTHONPATH=src python bench/studies/low_rank_warmup.py --runs
    PYTHONPATH=src python bench/studies/low_rank_warmup.py --runs --poisson --warmups 50,100
    PYTHONPATH=src python bench/studies/low_rank_warmup.py --fit
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


def run_child(dim: int, warmup: int, metric: str, seed: int) -> dict:
    import arviz as az
    import jax.numpy as jnp
    import numpy as np

    import sluice

    rng = np.random.default_rng(0)
    scales = np.exp(rng.uniform(-1.0, 1.0, dim))
    v = rng.normal(size=(dim, 5)) * (30.0 / np.sqrt(dim))
    inv_d = 1.0 / scales**2
    k = np.linalg.inv(np.eye(5) + (v.T * inv_d) @ v)
    w = v * inv_d[:, None]
    inv_d, k, w = (jnp.asarray(a, jnp.float32) for a in (inv_d, k, w))

    def log_density(x):
        a = w.T @ x
        return -0.5 * (jnp.sum(inv_d * x * x) - a @ (k @ a))

    t0 = time.perf_counter()
    run = sluice.sample(log_density, init=jnp.zeros(dim), chains=4, warmup=warmup, draws=1000,
                        seed=seed, progress=False, mass_matrix=metric)  # fmt: skip
    wall = time.perf_counter() - t0
    ess = az.ess(az.convert_to_dataset({"x": np.asarray(run.draws["x"])}), method="bulk")
    min_ess = float(ess["x"].min())
    return {"dim": dim, "warmup": warmup, "window": final_window(warmup), "metric": metric,
            "seed": seed, "wall_s": wall, "min_ess": min_ess, "ess_per_s": min_ess / wall,
            "gradients": int(run.info.num_gradients)}  # fmt: skip


def poisson_child(warmup: int, metric: str, seed: int) -> dict:
    """A varying-slopes Poisson regression (40 groups, 800 rows, non-centred; 82
    elements), the same settings as :func:`run_child`."""
    import arviz as az
    import jax.numpy as jnp
    import numpy as np

    import sluice

    rng = np.random.default_rng(0)
    groups, rows = 40, 800
    g = rng.integers(0, groups, rows)
    x = rng.normal(size=rows)
    a = 0.5 + 0.6 * rng.normal(size=groups)
    b = 0.3 + 0.4 * rng.normal(size=groups)
    y = rng.poisson(np.exp(a[g] + b[g] * x))
    g, x, y = jnp.asarray(g), jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)

    def log_density(p):
        sa, sb = jnp.exp(p["log_sa"]), jnp.exp(p["log_sb"])
        eta = (p["mu_a"] + sa * p["za"])[g] + (p["mu_b"] + sb * p["zb"])[g] * x
        prior = -0.5 * (p["mu_a"] ** 2 + p["mu_b"] ** 2 + jnp.sum(p["za"] ** 2)
                        + jnp.sum(p["zb"] ** 2) + sa**2 + sb**2) + p["log_sa"] + p["log_sb"]  # fmt: skip
        return jnp.sum(y * eta - jnp.exp(eta)) + prior

    zero = jnp.zeros(())
    init = {"mu_a": zero, "mu_b": zero, "log_sa": zero, "log_sb": zero,
            "za": jnp.zeros(groups), "zb": jnp.zeros(groups)}  # fmt: skip
    t0 = time.perf_counter()
    run = sluice.sample(log_density, init=init, chains=4, warmup=warmup, draws=1000, seed=seed,
                        progress=False, mass_matrix=metric)  # fmt: skip
    wall = time.perf_counter() - t0
    idata = az.from_dict(posterior={k: np.asarray(v) for k, v in run.draws.items()})
    min_ess = min(float(az.ess(idata, method="bulk")[k].min()) for k in run.draws)
    return {"dim": 82, "warmup": warmup, "window": final_window(warmup), "metric": metric,
            "seed": seed, "wall_s": wall, "min_ess": min_ess, "ess_per_s": min_ess / wall,
            "gradients": int(run.info.num_gradients)}  # fmt: skip


def final_window(warmup: int) -> int:
    """Draws in the last slow window of sluice's warmup schedule (0: none)."""
    from sluice.mcmc.adaptation import window_schedule

    schedule = window_schedule(warmup)
    ends = [int(e) for e in schedule.window_ends if e >= 0]
    if not ends:
        return 0
    return ends[-1] - (ends[-2] if len(ends) > 1 else int(schedule.slow_start) - 1)


def fit_child(dim: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from sluice.mcmc import metric

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(128, dim)), jnp.float32)
    g = -x + 0.1 * jnp.asarray(rng.normal(size=(128, dim)), jnp.float32)
    valid, diagonal = jnp.ones(128, bool), jnp.ones(dim, jnp.float32)
    fit = jax.jit(lambda x, g: metric.fit_low_rank(x, g, valid, diagonal, 16)[0])
    svd = jax.jit(lambda x: jnp.linalg.svd(x, full_matrices=False))

    def best(fn, *args):
        jax.block_until_ready(fn(*args))
        times = []
        for _ in range(5):
            t = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - t)
        return 1e3 * min(times)

    return {"dim": dim, "fit_ms": best(fit, x, g), "svd_ms": best(svd, x)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", action="store_true")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--poisson", action="store_true", help="--runs on the Poisson regression")
    ap.add_argument("--dims", default="100,300,1000")
    ap.add_argument("--warmups", default="50,100,150,200")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "run":
            d, w, m, s = rest
            emit_result(run_child(int(d), int(w), m, int(s)))
        elif kind == "poisson":
            w, m, s = rest
            emit_result(poisson_child(int(w), m, int(s)))
        else:
            emit_result(fit_child(int(rest[0])))
        return
    script = os.path.abspath(__file__)
    if args.fit:
        print(f"{'dim':>6} {'fit ms':>8} {'first SVD ms':>13}")
        for d in (175, 500, 2000, 10000):
            r = run_isolated(script, ["--child", "fit", str(d)])
            print(f"{d:6d} {r['fit_ms']:8.1f} {r['svd_ms']:13.1f}", flush=True)
    if args.runs:
        dims = [82] if args.poisson else [int(v) for v in args.dims.split(",")]
        warmups = [int(v) for v in args.warmups.split(",")]
        seeds = [int(v) for v in args.seeds.split(",")]
        print(f"{'dim':>5} {'warmup':>6} {'window':>6} {'seed':>4} "
              f"{'diag ESS/s':>10} {'low rank ESS/s':>14} {'ratio':>6}", flush=True)  # fmt: skip
        ratios: dict[bool, list[float]] = {True: [], False: []}
        for d in dims:
            for w in warmups:
                for s in seeds:
                    child = ["poisson"] if args.poisson else ["run", str(d)]
                    r = {m: run_isolated(script, ["--child", *child, str(w), m, str(s)])
                         for m in ("diag", "low_rank")}  # fmt: skip
                    ratio = r["low_rank"]["ess_per_s"] / r["diag"]["ess_per_s"]
                    short = r["diag"]["window"] < 50
                    ratios[short].append(ratio)
                    print(f"{d:5d} {w:6d} {r['diag']['window']:6d} {s:4d} "
                          f"{r['diag']['ess_per_s']:10.1f} {r['low_rank']['ess_per_s']:14.1f} "
                          f"{ratio:6.2f}", flush=True)  # fmt: skip
        for short, values in ratios.items():
            if values:
                label = "under 50 draws" if short else "50 draws or more"
                print(
                    f"last window {label}: low rank / diag ESS/s, median "
                    f"{statistics.median(values):.2f} over {len(values)} runs"
                )


if __name__ == "__main__":
    main()
