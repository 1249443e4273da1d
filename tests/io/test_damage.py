"""The damage suite: every file of a store, damaged three ways, is an error or is repaired.

One small finished store and one half-finished one (stopped in the middle of writing
a chunk) are built once. For every file in them (each chunk file, each ``zarr.json``,
the commit record, the checkpoints, the stored summary) and each damage (a flipped
bit, a truncation, a deletion), a fresh copy is damaged and read three ways:
``sluice.open`` with every variable read, the stored summary (``sluice summary``),
and ``sluice.resume``. Each reader either raises a :class:`StoreError` naming the
damaged file or returns exactly what the undamaged store gives (for ``resume``: the
draws, summary and statistics of the uninterrupted run). Which readers must refuse
is decided here from the store's layout (docs/reliability.md), not by the code under
test: a file holding committed values is refused by every reader that reads it; an
uncommitted chunk, or the checkpoint of the other parity, is repaired or harmless.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.helpers import store_child as child

import sluice
from sluice.io.store import COMMIT, StoreError, ZarrSink
from sluice.io.stored_summary import FILE as SUMMARY
from sluice.io.stored_summary import read_summary

SETTINGS = dict(chains=2, warmup=10, draws=20, chunk_size=10, seed=11)
DRAW_GROUPS = ("posterior", "sample_stats", "log_likelihood")
DAMAGES = ("flip", "truncate", "delete")


class Stopped(Exception):
    pass


class StopsInChunk(ZarrSink):
    """Stops the run while writing its second chunk of draws, after the posterior group
    (its checkpoint and commit are never written)."""

    def write(self, start, chunk):
        if start == SETTINGS["chunk_size"]:
            super().write(start, {"posterior": chunk["posterior"]})
            raise Stopped
        super().write(start, chunk)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The two stores, each with what its readers give undamaged: ``open`` (every
    variable), ``summary`` (the stored summary) and ``resume`` (both, once resumed: the
    uninterrupted run's)."""
    base = tmp_path_factory.mktemp("damage")
    model = child.model()
    finished = base / "finished.zarr"
    sluice.sample(model, sink=ZarrSink(finished), stats=child.STATS, progress=False,
                  **SETTINGS)  # fmt: skip
    half = base / "half.zarr"
    with pytest.raises(Stopped):
        sluice.sample(model, sink=StopsInChunk(half), stats=child.STATS, progress=False,
                      **SETTINGS)  # fmt: skip
    complete = {"open": _read_all(finished), "summary": _summary(finished)}
    return model, {
        "finished": (finished, 20, {**complete, "resume": complete}),
        "half": (half, 10, {"open": _read_all(half), "summary": None, "resume": complete}),
    }


def _read_all(store: Path) -> dict:
    """Every variable and coordinate of every group of ``sluice.open``, read."""
    idata = sluice.open(store)
    return {
        group: {name: np.asarray(v.values) for name, v in idata[group].variables.items()}
        for group in idata.groups()
    }


def _summary(store: Path) -> dict | None:
    stored = read_summary(store)
    return None if stored is None else {"draws": stored[1], **stored[0]}


def _same(a, b, where: str) -> None:
    if isinstance(a, dict) or isinstance(b, dict):
        assert isinstance(a, dict) and isinstance(b, dict), f"{where}: {type(a)} vs {type(b)}"
        assert sorted(a) == sorted(b), f"{where}: {sorted(a)} vs {sorted(b)}"
        for key in a:
            _same(a[key], b[key], f"{where}/{key}")
    elif a is None or b is None:
        assert a is b, f"{where}: {a!r} vs {b!r}"
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)


