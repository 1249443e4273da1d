"""Accuracy of the streaming ESS and R-hat against ArviZ on NUTS output.

Samples the logistic regression of :mod:`sluice.apps.datasets` (10 coefficients)
with NUTS (4 chains, 500 warmup iterations, ``N`` draws) for each ``N`` in
``--draws`` and each seed in ``--seeds``, streams
``stats.summary_statistics(N)`` over the stored draws of each chain
(``jit(lax.scan)`` per chain, then ``merge``), and prints the relative error
of ``ess_bulk``, ``ess_tail`` and ``r_hat`` against ``az.ess`` / ``az.rhat``
on the same draws: max and rms over the coefficients, per run and pooled
over seeds. NUTS chains are often antithetic (negative lag-1
autocorrelation, ESS above the number of draws): the case where ESS from
lags at block level (resolution 8) is noisiest.

Run: ``PYTHONPATH=src python bench/stats_accuracy.py`` (a few minutes on two
cores). ``--option key=value`` passes options to ``summary_statistics``
(for instance ``proxy_lags=0`` for the block-only proxies).
"""

from __future__ import annotations

import argparse
import ast
import warnings

import arviz as az
import jax
import numpy as np

import sluice
import sluice.apps.datasets
from sluice import stats


def stream(draws: np.ndarray, statistic: stats.Statistic) -> dict[str, np.ndarray]:
    """Finalized outputs of ``statistic`` over ``draws`` ``(chains, N, D)``, chain by chain."""

    @jax.jit
    def one(chain):
        body = lambda state, x: (statistic.update(state, {"beta": x}), None)  # noqa: E731
        return jax.lax.scan(body, statistic.init({"beta": draws[0, 0]}), chain)[0]

    states = [one(chain) for chain in draws]
    merged = states[0]
    for state in states[1:]:
        merged = statistic.merge(merged, state)
    out = jax.device_get(statistic.finalize(merged))
    return {k: np.asarray(v["beta"]) for k, v in out.items() if isinstance(v, dict)}


def reference(draws: np.ndarray) -> dict[str, np.ndarray]:
    data = az.convert_to_dataset(draws.astype(np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "ess_bulk": az.ess(data, method="bulk")["x"].values,
            "ess_tail": az.ess(data, method="tail")["x"].values,
            "r_hat": az.rhat(data)["x"].values,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, nargs="*", default=[400, 1000, 4000])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    options = {}
    for item in args.option:
        key, value = item.split("=", 1)
        options[key] = ast.literal_eval(value)
    model = sluice.apps.datasets.logistic_regression_model()
    print(f"options={options or 'default'}")
    print(
        "     N  seed | ess_bulk max   rms | ess_tail max   rms | r_hat max abs | bulk/tail res=1"
    )
    for n in args.draws:
        statistic = stats.summary_statistics(n, **options)
        errors: dict[str, list[np.ndarray]] = {"ess_bulk": [], "ess_tail": [], "r_hat": []}
        for seed in args.seeds:
            run = sluice.sample(model, chains=4, warmup=500, draws=n, seed=seed, progress=False,
                                default_stats=False)  # fmt: skip
            draws = np.asarray(run.draws["beta"], np.float32)  # (chains, N, D)
            mine, ref = stream(draws, statistic), reference(draws)
            for key in ("ess_bulk", "ess_tail"):
                errors[key].append(mine[key] / ref[key] - 1.0)
            errors["r_hat"].append(mine["r_hat"] - ref["r_hat"])
            e = {k: v[-1] for k, v in errors.items()}
            exact = [np.mean(mine[f"ess_{k}_resolution"] == 1) for k in ("bulk", "tail")]
            print(f"{n:6d} {seed:5d} | {np.max(np.abs(e['ess_bulk'])):11.1%} "
                  f"{np.sqrt(np.mean(e['ess_bulk'] ** 2)):5.1%} | "
                  f"{np.max(np.abs(e['ess_tail'])):11.1%} {np.sqrt(np.mean(e['ess_tail'] ** 2)):5.1%} | "
                  f"{np.max(np.abs(e['r_hat'])):13.1e} | {exact[0]:4.0%} {exact[1]:4.0%}",
                  flush=True)  # fmt: skip
        e = {k: np.concatenate(v) for k, v in errors.items()}
        print(f"{n:6d}   all | {np.max(np.abs(e['ess_bulk'])):11.1%} "
              f"{np.sqrt(np.mean(e['ess_bulk'] ** 2)):5.1%} | "
              f"{np.max(np.abs(e['ess_tail'])):11.1%} {np.sqrt(np.mean(e['ess_tail'] ** 2)):5.1%} | "
              f"{np.max(np.abs(e['r_hat'])):13.1e} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
