"""The floor under any one-pass tail ESS: thresholds fixed before the draws are seen.

ArviZ's ``ess_tail`` is the ESS of the indicators ``x <= q05`` and ``x >= q95``
at the pooled 5% and 95% quantiles of the very draws it reads, known only when
the run ends. A one-pass estimator fixes its thresholds first, from the pooled
final warmup draws (128 per chain). This script samples the 20,000-dim
Gaussian of ``bench/stats_scale.py`` (scales in [e^-1, e], NUTS, 4 x 1,000)
twice with different seeds, takes from the second run the first 128 draws of
each chain as the stand-in pilot (draws of the same posterior), and computes
with ArviZ's own ESS kernel on the stored indicators (exact lags, no
streaming) the tail ESS at the pilot's thresholds, against ArviZ's
``ess_tail``: the error a perfect one-pass estimator with those thresholds
would still make. It also prints the error between two ArviZ ``ess_tail``
estimates on disjoint halves of the chains (ArviZ's own noise).

    PYTHONPATH=src python bench/tail_floor.py [--dim 20000]
"""

from __future__ import annotations

import argparse
import warnings

import jax.numpy as jnp
import numpy as np

import sluice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=20_000)
    parser.add_argument("--pilot", type=int, default=128)
    args = parser.parse_args()
    import arviz as az

    scales = jnp.exp(jnp.linspace(-1.0, 1.0, args.dim))
    model = sluice.Model(lambda p: -0.5 * jnp.sum((p["x"] / scales) ** 2),
                         init={"x": jnp.zeros(args.dim)})  # fmt: skip
    runs = [
        np.asarray(sluice.sample(model, chains=4, warmup=500, draws=1000, seed=s,
                                 progress=False, default_stats=False).draws["x"], np.float64)
        for s in (0, 1)
    ]  # fmt: skip
    draws, other = runs
    pilot = other[:, : args.pilot].reshape(-1, args.dim)
    lo, hi = np.quantile(pilot, 0.05, axis=0), np.quantile(pilot, 0.95, axis=0)

    def ess(values):
        data = az.convert_to_dataset({"v": values})
        return az.ess(data, method="mean")["v"].values

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = az.ess(az.convert_to_dataset({"x": draws}), method="tail")["x"].values
        fixed = np.minimum(ess((draws <= lo).astype(np.float64)),
                           ess((draws >= hi).astype(np.float64)))  # fmt: skip
    err = fixed / reference - 1
    print(f"dim={args.dim} pilot={args.pilot} chains=4 draws=1000")
    print(f"ArviZ's ESS kernel at pilot thresholds vs ArviZ's ess_tail over {args.dim:,} elements:")
    print(f"  rms {np.sqrt(np.mean(err**2)):.4f}  max {np.max(np.abs(err)):.4f}  "
          f"elements > 20%: {int(np.sum(np.abs(err) > 0.2)):,}")  # fmt: skip
    mass = np.mean(draws.reshape(-1, args.dim) <= lo, axis=0)
    print(f"  the pilot's 5% threshold holds {mass.min():.3f} .. {mass.max():.3f} of the draws")


if __name__ == "__main__":
    main()
