"""sluice on an adapted NumPyro model vs ``numpyro.infer.MCMC`` on the same model.

For each model, each sampler runs in a fresh process (so that peak RSS is its
own) with the same chains, warmup and draws, and reports:

* ``total s``: wall time of the whole call (tracing, compiling, warmup, draws,
  moving the draws to the host), what a user waits for;
* ``compile s``: the part of it JAX spent compiling (JAX's own compile events);
* ``draws s``: wall time of the sampling phase alone (after warmup), less any
  compiling in it (NumPyro compiles its sampling loop when ``run`` starts;
  sluice compiles one program for warmup and draws before warmup). With
  ``numpyro-seq`` this is optimistic: NumPyro compiles again for every chain,
  and JAX runs one chain while Python compiles the next, so compile time that
  overlapped sampling is subtracted too — compare its ``total s``;
* ``min ESS``: the smallest bulk ESS over every element of every latent site
  (ArviZ, the same call for both);
* ``ESS/s``: min ESS per second of the sampling phase, and per second of total;
* ``peak RSS``: the process's peak resident memory (``ru_maxrss``), which on
  CPU includes the device buffers.

Samplers: ``sluice`` (``sink="memory"``: every draw on the host, as NumPyro),
``sluice-zarr`` (``sluice.ZarrSink``: one chunk at a time on the host),
``numpyro-vec`` (``chain_method="vectorized"``) and ``numpyro-seq``
(``"sequential"``). sluice records what ``MCMC.get_samples()`` returns (the
adapter's pointwise log-likelihood is turned off), so both keep the same draws.

Run ``python bench/adapters_numpyro.py`` (``--help`` for the settings); the
table is printed as Markdown.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

MARKER = "@@adapters-bench "
SAMPLERS = ("sluice", "sluice-zarr", "numpyro-vec", "numpyro-seq")
# JAX's three compile phases: tracing to a jaxpr, lowering to MLIR, XLA compilation
COMPILE_EVENTS = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)


# -- models (imported only by the measuring process) -----------------------------------
def _models() -> dict[str, tuple[Any, tuple, dict]]:
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    def eight_schools(sigma, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
        with numpyro.plate("school", sigma.shape[0]):
            z = numpyro.sample("z", dist.Normal(0.0, 1.0))
            numpyro.sample("y", dist.Normal(mu + tau * z, sigma), obs=y)

    def logistic_regression(x, y=None):
        alpha = numpyro.sample("alpha", dist.Normal(0.0, 2.0))
        beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("obs", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=alpha + x @ beta), obs=y)

    def hierarchical(group, num_groups, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        sigma_group = numpyro.sample("sigma_group", dist.HalfNormal(2.0))
        sigma = numpyro.sample("sigma", dist.Exponential(1.0))
        with numpyro.plate("group", num_groups):
            z = numpyro.sample("z", dist.Normal(0.0, 1.0))
        a = mu + sigma_group * z
        with numpyro.plate("obs", group.shape[0]):
            numpyro.sample("y", dist.Normal(a[group], sigma), obs=y)

    rng = np.random.default_rng(0)
    y8 = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
    s8 = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)
    n, k = 5000, 25
    x = rng.normal(size=(n, k)).astype(np.float32)
    logits = 0.2 + x @ rng.normal(0.0, 0.5, size=k)
    y_logit = (rng.uniform(size=n) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    groups = 400
    group = np.repeat(np.arange(groups), 5).astype(np.int32)
    y_hier = (rng.normal(1.0, 1.0, size=groups)[group] + rng.normal(size=group.size)).astype(
        np.float32
    )
    return {
        "eight_schools": (eight_schools, (s8,), {"y": y8}),
        "logistic_5000x25": (logistic_regression, (x,), {"y": y_logit}),
        "hierarchical_400": (hierarchical, (group, groups), {"y": y_hier}),
    }


# -- one measurement, in its own process -------------------------------------------------
def _measure(sampler: str, name: str, chains: int, warmup: int, draws: int, seed: int) -> dict:
    import jax

    spans: list[tuple[float, float]] = []  # (start, end) of every compile phase

    def on_event(event: str, duration: float, **_: Any) -> None:
        if event in COMPILE_EVENTS:
            end = time.perf_counter()
            spans.append((end - duration, end))

    def compile_seconds(since: float = -math.inf) -> float:
        """Wall time covered by compile phases after ``since`` (nested ones counted once)."""
        total, reach = 0.0, since
        for start, end in sorted(spans):
            start = max(start, reach)
            if end > start:
                total += end - start
                reach = end
        return total

    jax.monitoring.register_event_duration_secs_listener(on_event)
    import numpy as np

    from sluice.io.arviz import import_arviz

    az = import_arviz()
    model, args, kwargs = _models()[name]
    t0 = time.perf_counter()
    if sampler.startswith("sluice"):
        import sluice
        from sluice.interop.numpyro import convert

        adapted = convert(model, args, kwargs, log_likelihood=False)
        with tempfile.TemporaryDirectory() as tmp:
            sink = (
                sluice.ZarrSink(os.path.join(tmp, "run.zarr"))
                if sampler == "sluice-zarr"
                else "memory"
            )
            run = sluice.sample(
                adapted,
                chains=chains,
                warmup=warmup,
                draws=draws,
                seed=seed,
                sink=sink,
                progress=False,
            )
            total = time.perf_counter() - t0
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            draws_seconds = run.info.sampling_seconds  # the chunk program was compiled before
            posterior = run.to_arviz().posterior  # read back after the peak was taken
            latent = [v for v in posterior.data_vars if v in _latent_names(model, args, kwargs)]
            ess = float(az.ess(posterior[latent].load(), method="bulk").to_array().min())
    else:
        from numpyro.infer import MCMC, NUTS

        mcmc = MCMC(
            NUTS(model),
            num_warmup=warmup,
            num_samples=draws,
            num_chains=chains,
            chain_method="vectorized" if sampler == "numpyro-vec" else "sequential",
            progress_bar=False,
        )
        mcmc.warmup(jax.random.PRNGKey(seed), *args, **kwargs)
        jax.block_until_ready(mcmc.post_warmup_state)
        t1 = time.perf_counter()
        mcmc.run(mcmc.post_warmup_state.rng_key, *args, **kwargs)
        samples = jax.device_get(mcmc.get_samples(group_by_chain=True))
        total = time.perf_counter() - t0
        # NumPyro compiles its sampling loop in run(): leave that out of the draws' time
        draws_seconds = time.perf_counter() - t1 - compile_seconds(since=t1)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        posterior = az.from_dict(posterior={k: np.asarray(v) for k, v in samples.items()})
        ess = float(az.ess(posterior.posterior, method="bulk").to_array().min())
    return {
        "sampler": sampler,
        "model": name,
        "total_s": total,
        "compile_s": min(compile_seconds(since=t0), total),
        "draws_s": draws_seconds,
        "min_ess": ess,
        "peak_rss_mb": peak / 2**20,
    }


def _latent_names(model: Any, args: tuple, kwargs: dict) -> set[str]:
    import numpyro

    trace = numpyro.handlers.trace(numpyro.handlers.seed(model, 0)).get_trace(*args, **kwargs)
    return {k for k, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}


# -- orchestration -------------------------------------------------------------------------
def _run_isolated(sampler: str, name: str, settings: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        __file__,
        "--one",
        sampler,
        name,
        "--chains",
        str(settings.chains),
        "--warmup",
        str(settings.warmup),
        "--draws",
        str(settings.draws[name] if isinstance(settings.draws, dict) else settings.draws),
        "--seed",
        str(settings.seed),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    raise RuntimeError(f"{sampler} on {name} failed:\n{done.stderr[-3000:]}")


def _best(reps: list[dict]) -> dict:
    """Best of the repetitions: the least time and memory each (on a shared machine the
    noise only ever adds); the draws, hence the ESS, are the same in every repetition."""
    best = dict(reps[0])
    for key in ("total_s", "compile_s", "draws_s", "peak_rss_mb"):
        best[key] = min(r[key] for r in reps)
    best["reps"] = len(reps)
    return best


def _table(rows: list[dict]) -> str:
    head = (
        "| model | sampler | total s | compile s | draws s | min ESS | ESS/s (draws) "
        "| ESS/s (total) | ESS/s ratio vs numpyro-vec (draws / total) | peak RSS MB |"
    )
    lines = [head, "|" + "---|" * 10]
    reference = {r["model"]: r for r in rows if r["sampler"] == "numpyro-vec"}
    for r in rows:
        ref = reference.get(r["model"])
        per_draw = r["min_ess"] / r["draws_s"]
        per_total = r["min_ess"] / r["total_s"]
        if ref:
            ratio = (
                f"{per_draw / (ref['min_ess'] / ref['draws_s']):.2f} / "
                f"{per_total / (ref['min_ess'] / ref['total_s']):.2f}"
            )
        else:
            ratio = "-"
        lines.append(
            f"| {r['model']} | {r['sampler']} | {r['total_s']:.1f} | {r['compile_s']:.1f} | "
            f"{r['draws_s']:.2f} | {r['min_ess']:.0f} | {per_draw:.0f} | {per_total:.0f} | "
            f"{ratio} | {r['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("SAMPLER", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--models", default="eight_schools,logistic_5000x25,hierarchical_400")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument(
        "--draws",
        type=int,
        default=None,
        help="draws per chain (default: 20000 for eight_schools, 5000 otherwise)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reps",
        type=int,
        default=3,
        help="fresh processes per (model, sampler); the table shows the best",
    )
    args = parser.parse_args(argv)
    if args.one:
        result = _measure(*args.one, args.chains, args.warmup, args.draws, args.seed)
        print(MARKER + json.dumps(result), flush=True)
        return
    models = [m for m in args.models.split(",") if m]
    samplers = [s for s in args.samplers.split(",") if s]
    unknown = sorted(set(samplers) - set(SAMPLERS))
    if unknown:
        parser.error(f"unknown sampler(s) {unknown}; choose from {SAMPLERS}")
    if args.draws is None:
        args.draws = {m: 20000 if m == "eight_schools" else 5000 for m in models}
    rows = []
    for name in models:
        for sampler in samplers:
            reps = []
            for _ in range(args.reps):
                reps.append(_run_isolated(sampler, name, args))
                print(
                    f"  {name} / {sampler}: {reps[-1]['total_s']:.1f}s", file=sys.stderr, flush=True
                )
            rows.append(_best(reps))
    print(
        f"{datetime.date.today()}, {platform.node()} ({os.cpu_count()} CPUs), "
        f"chains={args.chains}, warmup={args.warmup}, draws={args.draws}, "
        f"best of {args.reps} fresh processes each\n"
    )
    print(_table(rows))


if __name__ == "__main__":
    main()
