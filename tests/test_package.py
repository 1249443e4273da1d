"""Package-level properties: imports are cheap and pure."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


def test_import_starts_no_backend_so_distributed_can_initialize_after_it():
    out = run_python(
        "from jax._src import xla_bridge as xb\nimport sluice\nprint(bool(xb._backends))"
    )
    assert out.strip() == "False"


def test_traced_modules_pull_in_no_io_libraries():
    code = (
        "import sys\n"
        "import sluice.model, sluice.mcmc.kernels, sluice.mcmc.adaptation, sluice.mcmc.chunk, sluice.stats\n"
        "import sluice.kernels, sluice.interop.blackjax_kernel, sluice.interop.numpyro_kernel\n"
        "print(sorted(m for m in ('tqdm', 'zarr', 'arviz', 'matplotlib') if m in sys.modules))"
    )
    assert run_python(code).strip() == "[]"


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).with_name(name))


def test_the_layers_hold():
    """The import contracts of pyproject.toml (docs/architecture.md, "Contracts")."""
    out = subprocess.run(
        [_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_no_module_is_longer_than_800_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "src").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 800
    }
    assert long == {}
