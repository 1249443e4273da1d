"""Test set-up: CPU only, with 4 virtual CPU devices standing in for a GPU cluster.

This must run before anything initialises the JAX backend; pytest imports
conftest.py before the test modules.
"""

import atexit
import os
import shutil
import tempfile
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "4")
# Most tests never read run.summary(): compiling every run's merge and finalize in
# the background would add minutes of CPU to the suite. tests/_jax/test_compile.py and tests/runtime/test_statistics.py turn
# it back on where it is under test.
os.environ.setdefault("SLUICE_BACKGROUND_COMPILE", "0")
# Every program of the suite compiles without XLA's newer CPU fusion emitters. They
# change code generation, not what a program computes, and the suite is mostly compile
# time (the classic emitters compile a small model's programs sooner: `python -m bench
# chunk-trace`). Child processes inherit the flag. Users' runs keep XLA's defaults for
# large programs, whose code compiles slower and samples some models faster. The
# backend's optimisation level stays: two of the bit-identity tests (draws on four
# devices against one, streamed statistics against stored draws) fail at level 0.
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    _flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_cpu_use_fusion_emitters=false".strip()
# One persistent compilation cache for the whole session: its worker processes and the
# child processes tests start share it. Modules drop their compiled programs (below) and
# child processes start cold, so the same programs would otherwise compile again and again.
# The first process to load this file makes the folder (the workers inherit the variable).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="sluice-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
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


# The files that take over a minute of a worker's time (pytest's junit report, this
# project's 2-core machine), slowest first. pytest-xdist's `--dist loadfile` hands whole
# files to workers in collection order: started first, they no longer leave one worker
# finishing a long file while the other idles at the end of the run.
SLOW_FILES = (
    "tests/runtime/test_multiprocess.py",
    "tests/stats/test_stats_laws.py",
    "tests/interop/test_external_kernels.py",
    "tests/io/test_store.py",
    "tests/interop/test_numpyro_adapter.py",
    "tests/interop/test_external_resume.py",
    "tests/interop/test_pymc_adapter.py",
    "tests/mcmc/test_kernels.py",
    "tests/stats/test_stats_accuracy.py",
    "tests/stats/test_stats_doctests.py",
    "tests/io/test_reliability.py",
    "tests/io/test_store_safety.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    root = config.rootpath

    def key(item):
        path = item.path.relative_to(root).as_posix()
        return rank.get(path, len(SLOW_FILES))

    items.sort(key=key)  # stable: every file keeps its own order
