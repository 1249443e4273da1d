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
would still make. It then asks what more thresholds would buy: indicators
at the pilot's quantiles ``5% - spread``, ``5%`` and ``5% + spread`` (and the
mirror image above), their ESS interpolated, linearly in the share of the
draws each threshold holds, at 5% (the level ArviZ's threshold holds); the
error of that estimate bounds a one-pass estimator with three thresholds a
tail, each costing one more pair of indicator lag products. Last, it feeds the
same draws, from the same pilot, to sluice's default statistic: its tail ESS
against ArviZ's, and against the kernel at the same thresholds (what its
one-pass lags add).

    PYTHONPATH=src python bench/studies/tail_floor.py [--dim 20000] [--spread 0.02]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import warnings

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from harness import scaled_gaussian_draws

from sluice.stats import streaming


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=20_000)
    parser.add_argument("--pilot", type=int, default=128)
    parser.add_argument("--spread", type=float, default=0.02)
    args = parser.parse_args()
    import arviz as az

    draws, other = (
        scaled_gaussian_draws(args.dim, s, default_stats=False).astype(np.float64) for s in (0, 1)
    )
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
    pooled = draws.reshape(-1, args.dim)
    mass = np.mean(pooled <= lo, axis=0)
    print(f"  the pilot's 5% threshold holds {mass.min():.3f} .. {mass.max():.3f} of the draws")

    # sluice's default statistic on the same draws, from the same pilot (so the same
    # thresholds): its tail ESS against ArviZ's, and against the kernel at those
    # thresholds (what its one-pass lags add to the thresholds' error)
    stat = streaming.summary(1000, chunk_size=1000)
    start = stat.init({"x": jnp.asarray(pilot, jnp.float32)})
    states = [stat.update_block(start, {"x": jnp.asarray(chain, jnp.float32)}, 1000)
              for chain in draws]  # fmt: skip
    out = stat.finalize(functools.reduce(stat.merge, states))
    streamed = np.asarray(out["ess_tail"]["x"], np.float64)
    for label, base in (
        ("ArviZ's ess_tail", reference),
        ("the kernel at the same thresholds", fixed),
    ):
        e = streamed / base - 1
        print(f"sluice's streamed ess_tail (same pilot) vs {label}:")
        print(f"  rms {np.sqrt(np.mean(e**2)):.4f}  max {np.max(np.abs(e)):.4f}  "
              f"elements > 20%: {int(np.sum(np.abs(e) > 0.2)):,}")  # fmt: skip

    levels = (0.05 - args.spread, 0.05, 0.05 + args.spread)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tails = []
        for side in ("lower", "upper"):
            shares, values = [], []
            for level in levels:
                if side == "lower":
                    t = np.quantile(pilot, level, axis=0)
                    indicator = draws <= t
                else:
                    t = np.quantile(pilot, 1 - level, axis=0)
                    indicator = draws >= t
                shares.append(np.mean(indicator.reshape(-1, args.dim), axis=0))
                values.append(ess(indicator.astype(np.float64)))
            shares, values = np.stack(shares), np.stack(values)  # (3, dim), ascending shares
            # linear in the share, through the two thresholds around 5% (the outer pair
            # beyond the ends): the ESS ArviZ's threshold, at exactly 5%, would see
            upper = np.clip(np.sum(shares < 0.05, axis=0), 1, 2)
            cols = np.arange(args.dim)
            s0, s1 = shares[upper - 1, cols], shares[upper, cols]
            v0, v1 = values[upper - 1, cols], values[upper, cols]
            w = np.clip((0.05 - s0) / np.where(s1 > s0, s1 - s0, 1.0), 0.0, 1.0)
            tails.append(v0 + w * (v1 - v0))
    err3 = np.minimum(*tails) / reference - 1
    print(f"three thresholds a tail (pilot quantiles {levels}), interpolated at 5%:")
    print(f"  rms {np.sqrt(np.mean(err3**2)):.4f}  max {np.max(np.abs(err3)):.4f}  "
          f"elements > 20%: {int(np.sum(np.abs(err3) > 0.2)):,}")  # fmt: skip


if __name__ == "__main__":
    main()
