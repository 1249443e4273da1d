"""The fused-diagnostic combinator (sluice.stats.fused): ArviZ's split, heavy elements, fuse."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz.stats.diagnostics import _split_chains
from tests.stats.helpers import jit

from sluice.stats.fused import Geometry, Part, fuse, half_counts, heavy_elements, split_position


def _halves(n):
    """ArviZ's split of n draws by hand: first n // 2 draws, last n // 2 draws."""
    half = n // 2
    return np.arange(half), np.arange(n - half, n)


@pytest.mark.parametrize("n", range(1, 10))
def test_split_position_is_arvizs_split(n):
    first, second = _halves(n)
    if n >= 2:  # ArviZ itself (for n = 1 its -0: slice takes the whole chain)
        split = _split_chains(np.arange(n)[None])
        np.testing.assert_array_equal(split, [first, second])
    for index in range(n):
        seg, pos, in_split = (int(v) for v in split_position(jnp.int32(index), n))
        if index in first:
            assert (seg, pos, in_split) == (0, index, True), (n, index)
        elif index in second:
            assert (seg, pos, in_split) == (1, index - (n - n // 2), True), (n, index)
        else:  # the middle draw of an odd n
            assert n % 2 == 1 and index == n // 2 and not in_split, (n, index)


@pytest.mark.parametrize("n", range(1, 10))
def test_half_counts_count_the_draws_seen_in_each_half(n):
    first, second = _halves(n)
    for count in range(n + 1):
        seen = np.arange(count)
        expected = [np.isin(seen, first).sum(), np.isin(seen, second).sum()]
        np.testing.assert_array_equal(half_counts(jnp.int32(count), n), expected)
        assert half_counts(jnp.int32(count), n).dtype == jnp.int32


def test_no_split_is_a_single_half():
    seg, pos, in_split = split_position(jnp.int32(7), None)
    assert (int(seg), int(pos), bool(in_split)) == (0, 7, True)
    np.testing.assert_array_equal(half_counts(jnp.int32(5), None), [5, 0])


def test_split_position_traces_under_jit():
    seg, pos, inside = jit(jax.vmap(lambda i: split_position(i, 7)))(jnp.arange(7))
    np.testing.assert_array_equal(seg, [0, 0, 0, 0, 1, 1, 1])  # draw 3: the middle
    np.testing.assert_array_equal(pos, [0, 1, 2, 3, 0, 1, 2])
    np.testing.assert_array_equal(inside, [True, True, True, False, True, True, True])


def test_heavy_elements():
    example = {"a": np.zeros((2, 3)), "b": np.zeros(()), "c": np.zeros(5)}  # offsets 0, 6, 7
    assert heavy_elements(example, None) is None
    assert heavy_elements(example, 6) is None  # nothing capped: every element
    np.testing.assert_array_equal(heavy_elements(example, 2), [0, 1, 6, 7, 8])
    np.testing.assert_array_equal(heavy_elements(example, 5), [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11])
    np.testing.assert_array_equal(heavy_elements(example, 1), [0, 6, 7])
    assert heavy_elements(example, 0).shape == (0,)
    assert heavy_elements({"x": np.zeros(3)}, 3) is None
    np.testing.assert_array_equal(heavy_elements([np.zeros(4), np.zeros(4)], 3), [0, 1, 2, 4, 5, 6])


# -- fuse ---------------------------------------------------------------------------
EVERY = 4  # the rare events: a flush after every 4th draw, and a mark at draw MARK
MARK = 5


def _summing_part():
    """Running sums of y, flushed into a total every EVERY draws (rare), split sums per half."""

    def init(d, dh, dtype):
        z = functools.partial(jnp.zeros, dtype=dtype)
        return {
            "open": z(d), "flushed": z(d), "halves": z((2, d)), "heavy": z(dh),
            "total": z(d), "flushes": jnp.zeros((), jnp.int32),
            "calls": jnp.zeros((), jnp.int32), "marks": jnp.zeros((), jnp.int32),
            "flush_index": jnp.full((8,), -1, jnp.int32), "half_counts": jnp.zeros(2, jnp.int32),
            "middle": jnp.zeros((), jnp.int32),
        }  # fmt: skip

    def update(s, draw):
        halves = s["halves"].at[draw.seg].add(jnp.where(draw.in_split, draw.y, 0.0))
        return {
            **s,
            "open": s["open"] + draw.y,
            "halves": halves,
            "heavy": s["heavy"] + draw.x_heavy,
        }

    def events(draw):
        return {"flush": (draw.index % EVERY) == EVERY - 1, "mark": draw.index == MARK}

    def rare(s, draw, events, view):
        assert draw.x is None  # the rare path sees only y
        flush = events["flush"]
        index = s["flush_index"].at[jnp.minimum(s["flushes"], 7)].set(draw.index)
        return {
            **s,
            "flushed": s["flushed"] + jnp.where(flush, s["open"], 0.0),
            "open": jnp.where(flush, 0.0, s["open"]),
            "flushes": s["flushes"] + flush.astype(jnp.int32),
            "calls": s["calls"] + 1,  # every call counts: the rare work runs only when due
            "marks": s["marks"] + events["mark"].astype(jnp.int32),
            "flush_index": jnp.where(flush, index, s["flush_index"]),
        }

    def close(s, closing, view):
        total = s["total"] + s["flushed"] + s["open"]
        zero = jnp.zeros_like(total)
        s = {
            **s, "total": total, "open": zero, "flushed": zero,
            "half_counts": s["half_counts"] + closing.half_count,
            "middle": s["middle"] + closing.has_middle.astype(jnp.int32),
        }  # fmt: skip
        return s, {"sum_total": total}

    def merge(a, b):
        out = jax.tree.map(jnp.add, a, b)
        return {**out, "flush_index": jnp.maximum(a["flush_index"], b["flush_index"])}

    return Part(init, update, events, rare, close, merge)


def _echo_part():
    """Sees what the part before it exported at close, and its state in the rare path."""

    def init(d, dh, dtype):
        return {"seen": jnp.zeros(d, dtype), "rare_open": jnp.zeros(d, dtype)}

    def rare(s, draw, events, view):  # the summing part was already flushed at this draw
        return {**s, "rare_open": s["rare_open"] + view["sum"]["open"]}

    def close(s, closing, view):
        return {**s, "seen": s["seen"] + view["sum_total"]}, {}

    return Part(
        init, lambda s, d: s, lambda d: {}, rare, close, lambda a, b: jax.tree.map(jnp.add, a, b)
    )


def _readout(state, parts):
    return {"parts": parts, "pilot": state.pilot, "chains": state.num_chains,
            "consistent": state.consistent}  # fmt: skip


N, DIM = 7, (2, 3)


def _draws(chains):
    rng = np.random.default_rng(0)
    return {
        "a": rng.normal(size=(chains, N, 2)).astype(np.float32),
        "b": rng.normal(size=(chains, N, 3)).astype(np.float32) + 5.0,
    }


@functools.cache
def _fused():
    geometry = Geometry(num_draws=N, max_elements=1)
    init, update, merge, finalize = fuse(
        {"sum": _summing_part(), "echo": _echo_part()}, geometry, _readout
    )

    def chain(example, draws):
        def body(s, d):
            return update(s, d), None

        return jax.lax.scan(body, init(example), draws)[0]

    return (
        jit(chain),
        jit(jax.vmap(chain, in_axes=(None, 0))),
        jit(merge),
        jit(finalize),
    )


def _reference(draws, pilot):
    """By hand, per chain: flat y = x - pilot, sums, ArviZ split halves, heavy elements."""
    x = np.concatenate([draws["a"], draws["b"]], axis=-1).astype(np.float64)  # (C, N, 5)
    y = x - np.concatenate([pilot["a"], pilot["b"]])
    first, second = _halves(N)
    return {
        "total": y.sum(axis=(0, 1)),
        "halves": np.stack([y[:, first].sum(axis=(0, 1)), y[:, second].sum(axis=(0, 1))]),
        "heavy": x[:, :, [0, 2]].sum(axis=(0, 1)),  # the first element of "a" and of "b"
        "flushes": x.shape[0] * (N // EVERY),
        "calls": x.shape[0] * len({*range(EVERY - 1, N, EVERY), MARK}),
    }


def _check(out, reference, chains):
    sums = out["parts"]["sum"]
    np.testing.assert_allclose(sums["total"], reference["total"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums["halves"], reference["halves"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums["heavy"], reference["heavy"], rtol=1e-5, atol=1e-5)
    assert int(sums["flushes"]) == reference["flushes"]
    assert int(sums["calls"]) == reference["calls"]  # the rare work ran only when due
    assert int(sums["marks"]) == chains
    np.testing.assert_array_equal(sums["flush_index"][:1], [EVERY - 1])
    np.testing.assert_array_equal(sums["flush_index"][1:], -1)
    np.testing.assert_array_equal(sums["half_counts"], [chains * (N // 2), chains * (N // 2)])
    assert int(sums["middle"]) == chains  # every chain saw N's middle draw
    np.testing.assert_allclose(out["parts"]["echo"]["seen"], reference["total"], rtol=1e-5)
    assert int(out["chains"]) == chains and bool(out["consistent"])


def test_fuse_one_chain_equals_a_direct_computation():
    chain, _, _, finalize = _fused()
    draws = _draws(1)
    pilot = {"a": draws["a"][0, 0] + 0.25, "b": draws["b"][0, 0]}
    state = chain(pilot, {k: v[0] for k, v in draws.items()})
    out = finalize(state)
    reference = _reference(draws, pilot)
    _check(out, reference, 1)
    np.testing.assert_array_equal(out["pilot"]["a"], pilot["a"])
    # in the rare path the second part sees the first one's state as of this draw:
    # just flushed at draw 3 (nothing open), draws 4 and 5 open at the mark
    y = np.concatenate([draws["a"][0], draws["b"][0]], -1) - np.concatenate(
        [pilot["a"], pilot["b"]]
    )
    np.testing.assert_allclose(out["parts"]["echo"]["rare_open"], y[4] + y[5], rtol=1e-5, atol=1e-5)


def test_fuse_vectorized_chains_then_merged_equals_a_direct_computation():
    _, chains, merge, finalize = _fused()
    draws = _draws(3)
    pilot = {"a": np.zeros(2, np.float32), "b": np.full(3, 5.0, np.float32)}
    states = chains(pilot, draws)  # uniform_cond: one branch for the batch
    one = [jax.tree.map(lambda s, i=i: s[i], states) for i in range(3)]
    merged = merge(merge(one[0], one[1]), one[2])
    _check(finalize(merged), _reference(draws, pilot), 3)
    # merge is associative with chains in another grouping
    regrouped = finalize(merge(one[0], merge(one[1], one[2])))
    np.testing.assert_allclose(
        regrouped["parts"]["sum"]["total"], finalize(merged)["parts"]["sum"]["total"], rtol=1e-6
    )


def test_fuse_states_of_different_pilots_are_marked_inconsistent():
    chain, _, merge, finalize = _fused()
    draws = {k: v[0] for k, v in _draws(1).items()}
    a = chain({"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)}, draws)
    b = chain({"a": np.ones(2, np.float32), "b": np.zeros(3, np.float32)}, draws)
    assert bool(finalize(merge(a, a))["consistent"])
    assert not bool(finalize(merge(a, b))["consistent"])
