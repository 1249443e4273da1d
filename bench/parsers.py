"""Parsers of the benchmark jobs' raw outputs: one raw output (stdout, stderr and the
JSON file a job wrote, if any) into table rows. The orchestrating process runs them:
this module imports no JAX.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics as _statistics
from typing import Any

import harness

Row = dict[str, Any]


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


# -- parsers: one raw output -> rows ------------------------------------------------------
def parse_mcmc(out: Output) -> list[Row]:
    import mcmc

    records = [r for r in out.data["records"] if r["variant"] in mcmc.VARIANTS]
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
    return [
        {
            "model": model,
            "chains": f"{head['chains']} {head['chain_method']}",
            "chunks": "one chunk",
            "statistics": "default (every element)",
            "runs": f"median of {base.group(1)}",
            "base": base.group(2),
            "with": full.group(1),
            "added_us": f"{float(full.group(1)) - float(base.group(2)):+.1f}",
            "added": added.group(1),
        }
    ]


# rows of the raw outputs that also measured the exact set, not a statistic of sluice's
EXACT_SET = "exact set (opt-in)"


def parse_stats_scale_accuracy(out: Output) -> list[Row]:
    (before, table), *_ = markdown_tables(out.text)
    head = dict(re.findall(r"(\w+)=(\S+)", out.text.splitlines()[0]))
    model = before.split(":")[0]
    run = f"{head['chains']} x {head['draws']}, {head['seeds']} seed(s)"
    return [
        {"model": model, "run": run, "statistics": r["statistics"], "metric": r["metric"],
         "elements": r["elements"], "rms": r["rms"], "max": r["max"]}
        for r in table
        if r["statistics"] != EXACT_SET
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
             "value": r["value"]} for r in table if r["statistics"] != EXACT_SET]  # fmt: skip


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
    what = (f"{d['dim']:,}-dim Gaussian, {d.get('kernel', 'nuts').upper()}, {d['chains']} x "
            f"{d['draws']:,} draws ({d['warmup']} warmup), sink=None")  # fmt: skip
    per = d["peak_rss_gb"] * 2**30 / (d["dim"] * d["chains"])
    rows = [
        ("wall time of sample()", f"{d['sample_seconds']:.0f} s (compile "
         f"{d['compile_seconds']:.0f}, warmup {d['warmup_seconds']:.0f}, sampling "
         f"{d['sampling_seconds']:.0f})"),
        ("summary table after the run", f"{d['summary_seconds']:.1f} s"),
        ("peak RSS", f"{d['peak_rss_gb']:.2f} GiB, {per:,.0f} B per element and chain"
         + (f" ({d['peak_rss_sampling_gb']:.2f} GiB until sample() returns)"
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
        if r.get("benchmark") == "store-read":
            rows.append(
                {
                    "run": f"reading a finished store with and without its checksums, "
                    f"{r['dim']:,} dims, {r['chains']} x {r['draws']:,} draws "
                    f"({r['store_bytes'] / 1e6:.0f} MB), chunks of {r['chunk_size']}",
                    "sampling": None,
                    "wall": f"checked {r['median_checked_s']:.3f}, unchecked "
                    f"{r['median_unchecked_s']:.3f} (medians of {len(r['checked_s'])})",
                    "peak": None,
                    "result": f"checked / unchecked {r['median_ratio_checked_over_unchecked']:.3f}"
                    f" (median); a resume's check of every committed chunk "
                    f"{r['median_resume_check_s']:.3f} s",
                }
            )
            continue
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
