"""NumPyro, PyMC and BlackJAX are optional: sluice imports without them and names the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_importing_sluice_and_its_adapter_modules_imports_neither_library():
    code = (
        "import sys, sluice, sluice.interop.numpyro, sluice.interop.pymc, sluice.kernels, "
        "sluice.pymc\n"
        "print(sorted(m for m in ('numpyro', 'pymc', 'pytensor', 'blackjax') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]"


SPELLINGS = {
    "import sluice.pymc": "import sluice.pymc\nfound = sluice.pymc.sample",
    "from sluice.pymc import sample": "from sluice.pymc import sample as found",
    "sluice.pymc after import sluice": "import sluice\nfound = sluice.pymc.sample",
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_sluice_pymc_is_a_module_in_every_spelling_without_importing_pymc(spelling):
    """Each spelling in a fresh interpreter finds the adapter's `sample`; `import sluice`
    alone leaves `sluice.pymc` unimported, and none of them imports PyMC."""
    code = (
        "import sys\n"
        "import sluice\n"
        "print('sluice.pymc' in sys.modules)\n"
        f"{SPELLINGS[spelling]}\n"
        "import sluice.interop.pymc as adapter\n"
        "print(found is adapter.sample, type(sys.modules['sluice.pymc']).__name__)\n"
        "print(sluice.pymc.from_pymc is adapter.from_pymc, 'pymc' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.split() == ["False", "True", "module", "True", "False"]


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
