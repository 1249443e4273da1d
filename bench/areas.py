"""The benchmark areas of ``BENCHMARKS.md``: their commands, how to read their outputs, tables.

An :class:`Area` is one section of ``BENCHMARKS.md`` and one table. It runs
one or more :class:`Job` (a bench script and its arguments, at the settings
the table reports); each job's parser turns one raw output (stdout, stderr
and the JSON file it wrote, if any) into table rows. Every row is a *figure*
with a key (``(model, variant)``, say); the table keeps, for each key, the
row of the newest raw output that holds it.

Raw outputs are found in two places:

* ``bench/results/<YYYY-MM-DD>/<job>.{txt,err,json}`` with
  ``<job>.meta.json`` (command, machine, start and end time), written by
  ``python -m bench``;
* raw outputs saved without a meta file, which carry neither their command
  nor always their time: each area's ``legacy`` entries (:class:`Legacy`)
  list those that hold its current figures, each with the command that
  produced it and when it ran.

This module imports no JAX: the orchestrating process only reads files.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import statistics as _statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import harness

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"

Row = dict[str, Any]

# The machine every raw output of LEGACY ran on (from their JSON records and the
# measurements' notes): label shown in the tables, details in the introduction.
LEGACY_MACHINE = "2-core x86_64, CPU, 23.5 GiB"
LEGACY_MACHINE_DETAILS = (
    "a 2-core x86_64 VM (AMD EPYC), 23.5 GiB of RAM, no GPU; Linux 6.18, Python 3.11.7, "
    "jax/jaxlib 0.10.2, NumPyro 0.22.0, BlackJAX 1.7.1, ArviZ 0.23.4, Zarr 3.1.6; shared with "
    "other work, so a figure from one repetition is indicative and differences of about 15% "
    "between runs are noise"
)


# -- raw outputs ------------------------------------------------------------------------
@dataclasses.dataclass
class Output:
    """One raw output of one job, with where, when and how it was measured."""

    job: str
    text: str  # stdout
    err: str  # stderr
    data: Any  # the JSON file the job wrote (None if it wrote none)
    command: str  # as shown in the tables
    machine: str  # label
    when: str  # ISO 8601 time: orders outputs (newest wins)
    source: str  # the raw output's path, relative to the repository root

    @property
    def date(self) -> str:
        return self.when[:10]


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


def markdown_tables(text: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Every Markdown table in ``text``: ``(the non-empty line before it, rows)``, each row
    ``{header: cell}`` (cells as printed)."""
    lines = text.splitlines()
    tables, i = [], 0
    while i < len(lines):
        line = lines[i].strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and nxt.startswith("|") and set(nxt) <= set("|-: "):
            header = [c.strip() for c in line.strip("|").split("|")]
            before = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
            rows, i = [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                rows.append(dict(zip(header, cells, strict=False)))
                i += 1
            tables.append((before, rows))
        else:
            i += 1
    return tables


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` that is a JSON object."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _chunks(chunk_size: str, draws: str) -> str:
    if chunk_size == "auto":
        return "engine's default"
    return "one chunk" if chunk_size == draws else f"chunks of {chunk_size}"


# -- parsers: one raw output -> rows ------------------------------------------------------
def parse_mcmc(out: Output) -> list[Row]:
    import mcmc

    records = [r for r in out.data["records"] if r["variant"] != mcmc.CHUNKS]
    mcmc.derive(records)
    rows = []
    for key in dict.fromkeys((r["model"], r["variant"]) for r in records):
        mine = [r for r in records if (r["model"], r["variant"]) == key]
        med = {k: harness.median([r[k] for r in mine]) for k in MCMC_KEYS}
        draws = mine[0]["settings"]["chains"] * mine[0]["settings"]["draws"]
        rows.append(
            {"model": key[0], "dim": mine[0]["dim"], "variant": key[1], "reps": len(mine),
             "_draws": draws, **med}
        )  # fmt: skip
    if out.job != "kernels":
        for r in rows:
            r.pop("_draws")
    return rows


def parse_rows(out: Output) -> list[Row]:
    """The table rows a script wrote into its JSON file (``{"rows": [...]}``)."""
    return list(out.data["rows"])


def parse_kernels(out: Output) -> list[Row]:
    """``parse_mcmc``'s rows with ESS per gradient, and for a BlackJAX kernel in sluice's
    engine its time per gradient over that of BlackJAX's own loop (same model)."""
    rows = parse_mcmc(out)
    loops = {r["model"]: r for r in rows if r["variant"] == "blackjax/seq"}
    for r in rows:
        grads = r["grads_per_draw"] * r["_draws"] if r.get("_draws") else None
        r["ess_per_grad"] = r["min_ess_bulk"] / grads if grads else None
        loop = loops.get(r["model"])
        if r["variant"].startswith("sluice+blackjax.nuts") and loop is not None:
            r["engine_cost"] = r["overhead"] / loop["overhead"]
        r.pop("_draws", None)
    return rows


MCMC_KEYS = (
    "wall_s",
    "compile_s",
    "sampling_s",
    "grads_per_draw",
    "overhead",
    "min_ess_bulk",
    "ess_per_s_sampling",
    "ess_per_s_total",
    "peak_rss_mb",
)


def parse_latency(out: Output) -> list[Row]:
    (before, table), *_ = markdown_tables(out.text)
    model = re.match(r"model (\S+),", before).group(1)
    reps = re.search(r"medians of (\d+)", before).group(1)
    return [
        {
            "model": model,
            "variant": r["variant"],
            "reps": reps,
            "sample": r["sample (s)"],
            "summary": r["summary (s)"],
            "total": r["total (s)"],
            "vs_anchor": r["total / best anchor"],
            "ess": r["min ESS bulk"],
        }
        for r in table
    ]


def parse_stats_parts(out: Output) -> list[Row]:
    (before, table), *_ = markdown_tables(out.text)
    head = dict(re.findall(r"(\w+)=(\S+)", before))
    chunks = _chunks(head.get("chunk_size", head["draws"]), head["draws"])
    base = next(r for r in table if r["statistics"] == "none")["us per draw (median)"]
    return [
        {
            "model": f"standard Gaussian, {head['dim']} dims",
            "chains": f"{head['chains']} {head['chain_method']}",
            "chunks": chunks,
            "statistics": r["statistics"],
            "runs": f"median of {head['reps']}",
            "base": base,
            "with": r["us per draw (median)"],
            "added_us": r["added us"],
            "added": r["added %"],
        }
        for r in table
    ]


def parse_stats_overhead(out: Output) -> list[Row]:
    text = out.text
    head = dict(re.findall(r"(\w+)=(\S+)", text.splitlines()[0]))
    base = re.search(r"NUTS draw \(median of (\d+)[^)]*\): ([\d.]+) us wall", text)
    full = re.search(r"NUTS draw \+ statistics: ([\d.]+) us wall", text)
    added = re.search(r"overhead \(end to end, sampling time\): ([+-][\d.]+%) wall", text)
    model = {
        "gaussian": f"standard Gaussian, {head['dim']} dims",
        "logreg": f"logistic regression, {head['dim']} coefficients",
    }[head["model"]]
    options = head["options"]
    return [
        {
            "model": model,
            "chains": f"{head['chains']} {head['chain_method']}",
            "chunks": _chunks(head["draws"], head["draws"]),  # one chunk of all draws
            "statistics": {
                "default": "default (every element)",
                "exact": "exact set (opt-in, 4,096 elements)",
            }.get(options, options),
            "runs": f"median of {base.group(1)}",
            "base": base.group(2),
            "with": full.group(1),
            "added_us": f"{float(full.group(1)) - float(base.group(2)):+.1f}",
            "added": added.group(1),
        }
    ]


def parse_short_runs(out: Output) -> list[Row]:
    (before, table), *_ = markdown_tables(out.text)
    elements = re.search(r"(\d+) elements", before).group(1)
    return [
        {
            "model": f"standard Gaussian, {elements} elements",
            "run": r["chains x draws"],
            "statistic": r["statistic"],
            "max": r["max rel. error"],
            "rms": r["rms rel. error"],
            "off": r["elements > 10%"],
        }
        for r in table
    ]


_ACCURACY_LINE = re.compile(
    r"^\s*(\d+)\s+(\w+)\s*\|\s*([\d.]+%)\s+([\d.]+%)\s*\|\s*([\d.]+%)\s+([\d.]+%)\s*\|\s*(\S+)"
)


def parse_stats_accuracy(out: Output) -> list[Row]:
    seeds: dict[str, int] = {}
    rows = []
    for line in out.text.splitlines():
        m = _ACCURACY_LINE.match(line)
        if not m:
            continue
        n, seed = m.group(1), m.group(2)
        if seed != "all":
            seeds[n] = seeds.get(n, 0) + 1
            continue
        k = seeds.get(n, 0)
        model = f"logistic regression, 10 coefficients, {k} seed{'' if k == 1 else 's'} pooled"
        run = f"4 x {n}"
        for stat, mx, rms in (("ess_bulk", 3, 4), ("ess_tail", 5, 6)):
            rows.append(
                {
                    "model": model,
                    "run": run,
                    "statistic": stat,
                    "max": m.group(mx),
                    "rms": m.group(rms),
                    "off": None,
                }
            )
        rows.append(
            {
                "model": model,
                "run": run,
                "statistic": "r_hat",
                "max": f"{m.group(7)} (absolute)",
                "rms": None,
                "off": None,
            }
        )
    return rows


def parse_stats_scale_accuracy(out: Output) -> list[Row]:
    (before, table), *_ = markdown_tables(out.text)
    head = dict(re.findall(r"(\w+)=(\S+)", out.text.splitlines()[0]))
    model = before.split(":")[0]
    run = f"{head['chains']} x {head['draws']}, {head['seeds']} seed(s)"
    return [
        {"model": model, "run": run, "statistics": r["statistics"], "metric": r["metric"],
         "elements": r["elements"], "rms": r["rms"], "max": r["max"]}
        for r in table
    ]  # fmt: skip


def parse_stats_proxy(out: Output) -> list[Row]:
    (_, table), *_ = markdown_tables(out.text)
    return [{"draws": r["draws"], "score": r["score"], "elements": r["elements"],
             "rms": r["rms"], "max": r["max"], "mean": r["mean"]} for r in table]  # fmt: skip


def parse_stats_scale_cost(out: Output) -> list[Row]:
    (_, table), *_ = markdown_tables(out.text)
    # older outputs name the summary's time after the run otherwise: the same figure
    old = r"^merge \+ finalize \+ table, ([\d,]+)-dim, 4 chains$"
    new = r"merge + finalize + table after the run returns, \1-dim, 4 x 1,000"
    return [{"what": re.sub(old, new, r["what"]), "statistics": r["statistics"],
             "value": r["value"]} for r in table]  # fmt: skip


def parse_stats_large(out: Output) -> list[Row]:
    (_, table), *_ = markdown_tables(out.text)
    head = dict(re.findall(r"(\w+)=(\S+)", out.text.splitlines()[0]))
    what = (f"{int(head['dim']):,}-dim Gaussian, 4 x {head['draws']} draws "
            f"({head['warmup']} warmup), sink=None")  # fmt: skip
    rows = []
    for r in table:
        label = "default (every element)" if r["statistics"] == "default" else "none"
        # (older outputs ran each configuration once, with the compiles: run 1)
        when = ("first run in the process" if r.get("run", "1") == "1"
                else "a later run, every program compiled")  # fmt: skip
        rows.append({"what": f"{what}: sampling, ns per element and draw ({r['chain method']} "
                             f"chains, chunks of {r['chunk']}; {when})",
                     "statistics": label, "value": r["ns per element-draw"]})  # fmt: skip
        rows.append({"what": f"{what}: warmup seconds ({when})", "statistics": label,
                     "value": r["warmup s"]})  # fmt: skip
    return rows


def parse_million(out: Output) -> list[Row]:
    d = out.data
    what = (f"{d['dim']:,}-dim Gaussian, {d['chains']} x {d['draws']:,} draws "
            f"({d['warmup']} warmup), sink=None")  # fmt: skip
    rows = [
        ("wall time of sample()", f"{d['sample_seconds']:.0f} s (compile "
         f"{d['compile_seconds']:.0f}, warmup {d['warmup_seconds']:.0f}, sampling "
         f"{d['sampling_seconds']:.0f})"),
        ("summary table after the run", f"{d['summary_seconds']:.1f} s"),
        ("peak RSS", f"{d['peak_rss_gb']:.1f} GB"
         + (f" ({d['peak_rss_sampling_gb']:.1f} GB until sample() returns)"
            if "peak_rss_sampling_gb" in d else "")),
        ("statistics state per element and chain", f"{d['state_bytes_per_element_chain']:.0f} B"),
        ("rows with a NaN", f"{d['rows_with_nan']:,} of {d['rows']:,}"),
        ("worst R-hat, lowest bulk / tail ESS", f"{d['max_r_hat']:.4f}, "
         f"{d['min_ess_bulk']:.0f} / {d['min_ess_tail']:.0f}"),
    ]  # fmt: skip
    return [{"what": f"{what}: {k}", "statistics": "default (every element)", "value": v}
            for k, v in rows]  # fmt: skip


MEMORY_LINES = {
    "sluice": 'sluice, sink="memory"',
    "sluice-none": "sluice, sink=None",
    "numpyro": "NumPyro",
    "blackjax": "BlackJAX",
}


def parse_memory(out: Output) -> list[Row]:
    mb = 2**20
    s = out.data["settings"]
    return [
        {
            "line": MEMORY_LINES.get(r["line"], r["line"]),
            "dim": s["dim"],
            "draws": r["draws"],
            "draw_mb": r["draw_bytes"] / mb,
            "base_mb": r["base_rss_bytes"] / mb,
            "peak_mb": r["peak_rss_bytes"] / mb,
            "ratio": r["excess_over_draws"],
            "chunk": r["chunk_size"] if r["line"].startswith("sluice") else None,
        }
        for r in out.data["records"]
    ]


def parse_store(out: Output) -> list[Row]:
    rows = []
    for r in json_lines(out.text):
        gb = r["draw_bytes"] / 1e9
        if r.get("benchmark") == "store-overhead":
            memory = _statistics.median(r["memory_sampling_s"])
            zarr = _statistics.median(r["zarr_sampling_s"])
            rows.append(
                {
                    "run": f"`ZarrSink` vs memory sink, {r['dim']:,} dims, {r['chains']} x "
                    f"{r['draws']:,} draws ({gb:.2f} GB), chunks of {r['chunk_size']}",
                    "sampling": f"memory {memory:.2f}, Zarr {zarr:.2f} (medians of "
                    f"{len(r['zarr_sampling_s'])})",
                    "wall": None,
                    "peak": None,
                    "result": f"Zarr / memory {r['median_ratio_zarr_over_memory']:.2f} (median); "
                    f"{r['zarr_write_MB_per_s']:.0f} MB/s of draws",
                }
            )
        elif r.get("benchmark") == "store-big":
            rows.append(
                {
                    "run": f"`ZarrSink`, {r['dim']:,} dims, {r['chains']} x {r['draws']:,} draws "
                    f"({gb:.1f} GB), chunks of {r['chunk_size']}",
                    "sampling": f"{r['sampling_s']:.0f}",
                    "wall": f"{r['wall_s']:.0f}",
                    "peak": f"{r['peak_rss_bytes'] / 1e9:.2f} GB",
                    "result": f"{r['store_bytes'] / 1e9:.2f} GB on disk; "
                    f"RAM {r['ram_bytes'] / 1e9:.1f} GB",
                }
            )
    return rows


VI_VARIANTS = ("sluice", "sluice-seq", "numpyro-vec", "numpyro-seq", "notebook", "jax-fused")
VI_RATIOS = ("numpyro-vec/sluice", "numpyro-seq/sluice", "sluice/jax-fused")


def parse_vi(out: Output) -> list[Row]:
    tables = markdown_tables(out.text)
    times = next(t for before, t in tables if before.startswith("median: ms per step"))
    ratios = next(t for before, t in tables if before.startswith("median: ratios"))
    steps = re.search(r"steps (\d+), reps (\d+)", out.text)
    rows = []
    for t, r in zip(times, ratios, strict=True):
        row = {"k": t["K"], "runs": f"median of {steps.group(2)} x {steps.group(1)} steps"}
        row.update({v: t[v] for v in VI_VARIANTS})
        row.update({v: r[v] for v in VI_RATIOS})
        rows.append(row)
    return rows


def parse_multiprocess(out: Output) -> list[Row]:
    rows = []
    for r in json_lines(out.text):
        if r.get("benchmark") != "multiprocess-throughput":
            continue
        rows.append(
            {
                "model": r["model"],
                "chains": r["chains"],
                "draws": r["draws"],
                "one": ", ".join(f"{v:,.0f}" for v in r["draws_per_s_1_process"]),
                "two": ", ".join(f"{v:,.0f}" for v in r["draws_per_s_2_processes"]),
                "ratio": f"{r['median_ratio']:.2f}",
            }
        )
    return rows


def parse_adapters(out: Output) -> list[Row]:
    (before, table), *_ = markdown_tables(out.text)
    best = re.search(r"best of (\d+)", before)
    return [
        {
            "model": r["model"],
            "sampler": r["sampler"],
            "runs": f"best of {best.group(1)}",
            "total": r["total s"],
            "compile": r["compile s"],
            "draws": r["draws s"],
            "ess": r["min ESS"],
            "ess_draws": r["ESS/s (draws)"],
            "ess_total": r["ESS/s (total)"],
            "ratio": r["ESS/s ratio vs numpyro-vec (draws / total)"],
            "rss": r["peak RSS MB"],
        }
        for r in table
    ]


# -- jobs and areas -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Job:
    """One bench script at the settings its table reports."""

    name: str  # file stem of its raw outputs
    args: tuple[str, ...]  # script (relative to the repository root) and arguments
    parse: Callable[[Output], list[Row]]
    quick: tuple[str, ...]  # the same script at smoke-test settings (seconds to a minute)
    json: bool = False  # the script takes --json PATH
    explicit: bool = False  # run only when named (``python -m bench AREA/JOB``): too long for all

    def argv(self, quick: bool, json_path: str | None) -> list[str]:
        argv = list(self.quick if quick else self.args)
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
    name: str
    title: str
    jobs: tuple[Job, ...]
    key: Callable[[Row], tuple]  # what identifies a figure across raw outputs
    rank: Callable[[Row], tuple]  # row order in the table
    columns: tuple[tuple[str, str, str], ...]  # (key, header, format spec)
    reading: str
    legacy: tuple[Legacy, ...] = ()
    left: tuple[str, ...] = ()  # left-aligned columns besides the first

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)


def _order(values: Sequence[str]) -> Callable[[str], int]:
    return lambda v: values.index(v) if v in values else len(values)


MCMC_MODELS = _order(("logreg_small", "logreg_large", "gaussian"))
MCMC_VARIANTS = _order(
    ("sluice/seq", "sluice/vec", "numpyro/seq", "numpyro/vec", "blackjax/seq", "blackjax/vec")
)
KERNEL_VARIANTS = (
    "sluice/seq,sluice+blackjax.nuts/seq,sluice+blackjax.adjusted_mclmc/seq,blackjax/seq"
)
KERNEL_ORDER = _order(KERNEL_VARIANTS.split(","))
LATENCY_VARIANTS = _order(
    (
        "sluice/seq",
        "sluice/vec",
        "sluice-nostats/seq",
        "sluice-nostats/vec",
        "numpyro/seq",
        "numpyro/vec",
        "blackjax/seq",
        "blackjax/vec",
    )
)

TAIL = (
    ("command", "command", ""),
    ("machine", "machine", ""),
    ("date", "date", ""),
    ("source", "raw output", ""),
)
TAIL_LEFT = ("command", "machine", "date", "source")


def _index(row: Row) -> tuple:
    return (row["_job"], row["_index"])


def _overhead_job(model: str, statistic: str) -> Job:
    """``bench/stats_overhead.py`` on ``model`` with the ``statistic`` set."""
    suffix = "" if statistic == "default" else f"-{statistic}"
    options = ("--model", model, "--statistic", statistic)
    return Job(
        f"stats-overhead-{model}{suffix}",
        ("bench/stats_overhead.py", "--dim", "1000", "--reps", "9", *options),
        parse_stats_overhead,
        ("bench/stats_overhead.py", "--dim", "100", "--draws", "200", "--reps", "1",
         "--micro-draws", "200", *options),
    )  # fmt: skip


GYM_SMALL = (
    "eight_schools,brownian,brownian_scales,lorenz,lorenz_scales,irt,lgcp,sv_small,"
    "sv_log_small,ill_gaussian,banana,funnel"
)
GYM_TARGETS = _order((*GYM_SMALL.split(","), "sv", "sv_log"))
GYM_LIBRARIES = _order(("sluice", "blackjax", "numpyro"))
GYM_READING = (
    "Every target of Google's Inference Gym whose data ships with the package "
    "(`pip install tfp-nightly inference-gym`), as an unconstrained log density through its "
    "`default_event_space_bijector`, sampled by sluice at its defaults, BlackJAX "
    "(`window_adaptation` + `nuts`, the chains under `lax.map`) and NumPyro (`NUTS`, "
    "sequential chains): 4 chains x (1,000 warmup + 1,000 draws), float32, seeds 0, 1, 2, "
    "one fresh process per run; each row the medians over the seeds "
    "(`bench/inference_gym.py`'s docstring has the details). *max abs z*: the largest "
    "|z| over every element's mean and sd against the Gym's ground truth, in units of the "
    "run's Monte Carlo error (and the truth's); a seed *passes* when every |z| is under "
    "*bound* (Bonferroni, 1% family-wise) and the smallest bulk ESS is at least 100. "
    "*wall*: the library's calls, compilation included; *ESS/s / best other*: this "
    "library's ESS/s over the best of the other two. *grads to b2max<0.01*: sampling "
    "gradients per chain until the largest squared bias of a second moment in units of "
    "its variance stays under 0.01 (the MAMS and LAPS papers' measure). The Brownian "
    "motion targets are checked against their exact posteriors instead of the shipped "
    "truth (`EXACT` in the script): the unknown-scales twin's shipped truth is off by up "
    "to 18 of its standard errors (observation noise scale 0.101 against the exact 0.113). "
    "Where sluice's ESS/s is below the best other's: on the Brownian motions (0.89, 0.83) "
    "its ESS per gradient is higher or within 8% and its wall 0.6-0.9 s longer, compile and "
    "start-up of a 6-8 s run; on lgcp (0.64) `mass_matrix=\"auto\"` takes the low-rank "
    "metric, whose trajectories are shorter (29,000-60,000 sampling gradients against "
    "53,000-59,000) and whose worst bulk ESS is lower (2,707 against BlackJAX's 4,221), "
    "8% fewer effective draws per gradient; on sv_small (0.46) its ESS per gradient is half "
    "BlackJAX's (2.4 against 5.2 per 1,000), not yet explained; no library passes the "
    "funnel or the banana. The wall times of lorenz and irt were measured while other jobs "
    "shared the machine."
)


