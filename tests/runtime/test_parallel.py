"""Chain slots over devices (sluice.runtime.parallel.Topology), in one process with the
4 CPU devices the test suite sets up (tests/conftest.py)."""

import jax
import numpy as np
import pytest

from sluice.runtime.parallel import Topology


@pytest.fixture(scope="module")
def devices():
    devices = jax.devices()
    assert len(devices) == 4 and devices[0].platform == "cpu"  # tests/conftest.py
    return devices


@pytest.mark.parametrize(
    ("chains", "num_devices", "slots"),
    [(1, 1, 1), (4, 4, 4), (5, 4, 8), (6, 4, 8), (9, 4, 12), (3, 2, 4), (7, 3, 9), (2, 4, 4)],
)
def test_slots_are_chains_rounded_up_to_a_multiple_of_the_devices(
    devices, chains, num_devices, slots
):
    topo = Topology.build(chains, devices[:num_devices])
    assert topo.num_chains == chains and topo.num_slots == slots
    assert topo.devices == tuple(devices[:num_devices])
    assert (topo.mesh is None) == (num_devices == 1)
    assert topo.local_slots == slice(0, slots)
    assert topo.local_chains == slice(0, chains)
    assert topo.slots_per_process == slots
    assert topo.process_count == 1 and topo.process_index == 0
    assert topo.is_main and not topo.multiprocess


@pytest.mark.parametrize(("chains", "used"), [(1, 1), (3, 3), (4, 4), (10, 4)])
def test_default_devices_are_no_more_than_the_chains(devices, chains, used):
    topo = Topology.build(chains)
    assert topo.devices == tuple(devices[:used])
    assert topo.num_slots == -(-chains // used) * used


def test_an_empty_device_list_is_an_error():
    with pytest.raises(ValueError, match="at least one device"):
        Topology.build(4, [])
    with pytest.raises(ValueError, match="at least one device"):
        Topology.build(4, ())


def test_put_shards_slots_over_devices_and_local_reads_them_back(devices):
    topo = Topology.build(6, devices)  # 8 slots, 2 per device
    tree = {
        "x": np.arange(8 * 3, dtype=np.float32).reshape(8, 3),
        "n": np.arange(8, dtype=np.int32) * 7,
        "flags": [np.arange(8) % 3 == 0],
    }
    placed = topo.put(tree)
    x = placed["x"]
    assert isinstance(x, jax.Array) and x.shape == (8, 3)
    assert {s.device for s in x.addressable_shards} == set(devices)
    for shard in x.addressable_shards:  # device i holds slots 2i, 2i + 1
        i = devices.index(shard.device)
        assert shard.index[0] == slice(2 * i, 2 * i + 2)
        np.testing.assert_array_equal(shard.data, tree["x"][2 * i : 2 * i + 2])
    back = topo.local(placed)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    again = topo.local(topo.put_local(tree))  # one process: its slots are all the slots
    np.testing.assert_array_equal(again["x"], tree["x"])


def test_put_on_one_device_is_plain_device_put(devices):
    topo = Topology.build(3, devices[1:2])
    placed = topo.put({"x": np.ones((3, 2), np.float32)})
    assert placed["x"].devices() == {devices[1]}
    np.testing.assert_array_equal(topo.local(placed)["x"], np.ones((3, 2)))


def test_collectives_are_identities_in_one_process(devices):
    topo = Topology.build(8, devices)
    local = {"a": np.arange(8.0), "b": np.array([1, 2], np.int64)}
    assert topo.allgather(local) is local
    assert topo.broadcast_from_main(local) is local
    totals = {"num_gradients": 123, "seconds": 1.5}
    assert topo.sum_over_processes(totals) == {"num_gradients": 123, "seconds": 1.5}
    assert topo.barrier("nothing-to-wait-for") is None


@pytest.mark.parametrize("num_devices", [1, 4])
def test_move_local_takes_the_leaves_and_frees_their_device_arrays(devices, num_devices):
    topo = Topology.build(6, devices[:num_devices])
    slots = topo.num_slots
    tree = {
        "x": np.arange(slots * 3, dtype=np.float32).reshape(slots, 3),
        "h": (np.arange(slots * 4) % 5).astype(np.uint16).reshape(slots, 2, 2),
    }
    live = len(jax.live_arrays())
    leaves, treedef = jax.tree.flatten(topo.put(tree))
    assert len(jax.live_arrays()) == live + 2
    moved = jax.tree.unflatten(treedef, topo.move_local(leaves))
    assert leaves == []  # emptied: the device arrays had no other holder
    assert len(jax.live_arrays()) == live  # and are gone, every shard's buffer with them
    for a, b in zip(jax.tree.leaves(moved), jax.tree.leaves(tree), strict=True):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_views_read_each_shard_in_place_and_a_checkpoint_writes_them_as_the_whole(
    devices, tmp_path
):
    """A checkpoint reads the states through views of their shards (no host copy of a
    large model's statistics beside the device's, Topology.views); the file it writes
    holds the same bytes as one written from whole arrays."""
    from jax.sharding import NamedSharding, PartitionSpec

    from sluice.io.checkpoint import read_record, write_record

    topo = Topology.build(6, devices)  # 8 slots, 2 per device
    tree = {
        "x": np.arange(8 * 3, dtype=np.float32).reshape(8, 3),
        "h": (np.arange(8 * 4) % 5).astype(np.uint16).reshape(8, 2, 2),
    }
    placed = topo.put(tree)
    placed["r"] = jax.device_put(np.arange(16, dtype=np.float32).reshape(8, 2),
                                 NamedSharding(topo.mesh, PartitionSpec()))  # fmt: skip
    tree["r"] = np.arange(16, dtype=np.float32).reshape(8, 2)
    leaves = jax.tree.leaves(placed)
    views = topo.views(placed)
    for view, leaf, want in zip(views, leaves, jax.tree.leaves(tree), strict=True):
        assert view.shape == want.shape and view.dtype == want.dtype
        buffers = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert all(any(np.shares_memory(p, b) for b in buffers) for p in view.parts)
        assert len(view.parts) == (1 if leaf is placed["r"] else 4)
        np.testing.assert_array_equal(view.whole(), want)
        for i in range(8):
            np.testing.assert_array_equal(view.row(i), want[i])
    with pytest.raises(IndexError):
        views[0].row(8)
    with open(tmp_path / "views", "wb") as f:
        write_record(f, {"a": 1}, views)
    with open(tmp_path / "arrays", "wb") as f:
        write_record(f, {"a": 1}, jax.tree.leaves(tree))
    assert (tmp_path / "views").read_bytes() == (tmp_path / "arrays").read_bytes()
    meta, back = read_record(tmp_path / "views")
    assert meta["a"] == 1
    for a, b in zip(back, jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(a, b)
