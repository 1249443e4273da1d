"""PyMC models sampled three ways: sluice, ``pm.sample(nuts_sampler="numpyro")``, nutpie.

sluice runs as a user gets it (``import sluice`` gives JAX one CPU device per
core, so the chains spread over the cores; ``mass_matrix="auto"``, nutpie's
low-rank plus diagonal metric on these models but eight schools, whose run is
too short to repay its compile), as ``sluice-diag`` with the
diagonal metric alone, as ``sluice-one-device`` on JAX's single CPU device
(``SLUICE_CPU_DEVICES=1``), to show what the cores add, and, when named, as
``sluice-low-rank`` (``mass_matrix="low_rank"``) and ``sluice-sequential`` with ``chain_method="sequential"``
(each device's chains one after another, where ``"auto"`` may vectorize them).

Each measurement is a fresh process that builds the PyMC model and samples it
to an ``arviz.InferenceData`` (4 chains, 1,000 tuning + 1,000 draws, each
library's defaults otherwise): *wall* is the time from the model's
construction to the InferenceData in hand (imports excluded), *sampling* the
sampling time the library reports (``posterior.attrs["sampling_time"]`` for
PyMC's JAX path and sluice; the ``nutpie.sample`` call for nutpie, whose
compile is timed apart). *min ESS* is ArviZ's bulk ESS, the smallest over
every scalar of the posterior's free variables.

Models:

* ``logistic``: logistic regression, 2,000 rows x 200 covariates (synthetic);
* ``radon``: varying intercepts, 85 groups, 919 rows, a floor slope
  (radon-like synthetic data);
* ``stochastic_volatility``: a Gaussian random walk of log-volatility under
  Student-t returns, 500 days (synthetic);
* ``eight_schools``: the non-centred eight schools;
* ``gp``: a marginal Gaussian process (ExpQuad kernel), 100 points;
* ``logistic_well``: logistic regression, 2,000 x 200, small coefficients (a
  well-conditioned posterior, close to round);
* ``radon_nc``: ``radon``'s data with non-centred varying intercepts;
* ``radon_slopes``: non-centred varying intercepts and floor slopes, 85 groups;
* ``linear``: linear regression, 10,000 rows x 20 covariates;
* ``poisson``: Poisson regression with an exposure, 2,000 rows x 10 covariates;
* ``hier_logistic``: logistic regression with non-centred intercepts of 40
  groups of 50 rows and 3 covariates;
* ``horseshoe``: linear regression, 100 rows x 50 covariates of which 3 matter,
  under a horseshoe prior (half-Cauchy global and local scales, non-centred).

Commands::

    python bench/pymc_models.py                      # every model, every sampler
    python bench/pymc_models.py --models radon --samplers sluice,numpyro --reps 2
    python bench/pymc_models.py --json results.json  # also the raw records
    python bench/pymc_models.py --one radon sluice   # one measurement (a child process)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import emit_result, median, run_each

MODELS = (
    "logistic", "radon", "stochastic_volatility", "eight_schools", "gp",
    "logistic_well", "radon_nc", "radon_slopes", "linear", "poisson", "hier_logistic",
    "horseshoe",
)  # fmt: skip
SAMPLERS = ("sluice", "sluice-diag", "sluice-one-device", "numpyro", "nutpie")
SLUICE_OPTIONS = {  # sluice's samplers, and what each passes to sluice.pymc.sample
    "sluice": {}, "sluice-diag": {"mass_matrix": "diag"}, "sluice-one-device": {},
    "sluice-low-rank": {"mass_matrix": "low_rank"},  # these two: only when named in --samplers
    "sluice-sequential": {"chain_method": "sequential"},
    "sluice-vectorized": {"chain_method": "vectorized"},
}  # fmt: skip
CHAINS, TUNE, DRAWS = 4, 1000, 1000


# -- the models (fixed synthetic data) -----------------------------------------------------
def build(name: str) -> tuple[Any, list[str]]:
    """The PyMC model and the names of its free variables."""
    import numpy as np
    import pymc as pm

    rng = np.random.default_rng(20261201)
    if name == "logistic":
        n, k = 2000, 200
        x = rng.normal(size=(n, k))
        beta = rng.normal(scale=0.3, size=k)
        y = rng.random(n) < 1 / (1 + np.exp(-(x @ beta - 0.5)))
        with pm.Model() as model:
            a = pm.Normal("alpha", 0.0, 2.0)
            b = pm.Normal("beta", 0.0, 1.0, shape=k)
            pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
        return model, ["alpha", "beta"]
    if name == "radon":
        groups, n = 85, 919
        county = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
        floor = rng.integers(0, 2, n)
        a_true = rng.normal(1.5, 0.3, groups)
        y = a_true[county] - 0.7 * floor + rng.normal(0, 0.7, n)
        with pm.Model(coords={"county": np.arange(groups)}) as model:
            mu = pm.Normal("mu_a", 0.0, 10.0)
            sigma_a = pm.HalfNormal("sigma_a", 1.0)
            a = pm.Normal("a", mu, sigma_a, dims="county")
            b = pm.Normal("b", 0.0, 1.0)
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("y", a[county] + b * floor, sigma, observed=y)
        return model, ["mu_a", "sigma_a", "a", "b", "sigma"]
    if name == "stochastic_volatility":
        days = 500
        log_vol = np.cumsum(rng.normal(0, 0.1, days))
        returns = rng.standard_t(10, days) * np.exp(log_vol) * 0.01
        with pm.Model(coords={"time": np.arange(days)}) as model:
            step = pm.Exponential("step_size", 10.0)
            volatility = pm.GaussianRandomWalk(
                "volatility", sigma=step, dims="time", init_dist=pm.Normal.dist(0, 100)
            )
            nu = pm.Exponential("nu", 0.1)
            pm.StudentT("returns", nu=nu, lam=np.exp(-2 * volatility), observed=returns)
        return model, ["step_size", "volatility", "nu"]
    if name == "eight_schools":
        y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
        sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
        with pm.Model(coords={"school": np.arange(8)}) as model:
            mu = pm.Normal("mu", 0.0, 5.0)
            tau = pm.HalfCauchy("tau", 5.0)
            z = pm.Normal("z", 0.0, 1.0, dims="school")
            theta = pm.Deterministic("theta", mu + tau * z, dims="school")
            pm.Normal("y", theta, sigma, observed=y, dims="school")
        return model, ["mu", "tau", "z"]
    if name == "gp":
        n = 100
        x = np.sort(rng.uniform(0, 10, n))[:, None]
        f = np.sin(x[:, 0]) + 0.3 * np.cos(3 * x[:, 0])
        y = f + rng.normal(0, 0.2, n)
        with pm.Model() as model:
            ell = pm.Gamma("ell", 2.0, 1.0)
            eta = pm.HalfNormal("eta", 2.0)
            sigma = pm.HalfNormal("sigma", 1.0)
            cov = eta**2 * pm.gp.cov.ExpQuad(1, ell)
            gp = pm.gp.Marginal(cov_func=cov)
            gp.marginal_likelihood("y", X=x, y=y, sigma=sigma)
        return model, ["ell", "eta", "sigma"]
    if name == "logistic_well":
        n, k = 2000, 200
        x = rng.normal(size=(n, k))
        beta = rng.normal(scale=0.05, size=k)
        y = rng.random(n) < 1 / (1 + np.exp(-(x @ beta)))
        with pm.Model() as model:
            a = pm.Normal("alpha", 0.0, 2.0)
            b = pm.Normal("beta", 0.0, 1.0, shape=k)
            pm.Bernoulli("y", logit_p=a + x @ b, observed=y.astype(int))
        return model, ["alpha", "beta"]
    if name in ("radon_nc", "radon_slopes"):
        groups, n = 85, 919
        county = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
        floor = rng.integers(0, 2, n)
        a_true = rng.normal(1.5, 0.3, groups)
        b_true = rng.normal(-0.7, 0.2 if name == "radon_slopes" else 0.0, groups)
        y = a_true[county] + b_true[county] * floor + rng.normal(0, 0.7, n)
        with pm.Model(coords={"county": np.arange(groups)}) as model:
            mu = pm.Normal("mu_a", 0.0, 10.0)
            sigma_a = pm.HalfNormal("sigma_a", 1.0)
            z_a = pm.Normal("z_a", 0.0, 1.0, dims="county")
            a = mu + sigma_a * z_a
            free = ["mu_a", "sigma_a", "z_a", "sigma"]
            if name == "radon_slopes":
                mu_b = pm.Normal("mu_b", 0.0, 1.0)
                sigma_b = pm.HalfNormal("sigma_b", 1.0)
                z_b = pm.Normal("z_b", 0.0, 1.0, dims="county")
                b = (mu_b + sigma_b * z_b)[county]
                free += ["mu_b", "sigma_b", "z_b"]
            else:
                b = pm.Normal("b", 0.0, 1.0)
                free += ["b"]
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("y", a[county] + b * floor, sigma, observed=y)
        return model, free
    if name == "linear":
        n, k = 10_000, 20
        x = rng.normal(size=(n, k))
        y = x @ rng.normal(size=k) + 1.0 + rng.normal(0, 2.0, n)
        with pm.Model() as model:
            a = pm.Normal("alpha", 0.0, 10.0)
            b = pm.Normal("beta", 0.0, 10.0, shape=k)
            sigma = pm.HalfNormal("sigma", 5.0)
            pm.Normal("y", a + x @ b, sigma, observed=y)
        return model, ["alpha", "beta", "sigma"]
    if name == "poisson":
        n, k = 2000, 10
        x = rng.normal(size=(n, k))
        exposure = rng.uniform(0.5, 2.0, n)
        y = rng.poisson(exposure * np.exp(0.5 + x @ rng.normal(scale=0.3, size=k)))
        with pm.Model() as model:
            a = pm.Normal("alpha", 0.0, 5.0)
            b = pm.Normal("beta", 0.0, 1.0, shape=k)
            pm.Poisson("y", exposure * pm.math.exp(a + x @ b), observed=y)
        return model, ["alpha", "beta"]
    if name == "hier_logistic":
        groups, per, k = 40, 50, 3
        g = np.repeat(np.arange(groups), per)
        x = rng.normal(size=(groups * per, k))
        logit = rng.normal(0, 0.8, groups)[g] + x @ np.array([0.5, -0.3, 0.2])
        y = rng.random(groups * per) < 1 / (1 + np.exp(-logit))
        with pm.Model(coords={"group": np.arange(groups)}) as model:
            mu = pm.Normal("mu", 0.0, 2.0)
            tau = pm.HalfNormal("tau", 1.0)
            z = pm.Normal("z", 0.0, 1.0, dims="group")
            b = pm.Normal("beta", 0.0, 1.0, shape=k)
            pm.Bernoulli("y", logit_p=(mu + tau * z)[g] + x @ b, observed=y.astype(int))
        return model, ["mu", "tau", "z", "beta"]
    if name == "horseshoe":
        n, k = 100, 50
        x = rng.normal(size=(n, k))
        beta = np.zeros(k)
        beta[:3] = [3.0, -2.0, 1.5]
        y = x @ beta + rng.normal(size=n)
        with pm.Model() as model:
            tau = pm.HalfCauchy("tau", 0.1)
            lam = pm.HalfCauchy("lam", 1.0, shape=k)
            z = pm.Normal("z", 0.0, 1.0, shape=k)
            sigma = pm.HalfNormal("sigma", 2.0)
            pm.Normal("y", x @ (z * lam * tau), sigma, observed=y)
        return model, ["tau", "lam", "z", "sigma"]
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


# -- one measurement (a child process) --------------------------------------------------------
def one(model_name: str, sampler: str, seed: int) -> dict[str, Any]:
    import arviz as az
    import pymc as pm

    t0 = time.perf_counter()
    model, free = build(model_name)
    compile_s = None
    if sampler in SLUICE_OPTIONS:
        if sampler == "sluice-one-device":  # JAX's single CPU device, as before import sluice
            os.environ["SLUICE_CPU_DEVICES"] = "1"  # gave one device per core
        import sluice

        with model:
            idata = sluice.pymc.sample(DRAWS, tune=TUNE, chains=CHAINS, random_seed=seed,
                                       progressbar=False, **SLUICE_OPTIONS[sampler])  # fmt: skip
        sampling = float(idata.posterior.attrs["sampling_time"])
    elif sampler == "numpyro":
        with model:
            idata = pm.sample(DRAWS, tune=TUNE, chains=CHAINS, random_seed=seed,
                              nuts_sampler="numpyro", progressbar=False,
                              compute_convergence_checks=False)  # fmt: skip
        sampling = float(idata.posterior.attrs["sampling_time"])
    elif sampler == "nutpie":
        import nutpie

        t1 = time.perf_counter()
        compiled = nutpie.compile_pymc_model(model)
        compile_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        idata = nutpie.sample(compiled, draws=DRAWS, tune=TUNE, chains=CHAINS, seed=seed,
                              progress_bar=False)  # fmt: skip
        sampling = time.perf_counter() - t2
    else:
        raise ValueError(f"unknown sampler {sampler!r}; choose from {SAMPLERS}")
    wall = time.perf_counter() - t0
    ess = az.ess(idata.posterior[free], method="bulk")
    min_ess = float(min(float(ess[v].min()) for v in free))
    return {
        "model": model_name,
        "sampler": sampler,
        "seed": seed,
        "wall_s": wall,
        "sampling_s": sampling,
        "compile_s": compile_s,
        "min_ess_bulk": min_ess,
        "ess_per_s_wall": min_ess / wall,
        "ess_per_s_sampling": min_ess / sampling,
        "divergent": int(idata.sample_stats["diverging"].sum()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--json", default=None, help="write every record here")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "SAMPLER"), default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.one:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        emit_result(one(*args.one, args.seed))
        return 0

    records = run_each(__file__, args.reps, args.models.split(","), args.samplers.split(","))
    rows = []
    for model in args.models.split(","):
        group = {s: [r for r in records if r["model"] == model and r["sampler"] == s]
                 for s in args.samplers.split(",")}  # fmt: skip
        others = [median([r["ess_per_s_wall"] for r in rs]) or 0.0
                  for s, rs in group.items() if not s.startswith("sluice")]  # fmt: skip
        best = max(others, default=None)  # None: only sluice's samplers ran
        for sampler, rs in group.items():
            wall_rate = median([r["ess_per_s_wall"] for r in rs])
            rows.append({
                "model": model, "sampler": sampler, "runs": len(rs),
                "wall_s": median([r["wall_s"] for r in rs]),
                "sampling_s": median([r["sampling_s"] for r in rs]),
                "min_ess_bulk": median([r["min_ess_bulk"] for r in rs]),
                "ess_per_s_wall": wall_rate,
                "ess_per_s_sampling": median([r["ess_per_s_sampling"] for r in rs]),
                "ratio": (wall_rate / best) if best and wall_rate is not None else None,
                "divergent": median([r["divergent"] for r in rs]),
            })  # fmt: skip
    areas.emit("pymc-models", rows, args.json, records=records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
