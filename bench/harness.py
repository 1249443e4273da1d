"""Measurement tools shared by the benchmark scripts. Nothing here knows about samplers.

* :class:`CompileClock` — how long JAX spent compiling, from JAX's own compile events;
* :func:`rss_bytes`, :func:`peak_rss_bytes` — memory of this process;
* :func:`gradient_seconds` — the in-loop cost of one log-density gradient (the floor);
* :func:`min_ess_bulk`, :func:`max_rhat` — ArviZ diagnostics, the same call for every library;
* :func:`run_isolated` — run ``script --one ...`` in a fresh process and read back its JSON;
  :func:`run_each` — that for every repetition, model and variant;
* :func:`script_parser`, :func:`child_args`, :func:`run_script` — the command line of a script
  that measures in fresh processes of itself, saves its records and reports them;
* :func:`median`, :func:`markdown_table` — summaries.

Only the measuring process imports JAX; the orchestrating process imports
this module without importing JAX (the heavy imports are inside functions).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "RESULT_MARKER",
    "CompileClock",
    "child_args",
    "comma_list",
    "emit_result",
    "gradient_seconds",
    "machine_info",
    "markdown_table",
    "max_rhat",
    "median",
    "min_ess_bulk",
    "peak_rss_bytes",
    "rss_bytes",
    "run_each",
    "run_isolated",
    "run_script",
    "script_parser",
]

RESULT_MARKER = "@@bench-result "  # prefix of the one stdout line a measuring process returns

# The three phases JAX reports for every compilation (jaxpr tracing, lowering to
# MLIR, XLA compilation), with their start and end times.
_COMPILE_EVENTS = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)


class CompileClock:
    """Time spent compiling, for any library, measured by JAX itself.

    Installs a ``jax.monitoring`` listener that records the (start, end) span
    of every trace, lowering and XLA compilation. :meth:`seconds` returns the
    length of the union of those spans inside a window, so nested tracing is
    not counted twice. Windows are given in :meth:`now` time (the wall clock
    JAX stamps its events with).
    """

    def __init__(self) -> None:
        import jax.monitoring

        self._spans: list[tuple[float, float]] = []
        jax.monitoring.register_event_time_span_listener(self._on_span)

    def _on_span(self, event: str, start: float, end: float, **_: Any) -> None:
        if event in _COMPILE_EVENTS:
            self._spans.append((start, end))

    @staticmethod
    def now() -> float:
        return time.time()

    def seconds(self, start: float = -math.inf, end: float = math.inf) -> float:
        """Seconds of compilation (union of spans) between ``start`` and ``end``."""
        clipped = sorted(
            (max(s, start), min(e, end)) for s, e in self._spans if e > start and s < end
        )
        total, cursor = 0.0, -math.inf
        for s, e in clipped:
            if e > cursor:
                total += e - max(s, cursor)
                cursor = e
        return total


def rss_bytes() -> int:
    """Resident set size of this process now."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int:
    """Largest resident set size this process has had (Linux ``ru_maxrss`` is in KiB)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def gradient_seconds(
    logdensity_fn: Callable,
    point: Any,
    batch: int | None = None,
    min_call_seconds: float = 0.02,
    repeats: int = 7,
) -> float:
    """Seconds per log-density gradient inside a compiled loop: the floor a sampler can reach.

    Times ``jit(lax.scan(value_and_grad(logdensity_fn)))``, each step moving
    the point by a tiny multiple of the gradient so that no step can be
    hoisted out of the loop. With ``batch``, the gradient is ``vmap``-ed over
    ``batch`` copies of the point (as a vectorized sampler evaluates it) and
    the time is divided by ``batch``. The scan length is chosen so that one
    call lasts at least ``min_call_seconds``; the fastest of ``repeats`` calls
    is kept (a floor: other processes can only slow a call down).
    """
    import jax
    import jax.numpy as jnp

    value_and_grad = jax.value_and_grad(logdensity_fn)
    if batch is not None:
        value_and_grad = jax.vmap(value_and_grad)
        point = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch, *x.shape)), point)

    def step(carry, _):
        x, total = carry
        value, grad = value_and_grad(x)
        x = jax.tree.map(lambda xi, gi: xi + 1e-6 * gi, x, grad)
        return (x, total + jnp.sum(value)), None

    def timed(length: int) -> float:
        loop = jax.jit(lambda x: jax.lax.scan(step, (x, jnp.float32(0.0)), length=length)[0])
        jax.block_until_ready(loop(point))  # compile and warm up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(loop(point))
            times.append(time.perf_counter() - start)
        return min(times)

    length = 16
    seconds = timed(length)
    if seconds < min_call_seconds:
        length = math.ceil(length * min_call_seconds / max(seconds, 1e-9))
        seconds = timed(length)
    return seconds / (length * (batch or 1))


def _as_dataset(draws: dict[str, Any]) -> Any:
    import arviz as az

    return az.convert_to_dataset({k: v for k, v in draws.items()})


def min_ess_bulk(draws: dict[str, Any]) -> float:
    """Smallest bulk ESS over every scalar of ``draws`` ``{name: (chain, draw, ...)}`` (ArviZ)."""
    import arviz as az

    ess = az.ess(_as_dataset(draws), method="bulk")
    return float(min(float(ess[name].min()) for name in ess.data_vars))


def max_rhat(draws: dict[str, Any]) -> float:
    """Largest rank-normalized split R-hat over every scalar of ``draws`` (ArviZ)."""
    import arviz as az

    rhat = az.rhat(_as_dataset(draws))
    return float(max(float(rhat[name].max()) for name in rhat.data_vars))


def scaled_gaussian_draws(dim: int, seed: int, **options: Any) -> Any:
    """``(4, 1000, dim)`` NUTS draws (500 warmup iterations) of the statistics' test
    Gaussian: independent, scales ``exp(linspace(-1, 1, dim))`` (in [e^-1, e])."""
    import jax.numpy as jnp
    import numpy as np

    import sluice

    scales = jnp.exp(jnp.linspace(-1.0, 1.0, dim))
    model = sluice.Model(lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2),
                         init={"x": jnp.zeros(dim)})  # fmt: skip
    run = sluice.sample(model, chains=4, warmup=500, draws=1000, seed=seed, progress=False,
                        **options)  # fmt: skip
    return np.asarray(run.draws["x"])


def machine_info() -> dict[str, Any]:
    """Where and when the numbers were measured, with library versions."""
    from importlib import metadata

    versions = {}
    for package in ("jax", "jaxlib", "blackjax", "numpyro", "arviz"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "versions": versions,
    }


# -- processes ----------------------------------------------------------------
def emit_result(result: dict[str, Any]) -> None:
    """Print the measuring process's result as the one marked JSON line on stdout."""
    print(RESULT_MARKER + json.dumps(result), flush=True)


