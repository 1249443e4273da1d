"""Test set-up: CPU only, with 4 virtual CPU devices standing in for a GPU cluster.

This must run before anything initialises the JAX backend; pytest imports
conftest.py before the test modules.
"""

import os
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "4")
# Most tests never read run.summary(): compiling every run's merge and finalize in
# the background would add minutes of CPU to the suite. tests/_jax/test_compile.py and tests/runtime/test_statistics.py turn
# it back on where it is under test.
os.environ.setdefault("SLUICE_BACKGROUND_COMPILE", "0")
warnings.filterwarnings("ignore", message=".*ArviZ is undergoing a major refactor.*")


import arviz as az  # noqa: E402
import pytest  # noqa: E402  (after the environment is set)

# The references are ArviZ's NumPy code paths. With numba installed (PyMC brings
# it) ArviZ switches to numba kernels whose az.mcse returns a (1,)-shaped array
# for one chain set, which float() rejects under NumPy 2.
az.Numba.disable_numba()


@pytest.fixture(autouse=True, scope="module")
def _fresh_compile_caches():
    """Drop compiled programs after each test module.

    A long session otherwise accumulates hundreds of executables in one
    process (JAX's caches and sluice's program cache); that costs memory and
    once ended in a crash inside XLA's compiler late in a full run.
    """
    yield
    from sluice._jax import compile as programs

    programs.clear_caches()
