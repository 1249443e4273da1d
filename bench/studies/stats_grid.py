"""The default summary's histogram grid: quantile and HDI errors per grid, and the HDI's floor.

The default statistics read quantiles and the HDI from one histogram per
element, on a grid in bulk-score units fixed by the pooled pilot
(``sluice.stats.streaming_state.grid``). This script samples the 20,000-dim Gaussian
of ``bench/stats_scale.py`` (scales in [e^-1, e], NUTS, 4 x 1,000) twice with
different seeds, takes from the second run the first 128 draws of each chain
as the stand-in pilot (draws of the same posterior, as ``bench/studies/tail_floor.py``
does), counts the first run's draws on each grid below and reads the 3%, 50%
and 97% quantiles and the 94% HDI as the statistic does
(``streaming_readout._quantiles_and_hdi``), against NumPy's quantiles and
ArviZ's HDI on the same draws, in units of ArviZ's quantile MCSE:

* 144, 288, 576 and 1,152 buckets of equal width in the score (the last two
  two and four times the default's bytes: how fast a finer grid approaches
  ArviZ's HDI);
* 288 buckets ``focus`` times narrower within ``half`` of the scores of the
  levels read (the default is marked).

It then measures how far ArviZ's own HDI moves when the draws change a little
(one draw of 4,000 left out; the first draw of each chain left out) and when
its search is restricted to every other draw's position (121 candidate lower
levels over exact quantiles of the draws, as the streamed search has): a
floor under any estimate of ArviZ's HDI that does not keep every draw.

    PYTHONPATH=src python bench/studies/stats_grid.py [--dim 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from harness import scaled_gaussian_draws

from sluice.stats import streaming_readout, streaming_state

PROBS = (0.03, 0.5, 0.97)
HDI_PROB = 0.94


def _errors(draws: np.ndarray, pilot: np.ndarray, edges_in_score: np.ndarray,
            ref: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Quantile and HDI errors (in ArviZ's quantile MCSE) of a histogram on the grid
    ``edges_in_score`` (``G + 1`` increasing bulk scores from ``-BOUND`` to ``BOUND``)."""
    d = draws.shape[-1]
    flat = draws.reshape(-1, d)
    knots = streaming_state.reference(jnp.asarray(pilot, jnp.float32))
    h = streaming_state.hinges(knots)
    s = np.asarray(streaming_state.score(streaming_state.proxy(jnp.asarray(flat, jnp.float32), h)))
    g = len(edges_in_score) - 1
    b = np.clip(np.searchsorted(edges_in_score, s, side="right") - 1, 0, g - 1)
    counts = np.zeros((d, g), np.int32)
    np.add.at(counts, (np.broadcast_to(np.arange(d), b.shape), b), 1)
    z = streaming_state.unscore(jnp.asarray(edges_in_score, jnp.float32))
    inner = streaming_state.inverse(jnp.clip(z, -1e30, 1e30), knots)  # (D, G + 1)
    edges = jnp.where(jnp.isinf(z), z, inner)
    edges = edges.at[:, 0].set(jnp.minimum(edges[:, 1], flat.min(0)))
    edges = edges.at[:, -1].set(jnp.maximum(edges[:, -2], flat.max(0)))
    q, hdi = streaming_readout._quantiles_and_hdi(
        jnp.asarray(counts), edges, jnp.asarray(PROBS, jnp.float32), HDI_PROB
    )
    eq = (np.asarray(q) - ref["quantiles"]) / ref["qmcse"]
    eh = (np.asarray(hdi) - ref["hdi"]) / ref["qmcse"][:, [0, 2]]
    return eq, eh


