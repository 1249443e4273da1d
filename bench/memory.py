"""Peak host memory (RSS) of MCMC against the bytes of the draws it returns.

For a high-dimensional isotropic Gaussian (100,000 dims by default), 4 chains
and a growing number of draws, each point measured in a fresh process:

* ``sluice``       sluice with ``sink="memory"``: every draw kept in host memory;
* ``sluice-none``  sluice with ``sink=None``: no draws kept (statistics only);
* ``numpyro``      NumPyro NUTS on the same log-density;
* ``blackjax``     (on request) BlackJAX window adaptation + NUTS in ``lax.scan``.

The draws are ``chains x draws x dim x 4`` bytes (float32). For each point
the script reports peak RSS, the RSS before sampling (``base``: interpreter,
JAX, the library and the model), and ``(peak - base) / draw bytes``; for each
line it fits ``peak = intercept + slope x draw bytes`` over the draw counts.
sluice's goal is a slope within 1.1 (the memory sink holds the draws once)
and a flat line for ``sink=None``.

    PYTHONPATH=src python bench/memory.py --quick          # ~1-2 min
    PYTHONPATH=src python bench/memory.py --json bench-memory.json

Warmup is short (100 iterations) and the tree depth is capped (3, at most 7
gradients per draw) to keep the runs quick: memory does not depend on either.
sluice picks its chunk size itself unless ``--chunk-size`` is given; its
automatic choice (a tenth of the draws, capped by a 256 MiB device budget on
CPU) grows with the draws up to the cap, and so do the chunk buffers.
All lines run their chains sequentially (sluice's and NumPyro's default on CPU).
A point of a line that keeps its draws is skipped, and reported so, when
the machine has not got about three times its draw bytes free.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import harness

LINES = ("sluice", "sluice-none", "numpyro", "blackjax")
DEFAULTS = {
    "draws": [500, 1000, 2000, 4000],
    "numpyro_draws": [500, 1000, 2000],
    "lines": ["sluice", "sluice-none", "numpyro"],
}
QUICK = {"draws": [500, 1000], "numpyro_draws": [500, 1000], "lines": DEFAULTS["lines"]}


def draw_bytes(chains: int, draws: int, dim: int) -> int:
    return chains * draws * dim * 4


# -- one point (runs in its own process) --------------------------------------------
def measure(line: str, draws: int, args: argparse.Namespace) -> dict[str, Any]:
    import importlib

    from samplers import Settings, run_blackjax, run_numpyro, run_sluice
    from targets import make_target

    library = line.split("-")[0]
    importlib.import_module(library)
    clock = harness.CompileClock()
    target = make_target(f"gaussian:{args.dim}")
    settings = Settings(
        chains=args.chains,
        warmup=args.warmup,
        draws=draws,
        seed=args.seed,
        chain_method="sequential",
        max_tree_depth=args.max_tree_depth,
        keep_draws=line != "sluice-none",
        chunk_size=args.chunk_size,
    )
    base = harness.rss_bytes()
    if library == "sluice":
        run = run_sluice(target, settings, clock)
    elif library == "numpyro":
        run = run_numpyro(target, settings, clock)
    else:
        run = run_blackjax(target, settings, clock)
    kept = sum(v.nbytes for v in run.draws.values())
    nominal = draw_bytes(args.chains, draws, args.dim)
    return {
        "line": line,
        "draws": draws,
        "dim": args.dim,
        "chains": args.chains,
        "draw_bytes": nominal,
        "kept_bytes": kept,
        "base_rss_bytes": base,
        "peak_rss_bytes": run.peak_rss_bytes,
        "excess_over_draws": (run.peak_rss_bytes - base) / nominal,
        "wall_s": run.wall_seconds,
        "grads_per_draw": run.num_gradients / (args.chains * draws),
        "chunk_size": run.extra.get("chunk_size"),
    }


# -- orchestration --------------------------------------------------------------
def plan(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(line, draws) points, the lines rotated at every draw count."""
    points = []
    for i, draws in enumerate(sorted(set(args.draws) | set(args.numpyro_draws))):
        lines = args.lines[i % len(args.lines) :] + args.lines[: i % len(args.lines)]
        for line in lines:
            wanted = args.numpyro_draws if line == "numpyro" else args.draws
            if draws in wanted:
                points.append((line, draws))
    return points


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    import psutil

    records, skipped = [], []
    started = time.perf_counter()
    for line, draws in plan(args):
        # a line that keeps its draws needs them in memory (NumPyro: about twice)
        held = 0 if line == "sluice-none" else draw_bytes(args.chains, draws, args.dim)
        need = 3 * held + 2**30
        available = psutil.virtual_memory().available
        label = f"{line:<12} draws={draws:<5}"
        if need > available:
            skipped.append(
                {"line": line, "draws": draws, "need_bytes": need, "available_bytes": available}
            )
            print(
                f"{label} skipped: needs ~{need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB free",
                file=sys.stderr,
            )
            continue
        print(label, end=" ", file=sys.stderr, flush=True)
        t = time.perf_counter()
        child = harness.child_args(args, ("dim", "chains", "warmup", "max_tree_depth", "seed",
                                          "chunk_size"))  # fmt: skip
        record = harness.run_isolated(__file__, ["--one", line, str(draws), *child])
        records.append(record)
        print(
            f"{time.perf_counter() - t:6.1f}s  peak {record['peak_rss_bytes'] / 2**20:7.0f} MB",
            file=sys.stderr,
            flush=True,
        )
    return {
        "script": "bench/memory.py",
        "command": " ".join(sys.argv),
        "machine": harness.machine_info(),
        "settings": {
            k: getattr(args, k)
            for k in ("dim", "chains", "warmup", "max_tree_depth", "seed", "chunk_size")
        },
        "elapsed_s": time.perf_counter() - started,
        "records": records,
        "skipped": skipped,
    }


