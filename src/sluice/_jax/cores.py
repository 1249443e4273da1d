"""One JAX CPU device per usable core, so that chains run on every core by default.

``import sluice`` asks JAX for one CPU device per core this process may run on,
unless the user chose a count (``SLUICE_CPU_DEVICES``, ``jax_num_cpu_devices``,
``XLA_FLAGS``); :func:`choice` reports what was decided and why, and
:func:`one_blas_thread` keeps OpenBLAS to one thread while a run is on the CPU.
docs/architecture.md ("Placement") gives the rules and the measurements.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings
from collections.abc import Iterator

__all__ = [
    "CpuDevices",
    "choice",
    "note_single_core",
    "one_blas_thread",
    "usable_cores",
    "use_every_core",
]

ENV = "SLUICE_CPU_DEVICES"
_FLAG = "--xla_force_host_platform_device_count"
_log = logging.getLogger("sluice")


@dataclasses.dataclass(frozen=True)
class CpuDevices:
    """What ``import sluice`` did about JAX's CPU devices."""

    requested: int | None  # the count sluice set, None if it set nothing
    reason: str  # why, in words
    too_late: bool = False  # JAX's backend had started: no count could be set


_choice = CpuDevices(None, "not decided yet")
_noted = False


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def use_every_core() -> CpuDevices:
    """Ask JAX for one CPU device per usable core unless the user chose (see the module)."""
    global _choice
    import jax

    env = os.environ.get(ENV)
    if env is not None:
        try:
            wanted = int(env)
        except ValueError:
            raise ValueError(f"{ENV} must be a whole number of CPU devices, got {env!r}") from None
        if wanted < 1:
            raise ValueError(f"{ENV} must be at least 1, got {env!r}")
        source = f"{ENV}={env}"
    else:
        wanted, source = usable_cores(), "one per usable core"
    if jax.config.jax_num_cpu_devices != -1:
        _choice = CpuDevices(None, f"jax_num_cpu_devices={jax.config.jax_num_cpu_devices} was set")
    elif _FLAG in os.environ.get("XLA_FLAGS", ""):
        _choice = CpuDevices(None, f"XLA_FLAGS sets {_FLAG}")
    elif wanted == 1:
        _choice = CpuDevices(None, f"{source}: JAX's single CPU device")
    else:
        try:
            jax.config.update("jax_num_cpu_devices", wanted)
        except RuntimeError:  # the backend already started: too late to add devices
            _choice = CpuDevices(
                None, "JAX's CPU backend started before `import sluice`", too_late=True
            )
        else:
            _choice = CpuDevices(wanted, source)
            _log.debug("sluice: jax_num_cpu_devices=%d (%s)", wanted, source)
    return _choice


def choice() -> CpuDevices:
    """What :func:`use_every_core` decided at ``import sluice``."""
    return _choice


def note_single_core(num_chains: int, devices: list) -> None:
    """Warn once when chains share one CPU device although the process has more cores.

    Only for a run that left the placement to sluice, on JAX's CPU backend,
    with more than one chain, where sluice could not add devices because the
    backend started first.
    """
    global _noted
    if _noted or num_chains < 2 or len(devices) != 1 or devices[0].platform != "cpu":
        return
    if not _choice.too_late:
        return
    cores = usable_cores()
    if cores < 2:
        return
    _noted = True
    warnings.warn(
        f"the {num_chains} chains share JAX's one CPU device although this process may use "
        f"{cores} cores: JAX's CPU backend started before `import sluice`, too late to add "
        f"devices. Import sluice before running JAX code, or set JAX_NUM_CPU_DEVICES={cores} "
        "in the environment (or SLUICE_CPU_DEVICES=1 to keep one device and silence this).",
        RuntimeWarning,
        stacklevel=3,
    )


@contextlib.contextmanager
def one_blas_thread(devices: list) -> Iterator[None]:
    """OpenBLAS (and any other BLAS loaded) limited to one thread while the block runs,
    where ``devices`` are CPU devices; elsewhere nothing changes. The limit is the
    process's (``threadpoolctl``), restored on leaving."""
    if not devices or devices[0].platform != "cpu":
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
