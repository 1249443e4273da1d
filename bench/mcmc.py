"""sluice vs NumPyro vs BlackJAX: NUTS on the same log-densities, side by side.

One run of this script measures every (model, variant) pair ``--reps`` times,
each measurement in a fresh Python process (so that peak RSS and compile
caches belong to one library only), rotating the order of the variants from
one repetition to the next. It prints medians per variant and the medians of
the per-repetition ratios sluice/NumPyro and sluice/BlackJAX (same chain
method), and, for sluice, the cost of sampling in 10 chunks instead of 1.

    PYTHONPATH=src python bench/mcmc.py --quick            # ~2 min smoke run
    PYTHONPATH=src python bench/mcmc.py --reps 3 --json bench-mcmc.json

Internally, ``--one VARIANT MODEL`` performs one measurement and prints it
as one JSON line; the orchestrating process starts those.

Metrics (see samplers.py for exactly what each library's numbers count):

* wall: the library call(s), compile included; compile: JAX trace + lower +
  XLA compile inside it; sampling: the sampling phase without compilation;
  warmup: wall - compile - sampling (start-up and adaptation);
* grad/s: sampling gradients / sampling seconds;
* floor: seconds per gradient of the same log-density in ``jit(lax.scan(...))``
  (vmapped over the chains for vectorized variants, divided by the chains),
  measured in every process; the report uses the median over all processes
  of a model and chain method. overhead = sampling seconds / (sampling
  gradients x floor), 1.0 being a sampler that costs nothing but its gradients;
* min ESS_bulk: ArviZ's bulk ESS, minimum over all parameters; ESS/s over the
  sampling seconds and over the wall seconds;
* peak RSS: the process's high-water mark after the run (before diagnostics);
  base RSS: after imports and building the model, before the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

import harness

VARIANTS: dict[str, tuple[str, str]] = {  # name: (library, chain method)
    "sluice/seq": ("sluice", "sequential"),
    "sluice/vec": ("sluice", "vectorized"),
    "numpyro/seq": ("numpyro", "sequential"),
    "numpyro/vec": ("numpyro", "vectorized"),
    "blackjax/seq": ("blackjax", "sequential"),
    "blackjax/vec": ("blackjax", "vectorized"),
}
CHUNKS = "sluice/chunks"  # sluice sampled with 1 chunk and with 10 chunks, alternately
MODELS = ("logreg_small", "logreg_large", "gaussian")
DEFAULTS = {
    "reps": 3,
    "warmup": 1000,
    "draws": 1000,
    "chunk_pairs": 3,
    "variants": list(VARIANTS),
    "rhat": True,
}
QUICK = {
    "reps": 1,
    "warmup": 100,
    "draws": 100,
    "chunk_pairs": 1,
    "variants": [v for v in VARIANTS if v.endswith("/seq")],
    "rhat": False,
}


# -- one measurement (runs in its own process) ------------------------------------
def measure(variant: str, model: str, settings: Any, rhat: bool = True) -> dict[str, Any]:
    """Sample ``model`` with ``variant`` once and return every metric as a dict."""
    import importlib
    import os

    from samplers import LIBRARIES
    from targets import make_target

    library, chain_method = VARIANTS[variant]
    importlib.import_module(library)
    clock = harness.CompileClock()
    target = make_target(model)
    settings = dataclasses.replace(settings, chain_method=chain_method)
    load_average = os.getloadavg()[0]  # other processes' work: > 0 means shared cores
    base_rss = harness.rss_bytes()

    run = LIBRARIES[library](target, settings, clock)

    batch = settings.chains if chain_method == "vectorized" else None
    floor = harness.gradient_seconds(target.logdensity_fn, target.init, batch=batch)
    ess = harness.min_ess_bulk(run.draws)
    num_draws = settings.chains * settings.draws
    return {
        "variant": variant,
        "library": library,
        "chain_method": chain_method,
        "model": model,
        "dim": target.dim,
        "settings": dataclasses.asdict(settings),
        "wall_s": run.wall_seconds,
        "compile_s": run.compile_seconds,
        "warmup_s": run.warmup_seconds,
        "sampling_s": run.sampling_seconds,
        "compile_in_sampling_s": run.compile_in_sampling_seconds,
        "grads_warmup": run.num_gradients_warmup,
        "grads_sampling": run.num_gradients,
        "grads_per_draw": run.num_gradients / num_draws,
        "grads_per_s": run.num_gradients / run.sampling_seconds,
        "floor_us": floor * 1e6,
        "overhead": run.sampling_seconds / (run.num_gradients * floor),
        "overhead_warmup": run.warmup_seconds / (run.num_gradients_warmup * floor),
        "min_ess_bulk": ess,
        "ess_per_s_sampling": ess / run.sampling_seconds,
        "ess_per_s_total": ess / run.wall_seconds,
        "max_rhat": harness.max_rhat(run.draws) if rhat else None,
        "divergent": run.num_divergent,
        "step_size": run.step_size,
        "base_rss_mb": base_rss / 2**20,
        "peak_rss_mb": run.peak_rss_bytes / 2**20,
        "load_average_1min": load_average,
        "extra": run.extra,
    }


def measure_chunks(model: str, settings: Any, pairs: int) -> dict[str, Any]:
    """sluice with ``chunk_size=draws`` and ``draws // 10``, alternately, in one process.

    The draws do not depend on the chunk size (sluice's key contract), so both
    runs do exactly the same sampling work; the ratio of their sampling times
    is the cost of the nine extra chunk boundaries. The first pair also
    compiles both programs (in warmup, not in sampling).
    """
    import numpy as np
    from samplers import run_sluice
    from targets import make_target

    clock = harness.CompileClock()
    target = make_target(model)
    sizes = {"1": settings.draws, "10": max(1, settings.draws // 10)}
    sampling: dict[str, list[float]] = {"1": [], "10": []}
    grads: dict[str, list[int]] = {"1": [], "10": []}
    first_draws: dict[str, dict] = {}
    for pair in range(pairs):
        for label in ("1", "10") if pair % 2 == 0 else ("10", "1"):
            run = run_sluice(target, dataclasses.replace(settings, chunk_size=sizes[label]), clock)
            sampling[label].append(run.sampling_seconds)
            grads[label].append(run.num_gradients)
            first_draws.setdefault(label, run.draws)
    same_draws = all(
        np.array_equal(first_draws["1"][name], first_draws["10"][name]) for name in first_draws["1"]
    )
    return {
        "variant": CHUNKS,
        "model": model,
        "settings": dataclasses.asdict(settings),
        "chunk_sizes": sizes,
        "sampling_s_1_chunk": sampling["1"],
        "sampling_s_10_chunks": sampling["10"],
        "grads_sampling": grads,
        "same_draws": bool(same_draws),
    }


# -- orchestration --------------------------------------------------------------
def _child_args(args: argparse.Namespace) -> list[str]:
    return [
        f"--chains={args.chains}",
        f"--warmup={args.warmup}",
        f"--draws={args.draws}",
        f"--seed={args.seed}",
        f"--max-tree-depth={args.max_tree_depth}",
        f"--chunk-pairs={args.chunk_pairs}",
        "--rhat" if args.rhat else "--no-rhat",
    ]


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    variants = list(args.variants) + ([CHUNKS] if args.chunks else [])
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    for rep in range(args.reps):
        shift = rep % len(variants)
        order = variants[shift:] + variants[:shift]  # each variant takes each slot in turn
        for model in args.models:
            for slot, variant in enumerate(order):
                print(
                    f"[rep {rep + 1}/{args.reps}] {model:<13} {variant:<13}",
                    end=" ",
                    file=sys.stderr,
                    flush=True,
                )
                t = time.perf_counter()
                record = harness.run_isolated(
                    __file__, ["--one", variant, model, *_child_args(args)]
                )
                record.update(rep=rep, slot=slot)
                records.append(record)
                print(f"{time.perf_counter() - t:6.1f}s", file=sys.stderr, flush=True)
    return {
        "script": "bench/mcmc.py",
        "command": " ".join(sys.argv),
        "machine": harness.machine_info(),
        "elapsed_s": time.perf_counter() - started,
        "records": records,
    }


# -- reports ----------------------------------------------------------------------
TIME_COLUMNS = [
    ("variant", "variant", ""),
    ("wall_s", "wall s", ".2f"),
    ("compile_s", "compile s", ".2f"),
    ("warmup_s", "warmup s", ".2f"),
    ("sampling_s", "sampling s", ".2f"),
    ("grads_warmup", "grads warmup", ".0f"),
    ("grads_sampling", "grads sampling", ".0f"),
    ("grads_per_draw", "grads/draw", ".1f"),
    ("grads_per_s", "grad/s", ".3g"),
    ("floor_us_pooled", "floor µs/grad", ".3g"),
    ("overhead", "overhead", ".2f"),
    ("overhead_warmup", "overhead warmup", ".2f"),
]
QUALITY_COLUMNS = [
    ("variant", "variant", ""),
    ("min_ess_bulk", "min ESS_bulk", ".0f"),
    ("ess_per_s_sampling", "ESS/s sampling", ".3g"),
    ("ess_per_s_total", "ESS/s total", ".3g"),
    ("max_rhat", "max R-hat", ".3f"),
    ("divergent", "divergent", ".0f"),
    ("base_rss_mb", "base RSS MB", ".0f"),
    ("peak_rss_mb", "peak RSS MB", ".0f"),
]
RATIO_METRICS = [  # (key, label): ratios sluice / other, < 1 is better for sluice unless noted
    ("wall_s", "wall time"),
    ("compile_s", "compile time"),
    ("warmup_s", "warmup time"),
    ("sampling_s", "sampling time"),
    ("grads_per_draw", "gradients per draw"),
    ("overhead", "overhead (time per gradient / floor)"),
    ("ess_per_s_sampling", "ESS/s sampling (> 1 better)"),
    ("ess_per_s_total", "ESS/s total (> 1 better)"),
    ("peak_rss_mb", "peak RSS"),
]


def _medians(records: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    return {k: harness.median([r[k] for r in records]) for k in keys}


def pool_floors(records: list[dict[str, Any]]) -> None:
    """Recompute ``overhead`` with one floor per (model, chain method): the median of all.

    Every process measures the floor; pooling those measurements keeps the
    noise of one process's floor out of the comparison between libraries.
    """
    for r in records:
        if r["variant"] == CHUNKS:
            continue
        same = [
            q["floor_us"]
            for q in records
            if q["variant"] != CHUNKS
            and (q["model"], q["chain_method"]) == (r["model"], r["chain_method"])
        ]
        floor = harness.median(same) * 1e-6
        r["floor_us_pooled"] = floor * 1e6
        r["overhead"] = r["sampling_s"] / (r["grads_sampling"] * floor)
        r["overhead_warmup"] = r["warmup_s"] / (r["grads_warmup"] * floor)


def report(result: dict[str, Any]) -> str:
    """Markdown tables: per-model medians, paired ratios, and the chunk cost."""
    records = result["records"]
    pool_floors(records)
    models = list(dict.fromkeys(r["model"] for r in records))
    reps = len({r["rep"] for r in records})
    lines = [f"Medians over {reps} repetition(s); each measurement in a fresh process.", ""]
    keys = [k for k, _, _ in TIME_COLUMNS + QUALITY_COLUMNS if k != "variant"]
    for model in models:
        mine = [r for r in records if r["model"] == model and r["variant"] != CHUNKS]
        if not mine:
            continue
        s = mine[0]["settings"]
        lines += [
            f"### {model} (dim {mine[0]['dim']}; {s['chains']} chains, {s['warmup']} warmup + "
            f"{s['draws']} draws, max tree depth {s['max_tree_depth']})",
            "",
        ]
        variants = list(dict.fromkeys(r["variant"] for r in mine))
        rows = [
            {"variant": v, **_medians([r for r in mine if r["variant"] == v], keys)}
            for v in variants
        ]
        lines += [markdown(rows, TIME_COLUMNS), "", markdown(rows, QUALITY_COLUMNS), ""]
        ratio_rows = _ratio_rows(mine)
        if ratio_rows:
            columns = [("metric", "ratio (median of per-rep ratios)", "")] + [
                (name, name, ".2f") for name in ratio_rows[0] if name != "metric"
            ]
            lines += [markdown(ratio_rows, columns), ""]
    chunk_rows = _chunk_rows(records)
    if chunk_rows:
        lines += [
            "### sluice: cost of 10 chunks over 1 (sampling time, same process, alternated)",
            "",
            markdown(
                chunk_rows,
                [
                    ("model", "model", ""),
                    ("runs", "runs each", "d"),
                    ("one_min", "1 chunk s (min)", ".3f"),
                    ("ten_min", "10 chunks s (min)", ".3f"),
                    ("cost_min", "extra % (min)", "+.1f"),
                    ("cost_median", "extra % (median)", "+.1f"),
                    ("per_chunk", "ms per extra chunk (min)", "+.2f"),
                    ("same", "identical draws", ""),
                ],
            ),
            "",
        ]
    return "\n".join(lines)


def _chunk_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, all chunk runs pooled: the minimum (least disturbed) and the median."""
    rows = []
    for model in dict.fromkeys(r["model"] for r in records if r["variant"] == CHUNKS):
        mine = [r for r in records if r["variant"] == CHUNKS and r["model"] == model]
        one = [t for r in mine for t in r["sampling_s_1_chunk"]]
        ten = [t for r in mine for t in r["sampling_s_10_chunks"]]
        rows.append(
            {
                "model": model,
                "runs": len(one),
                "one_min": min(one),
                "ten_min": min(ten),
                "cost_min": 100 * (min(ten) / min(one) - 1),
                "cost_median": 100 * (harness.median(ten) / harness.median(one) - 1),
                "per_chunk": 1e3 * (min(ten) - min(one)) / 9,
                "same": "yes" if all(r["same_draws"] for r in mine) else "NO",
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    return harness.markdown_table(rows, columns)


def _ratio_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over repetitions of sluice/<other> for each metric, same chain method and rep."""
    pairs: dict[str, list[tuple[dict, dict]]] = {}
    by_key = {(r["variant"], r["rep"]): r for r in records}
    for (variant, rep), mine in by_key.items():
        library, _, method = variant.partition("/")
        if library != "sluice":
            continue
        for other in ("numpyro", "blackjax"):
            theirs = by_key.get((f"{other}/{method}", rep))
            if theirs is not None:
                pairs.setdefault(f"sluice/{other} ({method})", []).append((mine, theirs))
    if not pairs:
        return []
    rows = []
    for key, label in RATIO_METRICS:
        row: dict[str, Any] = {"metric": label}
        for name, matched in sorted(pairs.items()):
            row[name] = harness.median([_ratio(a[key], b[key]) for a, b in matched])
        rows.append(row)
    return rows


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# -- command line -----------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run from the repository root with sluice importable (e.g. PYTHONPATH=src).",
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke-test defaults: {QUICK}")
    parser.add_argument("--reps", type=int, help="repetitions of every measurement (default 3)")
    parser.add_argument(
        "--models",
        type=lambda s: s.split(","),
        default=list(MODELS),
        help=f"comma-separated models (default {','.join(MODELS)})",
    )
    parser.add_argument(
        "--variants",
        type=lambda s: s.split(","),
        help=f"comma-separated variants (default {','.join(VARIANTS)})",
    )
    parser.add_argument(
        "--rhat",
        action=argparse.BooleanOptionalAction,
        help="compute the max R-hat as a sanity check (default on; off with --quick)",
    )
    parser.add_argument(
        "--no-chunks",
        dest="chunks",
        action="store_false",
        help="skip the sluice 1-vs-10-chunks measurement",
    )
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, help="warmup iterations per chain (default 1000)")
    parser.add_argument("--draws", type=int, help="draws per chain (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tree-depth", type=int, default=10)
    parser.add_argument(
        "--chunk-pairs",
        type=int,
        help="(1 chunk, 10 chunks) pairs per chunk measurement (default 3)",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write all records and settings as JSON"
    )
    parser.add_argument("--report", metavar="PATH", help="print the report of a saved --json file")
    parser.add_argument(
        "--one",
        nargs=2,
        metavar=("VARIANT", "MODEL"),
        help="internal: one measurement in this process, printed as JSON",
    )
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for variant in args.variants:
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    for model in args.models:
        if model not in MODELS and not model.startswith("gaussian:"):
            parser.error(
                f"unknown model {model!r}; choose from {', '.join(MODELS)} or gaussian:DIM"
            )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.one:
        from samplers import Settings

        variant, model = args.one
        settings = Settings(
            chains=args.chains,
            warmup=args.warmup,
            draws=args.draws,
            seed=args.seed,
            max_tree_depth=args.max_tree_depth,
        )
        if variant == CHUNKS:
            harness.emit_result(measure_chunks(model, settings, args.chunk_pairs))
        else:
            harness.emit_result(measure(variant, model, settings, rhat=args.rhat))
        return
    if args.report:
        with open(args.report) as f:
            print(report(json.load(f)))
        return
    result = orchestrate(args)
    print(report(result))
    print(
        f"\n{result['machine']['date']}; {result['elapsed_s']:.0f} s in all; "
        f"load average at the end {result['machine']['load_average']}",
        file=sys.stderr,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