def fit(records: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Least-squares ``peak = intercept + slope * draw_bytes`` (None under two points)."""
    if len({r["draws"] for r in records}) < 2:
        return None
    xs = [r["draw_bytes"] for r in records]
    ys = [r["peak_rss_bytes"] for r in records]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, slope


def report(result: dict[str, Any]) -> str:
    mb = 2**20
    s = result["settings"]
    lines = [
        f"Gaussian, {s['dim']:,} dims, {s['chains']} chains, warmup {s['warmup']}, "
        f"max tree depth {s['max_tree_depth']}, sluice chunk size "
        f"{s['chunk_size'] or 'automatic'}; one fresh process per point.",
        "",
    ]
    rows = [
        {
            "line": r["line"],
            "draws": r["draws"],
            "draw_mb": r["draw_bytes"] / mb,
            "base_mb": r["base_rss_bytes"] / mb,
            "peak_mb": r["peak_rss_bytes"] / mb,
            "excess_mb": (r["peak_rss_bytes"] - r["base_rss_bytes"]) / mb,
            "ratio": r["excess_over_draws"],
            "chunk": r["chunk_size"],
        }
        for r in sorted(result["records"], key=lambda r: (LINES.index(r["line"]), r["draws"]))
    ]
    lines.append(
        harness.markdown_table(
            rows,
            [
                ("line", "line", ""),
                ("draws", "draws/chain", "d"),
                ("draw_mb", "draw MB", ".0f"),
                ("base_mb", "base RSS MB", ".0f"),
                ("peak_mb", "peak RSS MB", ".0f"),
                ("excess_mb", "peak - base MB", ".0f"),
                ("ratio", "(peak - base) / draw bytes", ".2f"),
                ("chunk", "sluice chunk", "d"),
            ],
        )
    )
    fits = []
    for line in LINES:
        mine = [r for r in result["records"] if r["line"] == line]
        fitted = fit(mine)
        if fitted is not None:
            fits.append({"line": line, "intercept": fitted[0] / mb, "slope": fitted[1]})
    if fits:
        lines += ["", "Fit over the draw counts: peak RSS = intercept + slope x draw bytes", ""]
        lines.append(
            harness.markdown_table(
                fits,
                [
                    ("line", "line", ""),
                    ("intercept", "intercept MB", ".0f"),
                    ("slope", "slope", ".2f"),
                ],
            )
        )
    for skip in result["skipped"]:
        lines.append(
            f"\nskipped {skip['line']} at {skip['draws']} draws: needs "
            f"~{skip['need_bytes'] / 2**30:.1f} GiB, {skip['available_bytes'] / 2**30:.1f} GiB free"
        )
    return "\n".join(lines)


# -- command line -----------------------------------------------------------------
def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    parser = harness.script_parser(__doc__, QUICK, one=("LINE", "DRAWS"))
    parser.add_argument(
        "--draws",
        type=_int_list,
        help=f"draws per chain for the sluice lines (default {DEFAULTS['draws']})",
    )
    parser.add_argument(
        "--numpyro-draws",
        type=_int_list,
        help=f"draws per chain for NumPyro (default {DEFAULTS['numpyro_draws']})",
    )
    parser.add_argument(
        "--lines",
        type=harness.comma_list(LINES.__contains__),
        help=f"comma-separated, from {', '.join(LINES)} (default {DEFAULTS['lines']})",
    )
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--max-tree-depth", type=int, default=3)
    parser.add_argument(
        "--chunk-size", type=int, help="sluice's chunk_size (default: sluice's automatic choice)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    one = lambda line, draws: measure(line, int(draws), args)  # noqa: E731
    harness.run_script(args, DEFAULTS, QUICK, one, orchestrate, report)


if __name__ == "__main__":
    main()