AREAS: tuple[Area, ...] = (
    Area(
        name="mcmc",
        title="MCMC: NUTS against NumPyro and BlackJAX",
        jobs=(
            Job(
                "mcmc-a",
                ("bench/mcmc.py", "--models", "logreg_small", "--reps", "3", "--no-chunks"),
                parse_mcmc,
                ("bench/mcmc.py", "--quick", "--models", "logreg_small", "--no-chunks"),
                json=True,
            ),
            Job(
                "mcmc-bc",
                (
                    "bench/mcmc.py",
                    "--models",
                    "logreg_large,gaussian",
                    "--reps",
                    "1",
                    "--no-chunks",
                ),
                parse_mcmc,
                (
                    "bench/mcmc.py",
                    "--quick",
                    "--models",
                    "logreg_large",
                    "--no-chunks",
                    "--variants",
                    "sluice/seq",
                ),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["variant"]),
        rank=lambda r: (MCMC_MODELS(r["model"]), MCMC_VARIANTS(r["variant"])),
        columns=(
            ("model", "model", ""),
            ("dim", "dim", ",d"),
            ("variant", "variant", ""),
            ("reps", "reps", "d"),
            ("wall_s", "wall s", ".2f"),
            ("compile_s", "compile s", ".2f"),
            ("sampling_s", "sampling s", ".2f"),
            ("grads_per_draw", "grads/draw", ".1f"),
            ("overhead", "overhead", ".2f"),
            ("min_ess_bulk", "min ESS_bulk", ".0f"),
            ("ess_per_s_sampling", "ESS/s sampling", ".3g"),
            ("ess_per_s_total", "ESS/s total", ".3g"),
            ("peak_rss_mb", "peak RSS MB", ".0f"),
        ),
        left=("variant",),
        reading=(
            "NUTS with a diagonal mass matrix and Stan-style windowed adaptation (target "
            "acceptance 0.8, maximum tree depth 10), 4 chains, 1,000 warmup iterations and "
            "1,000 draws per chain, every chain starting at zero, float32, the same "
            "log-density for the three libraries. `logreg_small` is the JAX notebook's "
            "logistic regression (100 points x 10 features), `logreg_large` a synthetic one "
            "(10,000 x 100), `gaussian` a 10,000-dimensional Gaussian with scales from 0.1 "
            "to 10. `seq` runs the chains one after another, `vec` in lock step under "
            "`vmap`. Each measurement is a fresh process; values are medians over the row's "
            "repetitions. *wall* is the whole library call; *compile* the part of it JAX "
            "spent tracing, lowering and compiling; *sampling* the sampling phase without "
            "compilation. *overhead* is sampling time / (sampling gradients x the cost of one "
            "gradient inside a compiled loop): 1.0 is a sampler that costs nothing but its "
            "gradients. *min ESS_bulk* is ArviZ's bulk ESS, the smallest over the "
            "parameters, per second of sampling and per second of wall time; *peak RSS* the "
            "process's high-water mark with the draws in hand. sluice runs with its "
            "defaults, except that its `gaussian` runs computed the default streaming "
            "statistics (`default_stats=True`), which the memory sink does not by default. "
            "With one repetition, ESS differs by about 15% from run to run."
        ),
        legacy=(
            Legacy("mcmc-a", "2026-11-30-d/mcmc-a-final.json"),
            Legacy("mcmc-bc", "2026-11-30-a/mcmc.json"),
            Legacy("mcmc-bc", "2026-11-30-quiet/mcmc.json"),
        ),
    ),
    Area(
        name="kernels",
        title="Other libraries' kernels in the chunk engine",
        jobs=(
            Job(
                "kernels",
                ("bench/mcmc.py", "--models", "logreg_large,gaussian", "--reps", "1",
                 "--no-chunks", "--variants", KERNEL_VARIANTS),
                parse_kernels,
                ("bench/mcmc.py", "--quick", "--models", "logreg_large", "--no-chunks",
                 "--variants", KERNEL_VARIANTS),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["variant"]),
        rank=lambda r: (MCMC_MODELS(r["model"]), KERNEL_ORDER(r["variant"])),
        columns=(
            ("model", "model", ""),
            ("dim", "dim", ",d"),
            ("variant", "variant", ""),
            ("wall_s", "wall s", ".2f"),
            ("compile_s", "compile s", ".2f"),
            ("sampling_s", "sampling s", ".2f"),
            ("grads_per_draw", "grads/draw", ".1f"),
            ("overhead", "overhead", ".2f"),
            ("engine_cost", "time/grad vs BlackJAX loop", ".3f"),
            ("min_ess_bulk", "min ESS_bulk", ".0f"),
            ("ess_per_grad", "ESS/grad", ".3f"),
            ("ess_per_s_sampling", "ESS/s sampling", ".3g"),
            ("ess_per_s_total", "ESS/s total", ".3g"),
        ),
        left=("variant",),
        reading=(
            "The MCMC table's settings (4 chains, 1,000 warmup iterations and 1,000 draws, "
            "chains one after another, float32, a fresh process per row) for BlackJAX's "
            "kernels run by sluice's engine (`sluice.kernels.from_blackjax`) beside sluice's "
            "NUTS and BlackJAX's own loop (`window_adaptation`, then a `lax.scan` of "
            "`blackjax.nuts` steps). `sluice+blackjax.nuts` is `blackjax.nuts` with sluice's "
            "window warmup; `sluice+blackjax.adjusted_mclmc` is "
            "`blackjax.adjusted_mclmc_dynamic` with 1 to 7 integration steps (uniform) per "
            "transition and sluice's window warmup at target acceptance 0.9 (BlackJAX's own "
            "tuner of its trajectory length runs a whole warmup as one scan). *time/grad vs "
            "BlackJAX loop* is the row's *overhead* over `blackjax/seq`'s on the same model: "
            "what the chunk engine around BlackJAX's NUTS costs per gradient. *ESS/grad* is "
            "the min bulk ESS per sampling gradient. One repetition: ESS differs by about 15% "
            "from run to run."
        ),
    ),
    Area(
        name="engine-cost",
        title="The chunk engine around BlackJAX's NUTS: time per gradient",
        jobs=(
            Job(
                "engine-cost",
                ("bench/engine_cost.py",),
                parse_rows,
                ("bench/engine_cost.py", "--models", "logreg_large", "--draws", "100",
                 "--reps", "1"),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["variant"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("dim", "dim", ",d"),
            ("variant", "variant", ""),
            ("reps", "reps", "d"),
            ("us_per_grad", "µs/gradient", ".1f"),
            ("ratio", "vs BlackJAX loop", ".3f"),
            ("ratio_args", "vs BlackJAX loop, data as arguments", ".3f"),
        ),
        left=("variant",),
        reading=(
            "`blackjax.nuts` with one fixed step size and inverse mass matrix (from a short "
            "sluice warmup), one chain from the same point, 500 transitions: BlackJAX's own "
            "loop (`lax.scan` of `nuts.step`, positions stacked) against the same kernel in "
            "sluice's engine (`from_blackjax(blackjax.nuts, warmup=None, ...)`, draws kept in "
            "memory) in one chunk and in ten. BlackJAX's loop runs twice: with the model's "
            "arrays closed over (compiled in as constants, as its users write it) and with "
            "them as the program's arguments (as sluice passes a model's data, so that new "
            "data of the same shapes reuses the program): the like-for-like measure of the "
            "engine. Keys differ, so trajectories differ: the figure is sampling time per "
            "gradient, the median of the repetitions taken in turn in one process after "
            "compiling, and its ratios to both loops. Medians of 11 still move by about 5% "
            "from run to run on this machine."
        ),
    ),
    Area(
        name="mclmc-tuner",
        title="MCLMC's tuner in the chunk engine against BlackJAX's",
        jobs=(
            Job(
                "mclmc-tuner",
                ("bench/mclmc_tuner.py",),
                parse_rows,
                ("bench/mclmc_tuner.py", "--models", "logreg_large"),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["tuner"], r.get("seed", 0)),
        rank=lambda r: (MCMC_MODELS(r["model"]), r.get("seed", 0), r["tuner"] != "sluice"),
        columns=(
            ("model", "model", ""),
            ("dim", "dim", ",d"),
            ("seed", "seed", "d"),
            ("tuner", "tuner", ""),
            ("L", "L", ".3g"),
            ("step_size", "step size", ".3g"),
            ("min_ess_bulk", "min ESS_bulk", ".0f"),
            ("ess_per_grad", "ESS/grad", ".4f"),
            ("wall_s", "wall s", ".1f"),
        ),
        left=("tuner",),
        reading=(
            "Unadjusted MCLMC (`blackjax.mclmc`, two gradients per step), 4 chains one after "
            "another from the model's initial point, 1,000 tuning steps and 1,000 draws per "
            "chain, float32. `sluice`: `sluice.kernels.from_blackjax(blackjax.mclmc)`, the "
            "tuner's three stages one warmup iteration at a time in the chunk engine; "
            "`blackjax`: `mclmc_find_L_and_step_size` (diagonal preconditioning, its default "
            "fractions of `num_steps=3000`: the same 1,000 tuning steps), then a `lax.scan` "
            "of 1,000 steps. *L* and *step size* are medians over the chains; *min ESS_bulk* "
            "is ArviZ's over the parameters, the chains pooled; *ESS/grad* per sampling "
            "gradient. Wall times include compilation and, for BlackJAX, one compile per "
            "chain's tuning; the seeds' ESS moves by about 15%."
        ),
    ),
    Area(
        name="many-chains",
        title="Many short chains: ChEES across chains against NUTS per chain",
        jobs=(
            Job(
                "many-chains",
                ("bench/many_chains.py",),
                parse_rows,
                ("bench/many_chains.py", "--chains", "64", "--warmup", "100", "--draws", "20"),
                json=True,
            ),
        ),
        key=lambda r: (r["chains"], r["variant"]),
        rank=_index,
        columns=tuple(
            (k, h, f)
            for k, h, f in (
                ("variant", "variant", ""), ("chains", "chains", "d"), ("wall_s", "wall s", ".1f"),
                ("compile_s", "compile s", ".1f"), ("warmup_s", "warmup s", ".1f"),
                ("sampling_s", "sampling s", ".2f"), ("grads_per_draw", "grads/draw", ".1f"),
                ("min_ess_bulk", "min ESS_bulk", ".0f"), ("ess_per_grad", "ESS/grad", ".4f"),
                ("ess_per_s_sampling", "ESS/s sampling", ".3g"),
                ("ess_per_s_total", "ESS/s total", ".3g"), ("max_r_hat", "max R-hat", ".3f"),
                ("max_nested_r_hat", "max nested R-hat", ".3f"),
            )
        ),
        left=("variant",),
        reading=(
            "1,024 chains of a 100-dimensional Gaussian with scales log-spaced over [0.1, 10], "
            "vectorized, each chain from its own standard-normal point, 500 warmup iterations "
            "and 100 draws, float32, a fresh process per row. `nuts`: sluice's NUTS, each chain "
            "with its own window adaptation; `chees`: `blackjax.dynamic_hmc` through sluice "
            "with the ChEES warmup (`sluice.kernels.from_blackjax(blackjax.dynamic_hmc, "
            "warmup='chees')`), one step size, trajectory length and diagonal metric for all "
            "chains. *min ESS_bulk* is ArviZ's over the parameters, pooled over the chains; "
            "*ESS/grad* per sampling gradient; *max R-hat* and *max nested R-hat* (single "
            "chains as superchains) from sluice's streamed summary; *wall* includes the "
            "summary."
        ),
    ),
    Area(
        name="pymc-models",
        title="PyMC models: sluice against PyMC's NumPyro path and nutpie",
        jobs=(
            Job(
                "pymc-models",
                ("bench/pymc_models.py", "--reps", "3"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools"),
                json=True,
            ),
            Job(  # the low-rank metric where the others led, beside them
                "pymc-models-low-rank",
                ("bench/pymc_models.py", "--models", "logistic,radon,eight_schools",
                 "--samplers", "sluice-low-rank,numpyro,nutpie", "--reps", "2"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools", "--samplers",
                 "sluice-low-rank"),
                json=True,
            ),
            Job(  # the low-rank metric on the two models it had not run, beside nutpie
                "pymc-models-low-rank-sv-gp",
                ("bench/pymc_models.py", "--models", "stochastic_volatility,gp",
                 "--samplers", "sluice,sluice-low-rank,nutpie", "--reps", "2"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools", "--samplers",
                 "sluice-low-rank,nutpie"),
                json=True,
            ),
            Job(  # small models: sequential chains compile faster than vectorized ones
                "pymc-models-sequential",
                ("bench/pymc_models.py", "--models", "eight_schools,radon",
                 "--samplers", "sluice,sluice-sequential,numpyro,nutpie", "--reps", "2"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools", "--samplers",
                 "sluice-sequential"),
                json=True,
            ),
            Job(  # the two compile-bound models, five fresh processes a sampler
                "pymc-models-small",
                ("bench/pymc_models.py", "--models", "eight_schools,radon",
                 "--samplers", "sluice,sluice-diag,numpyro,nutpie", "--reps", "5"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools", "--samplers", "sluice"),
                json=True,
            ),
            Job(  # mass_matrix="auto" (low rank on all five) beside the diagonal and the others
                "pymc-models-auto",
                ("bench/pymc_models.py", "--samplers", "sluice,sluice-diag,numpyro,nutpie",
                 "--reps", "2"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools", "--samplers",
                 "sluice,sluice-diag"),
                json=True,
            ),
            Job(  # the GP alone, without PyMC's NumPyro path (two minutes a run)
                "pymc-models-gp",
                ("bench/pymc_models.py", "--models", "gp", "--samplers",
                 "sluice,sluice-one-device,nutpie", "--reps", "2"),
                parse_rows,
                ("bench/pymc_models.py", "--models", "eight_schools", "--samplers", "sluice"),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["sampler"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("sampler", "sampler", ""),
            ("runs", "runs", "d"),
            ("wall_s", "wall s", ".1f"),
            ("sampling_s", "sampling s", ".2f"),
            ("min_ess_bulk", "min ESS bulk", ".0f"),
            ("ess_per_s_wall", "ESS/s wall", ".1f"),
            ("ess_per_s_sampling", "ESS/s sampling", ".0f"),
            ("ratio", "ESS/s wall / best other", ".2f"),
            ("divergent", "divergent", ".0f"),
        ),
        left=("sampler",),
        reading=(
            "Five PyMC models (logistic regression 2,000 x 200, radon-like varying intercepts, "
            "stochastic volatility over 500 days, non-centred eight schools, a marginal "
            "Gaussian process of 100 points), 4 chains x (1,000 tuning + 1,000 draws), each "
            "library's defaults, each row the median of *runs* fresh processes: "
            "`sluice` is `sluice.pymc.sample` as a user gets it (one JAX CPU device per core; "
            "`mass_matrix='auto'`, which is nutpie's low-rank plus diagonal metric on four "
            "models and the diagonal on eight schools, a run too short to repay the low-rank "
            "metric's compile), `sluice-diag` the same with `mass_matrix='diag'`, `sluice-one-device` "
            "the diagonal metric on JAX's single CPU device (`SLUICE_CPU_DEVICES=1`), "
            "`sluice-low-rank` an explicit `mass_matrix='low_rank'` (older runs, when the "
            "default was the diagonal), `numpyro` is `pm.sample(nuts_sampler='numpyro')`, "
            "`nutpie` is `nutpie.compile_pymc_model` + `nutpie.sample`. *wall* runs from "
            "building the model to the InferenceData (imports excluded), *sampling* is the "
            "sampling time each library reports; *min ESS bulk* is ArviZ's over every scalar "
            "of the free variables; the ratio divides ESS/s over wall by the best of "
            "`numpyro` and `nutpie` in the same run (to the one that ran, where only one "
            "did). Rows of different dates "
            "come from different runs: this machine's speed varies by 10-30% between runs "
            "(PyMC's NumPyro path on the GP: 126 s one day, 185 s another)."
        ),
    ),
    Area(
        name="chunk-trace",
        title="Trace and compile time of the chunk program: vectorized and sequential chains",
        jobs=(
            Job(
                "chunk-trace",
                ("bench/chunk_trace.py", "--models", "eight_schools,radon,demo", "--reps", "3"),
                parse_rows,
                ("bench/chunk_trace.py", "--reps", "1"),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["chain_method"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("chain_method", "chain method", ""),
            ("runs", "runs", "d"),
            ("chose", "chose", ""),
            ("trace_s", "chunk trace s", ".2f"),
            ("compile_s", "chunk compile s", ".2f"),
            ("sampling_s", "sampling s", ".2f"),
            ("wall_s", "wall s", ".2f"),
        ),
        left=("chain_method", "chose"),
        reading=(
            "`sluice.sample(sluice.from_pymc(model), chain_method=...)` on two PyMC models and "
            "`sluice.sample` on the demo's 10-coefficient logistic regression, 4 "
            "chains x (1,000 warmup + 1,000 draws) on the machine's CPU devices, every program "
            "compiled in the foreground, fresh processes, the variants alternated, medians. "
            "*chunk trace* is JAX's longest trace of the run and *chunk compile* XLA's longest "
            "compile, both the chunk program's; *wall* is the `sample` call. A vectorized "
            "NUTS takes longer to trace: JAX batches each loop by re-tracing its body until "
            "the batched parts of its carry settle. `sequential/default-emitters` compiles the "
            "sequential program with XLA's default emitters (`SLUICE_SMALL_RUN_BYTES=0`). "
            "`auto` is the default; *chose* is the "
            "chain method it chose and the XLA:CPU emitters of the chunk program: a run whose "
            "expected gradient traffic is at most 8 GiB is compile-bound and takes sequential "
            "chains and the classic emitters."
        ),
    ),
    Area(
        name="terminal-buffer",
        title="Window adaptation: the terminal buffer, Stan's 50 iterations or 15% of warmup",
        jobs=(
            Job(
                "terminal-buffer",
                ("bench/terminal_buffer.py", "--seeds", "4"),
                parse_rows,
                ("bench/terminal_buffer.py", "--models", "eight_schools", "--seeds", "1"),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["buffer"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("buffer", "terminal buffer", ""),
            ("seeds", "seeds", "d"),
            ("min_ess_bulk", "min ESS bulk", ".0f"),
            ("grads_per_draw", "gradients per draw", ".1f"),
            ("ess_per_1000_grads", "ESS per 1,000 gradients", ".3g"),
            ("vs_first", "vs 50", ".2f"),
        ),
        left=("buffer",),
        reading=(
            "`sluice.pymc.sample` (4 chains x 1,000 tuning + 1,000 draws, NUTS, "
            "`mass_matrix='auto'`) on four PyMC models of `bench/pymc_models.py`, the window "
            "schedule's terminal buffer (the final iterations that adapt the step size alone) "
            "set to 50 (Stan's) or to 15% of warmup (at least 50; sluice's default); medians "
            "over four seeds of the smallest bulk ESS over every scalar of the free variables "
            "(ArviZ), of the gradients per draw and of their ratio. Gradients per draw and "
            "ESS do not depend on the machine's speed."
        ),
    ),
    Area(
        name="compile-init",
        title="Compile time of a short run: the initialisation compiled for a quick compile",
        jobs=(
            Job(
                "compile-init",
                ("bench/compile_init.py", "--reps", "4"),
                parse_rows,
                ("bench/compile_init.py", "--models", "eight_schools", "--reps", "1"),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["variant"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("variant", "variant", ""),
            ("runs", "runs", "d"),
            ("init_compile_s", "init compile s", ".2f"),
            ("chunk_compile_s", "chunk compile s", ".2f"),
            ("sampling_s", "sampling s", ".2f"),
            ("wall_s", "wall s", ".2f"),
            ("wall_vs_xla_defaults", "wall / xla-defaults", ".2f"),
        ),
        left=("variant",),
        reading=(
            "`sluice.pymc.sample` on three models of the PyMC table, 4 chains x (1,000 tuning "
            "+ 1,000 draws), fresh processes, the variants alternated, medians. `fast` is "
            "sluice as shipped: the programs that run once (the init program, the PyMC "
            "adapter's jittered start) compile with XLA's quick CPU options; `xla-defaults` "
            "compiles them with XLA's defaults (`SLUICE_FAST_COMPILE_BYTES=0`). *init compile* "
            "is XLA's compile time in the main thread, *chunk compile* the chunk program's, "
            "compiled meanwhile in a background thread; *wall* is the `sample` call."
        ),
    ),
    Area(
        name="mass-matrix",
        title="Mass matrices on synthetic posteriors: the low-rank metric and its cutoff",
        jobs=(
            Job(
                "mass-matrix",
                ("bench/mass_matrix.py", "--cutoffs", "2,10,100"),
                parse_rows,
                ("bench/mass_matrix.py", "--posteriors", "correlated",
                 "--mass-matrix", "diag,low_rank"),
                json=True,
            ),
        ),
        key=lambda r: (r["posterior"], r["mass_matrix"], r.get("cutoff")),
        rank=_index,
        columns=(
            ("posterior", "posterior", ""),
            ("mass_matrix", "mass matrix", ""),
            ("cutoff", "cutoff", "g"),
            ("dim", "dim", "d"),
            ("min_ess_bulk", "min ESS bulk", ".0f"),
            ("grads_per_ess", "grads / min ESS", ".1f"),
            ("grads_per_ess_sampling", "sampling grads / min ESS", ".1f"),
            ("directions_kept", "directions kept", ".1f"),
            ("wall_s", "wall s", ".1f"),
        ),
        left=("mass_matrix",),
        reading=(
            "`sluice.nuts(mass_matrix=...)` on three float32 posteriors, 4 chains x (1,000 "
            "warmup + 1,000 draws), seed 1, a fresh process per row: a 20-dim Gaussian with "
            "three directions 400, 100 and 0.01 times the rest (`correlated`), a 200-dim "
            "Gaussian with independent scales (`independent`, where the diagonal is exact), a "
            "logistic regression of 500 rows x 50 predictors sharing five factors "
            "(`collinear_logistic`). *grads / min ESS*: every gradient of the run, warmup "
            "included, per effective draw of the worst coordinate (ArviZ's bulk ESS); "
            "*directions kept*: the low-rank metric's eigenvalues beyond the cutoff, mean "
            "over chains (at most `max_rank` = 16). The cutoff 2 is sluice's default, 100 "
            "nutpie's."
        ),
    ),
    Area(
        name="posteriordb",
        title="posteriordb: diagonal and low-rank mass matrices",
        jobs=(
            Job(  # the posteriordb checkout comes from $POSTERIORDB
                "posteriordb",
                ("bench/posteriordb.py", "--seeds", "3"),
                parse_rows,
                ("bench/posteriordb.py", "--quick"),
                json=True,
            ),
        ),
        key=lambda r: (r["posterior"], r["mass_matrix"]),
        rank=_index,
        columns=(
            ("posterior", "posterior", ""),
            ("mass_matrix", "mass matrix", ""),
            ("dim", "dim", "d"),
            ("runs", "seeds", "d"),
            ("gradients", "gradients", ".0f"),
            ("min_ess_bulk", "min ESS bulk", ".0f"),
            ("grads_per_ess", "grads / min ESS", ".1f"),
            ("grads_per_ess_sampling", "sampling grads / min ESS", ".1f"),
            ("ratio", "diag / low_rank", ".2f"),
            ("max_rhat", "max R-hat", ".3f"),
            ("divergent", "divergent", ".0f"),
            ("wall_s", "wall s", ".1f"),
            ("max_abs_z", "max abs z", ".2f"),
            ("check", "check", ""),
        ),
        left=("mass_matrix", "check"),
        reading=(
            "Thirteen posteriors of [posteriordb](https://github.com/stan-dev/posteriordb) "
            "with reference draws, their Stan models translated by hand into sluice models "
            "(`bench/posteriordb_models.py`, float64, Stan's unconstraining transforms and "
            "priors): correlated regressions where a low-rank metric should matter "
            "(`kilpisjarvi`, whose predictor is the year; `diamonds`, 24 correlated "
            "predictors; the interaction regressions) and posteriors where it should not "
            "(eight schools, time series, a Gaussian process, a mixture). "
            "`sluice.nuts(mass_matrix='diag')` (`diag`) and `sluice.nuts(mass_matrix='low_rank')` (`low_rank`), 4 chains x "
            "(1,000 warmup + 1,000 draws), seeds 0, 1, 2, each row the medians over the seeds. "
            "*grads / min ESS* is the metric: every log-density gradient of the run, warmup "
            "included, per effective draw of the worst scalar (ArviZ's bulk ESS, the smallest "
            "over every scalar the reference holds); the *sampling* one counts the draws' "
            "gradients only. *diag / low_rank* (on the `low_rank` row) divides the `diag` "
            "row's grads / min ESS by the `low_rank` row's: above 1, the low-rank metric needs "
            "fewer gradients per effective draw. The check compares every scalar's mean with "
            "posteriordb's reference draws, z = (mean - mean_ref) / sqrt(mcse^2 + "
            "sd_ref^2 / ess_ref); *max abs z* is the largest over the posterior's scalars and "
            "seeds, `ok` when below 4.5 for every seed (about five sigma for tens of scalars). "
            "*wall* is `sluice.sample`'s call, compilation included. The job needs "
            "`POSTERIORDB` set to a checkout of posteriordb "
            "(`git clone https://github.com/stan-dev/posteriordb`)."
        ),
    ),
    Area(
        name="inference-gym",
        title="Inference Gym: sluice, BlackJAX and NumPyro against ground truth",
        jobs=(
            Job(
                "inference-gym",
                ("bench/inference_gym.py", "--targets", GYM_SMALL),
                parse_rows,
                ("bench/inference_gym.py", "--quick"),
                json=True,
            ),
            Job(  # 2,519 dimensions, 9 runs per target: hours on a 2-core CPU
                "inference-gym-sv",
                ("bench/inference_gym.py", "--targets", "sv,sv_log"),
                parse_rows,
                ("bench/inference_gym.py", "--quick"),
                json=True,
                explicit=True,
            ),
        ),
        key=lambda r: (r["target"], r["library"]),
        rank=lambda r: (GYM_TARGETS(r["target"]), GYM_LIBRARIES(r["library"])),
        columns=(
            ("target", "target", ""),
            ("library", "library", ""),
            ("dim", "dim", "d"),
            ("passed", "seeds passed", ""),
            ("max_z", "max abs z", ".2f"),
            ("bound", "bound", ".2f"),
            ("wall_s", "wall s", ".1f"),
            ("min_ess_bulk", "min ESS", ".0f"),
            ("ess_per_s", "ESS/s wall", ".1f"),
            ("ratio", "ESS/s / best other", ".2f"),
            ("ess_per_kgrad", "ESS per 1k grads", ".2f"),
            ("divergent", "divergent", ".0f"),
            ("step_size", "step size", ".3f"),
            ("grads_b2_max", "grads to b2max<0.01", ",.0f"),
        ),
        left=("library", "passed"),
        reading=GYM_READING,
    ),
    Area(
        name="latency",
        title="Time to a summary table",
        jobs=(
            Job(
                "latency",
                ("bench/latency.py", "--reps", "2"),
                parse_latency,
                (
                    "bench/latency.py",
                    "--reps",
                    "1",
                    "--warmup",
                    "100",
                    "--draws",
                    "100",
                    "--variants",
                    "sluice/seq",
                    "sluice-nostats/seq",
                    "blackjax/seq",
                ),
                json=True,
            ),
        ),
        key=lambda r: (r["model"], r["variant"]),
        rank=lambda r: (r["model"], LATENCY_VARIANTS(r["variant"])),
        columns=(
            ("model", "model", ""),
            ("variant", "variant", ""),
            ("reps", "runs", ""),
            ("sample", "sample s", ""),
            ("summary", "summary s", ""),
            ("total", "total s", ""),
            ("vs_anchor", "total / best anchor", ""),
            ("ess", "min ESS bulk", ""),
        ),
        left=("variant",),
        reading=(
            "Time from the library call to a summary table in hand (mean, sd, HDI, MCSE, "
            "ESS, R-hat) on `logreg_small` (the MCMC table's model), 4 chains, 1,000 warmup "
            "iterations + 1,000 draws per chain; each measurement a fresh process, imports and "
            "data made before the clock starts; medians of the row's runs. `sluice` is "
            "`sample(default_stats=True)` then `run.summary()` (the streaming statistics; "
            "their merge and finalize compile in the background while the run samples); "
            "`sluice-nostats` is `default_stats=False`, what the memory sink does by default, "
            "then ArviZ on the kept draws; NumPyro and BlackJAX are the MCMC table's runs "
            "then `az.summary` of their draws. *total / best anchor* divides by the fastest "
            "NumPyro or BlackJAX variant of the same command."
        ),
        legacy=(
            Legacy(
                "latency",
                "2026-11-30-e/latency.txt",
                "cd bench && PYTHONPATH=../src python latency.py --reps 2",
                "2026-11-30T20:22:00+00:00",
            ),
            Legacy(
                "latency",
                "2026-11-30-e/latency-final.txt",
                "cd bench && PYTHONPATH=../src python latency.py --reps 2 --variants "
                "sluice/seq sluice-nostats/seq blackjax/seq",
                "2026-11-30T21:20:00+00:00",
            ),
        ),
    ),
    Area(
        name="stats-cost",
        title="Streaming statistics: cost per draw",
        jobs=(
            *(
                _overhead_job(model, statistic)
                for statistic in ("default", "exact")
                for model in ("gaussian", "logreg")
            ),
        ),
        key=lambda r: (r["model"], r["chunks"], r["statistics"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("chains", "chains", ""),
            ("chunks", "chunks", ""),
            ("statistics", "statistics", ""),
            ("runs", "runs", ""),
            ("base", "NUTS draw, no statistics, us", ""),
            ("with", "with the statistics, us", ""),
            ("added_us", "added us", ""),
            ("added", "added", ""),
        ),
        left=("chains", "chunks", "statistics"),
        reading=(
            "Sampling time per draw and chain of NUTS with streaming statistics against the "
            "same run without them: 4 chains, 1,000 draws per chain in one chunk, "
            "`sink=None`, the runs with and without alternated in one process, medians. The "
            "standard Gaussian has the cheapest gradient there is, the worst case for the "
            "statistics' relative cost; the logistic regression (1,000 data points, 1,000 "
            "coefficients, vectorized chains) is a typical model of that size. *default* is "
            "what `sample` computes (`sluice.stats.streaming.summary`, every element); the "
            "*exact set* is the opt-in `sluice.stats.summary_statistics` (histograms and lags "
            "for the first 4,096 elements of each quantity)."
        ),
    ),
    Area(
        name="stats-accuracy",
        title="Streaming statistics: accuracy against ArviZ",
        jobs=(
            Job(
                "stats-scale-logreg",
                ("bench/stats_scale.py", "accuracy", "--model", "logreg", "--seeds", "4"),
                parse_stats_scale_accuracy,
                ("bench/stats_scale.py", "accuracy", "--model", "logreg", "--draws", "200"),
            ),
            Job(
                "stats-scale-gauss20k",
                ("bench/stats_scale.py", "accuracy", "--model", "gauss20k"),
                parse_stats_scale_accuracy,
                ("bench/stats_scale.py", "accuracy", "--model", "logreg", "--draws", "100"),
            ),
        ),
        key=lambda r: (r["model"], r["run"], r["statistics"], r["metric"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("run", "chains x draws", ""),
            ("statistics", "statistics", ""),
            ("metric", "error of", ""),
            ("elements", "elements", ""),
            ("rms", "rms", ""),
            ("max", "max", ""),
        ),
        left=("run", "statistics", "metric"),
        reading=(
            "Error of the statistics streamed in the run against ArviZ (and NumPy) on the "
            "same stored NUTS draws, over the elements (pooled over seeds): ESS relative, "
            "R-hat absolute, quantiles (3%, 50%, 97%) in units of ArviZ's MCSE of that "
            "quantile, HDI ends in units of the quantile MCSE at 3% and 97%, the mean in "
            "units of the sd. The exact set covers the first 4,096 elements of a quantity. "
            "On the Gaussian, whose posterior is known, the rows *vs exact* compare each "
            "estimator's quantiles and HDI ends (ArviZ's on the draws included) with the "
            "exact ones, in the same units: their own Monte Carlo error."
        ),
    ),
    Area(
        name="stats-proxy",
        title="Streaming statistics: the bulk score against rank normalisation",
        jobs=(
            Job(
                "stats-proxy",
                ("bench/stats_proxy.py",),
                parse_stats_proxy,
                ("bench/stats_proxy.py", "--dim", "2000", "--stride", "10"),
            ),
        ),
        key=lambda r: (r["draws"], r["score"]),
        rank=_index,
        columns=(
            ("draws", "draws", ""),
            ("score", "score", ""),
            ("elements", "elements", ""),
            ("rms", "rms", ""),
            ("max", "max", ""),
            ("mean", "mean", ""),
        ),
        left=("score",),
        reading=(
            "The default statistics' share of the bulk ESS error that comes from their score "
            "alone: ArviZ's ESS of the score (exact lags, no streaming) against ArviZ's bulk "
            "ESS, relative, on every fifth element of the 20,000-dim Gaussian (NUTS, 4 x "
            "1,000 draws, the first 128 draws of each chain as the pilot) and on monotone "
            "transforms of the same draws, whose bulk ESS is the same."
        ),
    ),
    Area(
        name="stats-scale",
        title="Streaming statistics: memory, compile, finalize, large models",
        jobs=(
            Job(
                "stats-scale-cost",
                ("bench/stats_scale.py", "cost"),
                parse_stats_scale_cost,
                ("bench/stats_scale.py", "cost", "--reps", "1"),
            ),
            Job(
                "stats-large",
                ("bench/stats_large.py", "--dim", "100000"),
                parse_stats_large,
                ("bench/stats_large.py", "--dim", "10000", "--draws", "20", "--warmup", "20"),
            ),
            Job(
                "million",
                ("bench/million.py", "--progress"),
                parse_million,
                ("bench/million.py", "--dim", "20000", "--warmup", "20", "--draws", "40"),
                json=True,
                explicit=True,
            ),
        ),
        key=lambda r: (r["what"], r["statistics"]),
        rank=_index,
        columns=(
            ("what", "what", ""),
            ("statistics", "statistics", ""),
            ("value", "value", ""),
        ),
        left=("statistics", "value"),
        reading=(
            "State per element and chain (float32, from `jax.eval_shape` of `init`); the "
            "compile time of a whole 10-dim run to its summary (every program, measured by "
            "JAX's compile events and log); the time from `sample`'s return to the summary "
            "table; and the cost per element and draw at 100,000 dimensions, where the "
            "statistics' state no longer fits in the caches. The million-parameter run "
            "(`bench/million.py`: NUTS on a 1,000,000-dim Gaussian with scales in [e^-1, e]) "
            "runs only when named (`python -m bench stats-scale/million`), not with `all`."
        ),
    ),
    Area(
        name="memory",
        title="Memory: peak RSS against the bytes of the draws",
        jobs=(
            Job(
                "memory-none",
                (
                    "bench/memory.py",
                    "--lines",
                    "sluice-none",
                    "--draws",
                    "1000,4000,16000,64000",
                    "--chunk-size",
                    "1000",
                ),
                parse_memory,
                (
                    "bench/memory.py",
                    "--lines",
                    "sluice-none",
                    "--draws",
                    "100",
                    "--dim",
                    "1000",
                    "--warmup",
                    "20",
                ),
                json=True,
            ),
            Job(
                "memory-kept",
                (
                    "bench/memory.py",
                    "--lines",
                    "sluice,numpyro",
                    "--draws",
                    "500,1000,2000,4000",
                    "--numpyro-draws",
                    "500,1000,2000",
                ),
                parse_memory,
                (
                    "bench/memory.py",
                    "--lines",
                    "sluice,numpyro",
                    "--draws",
                    "100",
                    "--numpyro-draws",
                    "100",
                    "--dim",
                    "1000",
                    "--warmup",
                    "20",
                ),
                json=True,
            ),
        ),
        key=lambda r: (r["line"], r["dim"], r["draws"]),
        rank=lambda r: (list(MEMORY_LINES.values()).index(r["line"]), r["dim"], r["draws"]),
        columns=(
            ("line", "line", ""),
            ("dim", "dim", ",d"),
            ("draws", "draws/chain", ",d"),
            ("draw_mb", "draw MB", ",.0f"),
            ("base_mb", "base RSS MB", ",.0f"),
            ("peak_mb", "peak RSS MB", ",.0f"),
            ("ratio", "(peak - base) / draw bytes", ".2f"),
            ("chunk", "sluice chunk", "d"),
        ),
        reading=(
            "Peak resident memory of one process (`ru_maxrss`) sampling a standard Gaussian, "
            "4 chains, 100 warmup iterations, maximum tree depth 3 (memory depends on "
            "neither), chains one after another, each point in a fresh process. *draw MB* is "
            "the size of the float32 draws (chains x draws x dim x 4 bytes), *base RSS* the "
            "process before sampling (interpreter, JAX, the library, the model). "
            "`sink=None` keeps no draws; its rows (2026-11-30) computed the default "
            "streaming statistics of that version, histograms and lags for the first 4,096 "
            "elements and exact moments for all (today's default covers every element, "
            "1.5 KB per element and chain: see the streaming statistics' section); "
            '`sink="memory"` keeps every draw in host memory and, by default, computes no '
            "streaming statistics. *sluice chunk* is sluice's chunk size (its automatic "
            "choice unless the command sets one)."
        ),
        legacy=(
            Legacy("memory-none", "2026-11-30-b/memory-none.json"),
            Legacy(
                "memory-kept",
                "2026-11-30-quiet/memory-stats.json",
                keep=lambda r: r["line"] == "NumPyro",
            ),
            Legacy(
                "memory-kept",
                "2026-11-30-shared-vm/memory.json",
                keep=lambda r: r["line"] in ('sluice, sink="memory"', "NumPyro"),
            ),
        ),
    ),
    Area(
        name="store",
        title="Draws on disk: the Zarr store",
        jobs=(
            Job(
                "store-overhead",
                ("bench/store.py", "overhead"),
                parse_store,
                (
                    "bench/store.py",
                    "overhead",
                    "--dim",
                    "1000",
                    "--draws",
                    "200",
                    "--chunk-size",
                    "100",
                    "--reps",
                    "1",
                    "--warmup",
                    "50",
                ),
            ),
            Job(
                "store-big",
                ("bench/store.py", "big", "--chunk-size", "100"),
                parse_store,
                (
                    "bench/store.py",
                    "big",
                    "--dim",
                    "1000",
                    "--draws",
                    "400",
                    "--chunk-size",
                    "100",
                    "--warmup",
                    "50",
                ),
            ),
        ),
        key=lambda r: (r["run"],),
        rank=_index,
        columns=(
            ("run", "run", ""),
            ("sampling", "sampling s", ""),
            ("wall", "wall s", ""),
            ("peak", "peak RSS", ""),
            ("result", "result", ""),
        ),
        left=("sampling", "result"),
        reading=(
            "The first row samples a Gaussian with the same default statistics into the "
            "memory sink and into a `ZarrSink`, alternated in one process (the compiled "
            "program is shared), and reports the median of the per-repetition ratios of the "
            "sampling times. The second writes more float32 draws than the machine has RAM to "
            "a `ZarrSink`, default statistics on, in a fresh process: peak RSS from "
            "`getrusage`, the store's size on disk, the machine's RAM. A Zarr run writes a "
            "checkpoint (the chains' state, mostly the statistics') after every chunk."
        ),
        legacy=(
            Legacy(
                "store-overhead",
                "2026-11-30-c/store-overhead.txt",
                "PYTHONPATH=src python bench/store.py overhead",
                "2026-11-30T15:30:00+00:00",
            ),
            Legacy(
                "store-big",
                "2026-11-30-c/store-big.txt",
                "PYTHONPATH=src python bench/store.py big --chunk-size 100",
                "2026-11-30T15:37:30+00:00",
            ),
        ),
    ),
    Area(
        name="vi",
        title="Variational inference",
        jobs=(
            Job(
                "vi",
                ("bench/vi_bench.py", "--reps", "5"),
                parse_vi,
                ("bench/vi_bench.py", "--particles", "1", "10", "--steps", "100", "--reps", "1"),
            ),
        ),
        key=lambda r: (int(r["k"]),),
        rank=lambda r: (int(r["k"]),),
        columns=(
            ("k", "K", ""),
            ("runs", "runs", ""),
            *((v, f"{v} ms", "") for v in VI_VARIANTS),
            *((v, v, "") for v in VI_RATIOS),
        ),
        reading=(
            "Milliseconds per optimisation step of a mean-field Gaussian fit (plain SGD) of "
            "the demo model, the JAX notebook's logistic regression, with K particles. "
            "`sluice` is `sluice.vi.fit` as a user calls it (particles vectorized, 100 steps "
            "per compiled chunk, the host loop included); `sluice-seq` the same with one "
            "particle at a time; `numpyro-vec` / `numpyro-seq` NumPyro's `Trace_ELBO` with "
            "particles vectorized or not, its steps in one jitted `lax.scan`; `notebook` the "
            "notebook's Python loop; `jax-fused` the notebook's step in a jitted `lax.scan` of "
            "100 steps: the floor. The ratios divide the medians: above 1, sluice is faster; "
            "`sluice/jax-fused` is sluice's time over the floor's."
        ),
        legacy=(
            Legacy(
                "vi",
                "2026-11-30-quiet/vi.txt",
                "PYTHONPATH=src python bench/vi_bench.py --reps 5",
                "2026-11-30T08:20:05+00:00",
            ),
        ),
    ),
    Area(
        name="multiprocess",
        title="Many processes",
        jobs=(
            Job(
                "multiprocess",
                ("bench/multiprocess.py", "--reps", "2"),
                parse_multiprocess,
                (
                    "bench/multiprocess.py",
                    "--reps",
                    "1",
                    "--draws",
                    "200",
                    "--warmup",
                    "50",
                    "--points",
                    "500",
                    "--features",
                    "10",
                ),
            ),
        ),
        key=lambda r: (r["model"], r["chains"], r["draws"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("chains", "chains", "d"),
            ("draws", "draws/chain", ",d"),
            ("one", "1 process, draws/s", ""),
            ("two", "2 processes, draws/s", ""),
            ("ratio", "ratio (median)", ""),
        ),
        reading=(
            "8 chains sampled with `sink=None`, sequential chains: one process on one core "
            "against two processes on one core each (`jax.distributed` on 127.0.0.1, each "
            "process pinned to its core), alternated. Throughput is chains x draws / the "
            "slowest process's sampling time, one value per repetition; the ratio is the "
            "median of the per-repetition ratios. The model is compute-bound: its gradient "
            "dominates a NUTS step."
        ),
        legacy=(
            Legacy(
                "multiprocess",
                "2026-11-30-a/multiprocess.txt",
                "PYTHONPATH=src python bench/multiprocess.py --reps 2",
                "2026-11-30T09:45:00+00:00",
            ),
        ),
    ),
    Area(
        name="numpyro",
        title="NumPyro models through the adapter",
        jobs=(
            Job(
                "adapters-numpyro",
                ("bench/adapters_numpyro.py",),
                parse_adapters,
                (
                    "bench/adapters_numpyro.py",
                    "--models",
                    "eight_schools",
                    "--reps",
                    "1",
                    "--warmup",
                    "100",
                    "--draws",
                    "200",
                ),
            ),
        ),
        key=lambda r: (r["model"], r["sampler"]),
        rank=_index,
        columns=(
            ("model", "model", ""),
            ("sampler", "sampler", ""),
            ("runs", "runs", ""),
            ("total", "total s", ""),
            ("compile", "compile s", ""),
            ("draws", "draws s", ""),
            ("ess", "min ESS", ""),
            ("ess_draws", "ESS/s (draws)", ""),
            ("ess_total", "ESS/s (total)", ""),
            ("ratio", "ESS/s vs numpyro-vec (draws / total)", ""),
            ("rss", "peak RSS MB", ""),
        ),
        left=("sampler",),
        reading=(
            "NumPyro models converted by sluice's adapter (`sluice.from_numpyro`) and sampled "
            "by sluice, with the memory sink and with a `ZarrSink`, against "
            "`numpyro.infer.MCMC` with vectorized and with sequential chains: 4 chains, 1,000 "
            "warmup iterations, 20,000 draws per chain for eight schools and 5,000 for the "
            "others; each row the best of its fresh processes. *total* is the whole call, "
            "*compile* JAX's compile time inside it, *draws* the sampling phase without "
            "compilation; *min ESS* the smallest bulk ESS over every latent element (ArviZ), "
            "per second of sampling and of the whole call; the ratio divides by "
            "`numpyro-vec`'s."
        ),
        legacy=(
            Legacy(
                "adapters-numpyro",
                "2026-11-30-quiet/adapters-numpyro.txt",
                "PYTHONPATH=src python bench/adapters_numpyro.py",
                "2026-11-30T08:21:49+00:00",
            ),
        ),
    ),
)


def area(name: str) -> Area:
    for a in AREAS:
        if a.name == name:
            return a
    raise KeyError(name)


# -- loading raw outputs --------------------------------------------------------------------
def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def legacy_output(entry: Legacy) -> Output:
    path = RESULTS / entry.path
    stem = path.with_suffix("")
    data = json.loads(path.read_text()) if path.suffix == ".json" else None
    command, when = entry.command, entry.when
    if command is None:
        argv = shlex.split(data["command"])
        command = display_command(argv)
    if when is None:
        when = data["machine"]["date"]
    text = _read(stem.with_suffix(".txt")) if path.suffix == ".json" else _read(path)
    return Output(
        entry.job,
        text,
        _read(stem.with_suffix(".err")),
        data,
        command,
        LEGACY_MACHINE,
        when,
        _rel(path),
    )


def machine_label(machine: dict[str, Any]) -> str:
    backend = (machine.get("backend") or "?").upper()
    return f"{machine['cpu_count']}-core {machine['machine']}, {backend}, {machine['memory_gib']:g} GiB"


def machine_details(machine: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)
    device = f", {machine['device']}" if machine.get("device") else ""
    return (
        f"{machine['cpu_count']} cores{device}, {machine['memory_gib']:g} GiB of RAM; "
        f"{machine['platform']}, Python {machine['python']}; {versions}"
    )


@dataclasses.dataclass
class Run:
    """A raw output written by ``python -m bench`` (its meta file read)."""

    meta: dict[str, Any]
    path: Path  # the meta file

    def output(self) -> Output:
        m, base = self.meta, self.path.parent
        data = None
        if m.get("json"):
            json_path = base / m["json"]
            data = json.loads(json_path.read_text()) if json_path.exists() else None
        source = base / (m["json"] if m.get("json") else m["stdout"])
        return Output(
            m["job"],
            _read(base / m["stdout"]),
            _read(base / m["stderr"]),
            data,
            m["command"],
            machine_label(m["machine"]),
            m["ended"],
            _rel(source),
        )


def runs(results: Path, include_quick: bool = False) -> list[Run]:
    """Every successful job output under ``results/*/`` (quick smoke runs only on request)."""
    found = []
    for path in sorted(results.glob("*/*.meta.json")):
        meta = json.loads(path.read_text())
        if meta.get("rc") != 0 or (meta.get("quick") and not include_quick):
            continue
        found.append(Run(meta, path))
    return found
