"""The shared law suite, run over every statistic of ``sluice.stats``.

For each statistic, on AR(1) chains of a draw ``{"a": (2,), "b": ()}``:

* per-draw (``scan``, chains ``vmap``-ed) == chunked (a jitted chunk of fixed
  length, masked at the end, applied to pieces of the stream) for every chain;
* the chunk function is traced once, however many chunks;
* merged states (random binary trees, random orders) all finalize to the same
  values, equal to NumPy / ArviZ on the stored draws (exact statistics to
  float tolerance; approximate ones within bounds from their accuracy tests);
* merging with a fresh ``init(example)`` changes nothing (either side).
"""

from __future__ import annotations

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.stats.helpers import (
    ar1,
    assert_trees_close,
    chunk_runner,
    merge_tree,
    scan_runner,
    sequential_runner,
    take_chain,
)

from sluice import stats

CHAINS, DRAWS, CHUNK = 3, 2000, 256  # DRAWS as test_stats_summary: they share compiles
MAX_LAG = 63  # Geyer stops far below this for rho = 0.5 (tau = 3): exact ess_mean


def _draws() -> dict[str, np.ndarray]:
    x = ar1(seed=11, chains=CHAINS, draws=DRAWS, rho=0.5, dim=3)
    return {
        "a": (3.0 + 2.0 * x[..., :2]).astype(np.float32),
        "b": (x[..., 2] - 1.0).astype(np.float32),
    }


DRAWS_NP = _draws()
EXAMPLE = {k: jnp.asarray(v[0, -1]) for k, v in DRAWS_NP.items()}  # one draw: shared pilot
FLAT = np.concatenate([DRAWS_NP["a"], DRAWS_NP["b"][..., None]], axis=-1).astype(np.float64)


def _per_element(fn):
    """Reference ``fn(array (chain, draw)) -> value`` for every element, as a draw-shaped tree."""
    values = np.array([fn(FLAT[..., i]) for i in range(FLAT.shape[-1])])
    return {"a": values[:2], "b": values[2]}


