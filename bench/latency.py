"""Time to a summary table: what a user waits for, compilation included.

One measurement per fresh process: build the model, then time from the
library call to a summary table in hand (mean, sd, HDI, MCSE, ESS, R-hat).
Imports (JAX, ArviZ, the library) happen before the clock starts.

* ``sluice``: ``sluice.sample(...)`` then ``run.summary()`` (the streaming
  default statistics: merge and finalize compiled in the background);
* ``sluice-nostats``: ``sample(default_stats=False)`` then
  ``run.summary(source="draws")`` (ArviZ on the kept draws);
* ``numpyro/<method>``, ``blackjax/<method>``: the harness's runs
  (``samplers.py``) then ``az.summary`` of their draws.

    PYTHONPATH=src python bench/latency.py [--model logreg_small] [--reps 2]

Prints a table of medians and the ratio of each variant's time to the
fastest anchor's (NumPyro or BlackJAX).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import harness

VARIANTS = (
    "sluice/seq",
    "sluice/vec",
    "sluice-nostats/seq",
    "sluice-nostats/vec",
    "numpyro/seq",
    "numpyro/vec",
    "blackjax/seq",
    "blackjax/vec",
)
METHODS = {"seq": "sequential", "vec": "vectorized"}


def one(variant: str, model: str, warmup: int, draws: int) -> dict:
    import arviz as az
    import jax
    import samplers
    import targets

    import sluice

    library, method = variant.split("/")
    target = targets.make_target(model)
    settings = samplers.Settings(warmup=warmup, draws=draws, chain_method=METHODS[method])
    jax.block_until_ready(target.init)
    t0 = time.perf_counter()
    if library.startswith("sluice"):
        stats = library == "sluice"
        run = sluice.sample(
            target.logdensity_fn,
            init=target.init,
            chains=settings.chains,
            warmup=warmup,
            draws=draws,
            chain_method=settings.chain_method,
            seed=settings.seed,
            default_stats=stats,
            progress=False,
        )
        t_sample = time.perf_counter() - t0
        table = run.summary(source="stats" if stats else "draws")
    else:
        clock = harness.CompileClock()
        runner = samplers.run_numpyro if library == "numpyro" else samplers.run_blackjax
        result = runner(target, settings, clock)
        t_sample = time.perf_counter() - t0
        table = az.summary({k: v for k, v in result.draws.items()})
    total = time.perf_counter() - t0
    return {
        "variant": variant,
        "model": model,
        "sample_s": t_sample,
        "summary_s": total - t_sample,
        "total_s": total,
        "rows": len(table),
        "min_ess_bulk": float(table["ess_bulk"].min()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="logreg_small")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "VARIANT"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.one:
        harness.emit_result(one(args.one[1], args.one[0], args.warmup, args.draws))
        return

    script = str(Path(__file__).resolve())
    sizes = ("--warmup", str(args.warmup), "--draws", str(args.draws))
    results = harness.run_each(script, args.reps, [args.model], args.variants, lambda _: sizes)
    rows = []
    for variant in args.variants:
        mine = [r for r in results if r["variant"] == variant]
        rows.append(
            {
                "variant": variant,
                "sample_s": harness.median([r["sample_s"] for r in mine]),
                "summary_s": harness.median([r["summary_s"] for r in mine]),
                "total_s": harness.median([r["total_s"] for r in mine]),
                "min_ess_bulk": harness.median([r["min_ess_bulk"] for r in mine]),
            }
        )
    anchors = [r["total_s"] for r in rows if r["variant"].split("/")[0] in ("numpyro", "blackjax")]
    best = min(anchors) if anchors else None
    for row in rows:
        row["vs_best_anchor"] = row["total_s"] / best if best else None
    print(
        f"model {args.model}, 4 chains, {args.warmup} warmup + {args.draws} draws; "
        f"medians of {args.reps} fresh processes each"
    )
    print(
        harness.markdown_table(
            rows,
            [
                ("variant", "variant", ""),
                ("sample_s", "sample (s)", ".2f"),
                ("summary_s", "summary (s)", ".2f"),
                ("total_s", "total (s)", ".2f"),
                ("vs_best_anchor", "total / best anchor", ".2f"),
                ("min_ess_bulk", "min ESS bulk", ".0f"),
            ],
        )
    )
    if args.json:
        args.json.write_text(json.dumps({"machine": harness.machine_info(), "results": results}))


if __name__ == "__main__":
    main()
