"""The workarounds of sluice._jax.compat, each with a test that fails once JAX makes it unneeded.

When one of the ``still_*`` tests fails, JAX offers a public way: use it and
delete the workaround (and its test).
"""

import functools
import inspect
import time

import jax
import jax.distributed
from jax._src import distributed as jax_distributed
from jax._src import xla_bridge
from jax._src.lib import _jax
from jax.experimental import multihost_utils

from sluice._jax import compat


# -- wait_at_barrier --------------------------------------------------------------
def test_still_no_public_barrier_in_jax_distributed():
    barriers = [name for name in dir(jax.distributed) if "barrier" in name.lower()]
    assert barriers == [], (
        f"jax.distributed now has {barriers}: use it instead of sluice._jax.compat.wait_at_barrier"
    )


def test_still_sync_global_devices_is_a_device_collective():
    source = inspect.getsource(multihost_utils.sync_global_devices)
    collective = ("assert_equal" in source) or ("process_allgather" in source)
    if "assert_equal" in source:  # which is itself an allgather over the devices
        collective = "process_allgather" in inspect.getsource(multihost_utils.assert_equal)
    assert collective, (
        "multihost_utils.sync_global_devices is no longer a device collective: it may serve "
        "as the barrier instead of sluice._jax.compat.wait_at_barrier\n" + source
    )


def test_wait_at_barrier_is_a_no_op_in_one_process():
    assert not jax.distributed.is_initialized()
    t0 = time.perf_counter()
    assert compat.wait_at_barrier("single-process", timeout_seconds=1e-3) is None
    assert time.perf_counter() - t0 < 1.0


def test_wait_at_barrier_uses_the_coordination_service_in_milliseconds(monkeypatch):
    calls = []

    class Client:
        def wait_at_barrier(self, name, timeout_ms):
            calls.append((name, timeout_ms))

    monkeypatch.setattr(jax_distributed.global_state, "client", Client())
    compat.wait_at_barrier("before-sum", 2.5)
    assert calls == [("before-sum", 2500)]


# -- gloo_on_loopback -------------------------------------------------------------
def test_still_no_gloo_address_option_in_jax_distributed_initialize():
    params = inspect.signature(jax.distributed.initialize).parameters
    options = [p for p in params if "gloo" in p.lower() or "hostname" in p.lower()]
    assert options == [], (
        f"jax.distributed.initialize now takes {options}: pass 127.0.0.1 there instead of "
        "sluice._jax.compat.gloo_on_loopback"
    )


def test_the_hooked_function_still_takes_a_hostname_and_is_looked_up_at_call_time():
    """The hook works only while JAX reads ``_jax.make_gloo_tcp_collectives`` when it
    makes the CPU client (not a reference taken at import) and it accepts ``hostname``."""
    assert "hostname" in (_jax.make_gloo_tcp_collectives.__doc__ or "")
    assert "_jax.make_gloo_tcp_collectives(" in inspect.getsource(xla_bridge)


def test_gloo_on_loopback_installs_a_loopback_partial_once():
    original = _jax.make_gloo_tcp_collectives
    base = original.func if isinstance(original, functools.partial) else original
    try:
        _jax.make_gloo_tcp_collectives = base
        assert compat.gloo_on_loopback() is True
        hooked = _jax.make_gloo_tcp_collectives
        assert isinstance(hooked, functools.partial)
        assert hooked.func is base
        assert hooked.args == () and hooked.keywords == {"hostname": "127.0.0.1"}
        assert compat.gloo_on_loopback() is True  # idempotent: no partial of a partial
        assert _jax.make_gloo_tcp_collectives is hooked
    finally:
        _jax.make_gloo_tcp_collectives = original
