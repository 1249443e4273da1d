"""Inference Gym targets sampled by sluice, BlackJAX and NumPyro, checked against ground truth.

Google's Inference Gym (PyPI ``inference-gym`` with ``tfp-nightly`` for its JAX
substrate) ships, for every target, posterior means and standard deviations
computed from long runs, with the standard errors of the means. Each target is
sampled here as an unconstrained log density of one flat vector, through its
``default_event_space_bijector`` (log density plus log-Jacobian), by:

* ``sluice``: ``sluice.sample(logdensity, init=..., seed=...)`` at every default
  (NUTS, ``mass_matrix="auto"``, ``chain_method="auto"``, progress on);
* ``blackjax``: ``blackjax.window_adaptation(blackjax.nuts, ...)`` then a
  ``lax.scan`` of ``blackjax.nuts`` steps, as BlackJAX's documentation runs it,
  one chain per CPU device with ``jax.pmap``;
* ``numpyro``: ``MCMC(NUTS(potential_fn=...), chain_method="parallel").run``,
  one call as its users make it, one chain per CPU device.

sluice places its chains itself (one CPU device per core); BlackJAX and
NumPyro get one CPU device per chain (``jax_num_cpu_devices``, as NumPyro's
``set_host_device_count``), their users' way to run chains in parallel on a
CPU: every library uses every core. ``blackjax-1core`` and ``numpyro-1core``
(``lax.map``; ``chain_method="sequential"``) run them on one core instead, named
in ``--libraries``; a row's ratio is over the best setting of each other library
that ran.

Every library: 4 chains of 1,000 warmup iterations and 1,000 draws, target
acceptance 0.8, max tree depth 10, float32, every chain starting at zero in the
unconstrained space, three seeds; one fresh process per run.

What a run reports (``--one TARGET LIBRARY SEED`` prints it as one JSON line):

* **z-scores** of every element's posterior mean and sd (the target's
  ``identity`` sample transformation, i.e. the constrained parameters) against
  the ground truth, in units of their Monte Carlo error: the run's own MCSE of
  the mean and of the sd (ArviZ's ``mcse`` formulas), combined with the ground
  truth's standard error where the Gym gives one. A run **passes** when every
  |z| is below the two-sided Bonferroni bound for a family-wise 1% error over
  the ``2 d`` comparisons (``d`` elements; a correct sampler fails 1 run in
  100) and its smallest bulk ESS is at least 100: below that the MCSE the
  z-scores divide by is itself unreliable (Vehtari et al. 2021), and a run that
  barely moved would pass on its own huge error bars;
* *wall*: from the library's first call to its draws in hand (compilation
  included; building the target excluded); *min ESS*: ArviZ's bulk ESS, the
  smallest over the elements; ESS/s over wall; ESS per gradient of sampling;
* *grads to b² < 0.01*: the MAMS and LAPS papers' measure of the bias of second
  moments, ``b²(n) = max_i (E_n[x_i²] - E[x_i²])² / Var[x_i²]`` (and its mean
  over ``i``), ``E_n`` the average over one chain's first ``n`` draws, averaged
  over the chains; reported is the mean number of sampling gradients per chain
  after which ``b²`` stays below 0.01 (warmup not counted, as in the papers).
  The Gym gives means and sds only, so ``Var[x_i²]`` is the Gaussian
  ``2 s⁴ + 4 m² s²``: exact for the Gaussian targets, an approximation elsewhere.

Commands::

    python bench/inference_gym.py                               # every target, library, seed
    python bench/inference_gym.py --targets sv_small --libraries sluice --seeds 0
    python bench/inference_gym.py --one sv_small sluice 0       # one run (a child process)
    python bench/inference_gym.py --report results.json          # the tables again
    python bench/inference_gym.py --quick                        # a smoke test (a minute)
    python bench/inference_gym.py --targets sv_small,banana --libraries sluice,sluice-fisher
                                     # the Fisher diagonal in the last window too, beside it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import emit_result, machine_info, median, run_isolated

# short name -> Inference Gym class (every target whose data ships with the package)
TARGETS = {
    "eight_schools": "EightSchools",
    "brownian": "BrownianMotionMissingMiddleObservations",
    "brownian_scales": "BrownianMotionUnknownScalesMissingMiddleObservations",
    "lorenz": "ConvectionLorenzBridge",
    "lorenz_scales": "ConvectionLorenzBridgeUnknownScales",
    "irt": "SyntheticItemResponseTheory",
    "lgcp": "SyntheticLogGaussianCoxProcess",
    "sv_small": "VectorizedStochasticVolatilitySP500Small",
    "sv_log_small": "VectorizedStochasticVolatilityLogSP500Small",
    "sv": "VectorizedStochasticVolatilitySP500",
    "sv_log": "VectorizedStochasticVolatilityLogSP500",
    "ill_gaussian": "IllConditionedGaussian",
    "banana": "Banana",
    "funnel": "NealsFunnel",
}
LIBRARIES = ("sluice", "blackjax", "numpyro")
CHAINS, WARMUP, DRAWS, TARGET_ACCEPT, MAX_TREE_DEPTH = 4, 1000, 1000, 0.8, 10
FAMILY_ERROR = 0.01  # a correct sampler fails one run in 100
MIN_ESS = 100  # below it the MCSE that a z-score divides by is itself unreliable
B2_LEVEL = 0.01


# -- the target -------------------------------------------------------------------------------
def _gym_package() -> Any:
    """``inference_gym.using_jax``: the package, not this script of the same name, whose
    folder is first on ``sys.path``."""
    here = Path(__file__).resolve().parent
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if getattr(sys.modules.get("inference_gym"), "__file__", None) == __file__:
        del sys.modules["inference_gym"]
    try:
        from inference_gym import using_jax
    finally:
        sys.path[:] = saved
    return using_jax


def gym_target(name: str) -> dict[str, Any]:
    """The target ``name`` as an unconstrained log density of one flat vector, with its
    ground truth (flat NumPy arrays of the ``identity`` transformation's elements)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from tensorflow_probability.substrates import jax as tfp

    gym = _gym_package()
    target = getattr(gym.targets, TARGETS[name])()
    bijector = target.default_event_space_bijector
    if not isinstance(bijector, tfp.bijectors.Bijector):  # a structure of bijectors
        bijector = tfp.bijectors.JointMap(bijector)
    example = jax.tree.map(
        lambda shape, dtype: jnp.zeros(shape, dtype),
        target.event_shape,
        target.dtype,
        is_leaf=lambda s: isinstance(s, tuple | list) and all(isinstance(i, int) for i in s),
    )
    flat, unravel = ravel_pytree(example)
    identity = target.sample_transformations["identity"]

    def logdensity(z: jax.Array) -> jax.Array:
        u = unravel(z)
        log_det = bijector.forward_log_det_jacobian(u)
        return target.unnormalized_log_prob(bijector.forward(u)) + log_det

    def constrained(z: jax.Array) -> jax.Array:
        values = identity(bijector.forward(unravel(z)))
        return jnp.concatenate([jnp.ravel(v) for v in jax.tree.leaves(values)])

    def leaves(tree: Any) -> Any:
        if tree is None:
            return None
        return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in jax.tree.leaves(tree)])

    truth = {
        "mean": leaves(identity.ground_truth_mean),
        "sd": leaves(identity.ground_truth_standard_deviation),
        "mean_se": leaves(getattr(identity, "ground_truth_mean_standard_error", None)),
        "sd_se": leaves(getattr(identity, "ground_truth_standard_deviation_standard_error", None)),
        "truth": "shipped",
    }
    if name in EXACT:
        truth = EXACT[name]()
    return {
        "dim": int(flat.shape[0]),
        "logdensity": logdensity,
        "constrained": constrained,
        "init": jnp.zeros_like(flat, jnp.float32),
        **truth,
    }


