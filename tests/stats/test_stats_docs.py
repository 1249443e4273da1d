"""The worked examples of docs/statistics.md run; the statistics layer stays pure."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "statistics.md"
STATS = ROOT / "src" / "sluice" / "stats"


def _blocks_after(heading: str) -> list[str]:
    text = DOC.read_text()
    section = text[text.index(heading) :]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_examples_run_in_order():
    """Every example of the page, in order, in one namespace (later ones reuse names)."""
    blocks = _blocks_after("# Streaming statistics")
    assert len(blocks) == 7
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # the blocks assert their results
    assert 0.66 < float(namespace["probability"]) < 0.72
    assert set(namespace["run"].stats) == {"summary", "p"}


@pytest.mark.parametrize("path", sorted(STATS.glob("*.py")), ids=lambda p: p.name)
def test_no_io_or_report_libraries_at_import(path):
    """Pure modules: no tqdm, zarr, arviz or pandas imported at module level, no printing."""
    tree = ast.parse(path.read_text())
    banned = {"tqdm", "zarr", "arviz", "pandas"}
    for node in tree.body:  # module level only: pandas is imported inside summary_table
        names = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        assert not banned & set(names), f"{path.name} imports {banned & set(names)}"
    assert not any(
        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "print" for n in ast.walk(tree)
    ), f"{path.name} prints"
