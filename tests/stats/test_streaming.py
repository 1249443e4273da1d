"""The default statistics (``sluice.stats.streaming.summary``) against ArviZ.

On AR(1) chains (rho 0, 0.5, 0.9, 0.99, -0.3; 4 chains x 1000 draws, a pilot of
128 stationary draws per chain as the final warmup draws would be), fed a chunk
at a time as the engine does:

* exact outputs (mean, sd, split R-hat, extremes) to float tolerance;
* ESS, rank R-hat, quantiles against ArviZ on the same draws within ArviZ's own
  Monte Carlo error: the relative sd of an integrated-autocorrelation estimate
  with a window of ``M = 5 tau`` lags is ``sqrt(2 (2M + 1) / N)`` (Sokal), and
  the streamed values must agree with ArviZ's to that (rms over elements);
* the open-ended state finalized after every chunk equals ArviZ on the draws so
  far (splits at a chunk boundary and inside one; odd chunk sizes; a short last
  chunk);
* the laws: per draw == per chunk; any merge tree gives the same values; merging
  an empty state changes nothing; an update out of order poisons the result.
"""

from __future__ import annotations

import functools
import warnings
from statistics import NormalDist

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.stats.helpers import ar1, assert_trees_close, jit, merge_tree

from sluice.stats import streaming, streaming_state

CHAINS, DRAWS, PILOT, CHUNK = 4, 1000, 128, 100
RHOS = (0.0, 0.5, 0.9, 0.99, -0.3)
PER = 40  # elements per rho


def _tau(rho: float) -> float:
    return (1 + rho) / (1 - rho)


def _sokal(rho: float, total: int = CHAINS * DRAWS) -> float:
    """Relative sd of an ESS estimate with a window of 5 tau lags (at least 5)."""
    m = max(5.0, 5.0 * _tau(rho))
    return float(np.sqrt(2 * (2 * m + 1) / total))


@functools.cache
def _data() -> tuple[np.ndarray, np.ndarray]:
    """``(pilot (CHAINS * PILOT, D), draws (CHAINS, DRAWS, D))``, float32."""
    parts = [ar1(seed=100 + i, chains=CHAINS, draws=PILOT + DRAWS + 500, rho=r, dim=PER)[:, 500:]
             for i, r in enumerate(RHOS)]  # fmt: skip
    x = np.concatenate(parts, axis=2).astype(np.float32)
    return x[:, :PILOT].reshape(-1, x.shape[2]), x[:, PILOT:]


@functools.cache
def _statistic(draws: int = DRAWS, chunk: int = CHUNK):
    return streaming.summary(draws, chunk_size=chunk)


@functools.cache
def _programs(draws: int = DRAWS, chunk: int = CHUNK):
    s = _statistic(draws, chunk)
    return (jit(s.init), jit(s.update_block), jit(s.merge), jit(s.finalize))


def _states(draws_np: np.ndarray, pilot: np.ndarray, draws: int, chunk: int, upto: int):
    """Each chain's state after its first ``upto`` draws, fed a chunk at a time."""
    init, update, _, _ = _programs(draws, chunk)
    out = []
    for c in range(draws_np.shape[0]):
        state = init({"x": jnp.asarray(pilot)})
        for start in range(0, upto, chunk):
            piece = draws_np[c, start : min(start + chunk, upto)]
            padded = np.zeros((chunk, piece.shape[1]), np.float32)
            padded[: len(piece)] = piece
            state = update(state, {"x": jnp.asarray(padded)}, len(piece))
        out.append(state)
    return out


def _merged(states, draws: int = DRAWS, chunk: int = CHUNK):
    merge = _programs(draws, chunk)[2]
    out = states[0]
    for s in states[1:]:
        out = merge(out, s)
    return out


def _finalized(draws_np, pilot, draws=DRAWS, chunk=CHUNK, upto=None):
    states = _states(draws_np, pilot, draws, chunk, draws if upto is None else upto)
    out = _programs(draws, chunk)[3](_merged(states, draws, chunk))
    return {k: np.asarray(v["x"] if isinstance(v, dict) else v) for k, v in out.items()}


def _reference(x: np.ndarray) -> dict[str, np.ndarray]:
    data = az.convert_to_dataset({"x": x.astype(np.float64)})
    flat = x.reshape(-1, x.shape[-1]).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "mean": flat.mean(0),
            "sd": flat.std(0, ddof=1),
            "ess_bulk": az.ess(data, method="bulk")["x"].values,
            "ess_tail": az.ess(data, method="tail")["x"].values,
            "ess_mean": az.ess(data, method="mean")["x"].values,
            "r_hat": az.rhat(data)["x"].values,
            "r_hat_split": az.rhat(data, method="split")["x"].values,
            "quantiles": np.quantile(flat, [0.03, 0.5, 0.97], axis=0).T,
            "q_mcse": np.stack(
                [az.mcse(data, method="quantile", prob=p)["x"].values for p in (0.03, 0.5, 0.97)],
                axis=1,
            ),
            "hdi": az.hdi(data, hdi_prob=0.94)["x"].values,
        }


@pytest.fixture(scope="module")
def full():
    pilot, draws = _data()
    return _finalized(draws, pilot), _reference(draws), draws


