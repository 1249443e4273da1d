"""The README's quick-start code runs as written (the notebook's log_joint, unchanged)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_quick_start_code_runs_as_written(capsys):
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    block = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    assert "def log_joint(beta):" in block
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "beta[0]" in out and "beta[9]" in out and "r_hat" in out
