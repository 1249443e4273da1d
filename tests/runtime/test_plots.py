"""run.plot() and `sluice plot`: the convergence picture from the streamed statistics."""

import matplotlib

matplotlib.use("Agg")

import jax.numpy as jnp
import numpy as np
import pytest

import sluice
from sluice.runtime.plots import worst_elements

SETTINGS = dict(chains=2, warmup=40, draws=60, chunk_size=30, seed=2, progress=False)


def model():
    scales = jnp.linspace(0.5, 2.0, 12)
    return sluice.Model(lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2) - 0.5 * p["s"] ** 2,
                        init={"x": jnp.zeros(12), "s": jnp.zeros(())})  # fmt: skip


@pytest.fixture(scope="module")
def run():
    return sluice.sample(model(), default_stats=True, **SETTINGS)


def count(title):
    return int(title.split(": ")[1].split(" of ")[0].replace(",", ""))


def test_histogram_counts_and_worst_elements_match_the_table(run):
    table = run.summary(round_to="none", source="stats")
    figure = run.plot()
    titles = [ax.get_title() for ax in figure.axes[:3]]
    assert count(titles[0]) == int((table["r_hat"] > 1.01).sum())
    assert count(titles[1]) == int((table["ess_bulk"] < 200).sum())
    assert count(titles[2]) == int((table["ess_tail"] < 200).sum())
    worst = [label for label, _ in worst_elements(run.stats["summary"], 3)]
    assert worst == table.sort_values("r_hat", ascending=False).index[:3].tolist()
    # rank plots of the worst, from the kept draws
    assert [ax.get_title() for ax in figure.axes[4:7]] == [f"ranks of {w}" for w in worst]


def test_plot_without_draws(tmp_path):
    run = sluice.sample(model(), sink=None, **SETTINGS)
    path = tmp_path / "c.png"
    figure = run.plot(path)
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert len([ax for ax in figure.axes if ax.get_title().startswith("ranks")]) == 0


def test_plot_without_statistics_uses_arviz_on_the_draws(run):
    plain = sluice.sample(model(), default_stats=False, **SETTINGS)
    titles = [ax.get_title() for ax in plain.plot().axes[:3]]
    table = plain.summary(round_to="none")  # ArviZ
    assert count(titles[0]) == int((table["r_hat"] > 1.01).sum())
    assert np.isfinite(table["ess_bulk"]).all()
