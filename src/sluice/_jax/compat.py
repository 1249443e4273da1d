"""The few things sluice needs from JAX that JAX does not offer publicly.

Each workaround here has a test in ``tests/_jax/test_compat.py`` that fails
once JAX offers a public way (then use it and delete the workaround).

* :func:`wait_at_barrier`: a barrier over the coordination service, with a
  timeout of our choosing (a dead peer still ends the wait within JAX's
  heartbeat). ``multihost_utils.sync_global_devices`` is a device collective
  whose gloo rendezvous has a fixed 30 s deadline.
* :func:`gloo_on_loopback`: gloo's TCP transport binds and advertises the
  machine's hostname, which may not resolve; ``jax.distributed.initialize``
  has no option for the address gloo uses.
"""

from __future__ import annotations

import functools

__all__ = ["gloo_on_loopback", "wait_at_barrier"]


def wait_at_barrier(name: str, timeout_seconds: float) -> None:
    """Block until every process reaches barrier ``name`` (no-op in one process)."""
    from jax._src import distributed

    client = distributed.global_state.client
    if client is not None:
        client.wait_at_barrier(name, int(timeout_seconds * 1000))


def gloo_on_loopback() -> bool:
    """Make gloo bind and advertise 127.0.0.1; ``True`` if the hook was installed."""
    try:
        from jax._src.lib import _jax
    except ImportError:  # pragma: no cover - other jaxlib layouts
        return False
    make = getattr(_jax, "make_gloo_tcp_collectives", None)
    if make is None:
        return False
    if not isinstance(make, functools.partial):
        _jax.make_gloo_tcp_collectives = functools.partial(make, hostname="127.0.0.1")
    return True
