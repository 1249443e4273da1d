"""Where draws go (sluice.io.sinks): host memory, nowhere, or a sink object."""

import numpy as np
import pytest

from sluice.io.sinks import Layout, MemorySink, NullSink, ResumableSink, Sink, resolve_sink
from sluice.io.store import ZarrSink

GROUPS = {
    "posterior": {"mu": ((), np.dtype(np.float32)), "z": ((2, 3), np.dtype(np.float64))},
    "sample_stats": {"diverging": ((), np.dtype(bool)), "n_steps": ((), np.dtype(np.int32))},
}


def _chunk(rng, chains, n):
    return {
        "posterior": {
            "mu": rng.normal(size=(chains, n)).astype(np.float32),
            "z": rng.normal(size=(chains, n, 2, 3)),
        },
        "sample_stats": {
            "diverging": rng.random((chains, n)) < 0.5,
            "n_steps": rng.integers(1, 100, (chains, n)).astype(np.int32),
        },
    }


def test_memory_sink_preallocates_and_places_chunks_at_their_start():
    sink = MemorySink()
    sink.open(Layout(chains=3, num_draws=10, groups=GROUPS), {"settings": "ignored"})
    kept = sink.kept()
    assert set(kept) == set(GROUPS)
    for group, names in GROUPS.items():
        assert set(kept[group]) == set(names)
        for name, (shape, dtype) in names.items():
            assert kept[group][name].shape == (3, 10, *shape)
            assert kept[group][name].dtype == dtype
    buffers = {(g, n): a for g, names in kept.items() for n, a in names.items()}

    rng = np.random.default_rng(0)
    chunks = [(0, _chunk(rng, 3, 4)), (4, _chunk(rng, 3, 4)), (8, _chunk(rng, 3, 2))]
    for start, chunk in chunks:
        sink.write(start, chunk)
    sink.close()
    kept = sink.kept()
    for group, names in GROUPS.items():
        for name in names:
            expected = np.concatenate([c[group][name] for _, c in chunks], axis=1)
            np.testing.assert_array_equal(kept[group][name], expected)
            assert kept[group][name] is buffers[group, name]  # written in place, no new arrays


def test_memory_sink_chunks_out_of_order_and_partial_writes():
    sink = MemorySink()
    groups = {"posterior": {"x": ((), np.dtype(np.float64))}}
    sink.open(Layout(chains=2, num_draws=6, groups=groups), {})
    sink.write(3, {"posterior": {"x": np.full((2, 3), 2.0)}})
    sink.write(0, {"posterior": {"x": np.full((2, 3), 1.0)}})
    np.testing.assert_array_equal(sink.kept()["posterior"]["x"], [[1, 1, 1, 2, 2, 2]] * 2)


def test_memory_sink_keeps_only_this_process_chains():
    sink = MemorySink()
    groups = {"posterior": {"x": ((4,), np.dtype(np.float32))}}
    sink.open(Layout(chains=8, num_draws=5, groups=groups, local_chains=(2, 5)), {})
    assert sink.kept()["posterior"]["x"].shape == (3, 5, 4)


def test_null_sink_keeps_nothing():
    sink = NullSink()
    assert sink.keeps_draws is False
    sink.open(Layout(chains=2, num_draws=3, groups=GROUPS), {})
    sink.write(0, _chunk(np.random.default_rng(1), 2, 3))
    sink.close()
    assert sink.kept() is None
    assert MemorySink.keeps_draws is True


class Custom:
    keeps_draws = True

    def open(self, layout, description):
        pass

    def write(self, start, chunk):
        pass

    def close(self):
        pass

    def kept(self):
        return {}


class NoKept:  # the methods, but not kept()
    keeps_draws = True

    def open(self, layout, description):
        pass

    def write(self, start, chunk):
        pass

    def close(self):
        pass


def test_resolve_sink():
    assert type(resolve_sink("memory")) is MemorySink
    assert resolve_sink("memory") is not resolve_sink("memory")  # a new one per run
    assert type(resolve_sink(None)) is NullSink
    custom = Custom()
    assert resolve_sink(custom) is custom
    memory = MemorySink()
    assert resolve_sink(memory) is memory
    with pytest.raises(ValueError, match="'disk'"):
        resolve_sink("disk")
    for bad in (object(), NoKept(), 3):
        with pytest.raises(TypeError, match="sink must be") as info:
            resolve_sink(bad)
        assert repr(bad) in str(info.value)


def test_protocol_checks(tmp_path):
    for sink in (MemorySink(), NullSink(), Custom()):
        assert isinstance(sink, Sink)
    assert not isinstance(NoKept(), Sink)
    zarr = ZarrSink(tmp_path / "run.zarr")
    assert isinstance(zarr, Sink) and isinstance(zarr, ResumableSink)
    assert not (tmp_path / "run.zarr").exists()  # building one writes nothing
    for sink in (MemorySink(), NullSink(), Custom()):
        assert not isinstance(sink, ResumableSink)


def test_layout_local_range():
    assert Layout(chains=4, num_draws=1, groups={}).local_range == (0, 4)
    assert Layout(chains=4, num_draws=1, groups={}, local_chains=(2, 4)).local_range == (2, 4)


def test_a_sink_with_keep_summary_gets_the_runs_finalized_summary():
    """The optional ``keep_summary``: any sink that has it (not only a store) is given
    the finalized default summary and the draws it covers; one without it is not
    asked."""
    import jax.numpy as jnp

    import sluice

    class Keeping(MemorySink):
        def keep_summary(self, result, draws):
            self.summary = (result, draws)

    sink = Keeping()
    run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(2), chains=2,
                        warmup=50, draws=40, chunk_size=10, sink=sink, default_stats=True,
                        progress=False)  # fmt: skip
    result, draws = sink.summary
    assert draws == 40
    x = np.asarray(run.draws["x"], np.float64)
    np.testing.assert_allclose(result["mean"]["x"], x.mean((0, 1)), rtol=1e-5, atol=1e-6)
    plain = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(2), chains=2,
                          warmup=50, draws=40, chunk_size=10, sink=Custom(),
                          default_stats=True, progress=False)  # fmt: skip
    assert "summary" in plain.stats
