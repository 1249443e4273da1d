"""``import sluice`` gives JAX one CPU device per core unless someone chose already.

Each case is a fresh process: the choice is made once, before JAX's backend starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPORT = (
    "import json, os, jax, sluice\n"
    "c = sluice.cpu_devices()\n"
    "print(json.dumps({'devices': len(jax.devices()), 'cores': len(os.sched_getaffinity(0)),"
    " 'requested': c.requested, 'reason': c.reason}))\n"
)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS", "SLUICE_CPU_DEVICES")}  # fmt: skip
    clean.update(env, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean)


def _report(**env: str) -> dict:
    proc = _run(REPORT, **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_one_device_per_usable_core_by_default():
    out = _report()
    assert out["devices"] == out["cores"]
    if out["cores"] > 1:
        assert out["requested"] == out["cores"]


def test_the_environment_variable_chooses_the_count():
    out = _report(SLUICE_CPU_DEVICES="3")
    assert (out["devices"], out["requested"]) == (3, 3)
    out = _report(SLUICE_CPU_DEVICES="1")
    assert (out["devices"], out["requested"]) == (1, None)


def test_a_count_the_user_chose_is_left_alone():
    out = _report(JAX_NUM_CPU_DEVICES="1")
    assert (out["devices"], out["requested"]) == (1, None)
    assert "jax_num_cpu_devices=1" in out["reason"]
    out = _report(XLA_FLAGS="--xla_force_host_platform_device_count=5", SLUICE_CPU_DEVICES="3")
    assert (out["devices"], out["requested"]) == (5, None)
    assert "xla_force_host_platform_device_count" in out["reason"]


def test_a_bad_value_is_named():
    proc = _run("import sluice", SLUICE_CPU_DEVICES="many")
    assert proc.returncode != 0
    assert "SLUICE_CPU_DEVICES must be a whole number of CPU devices, got 'many'" in proc.stderr
    proc = _run("import sluice", SLUICE_CPU_DEVICES="0")
    assert "SLUICE_CPU_DEVICES must be at least 1, got '0'" in proc.stderr


def test_a_backend_started_before_import_is_reported_once_when_a_run_could_use_more_cores():
    code = (
        "import warnings, jax, jax.numpy as jnp\n"
        "jnp.ones(1).block_until_ready()\n"  # the backend starts: too late for more devices
        "import sluice\n"
        "sluice._jax.cores.usable_cores = lambda: 4\n"  # as on a 4-core machine
        "print(sluice.cpu_devices().requested, len(jax.devices()))\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(2):\n"
        "        sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(2), chains=2,\n"
        "                      warmup=5, draws=5, progress=False)\n"
        "import json\n"
        "print(json.dumps([str(w.message) for w in caught if w.category is RuntimeWarning]))\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    first, messages = proc.stdout.strip().splitlines()[-2:]
    assert first == "None 1"
    messages = json.loads(messages)
    assert len(messages) == 1, messages
    assert "2 chains share JAX's one CPU device" in messages[0]
    assert "JAX_NUM_CPU_DEVICES=4" in messages[0]


def test_a_cpu_run_holds_openblas_to_one_thread_and_restores_it():
    """Inside a run on CPU devices every BLAS threadpool threadpoolctl sees has one
    thread (each core is a device already); the caller's setting is back afterwards."""
    import jax
    import jax.numpy as jnp
    from threadpoolctl import threadpool_info, threadpool_limits

    import sluice

    def threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    seen = []

    def log_density(x):
        jax.debug.callback(lambda: seen.append(threads()))
        return -0.5 * jnp.sum(x**2)

    with threadpool_limits(limits=2, user_api="blas"):
        before = threads()
        sluice.sample(log_density, init=jnp.zeros(2), chains=2, warmup=5, draws=5,
                      progress=False, sink=None)  # fmt: skip
        after = threads()
    assert before and after == before
    assert seen and all(n == [1] * len(before) for n in seen)