def brownian_exact(scales: tuple[float, float] | None = None, grid: int = 241) -> dict[str, Any]:
    """The exact posterior moments of the Gym's Brownian motion with missing middle
    observations, in the ``identity`` elements' order.

    The 30 locations are Gaussian given the two scales (a random walk from
    ``N(0, s_i^2)``, observed with ``N(0, s_o^2)`` noise at 20 time steps), so
    they integrate out in closed form; with ``scales=None`` (the unknown-scales
    target: ``LogNormal(0, 2)`` priors) the two scales are integrated by
    quadrature on a ``grid x grid`` lattice of their logarithms over
    ``[-7, 2]`` (mass beyond it: 3e-6; 241 and 481 points agree to six digits).
    Order: ``[innovation scale, locs..., observation scale]`` (the dict's sorted
    keys) for the unknown scales, the locs alone otherwise.
    """
    import numpy as np
    from scipy.stats import norm

    gym = _gym_package()
    del gym  # (the datasets module below imports without TensorFlow once the package has)
    from inference_gym.internal.datasets import brownian_motion_missing_middle_observations as d

    y_all = np.asarray(d.OBSERVED_LOC, np.float64)
    steps, seen = y_all.shape[0], ~np.isnan(y_all)
    y, m = y_all[seen], int(seen.sum())
    walk = np.minimum.outer(np.arange(steps), np.arange(steps)) + 1.0  # cov per unit variance
    if scales is None:
        logs = np.linspace(-7.0, 2.0, grid)
    else:
        logs = np.log(np.asarray(scales, np.float64))
    innovations = logs if scales is None else logs[:1]
    observations = logs if scales is None else logs[1:]
    n_i, n_o = len(innovations), len(observations)
    log_w, mean, second = (
        np.empty((n_i, n_o)),
        np.empty((n_i, n_o, steps)),
        np.empty((n_i, n_o, steps)),
    )
    for a, log_si in enumerate(innovations):
        cov = np.exp(2 * log_si) * walk
        cross = cov[:, seen]  # cov(locs, observed locs)
        noise = np.exp(2 * observations)[:, None, None] * np.eye(m)
        obs_cov = cov[np.ix_(seen, seen)][None] + noise
        alpha = np.linalg.solve(obs_cov, np.broadcast_to(y, (n_o, m))[..., None])[..., 0]
        logdet = np.linalg.slogdet(obs_cov)[1]
        log_w[a] = -0.5 * alpha @ y - 0.5 * logdet
        if scales is None:  # LogNormal(0, 2) priors: N(0, 2) on the grid of log scales
            log_w[a] += norm.logpdf(log_si, 0, 2) + norm.logpdf(observations, 0, 2)
        mean[a] = alpha @ cross.T
        solved = np.linalg.solve(obs_cov, np.broadcast_to(cross.T, (n_o, m, steps)))
        second[a] = np.diag(cov)[None] - np.einsum("tm,nmt->nt", cross, solved) + mean[a] ** 2
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    loc_mean = np.tensordot(w, mean, 2)
    loc_sd = np.sqrt(np.tensordot(w, second, 2) - loc_mean**2)
    if scales is not None:
        return {"mean": loc_mean, "sd": loc_sd, "mean_se": None, "sd_se": None, "truth": "exact"}
    s_i = np.exp(innovations)[:, None] * np.ones((1, n_o))
    s_o = np.ones((n_i, 1)) * np.exp(observations)[None]
    moments = [((w * s).sum(), np.sqrt((w * s * s).sum() - (w * s).sum() ** 2)) for s in (s_i, s_o)]
    return {
        "mean": np.concatenate([[moments[0][0]], loc_mean, [moments[1][0]]]),
        "sd": np.concatenate([[moments[0][1]], loc_sd, [moments[1][1]]]),
        "mean_se": None,
        "sd_se": None,
        "truth": "exact",
    }


