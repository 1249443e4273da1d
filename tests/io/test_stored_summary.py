"""The streamed summary kept in a store: read without draws, damage is an error."""

import numpy as np
import pytest
from tests.helpers import store_child as child

import sluice
from sluice.apps.cli import main
from sluice.io.store import StoreError, ZarrSink
from sluice.io.stored_summary import read_summary
from sluice.stats import summary_table


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "run.zarr"
    run = sluice.sample(child.model(), sink=ZarrSink(path), progress=False, **child.SETTINGS)
    return path, run


def test_the_store_holds_the_runs_summary(stored):
    path, run = stored
    result, draws = read_summary(path)
    assert draws == child.SETTINGS["draws"]
    expected = run.summary(round_to="none", source="stats")
    table = summary_table(result, round_to="none")
    np.testing.assert_array_equal(table.to_numpy(), expected.to_numpy())
    assert table.index.tolist() == expected.index.tolist()


def test_cli_summary_reads_no_draws(stored, capsys, monkeypatch):
    path, _ = stored
    import zarr

    real = zarr.Array.__getitem__

    def guarded(self, key):
        assert "posterior" not in str(self.store_path), "read a draw"
        return real(self, key)

    monkeypatch.setattr(zarr.Array, "__getitem__", guarded)
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ez" in out and "ess_tail" in out and "no draws read" in out


def test_a_damaged_summary_is_an_error(stored, tmp_path):
    import shutil

    path = tmp_path / "copy.zarr"
    shutil.copytree(stored[0], path)
    file = path / "summary.sluice"
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"summary\.sluice is damaged: checksum"):
        read_summary(path)
    assert main(["summary", str(path)]) == 2


def test_no_summary_without_default_statistics(tmp_path, capsys):
    path = tmp_path / "run.zarr"
    sluice.sample(
        child.model(), sink=ZarrSink(path), default_stats=False, progress=False,
        **child.SETTINGS,
    )  # fmt: skip
    assert read_summary(path) is None
    assert main(["summary", str(path)]) == 1
    assert "--arviz" in capsys.readouterr().err
