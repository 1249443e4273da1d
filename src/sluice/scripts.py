"""Models defined in Python scripts (``sluice sample FILE.py``)."""

from __future__ import annotations

import hashlib
import os
import runpy
from pathlib import Path
from typing import Any

__all__ = ["load_model_script", "script_source"]


def script_source(path: str | os.PathLike) -> dict[str, str]:
    """``{"script": absolute path, "sha256": digest}`` recorded in a store."""
    path = Path(path).resolve()
    return {"script": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def load_model_script(path: str | os.PathLike, expected_sha256: str | None = None) -> Any:
    """Run a script and return its ``model`` (a ``sluice.Model`` or a log-density with ``init``).

    A script defines ``model = sluice.Model(...)``, or ``log_density`` and
    ``init``. With ``expected_sha256``, a script that changed since is refused.
    """
    from sluice.model import Model, as_model

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model script {path} does not exist")
    if expected_sha256 is not None:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != expected_sha256:
            raise ValueError(
                f"model script {path} changed since the run started (sha256 {digest[:12]}... "
                f"!= {expected_sha256[:12]}...); resuming with a different model is refused"
            )
    namespace = runpy.run_path(str(path), run_name="__sluice_model__")
    if isinstance(namespace.get("model"), Model):
        return namespace["model"]
    for name in ("model", "log_density"):
        if callable(namespace.get(name)) and "init" in namespace:
            return as_model(namespace[name], namespace["init"])
    raise ValueError(
        f"model script {path} must define `model = sluice.Model(...)`, or `log_density` and `init`"
    )