def _brownian_known_scales() -> dict[str, Any]:
    gym = _gym_package()
    target = gym.targets.BrownianMotionMissingMiddleObservations()
    del target
    from inference_gym.internal.datasets import brownian_motion_missing_middle_observations as d

    return brownian_exact((float(d.INNOVATION_NOISE), float(d.OBSERVATION_NOISE)))


# targets whose posterior moments are computed here exactly (docstrings); the Gym's shipped
# ground truth of ``brownian_scales`` misses the exact values by up to 13 of its standard errors
EXACT = {"brownian": _brownian_known_scales, "brownian_scales": brownian_exact}


# -- the libraries: each returns draws (chain, draw, dim), gradients per draw, its figures -------
def run_sluice(t: dict[str, Any], seed: int, **settings: Any) -> dict[str, Any]:
    import numpy as np

    import sluice

    begin = time.perf_counter()
    run = sluice.sample(t["logdensity"], init=t["init"], chains=CHAINS, warmup=WARMUP,
                        draws=DRAWS, seed=seed, **settings)  # fmt: skip
    (z,) = (np.asarray(v) for v in run.draws.values())
    wall = time.perf_counter() - begin
    stats = run.sample_stats
    return {
        "z": z,
        "wall_s": wall,
        "steps": np.asarray(stats["n_steps"]),
        "energy": np.asarray(stats["energy"]),
        "divergent": int(np.asarray(stats["diverging"]).sum()),
        "grads_warmup": int(run.info.num_gradients_warmup),
        "step_size": [float(s) for s in np.ravel(run.info.step_size)],
        "setting": str(run.info.config.kernel.mass_matrix) + "/" + run.info.config.chain_method,
    }