def _damage(file: Path, how: str) -> None:
    data = file.read_bytes()
    if how == "flip":
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x04
        file.write_bytes(bytes(flipped))
    elif how == "truncate":
        file.write_bytes(data[: len(data) // 2])
    else:
        file.unlink()


def _must_refuse(store: Path, rel: str, committed_draws: int) -> set[str] | None:
    """The readers that must refuse damage to ``rel``, from the store's layout; ``None``
    where none may (``resume`` repairs the file, or it is never read again).

    A file of committed values is refused by every reader that reads its contents: a
    ``zarr.json`` or the commit record by all three, a chunk by ``open`` and ``resume``
    (``summary`` reads none, but sees a deleted one), the committed checkpoint by
    ``resume``, the stored summary by ``summary`` (``resume`` writes it again)."""
    parts = rel.split("/")
    if parts[-1] == "zarr.json" or rel == COMMIT:
        return {"open", "summary", "resume"}
    if rel == SUMMARY:
        return {"summary"}
    if rel.startswith("sluice-checkpoint-"):
        parity = json.loads((store / COMMIT).read_text())["parity"]
        return {"resume"} if rel.endswith(f"-{parity}.ckpt") else None
    group, name, index = parts[0], parts[1], parts[3:]  # group/name/c/i/j/...
    if group in DRAW_GROUPS and name not in ("chain", "draw"):
        if int(index[1]) * SETTINGS["chunk_size"] >= committed_draws:
            return None  # draws written after the last commit
    return {"open", "resume"}


def _readers(store: Path, rel: str, expected: dict, model) -> set[str]:
    """The readers that refused the damaged store, each naming the file; a reader that
    does not refuse must give exactly what the undamaged store gives."""
    file = store / rel
    refused = set()

    def resumed():
        sluice.resume(store, model, stats=child.STATS, progress=False)
        return {"open": _read_all(store), "summary": _summary(store)}

    for reader, action in (
        ("open", lambda: _read_all(store)),
        ("summary", lambda: _summary(store)),
        ("resume", resumed),  # last: it writes
    ):
        try:
            got = action()
        except StoreError as error:
            assert str(file) in str(error), f"{reader}: the error names another file: {error}"
            refused.add(reader)
            continue
        _same(expected[reader], got, f"{reader}")
    return refused


@pytest.mark.parametrize("kind", ["finished", "half"])
def test_every_damaged_file_is_refused_by_name_or_repaired(stores, tmp_path, kind):
    model, built = stores
    original, committed_draws, expected = built[kind]
    files = sorted(p.relative_to(original).as_posix() for p in original.rglob("*") if p.is_file())
    assert COMMIT in files and any(f.endswith(".ckpt") for f in files)
    assert (SUMMARY in files) == (kind == "finished")
    # One copy, damaged and restored file by file; copied afresh after a resume wrote it
    # (a refusal writes nothing: checked after every case).
    store = tmp_path / "run.zarr"
    shutil.copytree(original, store)
    failures, counts = [], {"refused": 0, "repaired or harmless": 0}
    for rel in files:
        must = _must_refuse(original, rel, committed_draws)
        for how in DAMAGES:
            _damage(store / rel, how)
            try:
                refused = _readers(store, rel, expected, model)
            except Exception as error:  # a wrong value, an unnamed file, another exception
                failures.append(f"{how} {rel}: {type(error).__name__}: {error}")
                refused = set()
            else:
                if (must is None and refused) or (must is not None and not must <= refused):
                    failures.append(f"{how} {rel}: refused by {sorted(refused)}, must: {must}")
                counts["refused" if refused else "repaired or harmless"] += 1
            if "resume" in refused:  # nothing written: restore the one file
                shutil.copy2(original / rel, store / rel)
                assert _listing(store) == _listing(original), f"{how} {rel}: a refusal wrote"
            else:
                shutil.rmtree(store)
                shutil.copytree(original, store)
    assert not failures, f"{len(failures)} of {3 * len(files)} cases:\n" + "\n".join(failures)
    print(f"\n{kind} store: {len(files)} files, {3 * len(files)} cases, {counts}")


def _listing(store: Path) -> dict[str, tuple[int, int]]:
    """Each file's size and modification time (a copy keeps the original's)."""
    return {
        p.relative_to(store).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in store.rglob("*")
        if p.is_file()
    }


def test_what_to_do_is_said_for_committed_and_uncommitted_chunks(stores, tmp_path):
    _, built = stores
    store = tmp_path / "run.zarr"
    shutil.copytree(built["half"][0], store)
    committed, uncommitted = (store / f"posterior/x/c/1/{i}/0" for i in (0, 1))
    for file in (committed, uncommitted):
        _damage(file, "flip")
    x = ZarrSink.open_existing(store, writable=False).kept()["posterior"]["x"]
    with pytest.raises(StoreError, match=rf"{uncommitted} is damaged .*no committed draws: "
                       "resuming the run writes it again"):  # fmt: skip
        x[1, 10:]  # (readers read committed draws only; this reads past them)
    with pytest.raises(StoreError, match=rf"{committed} is damaged .*committed values, "
                       r"which are lost; .*sample the run again"):  # fmt: skip
        x[1, :10]
    with pytest.raises(StoreError, match=rf"{committed} is damaged"):
        sluice.resume(store, child.model(), stats=child.STATS, progress=False)


def test_the_cli_reports_damage_in_one_line(stores, tmp_path, capsys):
    from sluice.apps.cli import main

    _, built = stores
    store = tmp_path / "run.zarr"
    shutil.copytree(built["finished"][0], store)
    for chunk, command in (
        (store / "sample_stats/diverging/c/0/1", ["summary", str(store)]),  # its diagnosis
        (store / "posterior/x/c/1/0/0", ["summary", "--arviz", str(store)]),
    ):
        _damage(chunk, "flip")
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(chunk) in err and "Traceback" not in err
    chunk.unlink()
    assert main(["summary", "--arviz", str(store)]) == 2
    assert f"{chunk} is missing" in capsys.readouterr().err
