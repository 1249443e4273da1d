"""Mass matrices of sluice's NUTS on three synthetic posteriors: gradients per effective draw.

``sluice.nuts(mass_matrix=...)`` with ``"diag"``, ``"dense"`` and ``"low_rank"``
(and the low-rank fit's eigenvalue cutoff, ``--cutoffs``), 4 chains x (1,000
warmup + 1,000 draws), float32, one seed; each row is a fresh process. The
metric is gradients per unit of minimum bulk ESS (ArviZ, over every
coordinate), all of the run's gradients (warmup included) and the draws' alone.

Posteriors:

* ``correlated``: a 20-dim Gaussian, scales e^U(-1, 1), and three directions
  400, 100 and 0.01 times the rest (random orientation);
* ``independent``: a 200-dim Gaussian with independent scales e^U(-2, 2),
  where the diagonal is exact and a low-rank part should find nothing;
* ``collinear_logistic``: a logistic regression, 500 rows x 50 predictors
  that share five factors, N(0, 1) prior.

Commands::

    python bench/mass_matrix.py                          # every posterior and metric
    python bench/mass_matrix.py --cutoffs 2,10,100       # the low-rank cutoff too
    python bench/mass_matrix.py --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import emit_result, run_isolated

POSTERIORS = ("correlated", "independent", "collinear_logistic")
METRICS = ("diag", "dense", "low_rank")


def build(name: str):
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    if name == "independent":
        d = 200
        s = jnp.asarray(np.exp(rng.uniform(-2, 2, d)), jnp.float32)
        return (lambda x: -0.5 * jnp.sum((x / s) ** 2)), d
    if name == "correlated":
        d = 20
        q, _ = np.linalg.qr(rng.normal(size=(d, d)))
        values = np.ones(d)
        values[:3] = [400.0, 100.0, 0.01]
        scales = np.exp(rng.uniform(-1, 1, d))
        cov = scales[:, None] * (q * values) @ q.T * scales[None, :]
        precision = jnp.asarray(np.linalg.inv(cov), jnp.float32)
        return (lambda x: -0.5 * x @ precision @ x), d
    if name == "collinear_logistic":
        n, d = 500, 50
        x = rng.normal(size=(n, 5)) @ rng.normal(size=(5, d)) + 0.3 * rng.normal(size=(n, d))
        beta = rng.normal(scale=0.2, size=d)
        y = (rng.random(n) < 1 / (1 + np.exp(-x @ beta))).astype(np.float32)
        x, y = jnp.asarray(x, jnp.float32), jnp.asarray(y)

        def log_density(b):
            eta = x @ b
            return jnp.sum(y * eta - jnp.logaddexp(0.0, eta)) - 0.5 * jnp.sum(b**2)

        return log_density, d
    raise ValueError(f"unknown posterior {name!r}")


def one(posterior: str, mass_matrix: str, cutoff: float | None) -> dict[str, Any]:
    import arviz as az
    import jax.numpy as jnp
    import numpy as np

    import sluice
    from sluice.mcmc import metric

    if cutoff is not None:
        metric.CUTOFF = cutoff  # read when the warmup is traced
    log_density, dim = build(posterior)
    start = time.perf_counter()
    run = sluice.sample(log_density, init=jnp.zeros(dim, jnp.float32), chains=4, warmup=1000,
                        draws=1000, seed=1, kernel=sluice.nuts(mass_matrix=mass_matrix),
                        progress=False)  # fmt: skip
    wall = time.perf_counter() - start
    x = np.asarray(next(iter(run.draws.values())), np.float64)
    ess = float(az.ess(az.convert_to_dataset({"x": x}))["x"].values.min())
    total = run.info.num_gradients + run.info.num_gradients_warmup
    imm = run.info.inverse_mass_matrix
    kept = None
    if isinstance(imm, metric.LowRank):
        kept = float(np.mean(np.sum(np.abs(np.log(np.asarray(imm.values))) > 1e-6, axis=1)))
    return {
        "posterior": posterior,
        "mass_matrix": mass_matrix,
        "cutoff": cutoff if mass_matrix == "low_rank" else None,
        "dim": dim,
        "min_ess_bulk": ess,
        "grads_per_ess": total / ess,
        "grads_per_ess_sampling": run.info.num_gradients / ess,
        "directions_kept": kept,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", default=",".join(POSTERIORS))
    parser.add_argument("--mass-matrix", default=",".join(METRICS))
    parser.add_argument("--cutoffs", default="", help="low-rank cutoffs to compare (default: 2)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=3, metavar=("POSTERIOR", "METRIC", "CUTOFF"))
    args = parser.parse_args()
    if args.one:
        posterior, mm, cutoff = args.one
        emit_result(one(posterior, mm, None if cutoff == "-" else float(cutoff)))
        return
    cutoffs = [c for c in args.cutoffs.split(",") if c] or ["-"]
    rows = []
    for posterior in args.posteriors.split(","):
        for mm in args.mass_matrix.split(","):
            for cutoff in cutoffs if mm == "low_rank" else ["-"]:
                rows.append(run_isolated(__file__, ["--one", posterior, mm, cutoff]))
    areas.emit("mass-matrix", rows, args.json)


if __name__ == "__main__":
    main()