def test_exact_outputs(full):
    out, ref, draws = full
    np.testing.assert_allclose(out["mean"], ref["mean"], rtol=0, atol=2e-6 * ref["sd"].max())
    np.testing.assert_allclose(out["sd"], ref["sd"], rtol=2e-6)
    np.testing.assert_allclose(out["r_hat_split"], ref["r_hat_split"], rtol=1e-5)
    np.testing.assert_array_equal(out["min"], draws.min(axis=(0, 1)))
    np.testing.assert_array_equal(out["max"], draws.max(axis=(0, 1)))


@pytest.mark.parametrize("rho", RHOS)
def test_ess_within_arviz_monte_carlo_error(full, rho):
    out, ref, _ = full
    i = RHOS.index(rho)
    sl = slice(i * PER, (i + 1) * PER)
    tol = _sokal(rho)
    for name in ("ess_bulk", "ess_tail", "ess_mean"):
        ratio = out[name][sl] / ref[name][sl]
        assert np.all(np.isfinite(ratio)), name
        rms = float(np.sqrt(np.mean(np.log(ratio) ** 2)))
        assert rms <= tol, f"rho={rho} {name}: rms log-ratio to ArviZ {rms:.3f} > {tol:.3f}"


@pytest.fixture(scope="module")
def heavy():
    """The same chains through ``exp(2 x)`` (log-normal, sigma 2): ArviZ's bulk ESS and
    rank R-hat, rank based, are those of ``x``; a score linear in the far tail is not."""
    pilot, draws = _data()
    return _finalized(np.exp(2.0 * draws), np.exp(2.0 * pilot))


@pytest.mark.parametrize("rho", RHOS)
def test_a_heavy_tail_leaves_bulk_ess_and_rank_rhat_as_arviz(full, heavy, rho):
    _, ref, _ = full
    i = RHOS.index(rho)
    sl = slice(i * PER, (i + 1) * PER)
    ratio = heavy["ess_bulk"][sl] / ref["ess_bulk"][sl]
    rms = float(np.sqrt(np.mean(np.log(ratio) ** 2)))
    assert rms <= _sokal(rho), f"rho={rho}: rms log-ratio to ArviZ {rms:.3f} > {_sokal(rho):.3f}"
    m, n = 2 * CHAINS, DRAWS // 2
    tol = max(0.005, float(np.sqrt(2 / (m - 1)) * _tau(rho) / n))
    diff = np.abs(heavy["r_hat"][sl] - ref["r_hat"][sl])
    assert diff.max() <= tol, f"rho={rho}: rank R-hat differs by {diff.max():.4f} > {tol:.4f}"


def _geyer_end(x: np.ndarray) -> int:
    """The last lag ArviZ's Geyer loop reads on ``(chains, draws)`` (split chains, FFT)."""
    m, n = 2 * x.shape[0], x.shape[1] // 2
    h = x[:, : 2 * n].reshape(m, n)
    c = h - h.mean(1, keepdims=True)
    f = np.fft.rfft(c, 2 * n)
    acov = np.fft.irfft(f * np.conj(f))[:, :n] / n
    w = h.var(1, ddof=1).mean()
    rho = 1 - (w - acov.mean(0)) / ((n - 1) / n * w + h.mean(1).var(ddof=1))
    t = 1
    while t < n - 2 and rho[t + 1] + rho[t + 2] > 0:
        t += 2
    return t + 2


