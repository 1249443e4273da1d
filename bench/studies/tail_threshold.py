"""What limits the streaming tail ESS on short NUTS runs: the threshold, not the lags.

ArviZ's ``ess_tail`` is the ESS of the indicators ``x <= q`` and ``x > q'`` at
the pooled 5% and 95% quantiles, unknown until the run ends. The streaming
statistics take each chain's thresholds from its own draws: for the first
half, from the draws before ``reference_draw`` (62 of 1,000); for the second
half, from the whole first half. This script keeps the draws of one NUTS run
of a standard Gaussian (antithetic draws, the hard case) and computes, with
ArviZ's own ESS kernel on stored indicators (exact lags, no streaming), the
tail ESS under several threshold choices, against ArviZ's:

* ``streaming``: what sluice reports (its ``ess_tail``);
* ``early thresholds``: first half from the first ``reference_draw`` draws,
  second half from the first half (the streaming choice, exact lags);
* ``thresholds from the first quarter``: the first half's from its first
  half (250 draws), applied to all of it (not streamable as such: a later
  reference would leave the first half's proxies fewer draws);
* ``first-half thresholds``: both halves from the whole first half (not
  streamable: the first half's indicators would need their threshold
  before their draws are seen);
* ``second halves only``: the streaming second-half indicators alone;
* ``late first-half reference``: streamable: the first half's threshold
  fixed at its middle draw from the draws before it and used for the rest of
  the half; every series cut to a quarter of the run (ArviZ's kernel needs
  equal lengths), so it uses half the indicators streaming would.

    PYTHONPATH=src python bench/studies/tail_threshold.py [--dim 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import warnings

import arviz as az
import jax.numpy as jnp
import numpy as np
from arviz.stats.diagnostics import _ess

import sluice


def _relative(ess_fn, x, probs=(0.05, 0.95)) -> float:
    """min over the two tails of ``ess_fn(x, p)``, as ESS per draw."""
    return min(ess_fn(x, p) for p in probs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    chains, draws = 4, 1000
    run = sluice.sample(
        lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(args.dim), chains=chains, warmup=300,
        draws=draws, progress=False, seed=args.seed, default_stats=True,
    )  # fmt: skip
    x = np.asarray(run.draws["x"], np.float64)  # (chains, draws, dim)
    streamed = np.asarray(run.stats["summary"]["ess_tail"]["x"], np.float64)
    half = draws // 2
    reference_draw = min(max(draws // 16, 32), half - 1)  # the default (lag_settings)

    def indicators(xi, p, first_from):
        rows = []
        for c in range(chains):
            q_first = np.quantile(xi[c, :first_from], p)
            q_second = np.quantile(xi[c, :half], p)
            below = (lambda v, q: v <= q) if p < 0.5 else (lambda v, q: v > q)
            rows += [below(xi[c, :half], q_first), below(xi[c, half:], q_second)]
        return np.asarray(rows, float)

    def second_halves(xi, p):
        below = (lambda v, q: v <= q) if p < 0.5 else (lambda v, q: v > q)
        rows = [below(xi[c, half:], np.quantile(xi[c, :half], p)) for c in range(chains)]
        return np.asarray(rows, float)

    def late_reference(xi, p):
        """Streamable: the first half's threshold fixed at its middle draw, from the draws
        before it, and used for the rest of that half; every series cut to a quarter."""
        below = (lambda v, q: v <= q) if p < 0.5 else (lambda v, q: v > q)
        quarter = half // 2
        rows = []
        for c in range(chains):
            rows.append(below(xi[c, quarter:half], np.quantile(xi[c, :quarter], p)))
            rows.append(below(xi[c, half : half + quarter], np.quantile(xi[c, :half], p)))
        return np.asarray(rows, float)

    variants = {
        "early thresholds": lambda xi, p: indicators(xi, p, reference_draw),
        "thresholds from the first quarter": lambda xi, p: indicators(xi, p, half // 2),
        "first-half thresholds": lambda xi, p: indicators(xi, p, half),
        "second halves only": second_halves,
        "late first-half reference (streamable), quarters": late_reference,
    }
    errors = {"streaming": [], **{k: [] for k in variants}}
    for i in range(args.dim):
        xi = x[:, :, i]
        reference = az.ess(xi, method="tail") / xi.size
        errors["streaming"].append(streamed[i] / xi.size / reference - 1)
        for name, build in variants.items():

            def per_draw(v, p, build=build):
                ind = build(v, p)
                return _ess(ind) / ind.size

            errors[name].append(_relative(per_draw, xi) / reference - 1)
    print(
        f"standard Gaussian, {args.dim} elements, {chains} x {draws} NUTS draws, seed {args.seed}"
    )
    print("| thresholds | rms rel. error vs ArviZ | max | elements > 10% |")
    print("|---|---:|---:|---:|")
    for name, values in errors.items():
        e = np.abs(np.asarray(values))
        print(
            f"| {name} | {np.sqrt(np.mean(e**2)):.1%} | {e.max():.1%} | "
            f"{int(np.sum(e > 0.1))} of {args.dim} |"
        )


if __name__ == "__main__":
    main()