def run_isolated(script: str, args: Sequence[str], timeout: float | None = None) -> dict[str, Any]:
    """Run ``python script *args`` in a fresh process and return the result it emitted.

    A fresh process per measurement keeps peak RSS (which only grows), JAX's
    backend settings and compile caches from leaking between measurements.
    The child's stderr is shown only if it fails.
    """
    command = [sys.executable, script, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"measurement failed (exit {proc.returncode}): {' '.join(command)}\n"
            f"--- stderr (tail) ---\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len(RESULT_MARKER) :])


def run_each(script: str, reps: int, models: Sequence[str], variants: Sequence[str],
             extra: Callable[[int], Sequence[str]] = lambda rep: ("--seed", str(rep + 1)),
             timeout: float = 3600) -> list[dict[str, Any]]:  # fmt: skip
    """:func:`run_isolated` ``script --one MODEL VARIANT *extra(rep)`` for every repetition,
    model and variant (their order rotated by one at every repetition, so that each variant
    takes each slot in turn), each result echoed to stderr."""
    records = []
    for rep in range(reps):
        shift = rep % len(variants)
        for model in models:
            for variant in [*variants[shift:], *variants[:shift]]:
                args = ["--one", model, variant, *extra(rep)]
                records.append(run_isolated(script, args, timeout=timeout))
                print(json.dumps(records[-1]), file=sys.stderr, flush=True)
    return records


def script_parser(doc: str, quick: dict[str, Any], one: tuple[str, str]) -> argparse.ArgumentParser:
    """``--quick`` (the settings ``quick``, see :func:`run_script`), ``--json PATH``,
    ``--report PATH`` and the internal ``--one`` (two arguments, named ``one``)."""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run from the repository root with sluice importable (e.g. PYTHONPATH=src).",
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke-test defaults: {quick}")
    parser.add_argument(
        "--json", metavar="PATH", help="also write all records and settings as JSON"
    )
    parser.add_argument("--report", metavar="PATH", help="print the report of a saved --json file")
    parser.add_argument("--one", nargs=2, metavar=one,
                        help="internal: one measurement in this process, printed as JSON")  # fmt: skip
    return parser


def comma_list(valid: Callable[[str], bool] = lambda _: True) -> Callable[[str], list[str]]:
    """An argparse ``type``: comma-separated names, each ``valid``."""

    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        if bad := [n for n in names if not valid(n)]:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(bad)}")
        return names

    return parse


def child_args(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """``args``' values of ``names`` as a child process takes them (None left out)."""
    flags = []
    for name in names:
        value, flag = getattr(args, name), name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        elif value is not None:
            flags.append(f"--{flag}={value}")
    return flags


def run_script(args: argparse.Namespace, defaults: dict[str, Any], quick: dict[str, Any],
               one: Callable[[str, str], dict[str, Any]],
               orchestrate: Callable[[argparse.Namespace], dict[str, Any]],
               report: Callable[[dict[str, Any]], str]) -> None:  # fmt: skip
    """``--one A B``: emit ``one(A, B)``; ``--report PATH``: print the report of that file;
    else ``orchestrate``, save its result (``--json``, first: the measurements survive any
    reporting error) and print its report. Settings not given take ``quick``'s values
    (``--quick``) or ``defaults``'."""
    for name, value in (quick if args.quick else defaults).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.one:
        return emit_result(one(*args.one))
    if args.report:
        with open(args.report) as f:
            return print(report(json.load(f)))
    result = orchestrate(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(report(result))
    machine = result["machine"]
    print(f"\n{machine['date']}; {result['elapsed_s']:.0f} s in all; "
          f"load average at the end {machine['load_average']}", file=sys.stderr)  # fmt: skip


# -- summaries ----------------------------------------------------------------
def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not None (None if there are none)."""
    kept = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(kept) if kept else None


def markdown_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str, str]],
    left: Sequence[str] = (),
) -> str:
    """A Markdown table of ``rows``; ``columns`` are ``(key, header, format spec)``.

    The first column and the columns whose keys are in ``left`` are left-aligned,
    the others right-aligned.
    """

    def cell(value: Any, spec: str) -> str:
        if value is None:
            return "–"
        if isinstance(value, str):
            return value
        return format(value, spec)

    header = "| " + " | ".join(h for _, h, _ in columns) + " |"
    rule = (
        "|"
        + "|".join(
            "---" if i == 0 or key in left else "---:" for i, (key, _, _) in enumerate(columns)
        )
        + "|"
    )
    body = [
        "| " + " | ".join(cell(row.get(k), spec) for k, _, spec in columns) + " |" for row in rows
    ]
    return "\n".join([header, rule, *body])