def test_ess_where_geyer_runs_past_the_exact_lags_by_noise():
    """Short-memory chains whose Geyer sequence stays positive past the exact lags by
    chance (about 0.5% of elements; NUTS's antithetic draws among them): ArviZ's loop
    goes on over noise-level pairs, and the streamed ESS must follow it, not the
    block means' far noisier estimate (off by up to 35% on such elements)."""
    dim = 2000
    x = np.concatenate(
        [ar1(seed=7 + i, chains=CHAINS, draws=PILOT + DRAWS + 200, rho=r, dim=dim // 2)[:, 200:]
         for i, r in enumerate((0.0, -0.3))], axis=2,
    ).astype(np.float32)  # fmt: skip
    pilot, draws = x[:, :PILOT].reshape(-1, dim), x[:, PILOT:]
    ends = np.array([_geyer_end(draws[:, :, j].astype(np.float64)) for j in range(dim)])
    long = np.flatnonzero(ends > streaming_state.StreamSettings(DRAWS, CHUNK).lags)
    assert len(long) >= 3, len(long)  # the case under test occurs
    out = _finalized(draws, pilot)
    data = az.convert_to_dataset({"x": draws[:, :, long].astype(np.float64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = az.ess(data, method="mean")["x"].values
    err = np.abs(out["ess_mean"][long] / ref - 1)
    # the accuracy asked of the default statistics' ESS: rms 5%, max 15%
    rms = float(np.sqrt(np.mean(err**2)))
    worst = dict(zip(long.tolist(), err.round(3).tolist(), strict=True))
    assert rms <= 0.05 and err.max() <= 0.15, worst


@pytest.mark.parametrize("rho", RHOS)
def test_rank_rhat_and_quantiles(full, rho):
    out, ref, _ = full
    i = RHOS.index(rho)
    sl = slice(i * PER, (i + 1) * PER)
    # R-hat's own sd with m split chains of n draws: about sqrt(2 / (m - 1)) tau / n
    m, n = 2 * CHAINS, DRAWS // 2
    tol = max(0.005, float(np.sqrt(2 / (m - 1)) * _tau(rho) / n))
    diff = np.abs(out["r_hat"][sl] - ref["r_hat"][sl])
    assert diff.max() <= tol, f"rho={rho}: rank R-hat differs by {diff.max():.4f} > {tol:.4f}"
    # quantiles: within half their MCSE (rms), every one within one MCSE
    err = np.abs(out["quantiles"][sl] - ref["quantiles"][sl]) / ref["q_mcse"][sl]
    assert np.sqrt(np.mean(err**2)) <= 0.5 and err.max() <= 1.0, f"rho={rho}: {err.max():.2f}"


def test_hdi_is_the_narrowest_interval(full):
    """The HDI holds its mass of the draws and is as narrow as ArviZ's (its endpoints
    are an argmin over a flat width: they may move while the interval does not)."""
    out, ref, draws = full
    flat = draws.reshape(-1, draws.shape[-1])
    lo, hi = out["hdi"][:, 0], out["hdi"][:, 1]
    mass = np.mean((flat >= lo) & (flat <= hi), axis=0)
    # the mass of a 94% interval of N draws: within 3 binomial sd of 0.94 (N = total draws)
    assert np.all(np.abs(mass - 0.94) <= 3 * np.sqrt(0.94 * 0.06 / flat.shape[0]) + 1e-3)
    # no wider than ArviZ's beyond the endpoints' Monte Carlo error (narrower is fine)
    excess = (hi - lo) - (ref["hdi"][:, 1] - ref["hdi"][:, 0])
    slack = ref["q_mcse"][:, 0] + ref["q_mcse"][:, 2]
    assert np.all(excess <= slack), (excess / slack).max()


def test_hdi_as_accurate_as_arviz(full):
    """The HDI's endpoints against the exact ones (the chains are stationary with unit
    normal marginals: ``+-z(0.97)``), in units of the endpoint quantiles' MCSE: the
    streamed HDI is as close to them as ArviZ's on the same draws.

    ArviZ's own endpoints (an argmin over a flat width) are off by 1.2 to 2.0 MCSE
    (rms) here, so the two estimates differ from each other by about as much; the
    exact HDI is the reference that can tell a better estimate from a worse one."""
    out, ref, _ = full
    exact = NormalDist().inv_cdf(0.97)
    mcse = ref["q_mcse"][:, [0, 2]]

    def rms(hdi: np.ndarray, sl: slice) -> float:
        err = (hdi[sl] - np.array([-exact, exact])) / mcse[sl]
        return float(np.sqrt(np.mean(err**2)))

    everything = slice(None)
    assert rms(out["hdi"], everything) <= 1.1 * rms(ref["hdi"], everything)
    for i, rho in enumerate(RHOS):
        sl = slice(i * PER, (i + 1) * PER)
        streamed, arviz = rms(out["hdi"], sl), rms(ref["hdi"], sl)
        assert streamed <= 1.2 * arviz, f"rho={rho}: HDI rms error {streamed:.2f} vs {arviz:.2f}"


@pytest.mark.parametrize("chunks", [1, 3, 5, 6])
def test_open_ended_state_after_k_chunks_equals_arviz_on_those(full, chunks):
    """Stopping after k chunks (odd k: ArviZ splits inside chunk k // 2) gives what
    ArviZ gives on the first k chunks' draws."""
    pilot, draws = _data()
    upto = chunks * CHUNK
    sel = slice(0, PER * 3)  # rho 0, 0.5, 0.9
    out = _finalized(draws[..., sel], pilot[:, sel], upto=upto)
    ref = _reference(draws[:, :upto, sel])
    np.testing.assert_allclose(out["r_hat_split"], ref["r_hat_split"], rtol=1e-5)
    np.testing.assert_allclose(out["mean"], ref["mean"], atol=2e-6 * ref["sd"].max())
    tol = _sokal(0.9, CHAINS * upto)
    ratio = out["ess_bulk"] / ref["ess_bulk"]
    assert np.sqrt(np.mean(np.log(ratio) ** 2)) <= tol
    rhat_tol = max(0.005, float(np.sqrt(2 / (2 * CHAINS - 1)) * _tau(0.9) / (upto // 2)))
    assert np.abs(out["r_hat"] - ref["r_hat"]).max() <= rhat_tol


@pytest.mark.parametrize(("draws", "chunk"), [(450, 75), (500, 110)])
def test_odd_chunks_and_a_short_last_chunk(draws, chunk):
    """Odd chunk sizes (a middle draw per chunk) and a last chunk that is short."""
    pilot, x = _data()
    sel = slice(0, PER * 2)
    xs = x[:, :draws, sel]
    out = _finalized(xs, pilot[:, sel], draws=draws, chunk=chunk)
    ref = _reference(xs)
    np.testing.assert_allclose(out["r_hat_split"], ref["r_hat_split"], rtol=1e-5)
    np.testing.assert_allclose(out["sd"], ref["sd"], rtol=2e-6)
    ratio = out["ess_bulk"] / ref["ess_bulk"]
    assert np.sqrt(np.mean(np.log(ratio) ** 2)) <= _sokal(0.5, CHAINS * draws)


def test_per_draw_equals_per_chunk_and_merge_laws():
    pilot, x = _data()
    sel = slice(PER, PER + 6)
    xs, ps = x[:, :300, sel], pilot[:, sel]
    s = streaming.summary(300, chunk_size=100)
    update = jit(s.update)
    init = jit(s.init)
    per_draw = []
    for c in range(CHAINS):
        state = init({"x": jnp.asarray(ps)})
        for t in range(300):
            state = update(state, {"x": jnp.asarray(xs[c, t])})
        per_draw.append(state)
    per_chunk = _states(xs, ps, 300, 100, 300)  # (another statistic: same settings)
    fin = jit(s.finalize)
    merge = jit(s.merge)
    for a, b in zip(per_draw, per_chunk, strict=True):
        assert_trees_close(fin(a), fin(b), rtol=2e-5, atol=1e-6)
    rng = np.random.default_rng(0)
    first = fin(merge_tree(merge, per_chunk, rng))
    second = fin(merge_tree(merge, per_chunk, rng))
    assert_trees_close(first, second, rtol=1e-5, atol=1e-6)
    empty = init({"x": jnp.asarray(ps)})
    assert_trees_close(fin(merge(empty, per_chunk[0])), fin(per_chunk[0]), rtol=1e-6, atol=1e-7)
    assert_trees_close(fin(merge(per_chunk[0], empty)), fin(per_chunk[0]), rtol=1e-6, atol=1e-7)


def test_windows_of_any_size_give_the_same_state(monkeypatch):
    """A small model's update processes fewer rows at once (a quicker compile) than a
    large one's: the same sums, float32 rounding aside, at either size (a chunk of
    100 rows: the last window of 16 is partial)."""
    pilot, x = _data()
    init, _, merge, finalize = _programs()
    assert streaming.window_rows(10) < streaming.window_rows(10**6)
    s = _statistic()
    outs = []
    for small in (10**6, 0):  # every model small, then none
        monkeypatch.setattr(streaming, "SMALL", small)
        update = jit(lambda st, d, n: s.update_block(st, d, n))  # (a fresh trace)
        states = []
        for c in range(CHAINS):
            state = init({"x": jnp.asarray(pilot)})
            for start in range(0, 300, CHUNK):
                state = update(state, {"x": jnp.asarray(x[c, start : start + CHUNK])}, CHUNK)
            states.append(state)
        outs.append(finalize(functools.reduce(merge, states)))
    assert_trees_close(outs[0], outs[1], rtol=2e-5, atol=1e-6)


def _caches(root, *caches: tuple[str, str, str, str]) -> None:
    """A sysfs ``cache`` folder with ``(level, type, size, shared_cpu_list)`` entries."""
    for i, fields in enumerate(caches):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        for name, value in zip(("level", "type", "size", "shared_cpu_list"), fields, strict=True):
            (index / name).write_text(value + "\n")


@pytest.mark.parametrize(
    ("caches", "share"),
    [
        (
            (
                ("1", "Data", "48K", "0-1"),
                ("1", "Instruction", "32K", "0-1"),
                ("2", "Unified", "1024K", "0"),
                ("3", "Unified", "32768K", "0-15"),
            ),
            2**20,
        ),
        ((("2", "Unified", "4M", "0-3"),), 2**20),  # shared by four cores: a quarter each
        ((("2", "Unified", "2048K", "0,2"),), 2**20),  # two threads of one core
        ((("1", "Data", "32K", "0"),), streaming.CACHE_FALLBACK),  # no L2 listed
    ],
)
def test_core_cache_bytes_reads_a_cores_share_of_its_l2(tmp_path, monkeypatch, caches, share):
    _caches(tmp_path, *caches)
    monkeypatch.setattr(streaming, "CPU_CACHES", tmp_path)
    streaming.core_cache_bytes.cache_clear()
    try:
        assert streaming.core_cache_bytes() == share
    finally:
        streaming.core_cache_bytes.cache_clear()


def test_block_elements_keeps_a_block_within_a_cores_cache(monkeypatch):
    """Past WHOLE_ELEMENTS, three times what a block copies fits a core's cache, in multiples of 64
    elements, at least MIN_BLOCK; CPU_UPDATE_BLOCK overrides both; off the CPU,
    UPDATE_BLOCK."""
    monkeypatch.setattr(streaming, "core_cache_bytes", lambda: 2**20)
    # what a block copies of the defaults' state (1,000 draws in chunks of 100), per
    # element: float32 knots (9), tail (16), sums (2 + 2 + 2), extremes (2); uint16
    # histogram (288); lag sums (4 x 16), the open block (4), block means (4 x 5) and
    # their lags (4 x 6); of the split ring (6 chunks) the chunk's own slot (2 parts x
    # 7), not the prefix; `final` is one number in all
    s = streaming.summary(1000, chunk_size=100)
    shapes = jax.eval_shape(s.init, jnp.zeros((16, 5000)))
    per_element = streaming._bytes_per_element(shapes, 5000)
    floats = 9 + 16 + 6 + 2 + 4 * 16 + 4 + 4 * 5 + 4 * 6 + 2 * 7
    assert per_element == 4 * floats + 2 * 288 + 1 == 1213  # (+1: `final`, rounded up)
    assert streaming.block_elements(per_element) == 2**20 // (3 * 1213) // 64 * 64 == 256
    assert streaming.block_elements(10**6) == streaming.MIN_BLOCK
    stack = jax.tree.map(lambda a: jax.ShapeDtypeStruct((3, *a.shape), a.dtype), shapes)
    assert streaming._bytes_per_element(stack, 5000, 3) == per_element
    assert streaming.whole_elements() == streaming.WHOLE_ELEMENTS
    monkeypatch.setattr(streaming, "CPU_UPDATE_BLOCK", 1000)
    assert streaming.block_elements(per_element) == streaming.whole_elements() == 1000
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert streaming.block_elements(per_element) == streaming.whole_elements() == 16384


def test_blocks_of_elements_and_stacked_chains_give_the_same_state(monkeypatch):
    """Past ``block_elements()`` elements the update runs a block of elements at a time
    (its temporaries are one block's), and ``update_chains`` updates a stack of chains
    in place: every sum is an element's own, so the states are the whole update's,
    chain by chain, up to XLA's fusing of the arithmetic (float32 rounding, and a draw
    within an ulp of a bucket's edge counted in its neighbour) (blocks of 64 over
    200 elements: three full and a remainder; a short last chunk keeps its final
    halves per element)."""
    pilot, x = _data()
    draws, chunk = 250, 100
    s = streaming.summary(draws, chunk_size=chunk)
    settings = s.key[1]
    start = {"x": jnp.asarray(pilot)}
    chunks = [(a, min(a + chunk, draws)) for a in range(0, draws, chunk)]

    def per_chain() -> list:
        update = jit(lambda st, d, n: streaming.update_block(settings, st, d, n))
        states = []
        for c in range(CHAINS):
            state = s.init(start)
            for a, b in chunks:
                rows = np.zeros((chunk, x.shape[2]), np.float32)
                rows[: b - a] = x[c, a:b]
                state = update(state, {"x": jnp.asarray(rows)}, b - a)
            states.append(state)
        return jax.tree.map(lambda *v: np.stack([np.asarray(u) for u in v]), *states)

    def stacked():
        update = jit(lambda st, d, n: streaming.update_chains(settings, st, d, n))
        states = jax.tree.map(lambda v: jnp.stack([v] * CHAINS), s.init(start))
        for a, b in chunks:
            rows = np.zeros((CHAINS, chunk, x.shape[2]), np.float32)
            rows[:, : b - a] = x[:, a:b]
            states = update(states, {"x": jnp.asarray(rows)}, b - a)
        return jax.tree.map(np.asarray, states)

    monkeypatch.setattr(streaming, "UPDATE_BLOCK", 2**20)  # `whole`: no blocks
    monkeypatch.setattr(streaming, "CPU_UPDATE_BLOCK", 2**20)
    whole = per_chain()
    monkeypatch.setattr(streaming, "UPDATE_BLOCK", 64)
    monkeypatch.setattr(streaming, "CPU_UPDATE_BLOCK", 64)
    for other in (per_chain(), stacked()):
        for field in whole._fields:
            for u, v in zip(jax.tree.leaves(getattr(whole, field)),
                            jax.tree.leaves(getattr(other, field)), strict=True):  # fmt: skip
                if field != "hist":
                    np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-4)
                    continue
                u = u.reshape(CHAINS, -1, settings.buckets).astype(int)
                v = v.reshape(CHAINS, -1, settings.buckets).astype(int)
                np.testing.assert_array_equal(u.sum(-1), v.sum(-1))
                moved = np.abs(np.cumsum(u, -1) - np.cumsum(v, -1))
                assert moved.max() <= 1 and (u != v).mean() < 1e-3
    out = s.finalize(functools.reduce(s.merge, [jax.tree.map(lambda v, c=c: v[c], whole)
                                                for c in range(CHAINS)]))  # fmt: skip
    np.testing.assert_allclose(out["mean"]["x"], x[:, :draws].mean(axis=(0, 1)), atol=1e-5)


def test_quantiles_read_in_blocks_of_elements_equal_all_at_once(monkeypatch):
    """A million elements' HDI search runs over blocks of elements (memory): the same
    values (float32 rounding aside)."""
    from sluice.stats import streaming_readout

    pilot, x = _data()
    sel = slice(0, 10)
    s = streaming.summary(200, chunk_size=100)
    states = _states(x[:, :200, sel], pilot[:, sel], 200, 100, 200)
    merged = functools.reduce(s.merge, states)
    whole = s.finalize(merged)
    monkeypatch.setattr(streaming_readout, "BLOCK", 4)  # 10 elements: blocks of 4, padded
    blocked = s.finalize(merged)
    for key in ("quantiles", "hdi"):  # the same arithmetic, vectorized otherwise: ulps apart
        np.testing.assert_allclose(blocked[key]["x"], whole[key]["x"], rtol=1e-6, atol=1e-7)


def test_a_large_summary_is_merged_and_finalized_in_blocks_of_elements(monkeypatch):
    """Past ``ELEMENT_BLOCK`` elements the chains' states are merged and finalized a
    block at a time (a million elements' merge holds tens of GB at once): every
    output as from the whole states, no program ever sees more than a block, and
    the background compile prepares exactly the block programs."""
    from sluice._jax import compile as programs
    from sluice.runtime import statistics as run_statistics

    pilot, x = _data()
    sel = slice(0, 10)
    s = _statistic()
    states = [
        jax.device_get(st) for st in _states(x[:, :, sel], pilot[:, sel], DRAWS, CHUNK, DRAWS)
    ]
    whole = run_statistics.finalize(s, run_statistics.merge_chains(s, states))
    monkeypatch.setattr(run_statistics, "ELEMENT_BLOCK", 4)  # 10 elements: 4 + 4 + 2 (padded)
    monkeypatch.setenv("SLUICE_BACKGROUND_COMPILE", "1")
    one = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), states[0])
    start = lambda: {"summary": jax.tree.map(lambda v: v[None], states[0])}  # noqa: E731
    starting = (("block-test-start",), start, ())
    run_statistics.fill(run_statistics.lowered({"summary": s}, None, starting))
    seen = []
    real_call = programs.call

    def call(key, fn, *args, **how):
        seen.append({leaf.shape[-1] for leaf in (a.knots for a in args)})
        return real_call(key, fn, *args, **how)

    monkeypatch.setattr(programs, "call", call)
    compiled_before = set(programs.cached())
    blocked = run_statistics.summarize(s, states)
    assert set(programs.cached()) == compiled_before, "the block programs were precompiled"
    assert seen and all(sizes == {4} for sizes in seen)
    assert one.knots.shape[-1] == 10
    assert set(blocked) == set(whole)
    # the block programs compile for speed (XLA's classic emitters), the whole state's for
    # a quick compile: the same sums in another order, float32 rounding apart, which the
    # ESS's differences of autocovariances (1 - (W - acov) / var+) amplify ~10-fold
    rtol = 1e-5
    for key, value in whole.items():
        np.testing.assert_allclose(
            np.asarray(jax.tree.leaves(blocked[key])[0]),
            np.asarray(jax.tree.leaves(value)[0]),
            rtol=rtol, atol=1e-7, err_msg=key,
        )  # fmt: skip
    ref = _reference(x[:, :, sel])  # and both agree with ArviZ where exact
    np.testing.assert_allclose(blocked["mean"]["x"], ref["mean"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(blocked["r_hat_split"]["x"], ref["r_hat_split"], atol=1e-5)
    # `until`'s readings, the convergence diagnostics alone: by blocks too, precompiled
    run_statistics.fill(run_statistics.lowered({"summary": s}, None, starting, diagnostics=True))
    compiled_before = set(programs.cached())
    alone = run_statistics.summarize(s, states, diagnostics=True)
    assert set(programs.cached()) == compiled_before, "diagnostics' blocks precompiled"
    assert set(whole) - set(alone) == {"quantiles", "hdi"}
    for key, value in alone.items():
        np.testing.assert_allclose(
            np.asarray(jax.tree.leaves(value)[0]), np.asarray(jax.tree.leaves(whole[key])[0]),
            rtol=rtol, atol=1e-7, err_msg=key,
        )  # fmt: skip


def test_an_update_out_of_order_poisons_the_result():
    pilot, x = _data()
    s = streaming.summary(200, chunk_size=100)
    state = s.init({"x": jnp.asarray(pilot[:, :3])})
    state = s.update_block(state, {"x": jnp.asarray(x[0, :50, :3])}, 50)  # half a chunk
    state = s.update_block(state, {"x": jnp.asarray(x[0, 50:150, :3])}, 100)  # misaligned
    out = s.finalize(state)
    assert np.all(np.isnan(np.asarray(out["ess_bulk"]["x"])))
    assert np.all(np.isnan(np.asarray(out["mean"]["x"])))


def test_memory_per_element_and_chain():
    """The default state is at most 1.5 KB per element and chain (float32): the bytes
    that grow with the elements, every leaf counted."""

    def nbytes(d: int) -> int:
        s = streaming.summary(1000, chunk_size=100)
        shapes = jax.eval_shape(s.init, {"x": jax.ShapeDtypeStruct((128, d), jnp.float32)})
        return sum(np.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(shapes))

    per_element = (nbytes(2000) - nbytes(1000)) / 1000
    assert 1024 < per_element <= 1536, per_element


def test_a_chain_past_num_draws_poisons_the_result():
    """``num_draws`` bounds a chain (the split ring and the counters are sized by it):
    a draw beyond it is an error in the output, not a silent wrap."""
    pilot, x = _data()
    s = streaming.summary(100, chunk_size=100)
    state = s.init({"x": jnp.asarray(pilot[:, :3])})
    state = s.update_block(state, {"x": jnp.asarray(x[0, :100, :3])}, 100)
    assert np.all(np.isfinite(np.asarray(s.finalize(state)["mean"]["x"])))
    over = s.update(state, {"x": jnp.asarray(x[0, 100, :3])})
    assert np.all(np.isnan(np.asarray(s.finalize(over)["mean"]["x"])))


def test_the_grid_is_finer_where_the_summary_reads_quantiles():
    """The buckets around the normal scores of the levels read (3%, 50%, 97%) are
    FOCUS times narrower than elsewhere, every draw lands in the bucket whose edges
    hold it, and the grid covers the score's range."""
    settings = streaming_state.StreamSettings(1000, 100, probs=(0.03, 0.5, 0.97))
    at, position = streaming_state.grid(settings.probs, settings.buckets)
    assert at[0] == -streaming_state.BOUND and at[-1] == streaming_state.BOUND
    assert position[0] == 0 and np.isclose(position[-1], settings.buckets)
    per_bucket = np.diff(at) / np.diff(position)  # score width of a bucket, per segment
    width = lambda s: per_bucket[np.searchsorted(at, s) - 1]  # noqa: E731
    for p in settings.probs:
        c = NormalDist().inv_cdf(p)
        half = streaming_state.FOCUS_HALF
        assert np.isclose(width(c + half / 2) * streaming_state.FOCUS, width(c + half + 0.1))
    # values land between the edges of their bucket (x units, through the reference)
    rng = np.random.default_rng(3)
    pilot = rng.standard_t(5, size=(512, 4)).astype(np.float32)
    x = rng.standard_t(5, size=(2000, 4)).astype(np.float32)
    knots = streaming_state.reference(jnp.asarray(pilot))
    s = streaming_state.score(streaming_state.proxy(jnp.asarray(x), streaming_state.hinges(knots)))
    b = np.asarray(streaming_state.bucket(s, settings))  # (2000, 4)
    edges = np.asarray(streaming_state.bucket_edges(knots, settings))  # (4, G + 1)
    lo = np.take_along_axis(edges, b.T, axis=1).T
    hi = np.take_along_axis(edges, b.T + 1, axis=1).T
    inside = (x >= lo - 1e-5 * np.abs(x)) & (x <= hi + 1e-5 * np.abs(x))
    assert inside.mean() == 1.0, np.argwhere(~inside)[:5]


def test_bucket_edges_interpolate_the_knots_with_and_without_ties():
    """An edge is the draw value whose proxy is the edge's score: NumPy's linear
    interpolation between the knots at their normal scores, the outer segments
    extended (every element untied); with a tied pilot (a point mass) the
    proxy's own inverse. Either way the edges never decrease."""
    settings = streaming_state.StreamSettings(1000, 100, probs=(0.03, 0.5, 0.97))
    at, position = streaming_state.grid(settings.probs, settings.buckets)
    w = np.interp(np.arange(settings.buckets + 1), position, at)
    z = streaming_state._unscore_host(w)  # the edges' proxy values
    scores = np.asarray(streaming_state.SCORES)
    rng = np.random.default_rng(12)
    pilot = rng.standard_t(4, size=(400, 6)) * np.exp(rng.normal(size=6)) + 50 * rng.normal(size=6)
    knots = streaming_state.reference(jnp.asarray(pilot, jnp.float32))
    got = np.asarray(streaming_state.bucket_edges(knots, settings))  # (6, G + 1)
    k = np.asarray(knots, np.float64)
    inner = np.isfinite(z)
    for d in range(6):
        want = np.interp(z[inner], scores, k[:, d])
        zi = z[inner]
        first = (k[1, d] - k[0, d]) / (scores[1] - scores[0])  # the outer slopes, extended
        last = (k[-1, d] - k[-2, d]) / (scores[-1] - scores[-2])
        lo, hi = zi < scores[0], zi > scores[-1]
        want[lo] = k[0, d] + (zi[lo] - scores[0]) * first
        want[hi] = k[-1, d] + (zi[hi] - scores[-1]) * last
        np.testing.assert_allclose(got[d, inner], want, rtol=1e-5, atol=1e-5 * np.ptp(k[:, d]))
        assert np.all(np.diff(got[d]) >= 0)
    np.testing.assert_array_equal(got[:, ~inner], np.broadcast_to(z[~inner], (6, (~inner).sum())))
    # a point mass in one element's pilot: the whole block takes the proxy's inverse
    pilot[:300, 2] = 1.5
    knots = streaming_state.reference(jnp.asarray(pilot, jnp.float32))
    got = np.asarray(streaming_state.bucket_edges(knots, settings))
    want = np.asarray(streaming_state.inverse(jnp.asarray(z[inner], jnp.float32), knots))
    np.testing.assert_allclose(got[:, inner], np.maximum.accumulate(want, axis=1), rtol=1e-6)
    assert np.all(np.diff(got, axis=1) >= 0)


def test_the_diagnostics_alone_are_the_finalizes():
    """What ``until`` reads at every chunk (``Blocks.diagnostics``: no histogram read)
    equals ``finalize``'s values, key for key, on merged chains; only the quantiles
    and the HDI are left out."""
    s = streaming.summary(300, chunk_size=100)
    x = ar1(5, 3, 300, 0.6, dim=40).astype(np.float32)
    pilot = jnp.asarray(x[:, :32].reshape(-1, 40))
    states = []
    for chain in x:
        state = s.init(pilot)
        for start in range(0, 300, 100):
            state = s.update_block(state, jnp.asarray(chain[start : start + 100]), 100)
        states.append(state)
    merged = s.merge(s.merge(states[0], states[1]), states[2])
    full = jax.jit(s.blocks.finalize)(merged)
    alone = jax.jit(s.blocks.diagnostics)(merged)
    assert set(full) - set(alone) == {"quantiles", "hdi"}
    for key, value in alone.items():
        np.testing.assert_allclose(value, full[key], rtol=1e-6, err_msg=key)


def _feed(s, rows_by_chain: list[np.ndarray], pilot: np.ndarray, chunk: int):
    states = []
    for rows in rows_by_chain:
        state = s.init({"x": jnp.asarray(pilot)})
        for start in range(0, len(rows), chunk):
            state = s.update_block(state, {"x": jnp.asarray(rows[start : start + chunk])}, chunk)
        states.append(state)
    out = states[0]
    for state in states[1:]:
        out = s.merge(out, state)
    return {k: np.asarray(v["x"]) for k, v in s.finalize(out).items() if isinstance(v, dict)}


@pytest.mark.slow
def test_counters_saturate_and_are_restored_when_chains_merge():
    """A chain counts in uint16 (its draws fit); merged chains may hold more than
    65,535 draws in one bucket. The buckets' total is known, so one saturated bucket
    per element is restored exactly: the quantiles equal those of int32 counters
    (a run allowed more draws) and NumPy's within their bucket, the HDI the int32
    counters' within its bucket. With two buckets past the limit the split is
    unknown: those quantiles are NaN, the rest stand."""
    chains, draws, chunk = 4, 20_000, 10_000
    rng = np.random.default_rng(11)
    # element 0: mostly one value (76,000 of 80,000 draws in its bucket); element 1:
    # a coin (40,000 each: no bucket full); element 2: a normal
    x = rng.normal(size=(chains, draws, 3)).astype(np.float32)
    x[..., 0] = np.where(rng.random((chains, draws)) < 0.95, 0.0, x[..., 0])
    x[..., 1] = (rng.random((chains, draws)) < 0.5).astype(np.float32)
    pilot = x[:, :128].reshape(-1, 3)
    small = streaming.summary(draws, chunk_size=chunk, buckets=288)
    wide = streaming.summary(70_000, chunk_size=chunk, buckets=288)
    assert small.init({"x": jnp.asarray(pilot)}).hist.dtype == jnp.uint16
    assert wide.init({"x": jnp.asarray(pilot)}).hist.dtype == jnp.int32
    got = _feed(small, list(x), pilot, chunk)
    want = _feed(wide, list(x), pilot, chunk)
    np.testing.assert_allclose(got["quantiles"], want["quantiles"], rtol=1e-6, atol=1e-7)
    flat = x.reshape(-1, 3)
    ref = np.quantile(flat, [0.03, 0.5, 0.97], axis=0).T
    assert np.all(np.isfinite(got["quantiles"]))
    # the saturated point mass and the normal are read within the bucket holding NumPy's
    knots = small.init({"x": jnp.asarray(pilot)}).knots
    edges = np.asarray(streaming_state.bucket_edges(knots, streaming_state.StreamSettings(
        draws, chunk, probs=(0.03, 0.5, 0.97))))  # fmt: skip
    for e in (0, 2):
        at = np.clip(np.searchsorted(edges[e], ref[e], side="right") - 1, 1, 286)
        width = edges[e, at + 1] - edges[e, at]
        assert np.all(np.abs(got["quantiles"][e] - ref[e]) <= width), (e, got, ref)
        # the HDI: the narrowest of its candidates, which for a point mass tie to
        # rounding: the two programs' may pick another, within the same bucket
        hdi_at = np.clip(np.searchsorted(edges[e], want["hdi"][e], side="right") - 1, 1, 286)
        hdi_width = edges[e, hdi_at + 1] - edges[e, hdi_at]
        assert np.all(np.abs(got["hdi"][e] - want["hdi"][e]) <= hdi_width), (e, got, want)
    np.testing.assert_allclose(got["hdi"][1], want["hdi"][1], rtol=1e-6, atol=1e-7)
    # a coin over 4 x 40,000 draws: both buckets past the limit
    coin = (rng.random((chains, 2 * draws, 1)) < 0.5).astype(np.float32)
    normal = rng.normal(size=(chains, 2 * draws, 1)).astype(np.float32)
    y = np.concatenate([coin, normal], axis=2)
    longer = streaming.summary(2 * draws, chunk_size=chunk, buckets=288)
    out = _feed(longer, list(y), y[:, :128].reshape(-1, 2), chunk)
    assert np.all(np.isnan(out["quantiles"][0])) and np.all(np.isnan(out["hdi"][0]))
    assert np.all(np.isfinite(out["quantiles"][1])) and np.isfinite(out["mean"][0])


def test_bad_settings_name_the_argument():
    with pytest.raises(ValueError, match="num_draws"):
        streaming.summary(0)
    with pytest.raises(ValueError, match="hdi_prob"):
        streaming.summary(10, hdi_prob=1.5)
    with pytest.raises(ValueError, match="lags"):
        streaming.summary(10, lags=1)


def test_a_fresh_state_owns_its_buffers():
    """The engine donates states to its compiled chunk: a state made eagerly shares no
    buffer with the pilot or with itself."""
    s = streaming.summary(100, chunk_size=50)
    pilot = {"x": jnp.asarray(np.random.default_rng(1).normal(size=(16, 3)), jnp.float32)}
    leaves = jax.tree.leaves(s.init(pilot)) + jax.tree.leaves(pilot)
    pointers = [leaf.unsafe_buffer_pointer() for leaf in leaves]
    assert len(set(pointers)) == len(pointers)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reference_quantiles_are_numpys(dtype):
    """The pilot's reference quantiles (an integer-keyed sort) equal NumPy's linear
    quantiles, signed zeros, ties and a constant element included."""
    rng = np.random.default_rng(5)
    rows = rng.standard_t(3, size=(301, 6)).astype(dtype)
    rows[:150, 2], rows[150:, 2] = -0.0, 0.0
    rows[:, 3] = 1.5
    rows[1::2, 4] = -rows[::2, 4][:150]  # symmetric pairs of values
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", dtype == np.float64)
    try:
        x = jnp.asarray(rows)
        assert x.dtype == dtype
        np.testing.assert_array_equal(streaming_state.sort_rows(x), np.sort(rows, axis=0))
        np.testing.assert_allclose(
            streaming_state.reference(x),
            np.quantile(rows, streaming_state.LEVELS, axis=0),
            rtol=1e-6,
        )
    finally:
        jax.config.update("jax_enable_x64", before)