def _arviz_hdi(flat: np.ndarray) -> np.ndarray:
    """ArviZ's HDI rule (``az.hdi`` on one array): the narrowest window of
    ``floor(prob N)`` order-statistic gaps."""
    x = np.sort(flat, axis=0)
    n, d = x.shape
    k = int(np.floor(HDI_PROB * n))
    i = np.argmin(x[k:] - x[: n - k], axis=0)
    return np.stack([x[i, np.arange(d)], x[i + k, np.arange(d)]], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=20_000)
    parser.add_argument("--pilot", type=int, default=128)
    args = parser.parse_args()
    import arviz as az

    draws, other = (
        scaled_gaussian_draws(args.dim, s, default_stats=False).astype(np.float32) for s in (0, 1)
    )
    pilot = other[:, : args.pilot].reshape(-1, args.dim)
    flat = draws.reshape(-1, args.dim).astype(np.float64)
    data = az.convert_to_dataset({"x": draws.astype(np.float64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = {
            "quantiles": np.quantile(flat, PROBS, axis=0).T,
            "qmcse": np.stack(
                [az.mcse(data, method="quantile", prob=p)["x"].values for p in PROBS], 1
            ),
            "hdi": az.hdi(data, hdi_prob=HDI_PROB)["x"].values,
        }
    assert np.array_equal(_arviz_hdi(flat), ref["hdi"])  # the rule below is ArviZ's

    b = streaming_state.BOUND
    grids = [(f"{g} equal", np.linspace(-b, b, g + 1)) for g in (144, 288, 576, 1152)]
    for focus, half in ((4.0, 0.5), (4.0, 0.7), (6.0, 0.5), (6.0, 0.35)):
        at, position = streaming_state.grid(PROBS, 288, focus, half)
        mark = (
            " (default)"
            if (focus, half) == (streaming_state.FOCUS, streaming_state.FOCUS_HALF)
            else ""
        )
        grids.append((f"288, x{focus:g} within {half:g}{mark}",
                      np.interp(np.arange(289), position, at)))  # fmt: skip
    fmt = lambda e: f"{np.sqrt(np.mean(e**2)):.3f} | {np.abs(e).max():.3f}"  # noqa: E731
    print(f"Gaussian, {args.dim:,} dims, 4 x 1,000 NUTS draws; pilot: 4 x {args.pilot} draws "
          "of a second run\n")  # fmt: skip
    print("| grid | quantiles rms (/ MCSE) | max | beyond 0.5 | HDI ends rms | max |")
    print("|---|---|---|---|---|---|")
    for label, edges in grids:
        eq, eh = _errors(draws, pilot, edges, ref)
        print(f"| {label} | {fmt(eq)} | {int((np.abs(eq) > 0.5).sum())} | {fmt(eh)} |")

    print("\nArviZ's HDI moved by small changes, in units of the quantile MCSE at 3% and 97%\n")
    print("| change | HDI ends rms | max |")
    print("|---|---|---|")
    n = flat.shape[0]
    mcse = ref["qmcse"][:, [0, 2]]
    for label, keep in (
        ("one draw of 4,000 left out (the first)", np.arange(1, n)),
        ("one draw of 4,000 left out (the last)", np.arange(n - 1)),
        ("the first draw of each chain left out", np.setdiff1d(np.arange(n), [0, 1000, 2000, 3000])),
    ):  # fmt: skip
        print(f"| {label} | {fmt((_arviz_hdi(flat[keep]) - ref['hdi']) / mcse)} |")
    levels = np.linspace(0.0, 1.0 - HDI_PROB, streaming_readout.HDI_LEVELS)
    lo, hi = np.quantile(flat, levels, axis=0), np.quantile(flat, levels + HDI_PROB, axis=0)
    best = np.argmin(hi - lo, axis=0)
    cols = np.arange(args.dim)
    searched = np.stack([lo[best, cols], hi[best, cols]], axis=1)
    print(
        f"| every draw kept, {streaming_readout.HDI_LEVELS} candidate levels (exact "
        f"quantiles) | {fmt((searched - ref['hdi']) / mcse)} |"
    )


if __name__ == "__main__":
    main()
