"""Package-level properties: imports are cheap and pure."""

import subprocess
import sys


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
        "import sluice.model, sluice.kernels, sluice.adaptation, sluice.chunk, sluice.stats\n"
        "print(sorted(m for m in ('tqdm', 'zarr', 'arviz', 'matplotlib') if m in sys.modules))"
    )
    assert run_python(code).strip() == "[]"