def _az(fn, **kw):
    def inner(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(fn(x, **kw))

    return inner


def _sd(x):
    return np.std(x, ddof=1)


SCALE = _per_element(_sd)  # tolerances of location outputs are relative to the sd


def _ref_quantiles(probs):
    values = np.stack([np.quantile(FLAT[..., i], probs) for i in range(3)])
    return {"a": values[:2], "b": values[2]}


def _ref_hdi(prob):
    values = np.stack([az.hdi(FLAT[..., i].ravel(), hdi_prob=prob) for i in range(3)])
    return {"a": values[:2], "b": values[2]}


def _loc_tol(fraction):
    """Absolute tolerance: ``fraction`` of each element's sd (quantile-like outputs)."""
    sd = np.array([SCALE["a"][0], SCALE["a"][1], SCALE["b"]])
    return float(fraction * sd.max())


# name -> (statistic, reference of the merged result, rtol, atol)
# Exact statistics: float32 tolerance. Approximate ones: bounds documented per case.
CASES = {
    "count": (stats.count(), lambda: CHAINS * DRAWS, 0, 0),
    "mean": (stats.mean(), lambda: _per_element(np.mean), 1e-5, 1e-5),
    "variance": (stats.variance(), lambda: _per_element(lambda x: np.var(x, ddof=1)), 1e-5, 0),
    "covariance": (
        stats.covariance(),
        lambda: np.cov(FLAT.reshape(-1, 3).T, ddof=1),
        1e-4,
        1e-5,
    ),
    "extrema": (
        stats.extrema(),
        lambda: {"min": _per_element(np.min), "max": _per_element(np.max)},
        0,
        0,
    ),
    # histogram quantiles: within a tenth of an sd (buckets are at most 1/32 of the
    # distance to the pilot; test_stats_accuracy checks half an MCSE)
    "quantiles": (
        stats.quantiles((0.05, 0.5, 0.95)),
        lambda: _ref_quantiles([0.05, 0.5, 0.95]),
        0,
        _loc_tol(0.1),
    ),
    # HDI endpoints are order statistics at an argmin: a fifth of an sd
    "hdi": (stats.hdi(0.8), lambda: _ref_hdi(0.8), 0, _loc_tol(0.2)),
    "rhat_split": (
        stats.rhat(DRAWS, method="split"),
        lambda: _per_element(_az(az.rhat, method="split")),
        1e-5,
        0,
    ),
    # rank R-hat: grid + first-order between-chain term; 0.005 (test_accuracy: <= 0.005)
    "rhat_rank": (stats.rhat(DRAWS), lambda: _per_element(_az(az.rhat)), 0, 0.005),
    "ess_mean": (
        stats.ess(DRAWS, method="mean", max_lag=MAX_LAG),
        lambda: _per_element(_az(az.ess, method="mean")),
        1e-4,
        0,
    ),
    "mcse_mean": (
        stats.mcse(DRAWS, method="mean", max_lag=MAX_LAG),
        lambda: _per_element(_az(az.mcse, method="mean")),
        1e-4,
        0,
    ),
    # ESS of (x - mean)^2 from exact cross lags at block size 1 (ends of halves ignored):
    # within 10% on 3 x 512 draws
    "ess_sd": (
        stats.ess(DRAWS, method="sd", max_lag=MAX_LAG, block_sizes=(1,), block_lags=MAX_LAG),
        lambda: _per_element(_az(lambda x: az.ess((x - x.mean()) ** 2, method="mean"))),
        0.1,
        0,
    ),
    "mcse_sd": (
        stats.mcse(DRAWS, method="sd", max_lag=MAX_LAG, block_sizes=(1,), block_lags=MAX_LAG),
        lambda: _per_element(_az(az.mcse, method="sd")),
        0.05,
        0,
    ),
    # bulk / tail proxies on short chains: within 25% here (10% on the long chains of
    # test_accuracy, where the replicate sd of the ratio is measured)
    "ess_bulk": (
        stats.ess(DRAWS, method="bulk", max_lag=MAX_LAG, block_sizes=(1,), block_lags=MAX_LAG),
        lambda: _per_element(_az(az.ess, method="bulk")),
        0.25,
        0,
    ),
    "ess_tail": (
        stats.ess(DRAWS, method="tail", max_lag=MAX_LAG, block_sizes=(1,), block_lags=MAX_LAG),
        lambda: _per_element(_az(az.ess, method="tail")),
        0.25,
        0,
    ),
    "group": (
        stats.group({"n": stats.count(), "var": stats.variance()}),
        lambda: {"n": CHAINS * DRAWS, "var": _per_element(lambda x: np.var(x, ddof=1))},
        1e-5,
        0,
    ),
    "restrict": (
        stats.restrict(stats.mean(), {"a": slice(1, 2)}),
        lambda: {"a": _per_element(np.mean)["a"][1:2]},
        1e-5,
        1e-5,
    ),
    "transform": (
        stats.transform(lambda d: {"s": d["a"][0] + d["b"]}, stats.variance()),
        lambda: {"s": np.var(FLAT[..., 0] + FLAT[..., 2], ddof=1)},
        1e-5,
        0,
    ),
}


def _summary_reference():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "mean": _per_element(np.mean),
            "sd": _per_element(_sd),
            "r_hat_split": _per_element(_az(az.rhat, method="split")),
            "ess_mean": _per_element(_az(az.ess, method="mean")),
            "mcse_mean": _per_element(_az(az.mcse, method="mean")),
        }


SUMMARY = stats.summary_statistics(DRAWS, max_lag=MAX_LAG)


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(20240601)


@pytest.fixture(scope="module")
def runs():
    """Per-chain states of every case (scan, vmap over chains), computed once."""
    draws = jax.tree.map(jnp.asarray, DRAWS_NP)
    out = {}
    for name, (s, *_rest) in {**CASES, "summary": (SUMMARY,)}.items():
        out[name] = scan_runner(s.init, s.update)(EXAMPLE, draws)
    return out


