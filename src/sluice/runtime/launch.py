"""Start N local processes of a multi-process run (``sluice launch``).

Each process gets the coordinator's address and its place in ``SLUICE_*``
variables, which :func:`sluice.runtime.distributed.initialize` reads; the
launcher prefixes their output, stops them all at a deadline or after the first
failure, and retries on a fresh port (docs/distributed.md, "Several processes
(hosts)").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

__all__ = ["LaunchResult", "free_port", "launch"]

# What process 0 prints when the coordinator cannot bind (it then crashes).
BIND_ERRORS = ("Failed to add port", "Address already in use")


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class LaunchResult:
    """Exit codes and output of every process."""

    returncodes: list[int | None]
    outputs: list[str]
    seconds: float
    timed_out: bool
    pids: list[int]

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(rc == 0 for rc in self.returncodes)

    def describe_failure(self) -> str:
        """Which process failed first and how, in words."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s; all processes stopped"
        parts = []
        for i, rc in enumerate(self.returncodes):
            if rc and rc < 0:
                parts.append(f"process {i} was killed by {signal.Signals(-rc).name}")
            elif rc:
                parts.append(f"process {i} exited with code {rc}")
        return "; ".join(parts) + "; all processes stopped" if parts else "all processes succeeded"

    @property
    def returncode(self) -> int:
        """0 if all succeeded; else the first failing code (124 on timeout)."""
        if self.timed_out:
            return 124
        for rc in self.returncodes:
            if rc:
                return rc if rc > 0 else 128 - rc
        return 0


def _pump(stream: IO[bytes], prefix: str, sink: list[str], echo: IO[str] | None) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        sink.append(line)
        if echo is not None:
            echo.write(prefix + line)
            echo.flush()


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _launch_once(
    command: Sequence[str],
    num_processes: int,
    devices_per_process: int | None,
    timeout: float | None,
    grace: float,
    env: dict[str, str] | None,
    echo: IO[str] | None,
) -> LaunchResult:
    port = free_port()
    base = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")
    }
    base.update(env or {})
    base.setdefault("PYTHONUNBUFFERED", "1")
    procs: list[subprocess.Popen] = []
    outputs: list[list[str]] = [[] for _ in range(num_processes)]
    threads: list[threading.Thread] = []
    t0 = time.perf_counter()
    timed_out = False
    try:
        for i in range(num_processes):
            proc_env = dict(
                base,
                SLUICE_COORDINATOR=f"127.0.0.1:{port}",
                SLUICE_NUM_PROCESSES=str(num_processes),
                SLUICE_PROCESS_ID=str(i),
            )
            if devices_per_process is not None:
                proc_env["SLUICE_LOCAL_DEVICES"] = str(devices_per_process)
                proc_env["JAX_NUM_CPU_DEVICES"] = str(devices_per_process)
            proc = subprocess.Popen(
                list(command),
                env=proc_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            procs.append(proc)
            thread = threading.Thread(
                target=_pump, args=(proc.stdout, f"[p{i}] ", outputs[i], echo), daemon=True
            )
            thread.start()
            threads.append(thread)
        deadline = None if timeout is None else t0 + timeout
        first_failure = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.perf_counter()
            if first_failure is None and any(c not in (None, 0) for c in codes):
                first_failure = now
            if deadline is not None and now > deadline:
                timed_out = True
                break
            if first_failure is not None and now > first_failure + grace:
                break
            time.sleep(0.05)
    finally:
        for proc in procs:  # whatever happened, nothing is left behind
            if proc.poll() is None:
                _kill_group(proc, signal.SIGTERM)
        t_kill = time.perf_counter()
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, 5.0 - (time.perf_counter() - t_kill)))
            except subprocess.TimeoutExpired:
                _kill_group(proc, signal.SIGKILL)
                proc.wait()
        for thread in threads:
            thread.join(timeout=5)
    return LaunchResult(
        [p.returncode for p in procs],
        ["".join(o) for o in outputs],
        time.perf_counter() - t0,
        timed_out,
        [p.pid for p in procs],
    )


def launch(
    command: Sequence[str],
    num_processes: int,
    *,
    devices_per_process: int | None = None,
    timeout: float | None = None,
    grace: float = 10.0,
    env: dict[str, str] | None = None,
    echo: IO[str] | None = sys.stdout,
    retries: int = 2,
) -> LaunchResult:
    """Run ``command`` as ``num_processes`` cooperating processes on this machine.

    Parameters
    ----------
    command
        The program and its arguments, e.g. ``["python", "script.py"]``; the
        script calls ``sluice.runtime.distributed.initialize()``.
    num_processes, devices_per_process
        How many processes, and CPU devices per process (default: JAX's).
    timeout
        Seconds before everything is stopped (exit code 124).
    grace
        Seconds the others get to exit by themselves after one fails.
    env
        Extra environment variables.
    echo
        Where to print the processes' prefixed output (``None``: keep quiet).
    retries
        New ports to try if the coordinator could not bind its port.
    """
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes must be a positive integer, got {num_processes!r}")
    if not command:
        raise ValueError("command must name a program to run, got an empty command")
    for attempt in range(retries + 1):
        result = _launch_once(
            command, num_processes, devices_per_process, timeout, grace, env, echo
        )
        if result.ok or not any(e in result.outputs[0] for e in BIND_ERRORS) or attempt == retries:
            return result
    return result  # pragma: no cover
