"""Long float32 streams: the compensated moments keep their digits, plain Welford does not.

10^7 draws of two elements, N(mu, 1) with mu = 10^4 (|mean| / sd = 10^4), in
float32, fed in chunks as the engine does. The reference is float64 NumPy on
the same float32 draws. Float32
Welford drifts by ~1.6e-2 in relative variance at 10^7 draws; the design keeps
it below 1e-4 (measured: ~1e-7). The Welford test is a regression guard: if a
"simplification" replaced the compensated sums, the first test fails, and this
pair documents why.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.stats.helpers import jit

from sluice import stats

TOTAL, CHUNK, MU = 10_000_000, 100_000, 1.0e4


class Welford(NamedTuple):
    count: jax.Array  # () int32
    mean: jax.Array  # (2,) float32
    m2: jax.Array  # (2,) float32


def welford() -> stats.Statistic:
    """Plain float32 Welford (int32 count): the design this suite guards against."""

    def init(example):
        return Welford(
            jnp.zeros((), jnp.int32), jnp.zeros(2, jnp.float32), jnp.zeros(2, jnp.float32)
        )

    def update(s, draw):
        x = draw["x"]
        n = s.count + 1
        delta = x - s.mean
        mean = s.mean + delta / n.astype(jnp.float32)
        return Welford(n, mean, s.m2 + delta * (x - mean))

    def finalize(s):
        return s.m2 / (s.count.astype(jnp.float32) - 1.0)

    return stats.Statistic(init, update, lambda a, b: a, finalize)


@functools.cache
def _stream():
    """Final states of variance() and welford() over the stream, and float64 references."""
    rng = np.random.default_rng(2024)
    s_var, s_mean, s_w = stats.variance(), stats.mean(), welford()
    group = stats.group({"var": s_var, "mean": s_mean, "welford": s_w})

    @jit
    def advance(state, xs):
        return jax.lax.scan(lambda st, x: (group.update(st, {"x": x}), None), state, xs)[0]

    first = (MU + rng.standard_normal((CHUNK, 2))).astype(np.float32)
    state = group.init({"x": jnp.asarray(first[0])})
    n, total, total_sq = 0, np.zeros(2), np.zeros(2)
    chunk = first
    while True:
        state = advance(state, jnp.asarray(chunk))
        c64 = chunk.astype(np.float64) - MU  # exact: float32 draws, shifted in float64
        n, total, total_sq = n + len(c64), total + c64.sum(0), total_sq + (c64 * c64).sum(0)
        if n >= TOTAL:
            break
        chunk = (MU + rng.standard_normal((CHUNK, 2))).astype(np.float32)
    mean = MU + total / n
    var = (total_sq - total * total / n) / (n - 1)
    out = group.finalize(state)
    return out, mean, var


@pytest.mark.slow
def test_compensated_moments_keep_float32_precision():
    out, mean, var = _stream()
    assert np.all(np.abs(np.asarray(out["var"]["x"]) / var - 1) < 1e-4)
    assert np.all(np.abs(np.asarray(out["mean"]["x"]) - mean) < 1e-3 * np.sqrt(var))


@pytest.mark.slow
def test_plain_float32_welford_fails_the_same_stream():
    out, _, var = _stream()
    assert np.all(np.abs(np.asarray(out["welford"]) / var - 1) > 1e-4)
