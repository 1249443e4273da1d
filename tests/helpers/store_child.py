"""A run that the crash tests kill and resume: ``python store_child.py STORE [CACHE_DIR]``.

It starts the run if the store has no checkpoint yet, and resumes it
otherwise. Writes are slowed down so that kills also land in the middle of
writing a chunk. In the environment, ``SLUICE_TEST_WRITE_DELAY`` sets that
delay (seconds per array), and ``SLUICE_TEST_KILL_AT_COMMIT=before:N`` (or
``after:N``) makes the process SIGKILL itself just before (after) the rename
that publishes its N-th commit record; ``SLUICE_TEST_KILL_AT_CREATE=1``, just
before the rename that puts the new store in place.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import sluice
from sluice.io.store import COMMIT, ZarrSink
from sluice.stats import Statistic

SETTINGS = dict(chains=3, warmup=60, draws=150, chunk_size=10, seed=11)
WRITE_DELAY = float(os.environ.get("SLUICE_TEST_WRITE_DELAY", 0.004))  # per array written


def model() -> sluice.Model:
    def log_density(p):
        return -0.5 * jnp.sum(((p["x"] - 1.0) / jnp.array([1.0, 2.0])) ** 2) - 0.5 * p["z"] ** 2

    return sluice.Model(
        log_density,
        init={"x": jnp.zeros(2), "z": jnp.zeros(())},
        transform=lambda p: {"x": p["x"], "ez": jnp.exp(p["z"])},
        log_likelihood=lambda p: {"obs": -0.5 * p["x"] ** 2},
        observed_data={"obs": np.zeros(2)},
    )


def sums() -> Statistic:
    """Count and sum of each quantity (a user statistic carried in the checkpoint)."""

    def init(example):
        return {"n": jnp.int32(0), "sum": jax.tree.map(jnp.zeros_like, example)}

    def update(state, draw):
        return {"n": state["n"] + 1, "sum": jax.tree.map(jnp.add, state["sum"], draw)}

    def merge(a, b):
        return jax.tree.map(jnp.add, a, b)

    def finalize(state):
        return jax.tree.map(lambda s: s / state["n"], state["sum"])

    return Statistic(init, update, merge, finalize)


STATS = {"sums": sums()}


class SlowZarrSink(ZarrSink):
    def write(self, start, chunk):
        for group, names in chunk.items():
            for name, values in names.items():
                time.sleep(WRITE_DELAY)
                super().write(start, {group: {name: values}})


def main(path: str) -> None:
    if os.path.exists(os.path.join(path, COMMIT)):
        sluice.resume(path, model(), stats=STATS, progress=False)
    else:
        sluice.sample(
            model(),
            sink=SlowZarrSink(path, overwrite=True),
            stats=STATS,
            progress=False,
            **SETTINGS,
        )
    print("DONE", flush=True)


def _kill_at_commit(spec: str) -> None:
    """SIGKILL this process around the rename of its N-th commit record."""
    when, n = spec.split(":")
    real, count = os.replace, [0]

    def replace(src, dst, *args, **kwargs):
        if os.path.basename(str(dst)) == COMMIT:
            count[0] += 1
            if count[0] == int(n) and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            real(src, dst, *args, **kwargs)
            if count[0] == int(n) and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return
        real(src, dst, *args, **kwargs)

    os.replace = replace


def _kill_at_create(store: str) -> None:
    """SIGKILL this process just before the rename that puts the new store in place."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.path.realpath(dst) == os.path.realpath(store):
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst, *args, **kwargs)

    os.replace = replace


if __name__ == "__main__":
    if os.environ.get("SLUICE_TEST_KILL_AT_COMMIT"):
        _kill_at_commit(os.environ["SLUICE_TEST_KILL_AT_COMMIT"])
    if os.environ.get("SLUICE_TEST_KILL_AT_CREATE"):
        _kill_at_create(sys.argv[1])
    if len(sys.argv) > 2:  # share compiled programs between the many short-lived processes
        jax.config.update("jax_compilation_cache_dir", sys.argv[2])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    main(sys.argv[1])
