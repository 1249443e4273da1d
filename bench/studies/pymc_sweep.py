"""PyMC models that no default was tuned on: sluice against PyMC's NumPyro path.

Twelve models of the kinds PyMC users write, none of them in ``bench/pymc_models.py``
(whose models the defaults were measured on), each sampled by
``sluice.pymc.sample`` and by ``pm.sample(nuts_sampler="numpyro")``, 4 chains x
(1,000 tuning + 1,000 draws), each library's defaults, each run a fresh process
(the two samplers alternate their order by seed):

* ``mixture``: a two-component normal mixture with ordered means;
* ``lkj``: a 3-dim multivariate normal under an LKJ Cholesky prior;
* ``grw``: a Gaussian random walk of 200 steps seen with noise;
* ``missing``: a regression whose covariate has 20 missing values (imputed);
* ``betabin``: binomial counts of 40 groups under a hierarchical beta prior;
* ``zerosum``: varying intercepts of 12 groups, a zero-sum normal;
* ``censored``: a censored linear regression;
* ``robust``: a Student-t regression with unknown degrees of freedom;
* ``ordinal``: an ordered-logistic regression with three ordered cutpoints;
* ``horseshoe_reg``: the regularised horseshoe (Piironen and Vehtari 2017),
  200 x 30;
* ``eight_centered``: the centred eight schools (a funnel);
* ``hier_centered``: centred varying intercepts of 30 groups of 4 rows.

For each: the largest ``|z|`` of the two posterior means of every scalar of the
free variables in units of their combined MCSE (ArviZ), the range of the ratio
of their posterior standard deviations, each sampler's wall (model built to
InferenceData), smallest bulk ESS, largest R-hat and divergences, and sluice's
ESS/s over NumPyro's.

    PYTHONPATH=src python bench/studies/pymc_sweep.py
    PYTHONPATH=src python bench/studies/pymc_sweep.py --models horseshoe_reg --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from harness import emit_result, run_isolated  # noqa: E402

SAMPLERS = ("sluice", "numpyro")


def build(name: str):
    """The PyMC model ``name`` on its synthetic data (the same data for every run)."""
    import numpy as np
    import pymc as pm
    import pytensor.tensor as pt

    rng = np.random.default_rng(42)
    if name == "mixture":
        y = np.concatenate([rng.normal(-2, 1, 150), rng.normal(3, 0.7, 100)])
        with pm.Model() as m:
            w = pm.Dirichlet("w", np.ones(2))
            mu = pm.Normal("mu", 0, 5, shape=2, transform=pm.distributions.transforms.ordered,
                           initval=[-1.0, 1.0])  # fmt: skip
            s = pm.HalfNormal("s", 2, shape=2)
            pm.NormalMixture("y", w=w, mu=mu, sigma=s, observed=y)
        return m
    if name == "lkj":
        cov = np.array([[1, 0.6, -0.3], [0.6, 2, 0.4], [-0.3, 0.4, 0.5]])
        y = rng.multivariate_normal([1, -1, 0], cov, 300)
        with pm.Model() as m:
            chol, _, _ = pm.LKJCholeskyCov("c", n=3, eta=2,
                                           sd_dist=pm.Exponential.dist(1, shape=3))  # fmt: skip
            mu = pm.Normal("mu", 0, 3, shape=3)
            pm.MvNormal("y", mu, chol=chol, observed=y)
        return m
    if name == "grw":
        t = 200
        y = np.cumsum(rng.normal(0, 0.3, t)) + rng.normal(0, 0.5, t)
        with pm.Model() as m:
            s = pm.HalfNormal("s", 1)
            e = pm.HalfNormal("e", 1)
            z = pm.GaussianRandomWalk("z", sigma=s, init_dist=pm.Normal.dist(0, 2), steps=t - 1)
            pm.Normal("y", z, e, observed=y)
        return m
    if name == "missing":
        x = rng.normal(size=200)
        y = 1 + 2 * x + rng.normal(0, 1, 200)
        x[rng.choice(200, 20, replace=False)] = np.nan
        with pm.Model() as m:
            xx = pm.Normal("x", 0, 1, observed=np.ma.masked_invalid(x))
            a, b = pm.Normal("a", 0, 5), pm.Normal("b", 0, 5)
            pm.Normal("y", a + b * xx, pm.HalfNormal("s", 2), observed=y)
        return m
    if name == "betabin":
        n = rng.integers(10, 50, 40)
        k = rng.binomial(n, rng.beta(2, 8, 40))
        with pm.Model() as m:
            a, b = pm.Gamma("a", 2, 0.5), pm.Gamma("b", 2, 0.1)
            pm.Binomial("k", n, pm.Beta("th", a, b, shape=40), observed=k)
        return m
    if name == "zerosum":
        g = rng.integers(0, 12, 400)
        effect = rng.normal(0, 1, 12)
        y = 0.5 + (effect - effect.mean())[g] + rng.normal(0, 1, 400)
        with pm.Model(coords={"g": range(12)}) as m:
            a = pm.Normal("a", 0, 5)
            z = pm.ZeroSumNormal("z", sigma=pm.HalfNormal("s", 2), dims="g")
            pm.Normal("y", a + z[g], pm.HalfNormal("e", 2), observed=y)
        return m
    if name == "censored":
        x = rng.normal(size=300)
        y = np.clip(0.5 + x + rng.normal(0, 1, 300), -1, 1.5)
        with pm.Model() as m:
            a, b = pm.Normal("a", 0, 5), pm.Normal("b", 0, 5)
            s = pm.HalfNormal("s", 2)
            pm.Censored("y", pm.Normal.dist(a + b * x, s), lower=-1, upper=1.5, observed=y)
        return m
    if name == "robust":
        x = rng.normal(size=300)
        y = 1 - x + rng.standard_t(3, 300)
        with pm.Model() as m:
            a, b = pm.Normal("a", 0, 5), pm.Normal("b", 0, 5)
            pm.StudentT("y", nu=pm.Gamma("nu", 2, 0.1), mu=a + b * x,
                        sigma=pm.HalfNormal("s", 2), observed=y)  # fmt: skip
        return m
    if name == "ordinal":
        x = rng.normal(size=400)
        cuts = np.array([-1, 0.5, 2])
        p = 1 / (1 + np.exp(-(cuts[None] - 1.2 * x[:, None])))
        y = (rng.uniform(size=400)[:, None] > p).sum(1)
        with pm.Model() as m:
            b = pm.Normal("b", 0, 5)
            c = pm.Normal("c", 0, 5, shape=3, transform=pm.distributions.transforms.ordered,
                          initval=[-1.0, 0.0, 1.0])  # fmt: skip
            pm.OrderedLogistic("y", eta=b * x, cutpoints=c, observed=y)
        return m
    if name == "horseshoe_reg":
        n, p = 200, 30
        x = rng.normal(size=(n, p))
        beta = np.zeros(p)
        beta[:4] = [2, -1.5, 1, 0.5]
        y = x @ beta + rng.normal(size=n)
        with pm.Model() as m:
            tau = pm.HalfStudentT("tau", 2, 0.1)
            lam = pm.HalfStudentT("lam", 5, 1, shape=p)
            c2 = pm.InverseGamma("c2", 2, 8)
            z = pm.Normal("z", 0, 1, shape=p)
            scale = pt.sqrt(c2) * lam / pt.sqrt(c2 + tau**2 * lam**2)
            pm.Normal("y", pt.dot(x, z * tau * scale), pm.HalfNormal("s", 2), observed=y)
        return m
    if name == "eight_centered":
        y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
        sigma = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
        with pm.Model() as m:
            mu, tau = pm.Normal("mu", 0, 5), pm.HalfCauchy("tau", 5)
            pm.Normal("y", pm.Normal("th", mu, tau, shape=8), sigma, observed=y)
        return m
    if name == "hier_centered":
        groups = 30
        g = np.repeat(np.arange(groups), 4)
        y = 1 + rng.normal(0, 0.3, groups)[g] + rng.normal(0, 1, g.size)
        with pm.Model() as m:
            mu, tau = pm.Normal("mu", 0, 5), pm.HalfNormal("tau", 1)
            a = pm.Normal("a", mu, tau, shape=groups)
            pm.Normal("y", a[g], pm.HalfNormal("s", 2), observed=y)
        return m
    raise ValueError(f"unknown model {name!r}")


MODELS = ("mixture", "lkj", "grw", "missing", "betabin", "zerosum", "censored", "robust",
          "ordinal", "horseshoe_reg", "eight_centered", "hier_centered")  # fmt: skip


def one(name: str, sampler: str, seed: int) -> dict:
    """One run in this process: wall, and per scalar the mean, sd and MCSE."""
    import arviz as az
    import numpy as np
    import pymc as pm

    t0 = time.perf_counter()
    model = build(name)
    with model:
        if sampler == "sluice":
            import sluice.pymc

            idata = sluice.pymc.sample(1000, tune=1000, chains=4, random_seed=seed,
                                       progressbar=False)  # fmt: skip
        else:
            idata = pm.sample(1000, tune=1000, chains=4, random_seed=seed, progressbar=False,
                              nuts_sampler="numpyro", compute_convergence_checks=False)  # fmt: skip
    wall = time.perf_counter() - t0
    post = idata.posterior[[v.name for v in model.free_RVs]]

    def flat(ds):
        return np.concatenate([np.ravel(ds[v].values) for v in ds.data_vars]).tolist()

    return {"model": name, "sampler": sampler, "seed": seed, "wall_s": wall,
            "mean": flat(post.mean(("chain", "draw"))), "sd": flat(post.std(("chain", "draw"))),
            "mcse": flat(az.mcse(post)), "ess_bulk": min(flat(az.ess(post))),
            "r_hat": max(flat(az.rhat(post))),
            "divergent": int(idata.sample_stats["diverging"].sum())}  # fmt: skip


def compare(a: dict, b: dict) -> dict:
    """sluice's run ``a`` against NumPyro's ``b`` of the same model and seed."""
    import numpy as np

    z = (np.array(a["mean"]) - b["mean"]) / np.hypot(a["mcse"], b["mcse"])
    sd = np.array(a["sd"]) / np.array(b["sd"])
    return {"model": a["model"], "seed": a["seed"], "max_abs_z": float(np.max(np.abs(z))),
            "scalars": int(z.size), "sd_ratio": (float(sd.min()), float(sd.max())),
            "ess_per_s_ratio": (a["ess_bulk"] / a["wall_s"]) / (b["ess_bulk"] / b["wall_s"]),
            **{f"{s}_{k}": r[k] for s, r in (("sluice", a), ("numpyro", b))
               for k in ("wall_s", "ess_bulk", "r_hat", "divergent")}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--json", default=None, help="write every record and comparison here")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "SAMPLER", "SEED"), default=None)
    args = parser.parse_args()
    if args.one:
        name, sampler, seed = args.one
        return emit_result(one(name, sampler, int(seed)))
    records, rows = [], []
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in args.models.split(","):
            order = SAMPLERS if seed % 2 else SAMPLERS[::-1]
            runs = {s: run_isolated(__file__, ["--one", name, s, str(seed)]) for s in order}
            records += runs.values()
            rows.append(compare(runs["sluice"], runs["numpyro"]))
            r = rows[-1]
            print(f"{name:15s} seed {seed}  max|z| {r['max_abs_z']:5.2f} of {r['scalars']:3d}  "
                  f"sd ratio {r['sd_ratio'][0]:.2f}-{r['sd_ratio'][1]:.2f}  "
                  f"sluice {r['sluice_wall_s']:5.1f} s ESS {r['sluice_ess_bulk']:6.0f} "
                  f"R-hat {r['sluice_r_hat']:.3f} div {r['sluice_divergent']:4d}  "
                  f"numpyro {r['numpyro_wall_s']:5.1f} s ESS {r['numpyro_ess_bulk']:6.0f} "
                  f"R-hat {r['numpyro_r_hat']:.3f} div {r['numpyro_divergent']:4d}  "
                  f"ESS/s ratio {r['ess_per_s_ratio']:.2f}", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
