"""Run the benchmark areas and regenerate ``BENCHMARKS.md`` from their raw outputs.

From the repository root::

    python -m bench list              # the areas and the commands each runs
    python -m bench all               # run every area, save raw outputs, rewrite BENCHMARKS.md
    python -m bench mcmc latency      # run these areas only (then rewrite BENCHMARKS.md)
    python -m bench stats-scale/million  # one job of an area (jobs too long for all: only so)
    python -m bench report            # rewrite BENCHMARKS.md from the newest raw outputs

Each job (a bench script at the settings ``BENCHMARKS.md`` reports) runs in
its own process with ``src/`` on ``PYTHONPATH``; its stdout, stderr and JSON
go to ``bench/results/<YYYY-MM-DD>/<job>.{txt,err,json}`` (UTC date) with
``<job>.meta.json`` (command, machine, times, exit status). ``report`` keeps,
for every figure, the newest raw output that holds it, and rewrites only the
tables of ``BENCHMARKS.md`` (between their markers; see ``bench/report.py``).

``--quick`` runs every job at smoke-test settings (seconds to a minute each),
writes to a temporary results folder unless ``--results`` is given, and never
touches ``BENCHMARKS.md`` unless ``--output`` is given; ``report`` ignores
quick outputs unless ``--include-quick``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # harness, areas, mcmc: as the scripts

import areas
import harness
import report

BENCHMARKS_MD = areas.ROOT / "BENCHMARKS.md"


# -- running --------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = areas.ROOT / "src"
    if src.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return env


def _device() -> dict[str, str]:
    """JAX's default backend and device kind, from a short child process."""
    code = "import jax; d = jax.devices()[0]; print(jax.default_backend()); print(d.device_kind)"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=300,
            check=True,
        )
        backend, kind = [*proc.stdout.strip().splitlines(), "", ""][:2]
        return {"backend": backend, "device": kind}
    except (subprocess.SubprocessError, OSError):
        return {"backend": "", "device": ""}


def run_job(area: areas.Area, job: areas.Job, folder: Path, quick: bool, machine: dict) -> bool:
    """Run one job, its outputs into ``folder``; True if it exited with 0."""
    folder.mkdir(parents=True, exist_ok=True)
    stdout, stderr = folder / f"{job.name}.txt", folder / f"{job.name}.err"
    json_path = folder / f"{job.name}.json" if job.json else None
    if json_path is not None and json_path.exists():
        json_path.unlink()  # a failed run must not leave an older file behind
    argv = job.argv(quick, None if json_path is None else str(json_path))
    started = datetime.datetime.now(datetime.UTC)
    print(
        f"[{started:%H:%M:%S}] {area.name}/{job.name}: {areas.display_command(argv)}",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    with stdout.open("w") as out, stderr.open("w") as err:
        rc = subprocess.run(
            [sys.executable, *argv], stdout=out, stderr=err, env=_env(), cwd=areas.ROOT, check=False
        ).returncode
    ended = datetime.datetime.now(datetime.UTC)
    meta = {
        "area": area.name,
        "job": job.name,
        "argv": argv,
        "command": areas.display_command(argv),
        "quick": quick,
        "rc": rc,
        "started": started.isoformat(timespec="seconds"),
        "ended": ended.isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "machine": machine,
        "stdout": stdout.name,
        "stderr": stderr.name,
        "json": json_path.name if json_path is not None and json_path.exists() else None,
    }
    (folder / f"{job.name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    status = "ok" if rc == 0 else f"FAILED (exit {rc}; see {stderr})"
    print(f"    {meta['elapsed_s']:.0f} s, {status}", file=sys.stderr, flush=True)
    return rc == 0


def run_areas(names: list[str], results: Path, quick: bool) -> bool:
    machine = {**harness.machine_info(), **_device()}
    folder = results / datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    ok = True
    for name in names:
        area_name, _, job_name = name.partition("/")
        area = areas.area(area_name)
        for job in area.jobs:
            if job_name == job.name or (job_name == "" and not job.explicit):
                ok &= run_job(area, job, folder, quick, machine)
    print(f"raw outputs in {folder}", file=sys.stderr)
    return ok


def write_report(output: Path, results: Path, include_quick: bool) -> None:
    template = output if output.exists() else BENCHMARKS_MD
    output.write_text(report.render(template.read_text(), results, include_quick))
    print(f"wrote {output}", file=sys.stderr)


# -- command line -----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    names = [a.name for a in areas.AREAS]
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"areas: {', '.join(names)}",
    )
    parser.add_argument("what", nargs="+", metavar="all|list|report|AREA|AREA/JOB")
    parser.add_argument("--quick", action="store_true", help="smoke-test settings")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results root (default bench/results; with --quick a temporary folder)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="the report file (default BENCHMARKS.md; with --quick none)",
    )
    parser.add_argument(
        "--include-quick", action="store_true", help="let the report use quick (smoke-test) outputs"
    )
    parser.add_argument("--no-report", action="store_true", help="run only")
    args = parser.parse_args(argv)
    what = args.what

    if what == ["list"]:
        for area in areas.AREAS:
            print(f"{area.name}:")
            for job in area.jobs:
                print(f"    {areas.display_command(job.argv(args.quick, None))}")
        return 0

    results = args.results
    if results is None:
        results = (
            Path(tempfile.gettempdir()) / "sluice-bench-quick" if args.quick else (areas.RESULTS)
        )
    include_quick = args.include_quick or args.quick

    if what == ["report"]:
        write_report(args.output or BENCHMARKS_MD, results, include_quick)
        return 0

    run = names if what == ["all"] else what
    jobs = {f"{a.name}/{j.name}" for a in areas.AREAS for j in a.jobs}
    unknown = [n for n in run if n not in names and n not in jobs]
    if unknown:
        parser.error(
            f"unknown area(s) {unknown}; choose from all, list, report, {', '.join(names)}, "
            "or AREA/JOB"
        )
    ok = run_areas(run, results, args.quick)
    output = args.output or (None if args.quick else BENCHMARKS_MD)
    if output is not None and not args.no_report:
        write_report(output, results, include_quick)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
