"""Multi-process start-up with safe defaults, over ``jax.distributed``.

Call :func:`initialize` at the top of a script, before anything touches a JAX
device; started by ``sluice launch`` it needs no arguments, and on SLURM or with
MPI JAX's own cluster detection fills them in. Its defaults end a broken job in
bounded time (docs/distributed.md, "Failures end in bounded time").
"""

from __future__ import annotations

import itertools
import os
import sys
import traceback
from typing import Any

import jax

from sluice._jax import compat

__all__ = ["barrier", "initialize", "is_initialized"]

ENV_COORDINATOR = "SLUICE_COORDINATOR"
ENV_NUM_PROCESSES = "SLUICE_NUM_PROCESSES"
ENV_PROCESS_ID = "SLUICE_PROCESS_ID"
ENV_LOCAL_DEVICES = "SLUICE_LOCAL_DEVICES"

_barrier_count = itertools.count()


def is_initialized() -> bool:
    """Whether this process joined a multi-process run."""
    return jax.distributed.is_initialized()


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_count: int | None = None,
    platform: str | None = None,
    initialization_timeout: int = 120,
    heartbeat_timeout_seconds: int = 10,
    shutdown_timeout_seconds: int = 60,
    fail_fast: bool = True,
    **jax_kwargs: Any,
) -> None:
    """Join a multi-process run (a thin layer over ``jax.distributed.initialize``).

    Without arguments, outside ``sluice launch`` and outside a cluster that
    JAX detects, this does nothing: the script runs as one process.

    Parameters
    ----------
    coordinator_address, num_processes, process_id
        As in ``jax.distributed.initialize``. When all are omitted they are
        read from ``sluice launch``'s ``SLUICE_*`` variables, or else left to
        JAX's cluster detection (SLURM, Open MPI, ...).
    local_device_count
        Number of CPU devices this process exposes (``jax_num_cpu_devices``);
        defaults to ``SLUICE_LOCAL_DEVICES`` when launched by ``sluice launch``.
    platform
        Force a JAX platform (``"cpu"``, ``"gpu"``); defaults to
        ``JAX_PLATFORMS`` or JAX's own choice.
    initialization_timeout, heartbeat_timeout_seconds, shutdown_timeout_seconds
        Bounded waits for peers (seconds; docs/distributed.md, "Failures end in
        bounded time").
    fail_fast
        Install an exception hook that exits at once after printing an
        uncaught exception.
    **jax_kwargs
        Passed on to ``jax.distributed.initialize``.
    """
    if is_initialized():
        return
    env = os.environ
    if coordinator_address is None and ENV_COORDINATOR in env:  # launched by sluice launch
        coordinator_address = env[ENV_COORDINATOR]
        num_processes = int(env[ENV_NUM_PROCESSES])
        process_id = int(env[ENV_PROCESS_ID])
        if local_device_count is None and env.get(ENV_LOCAL_DEVICES):
            local_device_count = int(env[ENV_LOCAL_DEVICES])
    if platform is not None:
        jax.config.update("jax_platforms", platform)
    if local_device_count is not None:
        jax.config.update("jax_num_cpu_devices", int(local_device_count))
    jax.config.update("jax_enable_preemption_service", False)
    kwargs: dict[str, Any] = dict(
        initialization_timeout=initialization_timeout,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
        shutdown_timeout_seconds=shutdown_timeout_seconds,
    )
    if coordinator_address is not None and num_processes is not None and process_id is not None:
        kwargs["cluster_detection_method"] = "deactivate"
        if coordinator_address.startswith(("127.0.0.1:", "localhost:")):
            port = coordinator_address.rsplit(":", 1)[1]
            kwargs["coordinator_bind_address"] = f"127.0.0.1:{port}"
            compat.gloo_on_loopback()
    kwargs.update(jax_kwargs)
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id, **kwargs)
    except ValueError as error:
        # Not launched and no cluster detected: a plain single-process run.
        if coordinator_address is None and "coordinator_address" in str(error):
            return
        raise
    if fail_fast:
        _install_fail_fast_hook()


def barrier(name: str, timeout_seconds: float = 600.0) -> None:
    """Block until every process reaches a barrier of this name (not a device collective)."""
    if is_initialized():
        compat.wait_at_barrier(f"sluice-{name}-{next(_barrier_count)}", timeout_seconds)


def _install_fail_fast_hook() -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            print(
                f"[process {jax.process_index()}] uncaught exception; exiting so that the other "
                "processes stop too",
                file=sys.stderr,
            )
            traceback.print_exception(kind, value, tb)
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            os._exit(1)

    if getattr(previous, "__name__", "") != "hook":
        sys.excepthook = hook
