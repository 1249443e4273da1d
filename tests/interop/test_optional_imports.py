"""NumPyro, PyMC and BlackJAX are optional: sluice imports without them and names the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_importing_sluice_and_its_adapter_modules_imports_neither_library():
    code = (
        "import sys, sluice, sluice.interop.numpyro, sluice.interop.pymc, sluice.kernels\n"
        "print(sorted(m for m in ('numpyro', 'pymc', 'pytensor', 'blackjax') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]"


def test_missing_numpyro_raises_an_import_error_naming_the_extra(monkeypatch):
    from sluice.interop.numpyro import from_numpyro

    monkeypatch.setitem(sys.modules, "numpyro", None)
    with pytest.raises(ImportError, match=r"pip install 'sluice\[numpyro\]'"):
        from_numpyro(lambda: None)


def test_missing_pymc_raises_an_import_error_naming_the_extra(monkeypatch):
    from sluice.interop.pymc import from_pymc

    monkeypatch.setitem(sys.modules, "pymc", None)
    with pytest.raises(ImportError, match=r"pip install 'sluice\[pymc\]'"):
        from_pymc()


@pytest.mark.parametrize(("library", "extra"), [("blackjax", "blackjax"), ("numpyro", "numpyro")])
def test_missing_kernel_library_raises_an_import_error_naming_the_extra(
    monkeypatch, library, extra
):
    from sluice import kernels

    monkeypatch.setitem(sys.modules, library, None)
    build = kernels.from_blackjax if library == "blackjax" else kernels.from_numpyro
    with pytest.raises(ImportError, match=rf"pip install 'sluice\[{extra}\]'"):
        build(object())
