"""Checkpoint files (sluice.io.checkpoint): exact round trip, damage detected, atomic writes."""

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from sluice.io.checkpoint import FORMAT, VERSION, Checkpoint, StoreError
from sluice.io.durable import atomic_write

MAGIC, END = b"SLUICECK", b"SLUICEND"  # the documented layout


def _checkpoint():
    rng = np.random.default_rng(0)
    carry = [
        rng.normal(size=(4, 3)),  # float64
        rng.normal(size=(4,)).astype(np.float32),
        rng.integers(-(2**31), 2**31 - 1, (4, 2, 2), dtype=np.int64).astype(np.int32),
        rng.random((4, 5)) < 0.5,  # bool
        np.asarray(7.25),  # 0-d
        np.zeros((4, 0), np.float32),  # empty
        np.zeros((0,), np.int64),
        np.arange(12, dtype=np.uint32).reshape(3, 4).T,  # not C-contiguous
        rng.integers(0, 2**32, (2, 2), dtype=np.uint32),
    ]
    return Checkpoint(
        config={"chains": 4, "kernel": {"name": "nuts"}},
        next_iteration=250,
        stats_ready=True,
        carry=carry,
        totals={"num_gradients": 12345, "seconds": 1.5},
        sequence=3,
    )


def _write(path: Path, checkpoint: Checkpoint) -> Path:
    with open(path, "wb") as f:
        checkpoint.write_to(f)
    return path


def test_round_trip_is_exact_for_every_dtype_and_shape(tmp_path):
    original = _checkpoint()
    back = Checkpoint.from_file(_write(tmp_path / "ck", original))
    assert back.config == original.config
    assert back.next_iteration == 250 and back.stats_ready is True and back.sequence == 3
    assert back.totals == original.totals
    assert len(back.carry) == len(original.carry)
    for a, b in zip(back.carry, original.carry, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        assert a.flags.writeable  # its own memory, not a view of the file's bytes


def test_the_file_follows_the_documented_layout(tmp_path):
    original = _checkpoint()
    data = _write(tmp_path / "ck", original).read_bytes()
    assert data[:8] == MAGIC and data[-8:] == END
    body = data[8:-12]
    assert int.from_bytes(data[-12:-8], "little") == zlib.crc32(body)
    size = int.from_bytes(body[:8], "little")
    header = json.loads(body[8 : 8 + size])
    assert header["format"] == FORMAT and header["version"] == VERSION
    assert header["next_iteration"] == 250 and header["sequence"] == 3
    raw = b"".join(np.ascontiguousarray(x).tobytes() for x in original.carry)
    assert body[8 + size :] == raw  # the leaves' C-order bytes, nothing else
    assert header["leaves"] == [[x.dtype.str, list(x.shape)] for x in original.carry]


def _hand_made(path: Path, header: dict | bytes, payload: bytes) -> Path:
    """A file with a valid checksum around any header and payload."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    body = len(head).to_bytes(8, "little") + head + payload
    path.write_bytes(MAGIC + body + zlib.crc32(body).to_bytes(4, "little") + END)
    return path


def _header(**changes):
    base = {
        "format": FORMAT, "version": VERSION, "config": {}, "next_iteration": 0,
        "stats_ready": False, "totals": {}, "sequence": 0, "leaves": [["<f8", [2]]],
    }  # fmt: skip
    return {**base, **changes}


def test_a_hand_made_file_reads(tmp_path):
    path = _hand_made(tmp_path / "ck", _header(), np.array([1.5, -2.0]).tobytes())
    np.testing.assert_array_equal(Checkpoint.from_file(path).carry[0], [1.5, -2.0])


def _damaged(tmp_path):
    good = _write(tmp_path / "good", _checkpoint()).read_bytes()
    flipped = bytearray(good)
    flipped[len(good) - 40] ^= 0x04  # one bit of the last leaf
    header_flip = bytearray(good)
    header_flip[20] ^= 0x01  # one bit of the header
    wrong_magic = b"NOTSLUIC" + good[8:]
    payload = np.array([1.5, -2.0]).tobytes()
    return {
        "truncated": good[:-5],
        "truncated to half": good[: len(good) // 2],
        "end marker only": good[: len(good) // 2] + END,
        "bit flipped in a leaf": bytes(flipped),
        "bit flipped in the header": bytes(header_flip),
        "wrong magic": wrong_magic,
        "empty": b"",
        "too short": MAGIC + END,
        "shorter than its header": _hand_made(
            tmp_path / "a", _header(leaves=[["<f8", [3]]]), payload
        ).read_bytes(),
        "longer than its header": _hand_made(
            tmp_path / "b", _header(), payload + b"\0"
        ).read_bytes(),
        "not JSON": _hand_made(tmp_path / "c", b"{'format': 1}", payload).read_bytes(),
        "not UTF-8": _hand_made(tmp_path / "e", b"\xff\xfe", payload).read_bytes(),
        "another format": _hand_made(
            tmp_path / "d", _header(format="other-store"), payload
        ).read_bytes(),
    }


def test_damaged_files_raise_store_error_naming_the_file(tmp_path):
    for what, data in _damaged(tmp_path).items():
        path = tmp_path / f"checkpoint-{what.replace(' ', '-')}.bin"
        path.write_bytes(data)
        with pytest.raises(StoreError) as info:
            Checkpoint.from_file(path)
        assert str(path) in str(info.value), (what, str(info.value))


def test_a_missing_file_is_a_store_error_naming_it(tmp_path):
    path = tmp_path / "never-written"
    with pytest.raises(StoreError, match="never-written"):
        Checkpoint.from_file(path)


def test_damage_is_described(tmp_path):
    cases = _damaged(tmp_path)
    expected = {
        "truncated": "truncated",
        "bit flipped in a leaf": "checksum",
        "wrong magic": "magic",
        "shorter than its header": "shorter",
        "longer than its header": "longer",
        "another format": "not a sluice checkpoint",
    }
    for what, words in expected.items():
        path = tmp_path / "ck"
        path.write_bytes(cases[what])
        with pytest.raises(StoreError, match=words):
            Checkpoint.from_file(path)


# -- atomic_write ------------------------------------------------------------------
def test_atomic_write_writes_bytes_or_a_callback(tmp_path):
    target = tmp_path / "file"
    atomic_write(target, b"first")
    assert target.read_bytes() == b"first"
    atomic_write(target, lambda f: (f.write(b"sec"), f.write(b"ond")))
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_failed_atomic_write_leaves_the_old_content(tmp_path):
    target = tmp_path / "file"
    atomic_write(target, b"old content")

    def payload(f):
        f.write(b"half of the new")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, payload)
    assert target.read_bytes() == b"old content"
    atomic_write(target, b"new content")  # a later write succeeds over the left-overs
    assert target.read_bytes() == b"new content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "file"
    atomic_write(target, b"old content")

    def payload(f):
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(target, payload)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_checkpoint_written_atomically_reads_back(tmp_path):
    target = tmp_path / "checkpoint-0"
    atomic_write(target, _checkpoint().write_to)
    back = Checkpoint.from_file(target)
    np.testing.assert_array_equal(back.carry[0], _checkpoint().carry[0])