def run_sluice_fisher(t: dict[str, Any], seed: int) -> dict[str, Any]:
    """sluice with the Fisher diagonal in the last warmup window too (``final_variance=False``
    in :func:`sluice.mcmc.adaptation.window_adaptation`, which also keeps a low-rank fit
    there however far from Gaussian; the default takes the draws' variance there): the
    comparison behind that default."""
    import functools

    from sluice.mcmc import adaptation, kernels

    kernels.window_adaptation = functools.partial(
        adaptation.window_adaptation, final_variance=False
    )
    return run_sluice(t, seed)


def run_blackjax(t: dict[str, Any], seed: int, parallel: bool = True) -> dict[str, Any]:
    import blackjax
    import jax
    import jax.numpy as jnp
    import numpy as np

    logdensity = t["logdensity"]

    def one_chain(keys: jax.Array) -> Any:
        warmup = blackjax.window_adaptation(
            blackjax.nuts, logdensity, target_acceptance_rate=TARGET_ACCEPT,
            max_num_doublings=MAX_TREE_DEPTH,
        )  # fmt: skip
        (state, params), info = warmup.run(keys[0], t["init"], WARMUP)
        nuts = blackjax.nuts(logdensity, params["step_size"], params["inverse_mass_matrix"],
                             max_num_doublings=MAX_TREE_DEPTH)  # fmt: skip

        def step(state: Any, key: jax.Array) -> Any:
            state, info = nuts.step(key, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent,
                           info.energy)  # fmt: skip

        _, (z, steps, divergent, energy) = jax.lax.scan(
            step, state, jax.random.split(keys[1], DRAWS)
        )
        grads_warmup = jnp.sum(info.info.num_integration_steps)
        return z, steps, divergent, energy, grads_warmup, params["step_size"]

    keys = jax.random.split(jax.random.key(seed), (CHAINS, 2))
    begin = time.perf_counter()
    chains = jax.pmap(one_chain) if parallel else jax.jit(lambda k: jax.lax.map(one_chain, k))
    out = jax.block_until_ready(chains(keys))
    wall = time.perf_counter() - begin
    z, steps, divergent, energy, grads_warmup, step_size = (np.asarray(x) for x in out)
    return {
        "z": z,
        "wall_s": wall,
        "steps": steps,
        "energy": energy,
        "divergent": int(divergent.sum()),
        "grads_warmup": int(grads_warmup.sum()),
        "step_size": [float(s) for s in step_size],
        "setting": "diag/pmap" if parallel else "diag/lax.map",
    }


def run_numpyro(t: dict[str, Any], seed: int, parallel: bool = True) -> dict[str, Any]:
    import jax
    import numpy as np
    from numpyro.infer import MCMC, NUTS

    logdensity = t["logdensity"]
    kernel = NUTS(potential_fn=lambda z: -logdensity(z), target_accept_prob=TARGET_ACCEPT,
                  max_tree_depth=MAX_TREE_DEPTH)  # fmt: skip
    mcmc = MCMC(kernel, num_warmup=WARMUP, num_samples=DRAWS, num_chains=CHAINS,
                chain_method="parallel" if parallel else "sequential",
                progress_bar=False)  # fmt: skip
    init = jax.numpy.broadcast_to(t["init"], (CHAINS, t["dim"]))
    begin = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), init_params=init,
             extra_fields=("num_steps", "diverging", "energy"))  # fmt: skip
    z = np.asarray(mcmc.get_samples(group_by_chain=True))
    wall = time.perf_counter() - begin
    fields = mcmc.get_extra_fields(group_by_chain=True)
    return {
        "z": z,
        "wall_s": wall,
        "steps": np.asarray(fields["num_steps"]),
        "energy": np.asarray(fields["energy"]),
        "divergent": int(np.asarray(fields["diverging"]).sum()),
        "grads_warmup": None,  # one run() call: its warmup steps are not collected
        "step_size": [float(s) for s in np.ravel(mcmc.last_state.adapt_state.step_size)],
        "setting": "diag/parallel" if parallel else "diag/sequential",
    }


