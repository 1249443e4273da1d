"""The benchmark areas of ``BENCHMARKS.md``: the jobs each runs and the table each fills.

An :class:`Area` is one table of ``BENCHMARKS.md`` (its prose is written there,
around the table's markers; see ``bench/report.py``). It runs one or more
:class:`Job` (a bench script and its arguments, at the settings the table
reports); each job's parser (``bench/parsers.py``) turns one raw output into
table rows. Every row is a *figure* with a key (``(model, variant)``, say);
the table keeps, for each key, the row of the newest raw output that holds it.

Raw outputs saved without a meta file carry neither their command nor always
their time: each area's ``legacy`` entries (:class:`Legacy`) list those that
hold its current figures, with the command that produced each and when it ran.

This module imports no JAX: the orchestrating process only reads files.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import harness
from parsers import (
    MEMORY_LINES,
    VI_RATIOS,
    VI_VARIANTS,
    Output,
    Row,
    parse_adapters,
    parse_kernels,
    parse_latency,
    parse_mcmc,
    parse_memory,
    parse_million,
    parse_multiprocess,
    parse_rows,
    parse_stats_large,
    parse_stats_overhead,
    parse_stats_proxy,
    parse_stats_scale_accuracy,
    parse_stats_scale_cost,
    parse_store,
    parse_vi,
)

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"


def display_command(argv: Sequence[str]) -> str:
    """``PYTHONPATH=src python bench/x.py ...`` for a job's argv (its ``--json PATH`` left
    out: the raw output's path is a column of its own)."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--json":
            skip = True
            continue
        if arg.startswith("--json="):
            continue
        shown.append(arg)
    return "PYTHONPATH=src python " + shlex.join(shown)


@dataclasses.dataclass(frozen=True)
class Job:
    """One bench script at the settings its table reports."""

    name: str  # file stem of its raw outputs
    args: str  # script (relative to the repository root) and arguments, as a shell would split
    parse: Callable[[Output], list[Row]]
    quick: str  # the same script at smoke-test settings (seconds to a minute)
    json: bool = True  # the script takes --json PATH
    explicit: bool = False  # run only when named (``python -m bench AREA/JOB``): too long for all

    def argv(self, quick: bool, json_path: str | None) -> list[str]:
        argv = shlex.split(self.quick if quick else self.args)
        if self.json and json_path is not None:
            argv += ["--json", json_path]
        return argv


@dataclasses.dataclass(frozen=True)
class Legacy:
    """A raw output saved without a meta file: the command that produced it and when."""

    job: str
    path: str  # relative to bench/results: the stdout (.txt) or the JSON file
    command: str | None = None  # None: the JSON file's own "command"
    when: str | None = None  # None: the JSON file's "machine" date
    keep: Callable[[Row], bool] | None = None  # rows of it that are current figures


@dataclasses.dataclass(frozen=True)
class Area:
    name: str  # also the name of its table's markers in BENCHMARKS.md
    jobs: tuple[Job, ...]
    key: Callable[[Row], tuple]  # what identifies a figure across raw outputs
    columns: tuple[tuple[str, str, str], ...]  # (key, header, format spec)
    rank: Callable[[Row], tuple] | None = None  # row order in the table (None: as parsed)
    legacy: tuple[Legacy, ...] = ()
    left: tuple[str, ...] = ()  # left-aligned columns besides the first

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)


def _order(values: Sequence[str]) -> Callable[[str], int]:
    return lambda v: values.index(v) if v in values else len(values)


def _by(*keys: str) -> Callable[[Row], tuple]:
    return lambda r: tuple(r.get(k) for k in keys)


