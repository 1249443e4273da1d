"""``BENCHMARKS.md`` from the raw outputs: the tables between their markers, the prose kept.

``BENCHMARKS.md`` is written by hand except between marker comments: the list
of machines between ``<!-- bench:machines -->`` and ``<!-- /bench:machines -->``,
and each area's table between ``<!-- bench:table AREA -->`` and
``<!-- /bench:table -->``. :func:`render` rewrites what lies between them from
the raw outputs, keeping for every figure the newest raw output that holds it,
and leaves the rest of the file as it is. An area without markers gets a
section of its own at the end, for its prose to be written around it.

Raw outputs are found in two places:

* ``bench/results/<YYYY-MM-DD>/<job>.{txt,err,json}`` with
  ``<job>.meta.json`` (command, machine, start and end time), written by
  ``python -m bench``;
* the areas' ``legacy`` entries, raw outputs saved without a meta file.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import areas
import harness
from areas import RESULTS, ROOT, Legacy, display_command
from parsers import Output, Row

# The machine every raw output of a Legacy entry ran on (from their JSON records and
# the measurements' notes): label shown in the tables, details in the list of machines.
LEGACY_MACHINE = "2-core x86_64, CPU, 23.5 GiB"
LEGACY_MACHINE_DETAILS = (
    "a 2-core x86_64 VM (AMD EPYC), 23.5 GiB of RAM, no GPU; Linux 6.18, Python 3.11.7, "
    "jax/jaxlib 0.10.2, NumPyro 0.22.0, BlackJAX 1.7.1, ArviZ 0.23.4, Zarr 3.1.6; shared with "
    "other work, so a figure from one repetition is indicative and differences of about 15% "
    "between runs are noise"
)
TABLE_END = "<!-- /bench:table -->"
TAIL = (
    ("command", "command", ""),
    ("machine", "machine", ""),
    ("date", "date", ""),
    ("source", "raw output", ""),
)


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


def rows(area: areas.Area, results: Path, include_quick: bool) -> list[Row]:
    """The area's current figures: for every key, the row of the newest raw output."""
    outputs: list[tuple[Output, Legacy | None]] = []
    for entry in area.legacy:
        try:
            outputs.append((legacy_output(entry), entry))
        except (OSError, KeyError, ValueError) as error:
            print(f"warning: {entry.path}: {error}", file=sys.stderr)
    jobs = [j.name for j in area.jobs]
    outputs += [
        (run.output(), None) for run in runs(results, include_quick) if run.meta.get("job") in jobs
    ]
    newest: dict[tuple, Row] = {}
    for out, entry in outputs:
        try:
            parsed = area.job(out.job).parse(out)
        except Exception as error:  # an output this parser cannot read: say so, go on
            print(
                f"warning: cannot read {out.source} ({type(error).__name__}: {error})",
                file=sys.stderr,
            )
            continue
        for i, row in enumerate(parsed):
            if entry is not None and entry.keep is not None and not entry.keep(row):
                continue
            row = {
                **row,
                "command": f"`{out.command}`",
                "machine": out.machine,
                "date": out.date,
                "source": f"`{out.source}`",
                "_when": out.when,
                "_order": (jobs.index(out.job), i),
            }
            key = area.key(row)
            if key not in newest or row["_when"] >= newest[key]["_when"]:
                newest[key] = row
    return sorted(newest.values(), key=area.rank or (lambda r: r["_order"]))


def _machines(shown: set[str], results: Path, include_quick: bool) -> str:
    details = {LEGACY_MACHINE: LEGACY_MACHINE_DETAILS}
    for run in runs(results, include_quick):
        details.setdefault(machine_label(run.meta["machine"]), machine_details(run.meta["machine"]))
    return "\n".join(f"* **{label}**: {details.get(label, label)}." for label in sorted(shown))


def _between(text: str, start: str, end: str, body: str) -> tuple[str, bool]:
    """``text`` with what lies between the markers ``start`` and ``end`` replaced by ``body``."""
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    new, count = pattern.subn(lambda _: f"{start}\n{body}\n{end}", text)
    return new, count > 0


def render(text: str, results: Path, include_quick: bool = False) -> str:
    """``text`` (``BENCHMARKS.md``) with its tables and list of machines regenerated."""
    shown = set()
    for area in areas.AREAS:
        found = rows(area, results, include_quick)
        shown |= {row["machine"] for row in found}
        columns = [*area.columns, *TAIL]
        left = (*area.left, *(key for key, _, _ in TAIL))
        body = (
            harness.markdown_table(found, columns, left=left)
            if found
            else f"No raw output yet: `python -m bench {area.name}`."
        )
        start = f"<!-- bench:table {area.name} -->"
        text, found_markers = _between(text, start, TABLE_END, body)
        if not found_markers:
            print(f"warning: no markers for {area.name}: a section at the end", file=sys.stderr)
            text += f"\n## {area.name}\n\n{start}\n{body}\n{TABLE_END}\n"
    machines = _machines(shown, results, include_quick)
    text, _ = _between(text, "<!-- bench:machines -->", "<!-- /bench:machines -->", machines)
    return text
