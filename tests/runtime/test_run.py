"""InferenceData, summary, progress bars and the CLI demo."""

import io

import arviz as az
import numpy as np
import pytest

import sluice
from sluice.apps.cli import main as cli_main
from sluice.apps.datasets import logistic_regression_data, logistic_regression_model
from sluice.runtime.progress import ChunkProgress


@pytest.fixture(scope="module")
def run():
    return sluice.sample(
        logistic_regression_model(), chains=2, warmup=200, draws=100, progress=False
    )


def test_notebook_data_is_reproduced():
    data = logistic_regression_data()
    assert data.x.shape == (100, 10) and data.y.shape == (100,) and data.true_beta.shape == (10,)
    np.random.seed(10009)  # noqa: NPY002 - the notebook's own recipe, on the global generator
    beta = np.random.randn(10).astype(np.float32)  # noqa: NPY002
    x = np.random.randn(100, 10).astype(np.float32)  # noqa: NPY002
    np.testing.assert_array_equal(data.true_beta, beta)
    np.testing.assert_array_equal(data.x, x)


@pytest.mark.filterwarnings("ignore:Estimated shape parameter")
def test_inference_data_groups_and_dims(run):
    idata = run.to_arviz()
    assert set(idata.groups()) == {"posterior", "sample_stats", "log_likelihood", "observed_data"}
    assert idata.posterior["beta"].dims == ("chain", "draw", "feature")
    assert idata.log_likelihood["y"].shape == (2, 100, 100)
    assert idata.sample_stats["diverging"].dtype == bool
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo)


def test_summary_matches_arviz(run):
    table = run.summary()
    expected = az.summary(run.to_arviz())
    assert list(table.columns) == list(expected.columns)
    assert list(table.index) == [f"beta[{i}]" for i in range(10)]
    np.testing.assert_allclose(table["mean"], expected["mean"])


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_chunks_and_rate_on_a_terminal(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with ChunkProgress("sampling", total=100, chunk_size=25, chains=2, enabled=True) as bar:
        for _ in range(4):
            bar.advance(25)
    out = terminal.getvalue()
    assert "sampling" in out and "chunk 4/4" in out and "draws/s" in out and "100/100" in out


def test_progress_is_quiet_when_disabled_and_lines_when_not_a_terminal(monkeypatch, capsys):
    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    with ChunkProgress("sampling", total=10, chunk_size=10, chains=1, enabled=True) as bar:
        bar.advance(10)
    assert pipe.getvalue().startswith("sampling: 10/10 (chunk 1/1, ")
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with ChunkProgress("sampling", total=10, chunk_size=10, chains=1, enabled=False) as bar:
        bar.advance(10)
    assert terminal.getvalue() == ""


def test_cli_demo_writes_summary_and_figure(tmp_path, capsys):
    assert (
        cli_main(
            [
                "demo",
                "--out",
                str(tmp_path),
                "--warmup",
                "150",
                "--draws",
                "120",
                "--num-chunks",
                "3",
                "--chains",
                "2",
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "beta[9]" in out and "r_hat" in out and "3 chunks of 40 draws" in out
    png = tmp_path / "logistic_regression.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