RUNNERS = {
    "sluice": run_sluice,
    "blackjax": run_blackjax,
    "numpyro": run_numpyro,
    "sluice-fisher": run_sluice_fisher,  # these and below: only when named in --libraries
    "sluice-diag": lambda t, seed: run_sluice(t, seed, kernel=_nuts_diag()),
    # the other libraries on one core (lax.map; chain_method="sequential"): on lgcp's dense
    # linear algebra faster than four devices sharing two cores
    "blackjax-1core": lambda t, seed: run_blackjax(t, seed, parallel=False),
    "numpyro-1core": lambda t, seed: run_numpyro(t, seed, parallel=False),
}


def _nuts_diag() -> Any:
    import sluice

    return sluice.nuts(mass_matrix="diag")


# -- the checks ---------------------------------------------------------------------------------
def z_scores(x: Any, t: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Per element: z of the mean and of the sd against the truth, and bulk ESS.

    The MCSEs are ArviZ's formulas (``arviz.stats.diagnostics._mcse_mean`` and
    ``_mcse_sd``) on ArviZ's ESS of the draws and of their squared deviations.
    """
    import arviz as az
    import numpy as np

    ds = az.convert_to_dataset({"x": x})
    mean, sd = x.mean((0, 1)), x.std((0, 1), ddof=1)
    ess_mean = az.ess(ds, method="mean")["x"].values
    c2 = (x - mean) ** 2
    ess_c2 = az.ess(az.convert_to_dataset({"x": c2}), method="mean")["x"].values
    evar = c2.mean((0, 1))
    mcse_mean = sd / np.sqrt(ess_mean)
    mcse_sd = np.sqrt((((c2**2).mean((0, 1)) - evar**2) / ess_c2) / evar / 4)
    mean_se = 0.0 if t["mean_se"] is None else t["mean_se"]
    sd_se = 0.0 if t["sd_se"] is None else t["sd_se"]
    z_mean = (mean - t["mean"]) / np.sqrt(mcse_mean**2 + mean_se**2)
    z_sd = (sd - t["sd"]) / np.sqrt(mcse_sd**2 + sd_se**2)
    return z_mean, z_sd, az.ess(ds, method="bulk")["x"].values


def grads_to_low_bias(x: Any, steps: Any, t: dict[str, Any]) -> dict[str, float | None]:
    """Mean sampling gradients per chain after which b² (max and mean over elements) stays
    below :data:`B2_LEVEL` (module docstring); None where it never does."""
    import numpy as np

    second = t["mean"] ** 2 + t["sd"] ** 2
    var_second = 2 * t["sd"] ** 4 + 4 * t["mean"] ** 2 * t["sd"] ** 2
    n = np.arange(1, x.shape[1] + 1)[None, :, None]
    running = np.cumsum(x**2, axis=1) / n  # (chain, draw, dim)
    b2 = (running - second) ** 2 / var_second
    curves = {"max": b2.max(-1).mean(0), "avg": b2.mean(-1).mean(0)}
    grads = np.cumsum(steps, axis=1).mean(0)
    out: dict[str, float | None] = {}
    for kind, curve in curves.items():
        above = np.nonzero(curve >= B2_LEVEL)[0]
        first = 0 if above.size == 0 else above[-1] + 1
        out[kind] = float(grads[first]) if first < curve.shape[0] else None
    return out


def one(target_name: str, library: str, seed: int) -> dict[str, Any]:
    import jax
    import numpy as np
    from scipy import stats

    # Before anything starts JAX's backend: each library's CPU devices.
    if library.startswith("sluice"):
        import sluice  # noqa: F401  (as a user's script does: one device per core)
    elif not library.endswith("-1core"):
        jax.config.update("jax_num_cpu_devices", CHAINS)  # one per chain, run in parallel
    t = gym_target(target_name)
    result = RUNNERS[library](t, seed)
    z = result.pop("z").reshape(CHAINS, DRAWS, t["dim"])
    x = np.asarray(jax.jit(jax.vmap(jax.vmap(t["constrained"])))(z), np.float64)
    z_mean, z_sd, ess = z_scores(x, t)
    bound = float(stats.norm.isf(FAMILY_ERROR / (2 * 2 * x.shape[-1])))
    worst = float(np.nanmax(np.abs(np.concatenate([z_mean, z_sd]))))
    finite = bool(np.all(np.isfinite(z_mean)) and np.all(np.isfinite(z_sd)))
    steps = result.pop("steps").reshape(CHAINS, DRAWS)
    energy = np.asarray(result.pop("energy"), np.float64).reshape(CHAINS, DRAWS)
    e_bfmi = np.square(np.diff(energy, axis=1)).mean(1) / energy.var(1, ddof=1)
    grads = int(steps.sum())
    min_ess = float(np.min(ess))
    b2 = grads_to_low_bias(x, steps, t)
    worst_el = int(np.nanargmax(np.maximum(np.abs(z_mean), np.abs(z_sd))))
    return {
        "target": target_name,
        "library": library,
        "seed": seed,
        "dim": t["dim"],
        "truth": t["truth"],
        **result,
        "grads": grads,
        "min_ess_bulk": min_ess,
        "ess_per_s": min_ess / result["wall_s"],
        "ess_per_grad": min_ess / grads,
        "max_z_mean": float(np.nanmax(np.abs(z_mean))),
        "max_z_sd": float(np.nanmax(np.abs(z_sd))),
        "worst_element": worst_el,
        "worst_sd": float(x[..., worst_el].std(ddof=1)),
        "worst_truth_sd": float(t["sd"][worst_el]),
        "bound": bound,
        "z_passed": finite and worst < bound,
        "passed": finite and worst < bound and min_ess >= MIN_ESS,
        "min_e_bfmi": float(np.min(e_bfmi)),
        "grads_b2_max": b2["max"],
        "grads_b2_avg": b2["avg"],
    }


# -- the tables ---------------------------------------------------------------------------------
def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per target and library: seeds passed, medians over seeds, ESS/s against the
    best other library's."""
    rows = []
    for target in TARGETS:
        by_lib = {lib: [r for r in records if r["target"] == target and r["library"] == lib]
                  for lib in RUNNERS}  # fmt: skip
        rates = {lib: median([r["ess_per_s"] for r in rs]) for lib, rs in by_lib.items() if rs}
        for lib, rs in by_lib.items():
            if not rs:
                continue
            # the best other library's, at its best setting (a variant of a library, named
            # "library-variant", is not another library)
            mine = lib.split("-")[0]
            others = [v for k, v in rates.items()
                      if (base := k.split("-")[0]) in LIBRARIES and base != mine and v]  # fmt: skip
            rows.append({
                "target": target,
                "library": lib,
                "dim": rs[0]["dim"],
                "passed": f"{sum(r['passed'] for r in rs)}/{len(rs)}",
                "max_z": median([max(r["max_z_mean"], r["max_z_sd"]) for r in rs]),
                "bound": rs[0]["bound"],
                "wall_s": median([r["wall_s"] for r in rs]),
                "min_ess_bulk": median([r["min_ess_bulk"] for r in rs]),
                "ess_per_s": rates[lib],
                "ratio": rates[lib] / max(others) if others and rates[lib] is not None else None,
                "ess_per_kgrad": 1000 * median([r["ess_per_grad"] for r in rs]),
                "divergent": median([r["divergent"] for r in rs]),
                "step_size": median([median(r["step_size"]) for r in rs]),
                "grads_b2_max": median([r["grads_b2_max"] for r in rs]),
                "grads_b2_avg": median([r["grads_b2_avg"] for r in rs]),
            })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    global WARMUP, DRAWS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", default=None, help="write every record here")
    parser.add_argument("--report", default=None, help="print the tables of this JSON file")
    parser.add_argument("--one", nargs=3, metavar=("TARGET", "LIBRARY", "SEED"), default=None)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: eight schools, seed 0, 200 + 200 iterations")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.targets, args.seeds, args.warmup, args.draws = "eight_schools", "0", 200, 200
    WARMUP, DRAWS = args.warmup, args.draws
    sizes = ["--warmup", str(WARMUP), "--draws", str(DRAWS)]
    if args.one:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        emit_result(one(args.one[0], args.one[1], int(args.one[2])))
        return 0
    if args.report:
        records = json.loads(Path(args.report).read_text())["records"]
    else:
        records = []
        libraries = args.libraries.split(",")
        for target in args.targets.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                shift = seed % len(libraries)  # every library takes every slot in turn
                for library in libraries[shift:] + libraries[:shift]:
                    try:
                        record = run_isolated(__file__, ["--one", target, library, str(seed), *sizes],
                                              timeout=7200)  # fmt: skip
                    except RuntimeError as error:
                        print(error, file=sys.stderr, flush=True)
                        continue
                    records.append(record)
                    print(json.dumps(record), file=sys.stderr, flush=True)
                    if args.json:  # after every run: a long job keeps what it measured
                        Path(args.json).write_text(json.dumps(
                            {"machine": machine_info(), "records": records,
                             "rows": summarise(records)}))  # fmt: skip
    print(areas.table("inference-gym", summarise(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
