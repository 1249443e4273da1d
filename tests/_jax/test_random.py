"""Threefry unrolled (sluice._jax.random): bit for bit jax.random's, on device and host."""

import jax
import numpy as np
import scipy.stats

from sluice._jax import random

P_MIN = 1e-3


def test_inline_threefry_is_jax_fold_in_bit_for_bit():
    for seed in (0, 1, 2**31 - 1):
        key = jax.random.PRNGKey(seed)
        for data in (0, 1, 7, np.uint32(2**32 - 1)):
            np.testing.assert_array_equal(random.fold_in(key, data), jax.random.fold_in(key, data))
    typed = jax.random.key(3)
    np.testing.assert_array_equal(
        random.fold_in(typed, 5), jax.random.key_data(jax.random.fold_in(typed, 5))
    )


def test_momenta_are_standard_normal():
    words = random.key_words(jax.random.PRNGKey(4))
    z = np.asarray(random.normal(words, 0, 20001), np.float64)
    assert scipy.stats.kstest(z, "norm").pvalue > P_MIN
    other = np.asarray(random.normal(words, 1, 20001), np.float64)
    assert abs(np.corrcoef(z, other)[0, 1]) < 4.5 / np.sqrt(len(z))


def test_split_is_jax_random_split_bit_for_bit():
    for seed in range(5):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), 99)
        assert np.array_equal(random.split(key), jax.random.split(key))


def test_host_fold_in_equals_jax_fold_in():
    for seed in (0, 5, 2**31 - 1):
        key = np.asarray(jax.random.PRNGKey(seed))
        for data in (0, 3, 2**32 - 1):
            np.testing.assert_array_equal(
                random.host_fold_in(key, data), jax.random.fold_in(key, data)
            )


def test_uniforms_are_uniform_and_bits_depend_on_stream_and_counter():
    words = random.key_words(jax.random.PRNGKey(9))
    u = np.asarray(random.uniform(words, 0, np.arange(20000, dtype=np.uint32)), np.float64)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert scipy.stats.kstest(u, "uniform").pvalue > P_MIN
    a, _ = random.bits(words, 0, np.arange(4, dtype=np.uint32))
    b, _ = random.bits(words, 1, np.arange(4, dtype=np.uint32))
    assert not np.array_equal(np.asarray(a), np.asarray(b))