MCMC_MODELS = _order(("logreg_small", "logreg_large", "gaussian"))
MCMC_VARIANTS = _order(
    ("sluice/seq", "sluice/vec", "numpyro/seq", "numpyro/vec", "blackjax/seq", "blackjax/vec")
)
KERNEL_VARIANTS = (
    "sluice/seq,sluice+blackjax.nuts/seq,sluice+blackjax.adjusted_mclmc/seq,blackjax/seq"
)
KERNEL_ORDER = _order(KERNEL_VARIANTS.split(","))
LATENCY_VARIANTS = _order(
    ("sluice/seq", "sluice/vec", "sluice-nostats/seq", "sluice-nostats/vec", "numpyro/seq",
     "numpyro/vec", "blackjax/seq", "blackjax/vec")
)  # fmt: skip
GYM_SMALL = (
    "eight_schools,brownian,brownian_scales,lorenz,lorenz_scales,irt,lgcp,sv_small,"
    "sv_log_small,ill_gaussian,banana,funnel"
)
GYM_TARGETS = _order((*GYM_SMALL.split(","), "sv", "sv_log"))
GYM_LIBRARIES = _order(("sluice", "blackjax", "numpyro"))
PYMC = "bench/pymc_models.py --models"
PYMC_QUICK = "bench/pymc_models.py --models eight_schools --samplers"
MEMORY_QUICK = "--draws 100 --dim 1000 --warmup 20"
MCMC_COLUMNS = (
    ("model", "model", ""), ("dim", "dim", ",d"), ("variant", "variant", ""),
    ("reps", "reps", "d"), ("wall_s", "wall s", ".2f"), ("compile_s", "compile s", ".2f"),
    ("sampling_s", "sampling s", ".2f"), ("grads_per_draw", "grads/draw", ".1f"),
    ("overhead", "overhead", ".2f"), ("min_ess_bulk", "min ESS_bulk", ".0f"),
    ("ess_per_s_sampling", "ESS/s sampling", ".3g"), ("ess_per_s_total", "ESS/s total", ".3g"),
    ("peak_rss_mb", "peak RSS MB", ".0f"),
)  # fmt: skip
KERNEL_COLUMNS = (
    ("model", "model", ""), ("dim", "dim", ",d"), ("variant", "variant", ""),
    ("wall_s", "wall s", ".2f"), ("compile_s", "compile s", ".2f"),
    ("sampling_s", "sampling s", ".2f"), ("grads_per_draw", "grads/draw", ".1f"),
    ("overhead", "overhead", ".2f"), ("engine_cost", "time/grad vs BlackJAX loop", ".3f"),
    ("min_ess_bulk", "min ESS_bulk", ".0f"), ("ess_per_grad", "ESS/grad", ".3f"),
    ("ess_per_s_sampling", "ESS/s sampling", ".3g"), ("ess_per_s_total", "ESS/s total", ".3g"),
)  # fmt: skip


def _overhead_job(model: str) -> Job:
    """``bench/stats_overhead.py`` on ``model`` with the default statistics."""
    return Job(
        f"stats-overhead-{model}",
        f"bench/stats_overhead.py --dim 1000 --reps 9 --model {model}",
        parse_stats_overhead,
        f"bench/stats_overhead.py --dim 100 --draws 200 --reps 1 --micro-draws 200 --model {model}",
        json=False,
    )