@pytest.mark.parametrize("name", [*CASES, "summary"])
def test_chunked_equals_per_draw_and_compiles_once(name, runs):
    s = CASES[name][0] if name in CASES else SUMMARY
    advance, counted = chunk_runner(s.update, CHUNK)
    finalize = s.finalize  # diagnostics compile it once per settings (shared by their views)
    for c in range(CHAINS):
        state = s.init(EXAMPLE)
        for start in range(0, DRAWS, CHUNK):
            piece = {k: v[c, start : start + CHUNK] for k, v in DRAWS_NP.items()}
            n = piece["b"].shape[0]
            padded = {
                k: np.concatenate([v, np.zeros((CHUNK - n, *v.shape[1:]), v.dtype)])
                for k, v in piece.items()
            }
            state = advance(state, padded, n)
        assert_trees_close(
            finalize(state), finalize(take_chain(runs[name], c)), rtol=1e-5, atol=1e-6,
            err_msg=f"{name}: chunked != per-draw (chain {c})",
        )  # fmt: skip
    assert counted.count == 1, f"{name}: the chunk's update was traced {counted.count} times"


@pytest.mark.parametrize("name", list(CASES))
def test_merged_equals_reference_in_any_tree(name, runs, rng):
    s, reference, rtol, atol = CASES[name]
    merge, finalize = s.merge, s.finalize
    states = [take_chain(runs[name], c) for c in range(CHAINS)]
    first = finalize(merge_tree(merge, states, rng))
    second = finalize(merge_tree(merge, states, rng))
    assert_trees_close(first, second, rtol=1e-5, atol=1e-6, err_msg=f"{name}: trees disagree")
    expected = reference()
    assert_trees_close(first, jax.tree.map(np.asarray, expected), rtol=rtol, atol=atol,
                       err_msg=f"{name}: merged result != NumPy/ArviZ")  # fmt: skip


@pytest.mark.parametrize("name", [*CASES, "summary"])
def test_merging_with_empty_changes_nothing(name, runs, rng):
    s = CASES[name][0] if name in CASES else SUMMARY
    merge, finalize = s.merge, s.finalize
    empty = s.init(EXAMPLE)
    one = take_chain(runs[name], 0)
    merged = merge(one, take_chain(runs[name], 1))
    for state in (one, merged):
        expected = finalize(state)
        assert_trees_close(finalize(merge(empty, state)), expected, rtol=1e-6, atol=1e-7,
                           err_msg=f"{name}: empty + state")  # fmt: skip
        assert_trees_close(finalize(merge(state, empty)), expected, rtol=1e-6, atol=1e-7,
                           err_msg=f"{name}: state + empty")  # fmt: skip


def test_summary_matches_arviz_on_exact_outputs(runs, rng):
    merge, finalize = SUMMARY.merge, SUMMARY.finalize
    out = finalize(merge_tree(merge, [take_chain(runs["summary"], c) for c in range(CHAINS)], rng))
    for key, expected in _summary_reference().items():
        assert_trees_close(out[key], expected, rtol=1e-4, atol=1e-5, err_msg=key)


def test_sequential_chains_equal_vectorized(runs):
    """``lax.map`` over chains (CPU engine default) == ``vmap`` (accelerator default)."""

    draws = jax.tree.map(jnp.asarray, DRAWS_NP)
    states = sequential_runner(SUMMARY.init, SUMMARY.update)(EXAMPLE, draws)
    finalize = SUMMARY.finalize
    for c in range(CHAINS):
        assert_trees_close(finalize(take_chain(states, c)), finalize(take_chain(runs["summary"], c)),
                           rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("name", [*CASES, "summary", "all grouped"])
def test_fresh_state_owns_its_buffers(name):
    """The engine may donate states to its compiled chunk: a state made eagerly must not
    share a buffer with the example or with itself (grouped statistics included)."""
    if name == "all grouped":
        s = stats.group({k: case[0] for k, case in CASES.items()} | {"summary": SUMMARY})
    else:
        s = CASES[name][0] if name in CASES else SUMMARY
    example = {k: jnp.array(v) for k, v in EXAMPLE.items()}
    leaves = jax.tree.leaves(s.init(example)) + jax.tree.leaves(example)
    pointers = [leaf.unsafe_buffer_pointer() for leaf in leaves]
    assert len(set(pointers)) == len(pointers), f"{name}: init returns shared buffers"
