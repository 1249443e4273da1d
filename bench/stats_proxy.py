"""How close ArviZ's ESS of the default statistics' bulk score comes to its bulk ESS.

The default summary (``sluice.stats.streaming``) estimates the bulk ESS from lag
products of a *score*: piecewise-linear normal scores through nine reference
quantiles of the pooled pilot draws, standing in for ArviZ's rank
normalisation. This script isolates the score's share of the error: it samples
the 20,000-dim Gaussian of ``bench/stats_scale.py`` (scales in [e^-1, e], NUTS,
4 x 1,000 draws), takes the first 128 draws of each chain as the pilot, and
compares ``az.ess(score(x), method="mean")`` (exact lags, no streaming) with
``az.ess(x, method="bulk")`` on every ``--stride``-th element, for the proxy
extended linearly beyond the outer knots and for the score rolled off there
(``sluice.stats.streaming_state.score``), on the draws and on monotone
transforms of them (ArviZ's bulk ESS, rank based, is the same for all four; a
heavy tail is what tells the two apart).

    PYTHONPATH=src python bench/stats_proxy.py [--stride 5]
"""

from __future__ import annotations

import argparse
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from harness import markdown_table, scaled_gaussian_draws

from sluice.stats import streaming_state

TRANSFORMS = {
    "x": lambda x: x,
    "exp(x / sd)": lambda x: np.exp(x / x.std(axis=(0, 1))),
    "exp(2 x / sd)": lambda x: np.exp(2 * x / x.std(axis=(0, 1))),
    "x^3": lambda x: x**3,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=20_000)
    parser.add_argument("--stride", type=int, default=5)
    parser.add_argument("--pilot", type=int, default=128)
    args = parser.parse_args()
    import arviz as az

    draws = scaled_gaussian_draws(args.dim, 0).astype(np.float64)[..., :: args.stride]

    def ess(x: np.ndarray, method: str) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return az.ess(az.convert_to_dataset({"x": x}), method=method)["x"].values

    rows = []
    for name, transform in TRANSFORMS.items():
        x = transform(draws).astype(np.float32)
        bulk = ess(x.astype(np.float64), "bulk")
        pilot = jnp.asarray(x[:, : args.pilot].reshape(-1, x.shape[-1]))
        h = streaming_state.hinges(streaming_state.reference(pilot))
        z = jax.jit(streaming_state.proxy)(jnp.asarray(x), h)
        for label, s in (("linear beyond the outer knots", z),
                         ("rolled off (streaming.score)", jax.jit(streaming_state.score)(z))):  # fmt: skip
            err = ess(np.asarray(s, np.float64), "mean") / bulk - 1
            rows.append({"draws": name, "score": label, "elements": err.size,
                         "rms": f"{np.sqrt(np.mean(err**2)):.4f}",
                         "max": f"{np.max(np.abs(err)):.4f}",
                         "mean": f"{np.mean(err):+.4f}"})  # fmt: skip
    print(f"dim={args.dim} stride={args.stride} pilot={args.pilot} chains=4 draws=1000")
    print("ArviZ's ESS of the score (method='mean') against its bulk ESS, relative error\n")
    columns = [(k, k, "") for k in ("draws", "score", "elements", "rms", "max", "mean")]
    print(markdown_table(rows, columns, left=("draws", "score")))


if __name__ == "__main__":
    main()