# fmt: off
AREAS: tuple[Area, ...] = (
    Area(
        "mcmc",
        jobs=(
            Job("mcmc-a", "bench/mcmc.py --models logreg_small --reps 3", parse_mcmc,
                "bench/mcmc.py --quick --models logreg_small"),
            Job("mcmc-bc", "bench/mcmc.py --models logreg_large,gaussian --reps 1", parse_mcmc,
                "bench/mcmc.py --quick --models logreg_large --variants sluice/seq"),
        ),
        key=_by("model", "variant"),
        rank=lambda r: (MCMC_MODELS(r["model"]), MCMC_VARIANTS(r["variant"])),
        columns=MCMC_COLUMNS,
        left=("variant",),
        legacy=(
            Legacy("mcmc-a", "2026-11-30-d/mcmc-a-final.json"),
            Legacy("mcmc-bc", "2026-11-30-a/mcmc.json"),
            Legacy("mcmc-bc", "2026-11-30-quiet/mcmc.json"),
        ),
    ),
    Area(
        "kernels",
        jobs=(
            Job("kernels", "bench/mcmc.py --models logreg_large,gaussian --reps 1 "
                f"--variants {KERNEL_VARIANTS}", parse_kernels,
                f"bench/mcmc.py --quick --models logreg_large --variants {KERNEL_VARIANTS}"),
        ),
        key=_by("model", "variant"),
        rank=lambda r: (MCMC_MODELS(r["model"]), KERNEL_ORDER(r["variant"])),
        columns=KERNEL_COLUMNS,
        left=("variant",),
    ),
    Area(
        "engine-cost",
        jobs=(
            Job("engine-cost", "bench/engine_cost.py", parse_rows,
                "bench/engine_cost.py --models logreg_large --draws 100 --reps 1"),
        ),
        key=_by("model", "variant"),
        columns=(
            ("model", "model", ""), ("dim", "dim", ",d"), ("variant", "variant", ""),
            ("reps", "reps", "d"), ("us_per_grad", "µs/gradient", ".1f"),
            ("ratio", "vs BlackJAX loop", ".3f"),
            ("ratio_args", "vs BlackJAX loop, data as arguments", ".3f"),
        ),
        left=("variant",),
    ),
    Area(
        "mclmc-tuner",
        jobs=(
            Job("mclmc-tuner", "bench/mclmc_tuner.py", parse_rows,
                "bench/mclmc_tuner.py --models logreg_large"),
        ),
        key=lambda r: (r["model"], r["tuner"], r.get("seed", 0)),
        rank=lambda r: (MCMC_MODELS(r["model"]), r.get("seed", 0), r["tuner"] != "sluice"),
        columns=(
            ("model", "model", ""), ("dim", "dim", ",d"), ("seed", "seed", "d"),
            ("tuner", "tuner", ""), ("L", "L", ".3g"), ("step_size", "step size", ".3g"),
            ("min_ess_bulk", "min ESS_bulk", ".0f"), ("ess_per_grad", "ESS/grad", ".4f"),
            ("wall_s", "wall s", ".1f"),
        ),
        left=("tuner",),
    ),
    Area(
        "many-chains",
        jobs=(
            Job("many-chains", "bench/many_chains.py", parse_rows,
                "bench/many_chains.py --chains 64 --warmup 100 --draws 20"),
        ),
        key=_by("chains", "variant"),
        columns=(
            ("variant", "variant", ""), ("chains", "chains", "d"), ("wall_s", "wall s", ".1f"),
            ("compile_s", "compile s", ".1f"), ("warmup_s", "warmup s", ".1f"),
            ("sampling_s", "sampling s", ".2f"), ("grads_per_draw", "grads/draw", ".1f"),
            ("min_ess_bulk", "min ESS_bulk", ".0f"), ("ess_per_grad", "ESS/grad", ".4f"),
            ("ess_per_s_sampling", "ESS/s sampling", ".3g"),
            ("ess_per_s_total", "ESS/s total", ".3g"), ("max_r_hat", "max R-hat", ".3f"),
            ("max_nested_r_hat", "max nested R-hat", ".3f"),
        ),
        left=("variant",),
    ),
    Area(
        "pymc-models",
        jobs=(
            Job("pymc-models", "bench/pymc_models.py --reps 3", parse_rows,
                "bench/pymc_models.py --models eight_schools"),
            # the low-rank metric where the others led, beside them
            Job("pymc-models-low-rank", f"{PYMC} logistic,radon,eight_schools "
                "--samplers sluice-low-rank,numpyro,nutpie --reps 2", parse_rows,
                f"{PYMC_QUICK} sluice-low-rank"),
            # the low-rank metric on the two models it had not run, beside nutpie
            Job("pymc-models-low-rank-sv-gp", f"{PYMC} stochastic_volatility,gp "
                "--samplers sluice,sluice-low-rank,nutpie --reps 2", parse_rows,
                f"{PYMC_QUICK} sluice-low-rank,nutpie"),
            # small models: sequential chains compile faster than vectorized ones
            Job("pymc-models-sequential", f"{PYMC} eight_schools,radon "
                "--samplers sluice,sluice-sequential,numpyro,nutpie --reps 2", parse_rows,
                f"{PYMC_QUICK} sluice-sequential"),
            # the two compile-bound models, five fresh processes a sampler
            Job("pymc-models-small", f"{PYMC} eight_schools,radon "
                "--samplers sluice,sluice-diag,numpyro,nutpie --reps 5", parse_rows,
                f"{PYMC_QUICK} sluice"),
            # mass_matrix="auto" (low rank on all five) beside the diagonal and the others
            Job("pymc-models-auto", "bench/pymc_models.py "
                "--samplers sluice,sluice-diag,numpyro,nutpie --reps 2", parse_rows,
                f"{PYMC_QUICK} sluice,sluice-diag"),
            # the family: every model but the GP, sluice at its defaults beside the two others
            Job("pymc-models-family", f"{PYMC} logistic,radon,stochastic_volatility,"
                "eight_schools,logistic_well,radon_nc,radon_slopes,linear,poisson,hier_logistic "
                "--samplers sluice,numpyro,nutpie --reps 3", parse_rows,
                f"{PYMC_QUICK} sluice"),
            # the family's models of 8-64 GiB of expected gradient traffic, which the classic
            # emitters' bound reaches (docs/architecture.md)
            Job("pymc-models-emitters", f"{PYMC} linear,poisson,hier_logistic,"
                "stochastic_volatility --samplers sluice,numpyro,nutpie --reps 3", parse_rows,
                f"{PYMC_QUICK} sluice"),
            # a horseshoe prior, where the low-rank fit's last-window check hands every chain
            # the diagonal metric's variance (docs/kernels.md, "Mass matrices")
            Job("pymc-models-horseshoe", f"{PYMC} horseshoe --samplers "
                "sluice,sluice-diag,numpyro,nutpie --reps 3", parse_rows,
                f"{PYMC_QUICK} sluice"),
            # the GP alone, without PyMC's NumPyro path (two minutes a run)
            Job("pymc-models-gp", f"{PYMC} gp --samplers sluice,sluice-one-device,nutpie "
                "--reps 2", parse_rows, f"{PYMC_QUICK} sluice"),
        ),
        key=_by("model", "sampler"),
        columns=(
            ("model", "model", ""), ("sampler", "sampler", ""), ("runs", "runs", "d"),
            ("wall_s", "wall s", ".1f"), ("sampling_s", "sampling s", ".2f"),
            ("min_ess_bulk", "min ESS bulk", ".0f"), ("ess_per_s_wall", "ESS/s wall", ".1f"),
            ("ess_per_s_sampling", "ESS/s sampling", ".0f"),
            ("ratio", "ESS/s wall / best other", ".2f"), ("divergent", "divergent", ".0f"),
        ),
        left=("sampler",),
    ),
    Area(
        "chunk-trace",
        jobs=(
            Job("chunk-trace", "bench/chunk_trace.py --models eight_schools,radon,demo --reps 3",
                parse_rows, "bench/chunk_trace.py --reps 1"),
        ),
        key=_by("model", "chain_method"),
        columns=(
            ("model", "model", ""), ("chain_method", "chain method", ""), ("runs", "runs", "d"),
            ("chose", "chose", ""), ("trace_s", "chunk trace s", ".2f"),
            ("compile_s", "chunk compile s", ".2f"), ("sampling_s", "sampling s", ".2f"),
            ("wall_s", "wall s", ".2f"),
        ),
        left=("chain_method", "chose"),
    ),
    Area(
        "terminal-buffer",
        jobs=(
            Job("terminal-buffer", "bench/terminal_buffer.py --seeds 4", parse_rows,
                "bench/terminal_buffer.py --models eight_schools --seeds 1"),
        ),
        key=_by("model", "buffer"),
        columns=(
            ("model", "model", ""), ("buffer", "terminal buffer", ""), ("seeds", "seeds", "d"),
            ("min_ess_bulk", "min ESS bulk", ".0f"),
            ("grads_per_draw", "gradients per draw", ".1f"),
            ("ess_per_1000_grads", "ESS per 1,000 gradients", ".3g"), ("vs_first", "vs 50", ".2f"),
        ),
        left=("buffer",),
    ),
    Area(
        "compile-init",
        jobs=(
            Job("compile-init", "bench/compile_init.py --reps 4", parse_rows,
                "bench/compile_init.py --models eight_schools --reps 1"),
        ),
        key=_by("model", "variant"),
        columns=(
            ("model", "model", ""), ("variant", "variant", ""), ("runs", "runs", "d"),
            ("init_compile_s", "init compile s", ".2f"),
            ("chunk_compile_s", "chunk compile s", ".2f"), ("sampling_s", "sampling s", ".2f"),
            ("wall_s", "wall s", ".2f"), ("wall_vs_xla_defaults", "wall / xla-defaults", ".2f"),
        ),
        left=("variant",),
    ),
    Area(
        "mass-matrix",
        jobs=(
            Job("mass-matrix", "bench/mass_matrix.py --cutoffs 2,10,100", parse_rows,
                "bench/mass_matrix.py --posteriors correlated --mass-matrix diag,low_rank"),
        ),
        key=lambda r: (r["posterior"], r["mass_matrix"], r.get("cutoff")),
        columns=(
            ("posterior", "posterior", ""), ("mass_matrix", "mass matrix", ""),
            ("cutoff", "cutoff", "g"), ("dim", "dim", "d"), ("min_ess_bulk", "min ESS bulk", ".0f"),
            ("grads_per_ess", "grads / min ESS", ".1f"),
            ("grads_per_ess_sampling", "sampling grads / min ESS", ".1f"),
            ("directions_kept", "directions kept", ".1f"), ("wall_s", "wall s", ".1f"),
        ),
        left=("mass_matrix",),
    ),
    Area(
        "posteriordb",
        jobs=(  # the posteriordb checkout comes from $POSTERIORDB
            Job("posteriordb", "bench/posteriordb.py --seeds 3", parse_rows,
                "bench/posteriordb.py --quick"),
        ),
        key=_by("posterior", "mass_matrix"),
        columns=(
            ("posterior", "posterior", ""), ("mass_matrix", "mass matrix", ""), ("dim", "dim", "d"),
            ("runs", "seeds", "d"), ("gradients", "gradients", ".0f"),
            ("min_ess_bulk", "min ESS bulk", ".0f"), ("grads_per_ess", "grads / min ESS", ".1f"),
            ("grads_per_ess_sampling", "sampling grads / min ESS", ".1f"),
            ("ratio", "diag / low_rank", ".2f"), ("max_rhat", "max R-hat", ".3f"),
            ("divergent", "divergent", ".0f"), ("wall_s", "wall s", ".1f"),
            ("max_abs_z", "max abs z", ".2f"), ("check", "check", ""),
        ),
        left=("mass_matrix", "check"),
    ),
    Area(
        "inference-gym",
        jobs=(
            Job("inference-gym", f"bench/inference_gym.py --targets {GYM_SMALL}", parse_rows,
                "bench/inference_gym.py --quick"),
            # the targets behind on the full run's wall, re-run on their own
            Job("inference-gym-behind", "bench/inference_gym.py --targets "
                "brownian,brownian_scales,sv_log_small", parse_rows,
                "bench/inference_gym.py --quick", explicit=True),
            # 2,519 dimensions, 9 runs per target: hours on a 2-core CPU
            Job("inference-gym-sv", "bench/inference_gym.py --targets sv,sv_log", parse_rows,
                "bench/inference_gym.py --quick", explicit=True),
        ),
        key=_by("target", "library"),
        rank=lambda r: (GYM_TARGETS(r["target"]), GYM_LIBRARIES(r["library"])),
        columns=(
            ("target", "target", ""), ("library", "library", ""), ("dim", "dim", "d"),
            ("passed", "seeds passed", ""), ("max_z", "max abs z", ".2f"),
            ("bound", "bound", ".2f"), ("wall_s", "wall s", ".1f"),
            ("min_ess_bulk", "min ESS", ".0f"), ("ess_per_s", "ESS/s wall", ".1f"),
            ("ratio", "ESS/s / best other", ".2f"), ("ess_per_kgrad", "ESS per 1k grads", ".2f"),
            ("divergent", "divergent", ".0f"), ("step_size", "step size", ".3f"),
            ("grads_b2_max", "grads to b2max<0.01", ",.0f"),
        ),
        left=("library", "passed"),
    ),
    Area(
        "latency",
        jobs=(
            Job("latency", "bench/latency.py --reps 2", parse_latency,
                "bench/latency.py --reps 1 --warmup 100 --draws 100 "
                "--variants sluice/seq sluice-nostats/seq blackjax/seq"),
        ),
        key=_by("model", "variant"),
        rank=lambda r: (r["model"], LATENCY_VARIANTS(r["variant"])),
        columns=(
            ("model", "model", ""), ("variant", "variant", ""), ("reps", "runs", ""),
            ("sample", "sample s", ""), ("summary", "summary s", ""), ("total", "total s", ""),
            ("vs_anchor", "total / best anchor", ""), ("ess", "min ESS bulk", ""),
        ),
        left=("variant",),
        legacy=(
            Legacy("latency", "2026-11-30-e/latency.txt",
                   "cd bench && PYTHONPATH=../src python latency.py --reps 2",
                   "2026-11-30T20:22:00+00:00"),
            Legacy("latency", "2026-11-30-e/latency-final.txt",
                   "cd bench && PYTHONPATH=../src python latency.py --reps 2 --variants "
                   "sluice/seq sluice-nostats/seq blackjax/seq", "2026-11-30T21:20:00+00:00"),
        ),
    ),
    Area(
        "stats-cost",
        jobs=(_overhead_job("gaussian"), _overhead_job("logreg")),
        key=_by("model", "chunks", "statistics"),
        columns=(
            ("model", "model", ""), ("chains", "chains", ""), ("chunks", "chunks", ""),
            ("statistics", "statistics", ""), ("runs", "runs", ""),
            ("base", "NUTS draw, no statistics, us", ""), ("with", "with the statistics, us", ""),
            ("added_us", "added us", ""), ("added", "added", ""),
        ),
        left=("chains", "chunks", "statistics"),
    ),
    Area(
        "stats-defaults",
        jobs=(
            Job("stats-defaults", "bench/stats_overhead.py --defaults 1000 --reps 5",
                parse_rows, "bench/stats_overhead.py --defaults 100 --reps 1"),
            # a user's second run: JAX's persistent compilation cache, warmed first
            Job("stats-defaults-cached", "bench/stats_overhead.py --defaults 1000 --reps 5 "
                "--cache /tmp/sluice-bench-jax-cache", parse_rows,
                "bench/stats_overhead.py --defaults 100 --reps 1 "
                "--cache /tmp/sluice-bench-jax-cache"),
            # 10,000 dims: the update by blocks the size of a core's cache (the rule)
            # against blocks of 2,048 elements; `until` reading the summary at every chunk,
            # its programs compiled for speed (Plan.repeated_readout) and for a quick compile
            Job("stats-defaults-10k", "bench/stats_overhead.py --defaults 10000 --reps 3 "
                "--variants statistics,statistics-block2048,until,until-quick,none", parse_rows,
                "bench/stats_overhead.py --defaults 3000 --reps 1 --warmup 50 --draws 50 "
                "--variants statistics,statistics-block2048,until,until-quick,none"),
            # 100,000 dims: NUTS takes ~10 min a run at 1,000 + 1,000 on two cores
            Job("stats-defaults-100k", "bench/stats_overhead.py --defaults 100000 --reps 2 "
                "--warmup 100 --draws 200 --variants statistics,statistics-block2048,none",
                parse_rows,
                "bench/stats_overhead.py --defaults 1000 --reps 1 --warmup 50 --draws 50"),
        ),
        # (raw outputs from before the cache column ran without one)
        key=lambda r: (r.get("dim"), r.get("warmup"), r.get("draws"),
                       r.get("compile_cache") or "none", r.get("variant")),
        columns=(
            ("dim", "dim", "d"), ("warmup", "warmup", "d"), ("draws", "draws", "d"),
            ("compile_cache", "compile cache", ""), ("variant", "statistics", ""),
            ("runs", "runs", "d"),
            ("chunk_size", "chunk size", "d"), ("chain_method", "chain method", ""),
            ("wall_s", "wall s", ".2f"), ("compile_s", "compile s", ".2f"),
            ("warmup_s", "warmup s", ".2f"), ("sampling_s", "sampling s", ".2f"),
            ("sampling_ratio", "sampling / without", ".2f"),
            ("wall_ratio", "wall / without", ".2f"),
        ),
        left=("variant", "chain_method"),
    ),
    Area(
        "stats-accuracy",
        jobs=(
            Job("stats-scale-logreg", "bench/stats_scale.py accuracy --model logreg --seeds 4",
                parse_stats_scale_accuracy,
                "bench/stats_scale.py accuracy --model logreg --draws 200", json=False),
            Job("stats-scale-gauss20k", "bench/stats_scale.py accuracy --model gauss20k",
                parse_stats_scale_accuracy,
                "bench/stats_scale.py accuracy --model logreg --draws 100", json=False),
        ),
        key=_by("model", "run", "statistics", "metric"),
        columns=(
            ("model", "model", ""), ("run", "chains x draws", ""), ("statistics", "statistics", ""),
            ("metric", "error of", ""), ("elements", "elements", ""), ("rms", "rms", ""),
            ("max", "max", ""),
        ),
        left=("run", "statistics", "metric"),
    ),
    Area(
        "stats-proxy",
        jobs=(
            Job("stats-proxy", "bench/stats_proxy.py", parse_stats_proxy,
                "bench/stats_proxy.py --dim 2000 --stride 10", json=False),
        ),
        key=_by("draws", "score"),
        columns=(
            ("draws", "draws", ""), ("score", "score", ""), ("elements", "elements", ""),
            ("rms", "rms", ""), ("max", "max", ""), ("mean", "mean", ""),
        ),
        left=("score",),
    ),
    Area(
        "stats-scale",
        jobs=(
            Job("stats-scale-cost", "bench/stats_scale.py cost", parse_stats_scale_cost,
                "bench/stats_scale.py cost --reps 1", json=False),
            Job("stats-large", "bench/stats_large.py --dim 100000", parse_stats_large,
                "bench/stats_large.py --dim 10000 --draws 20 --warmup 20", json=False),
            Job("million", "bench/million.py --progress", parse_million,
                "bench/million.py --dim 20000 --warmup 20 --draws 40", explicit=True),
            # the memory of a short run: 100 draws, the statistics' state against the peak
            Job("million-hmc-short", "bench/million.py --kernel hmc --warmup 20 --draws 100 "
                "--chunk-size 50", parse_million,
                "bench/million.py --kernel hmc --dim 20000 --warmup 20 --draws 40",
                explicit=True),
        ),
        key=_by("what", "statistics"),
        columns=(("what", "what", ""), ("statistics", "statistics", ""), ("value", "value", "")),
        left=("statistics", "value"),
    ),
    Area(
        "memory",
        jobs=(
            Job("memory-none", "bench/memory.py --lines sluice-none --draws 1000,4000,16000,64000 "
                "--chunk-size 1000", parse_memory,
                f"bench/memory.py --lines sluice-none {MEMORY_QUICK}"),
            Job("memory-kept", "bench/memory.py --lines sluice,numpyro --draws 500,1000,2000,4000 "
                "--numpyro-draws 500,1000,2000", parse_memory,
                f"bench/memory.py --lines sluice,numpyro --numpyro-draws 100 {MEMORY_QUICK}"),
        ),
        key=_by("line", "dim", "draws"),
        rank=lambda r: (list(MEMORY_LINES.values()).index(r["line"]), r["dim"], r["draws"]),
        columns=(
            ("line", "line", ""), ("dim", "dim", ",d"), ("draws", "draws/chain", ",d"),
            ("draw_mb", "draw MB", ",.0f"), ("base_mb", "base RSS MB", ",.0f"),
            ("peak_mb", "peak RSS MB", ",.0f"), ("ratio", "(peak - base) / draw bytes", ".2f"),
            ("chunk", "sluice chunk", "d"),
        ),
        legacy=(
            Legacy("memory-none", "2026-11-30-b/memory-none.json"),
            Legacy("memory-kept", "2026-11-30-quiet/memory-stats.json",
                   keep=lambda r: r["line"] == "NumPyro"),
            Legacy("memory-kept", "2026-11-30-shared-vm/memory.json",
                   keep=lambda r: r["line"] in ('sluice, sink="memory"', "NumPyro")),
        ),
    ),
    Area(
        "store",
        jobs=(
            Job("store-overhead", "bench/store.py overhead", parse_store,
                "bench/store.py overhead --dim 1000 --draws 200 --chunk-size 100 --reps 1 "
                "--warmup 50", json=False),
            Job("store-read", "bench/store.py read --reps 31", parse_store,
                "bench/store.py read --dim 100 --draws 200 --reps 3", json=False),
            Job("store-big", "bench/store.py big --chunk-size 100", parse_store,
                "bench/store.py big --dim 1000 --draws 400 --chunk-size 100 --warmup 50",
                json=False),
        ),
        key=_by("run"),
        columns=(
            ("run", "run", ""), ("sampling", "sampling s", ""), ("wall", "wall s", ""),
            ("peak", "peak RSS", ""), ("result", "result", ""),
        ),
        left=("sampling", "result"),
        legacy=(
            Legacy("store-overhead", "2026-11-30-c/store-overhead.txt",
                   "PYTHONPATH=src python bench/store.py overhead", "2026-11-30T15:30:00+00:00"),
            Legacy("store-big", "2026-11-30-c/store-big.txt",
                   "PYTHONPATH=src python bench/store.py big --chunk-size 100",
                   "2026-11-30T15:37:30+00:00"),
        ),
    ),
    Area(
        "vi",
        jobs=(
            Job("vi", "bench/vi_bench.py --reps 5", parse_vi,
                "bench/vi_bench.py --particles 1 10 --steps 100 --reps 1", json=False),
        ),
        key=lambda r: (int(r["k"]),),
        rank=lambda r: (int(r["k"]),),
        columns=(
            ("k", "K", ""), ("runs", "runs", ""), *((v, f"{v} ms", "") for v in VI_VARIANTS),
            *((v, v, "") for v in VI_RATIOS),
        ),
        legacy=(
            Legacy("vi", "2026-11-30-quiet/vi.txt", "PYTHONPATH=src python bench/vi_bench.py "
                   "--reps 5", "2026-11-30T08:20:05+00:00"),
        ),
    ),
    Area(
        "multiprocess",
        jobs=(
            Job("multiprocess", "bench/multiprocess.py --reps 2", parse_multiprocess,
                "bench/multiprocess.py --reps 1 --draws 200 --warmup 50 --points 500 "
                "--features 10", json=False),
        ),
        key=_by("model", "chains", "draws"),
        columns=(
            ("model", "model", ""), ("chains", "chains", "d"), ("draws", "draws/chain", ",d"),
            ("one", "1 process, draws/s", ""), ("two", "2 processes, draws/s", ""),
            ("ratio", "ratio (median)", ""),
        ),
        legacy=(
            Legacy("multiprocess", "2026-11-30-a/multiprocess.txt",
                   "PYTHONPATH=src python bench/multiprocess.py --reps 2",
                   "2026-11-30T09:45:00+00:00"),
        ),
    ),
    Area(
        "numpyro",
        jobs=(
            Job("adapters-numpyro", "bench/adapters_numpyro.py", parse_adapters,
                "bench/adapters_numpyro.py --models eight_schools --reps 1 --warmup 100 "
                "--draws 200", json=False),
        ),
        key=_by("model", "sampler"),
        columns=(
            ("model", "model", ""), ("sampler", "sampler", ""), ("runs", "runs", ""),
            ("total", "total s", ""), ("compile", "compile s", ""), ("draws", "draws s", ""),
            ("ess", "min ESS", ""), ("ess_draws", "ESS/s (draws)", ""),
            ("ess_total", "ESS/s (total)", ""),
            ("ratio", "ESS/s vs numpyro-vec (draws / total)", ""), ("rss", "peak RSS MB", ""),
        ),
        left=("sampler",),
        legacy=(
            Legacy("adapters-numpyro", "2026-11-30-quiet/adapters-numpyro.txt",
                   "PYTHONPATH=src python bench/adapters_numpyro.py",
                   "2026-11-30T08:21:49+00:00"),
        ),
    ),
)
# fmt: on


def area(name: str) -> Area:
    for a in AREAS:
        if a.name == name:
            return a
    raise KeyError(name)


def table(name: str, rows: Sequence[Row]) -> str:
    """The area's table of ``rows``, as its job prints it (``BENCHMARKS.md``'s columns but
    the command, machine, date and raw output)."""
    a = area(name)
    return harness.markdown_table(rows, a.columns, left=a.left)


def emit(name: str, rows: Sequence[Row], json_path: str | None, **more: object) -> None:
    """A job's output: ``rows`` written to ``json_path`` (if given) with the machine and
    ``more``, then printed as the area's table."""
    if json_path:
        data = {"machine": harness.machine_info(), **more, "rows": rows}
        Path(json_path).write_text(json.dumps(data, indent=1))
    print(table(name, rows))
