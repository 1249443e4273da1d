"""posteriordb posteriors: sluice's NUTS with a diagonal and a low-rank mass matrix, checked
against the reference draws.

For each posterior (a Stan model translated by hand into a sluice model,
``posteriordb_models.py``) and each mass-matrix adaptation —
``sluice.nuts(mass_matrix="diag")`` (``diag``) and
``sluice.nuts(mass_matrix="low_rank")`` (``low_rank``) — sluice samples 4
chains x (1,000 warmup + 1,000 draws) from a fixed seed, and the script
records:

* *gradients*: log-density gradients of the whole run, warmup included
  (``run.info.num_gradients_warmup + run.info.num_gradients``, all chains);
* *min ESS*: ArviZ's bulk ESS, the smallest over every scalar of the model's
  outputs that the reference draws hold (``beta[1]`` is ``draws["beta"][..., 0]``);
* *gradients per min ESS* (the metric: what one effective draw of the worst
  scalar costs, warmup included) and *sampling gradients per min ESS*
  (``num_gradients`` alone);
* max R-hat (ArviZ's rank-normalised split R-hat), divergences, wall seconds
  of ``sluice.sample`` (compilation included);
* a check against posteriordb's reference draws (10 chains x 1,000 near-
  independent draws from Stan): for every reference scalar,
  ``z = (mean - mean_ref) / sqrt(mcse^2 + sd_ref^2 / ess_ref)`` with sluice's
  mean and its MCSE (``az.mcse``) and the reference's mean, sd and bulk ESS.
  ``max |z|`` is the largest over the posterior's scalars; the run is ``ok``
  when it is below 4.5: for one scalar |z| > 4.5 has a normal probability of
  about 7e-6, so for the tens of scalars of a posterior the bound is a
  family-wise test at roughly five sigma; a failed check means a wrong
  translation or a sampler that missed part of the posterior, not noise. A
  run whose max R-hat is above 1.1 fails it too: its chains disagree, so one
  of them missed what the others found (a stuck chain can leave the pooled
  mean within its wide MCSE).

With ``--seeds N`` every measurement is repeated with seeds 0..N-1; a row
gives the medians over the seeds, but its largest ``max |z|`` and ``max
R-hat`` (``ok`` only if every seed's run is). The ``diag/low_rank`` column, on a ``low_rank``
row, divides the ``diag`` row's gradients per min ESS by its own (above 1:
the low-rank metric needs fewer gradients per effective draw).

The data, Stan code and reference draws come from a checkout of
https://github.com/stan-dev/posteriordb (``--posteriordb PATH``, or the
environment variable ``POSTERIORDB``); the zip files are read directly.

Commands::

    POSTERIORDB=~/posteriordb python bench/posteriordb.py            # every posterior, both
    python bench/posteriordb.py --posteriordb ~/posteriordb --mass-matrix diag
    python bench/posteriordb.py --posteriors arK-arK,sblrc-blr --seeds 3 --json out.json
    python bench/posteriordb.py --quick                              # 2 posteriors, 300 + 300
    python bench/posteriordb.py --list                               # the posteriors
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import traceback
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import areas
from harness import machine_info, median

MASS_MATRICES = ("diag", "low_rank")
CHAINS, WARMUP, DRAWS = 4, 1000, 1000
QUICK_POSTERIORS = ("kidiq-kidscore_interaction", "eight_schools-eight_schools_noncentered")
QUICK_WARMUP, QUICK_DRAWS = 300, 300
Z_LIMIT = 4.5
RHAT_LIMIT = 1.1


# -- posteriordb ---------------------------------------------------------------------------
def database(path: str | None) -> Path:
    """The ``posterior_database`` folder of a posteriordb checkout (``path`` or $POSTERIORDB)."""
    path = path or os.environ.get("POSTERIORDB")
    if not path:
        raise SystemExit(
            "no posteriordb checkout: pass --posteriordb PATH or set the environment variable "
            "POSTERIORDB (a clone of https://github.com/stan-dev/posteriordb)"
        )
    root = Path(path).expanduser()
    for candidate in (root / "posterior_database", root):
        if (candidate / "posteriors").is_dir():
            return candidate
    raise SystemExit(
        f"{root} (from --posteriordb or POSTERIORDB) is not a posteriordb checkout: "
        "no posterior_database/posteriors/ in it"
    )


def _read_zip(path: Path) -> Any:
    with zipfile.ZipFile(path) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".json")]
        return json.loads(archive.read(name))


def load(db: Path, posterior: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The posterior's data set and its reference draws ``{stan name: (chain, draw)}``."""
    info = json.loads((db / "posteriors" / f"{posterior}.json").read_text())
    data = _read_zip(db / "data" / "data" / f"{info['data_name']}.json.zip")
    reference_name = info.get("reference_posterior_name") or posterior
    reference_path = db / "reference_posteriors" / "draws" / "draws" / f"{reference_name}.json.zip"
    if not reference_path.exists():
        raise SystemExit(f"{posterior} has no reference draws ({reference_path} missing)")
    import numpy as np

    chains = _read_zip(reference_path)
    reference = {
        name: np.asarray([chain[name] for chain in chains], dtype=np.float64) for name in chains[0]
    }
    return data, reference


_STAN_NAME = re.compile(r"^(?P<base>[^\[\]]+)(?:\[(?P<index>[\d,\s]+)\])?$")


def scalar(draws: dict[str, Any], stan_name: str) -> Any:
    """``draws[base][..., i - 1, j - 1]`` for Stan's ``base[i,j]`` (None if not recorded)."""
    match = _STAN_NAME.match(stan_name)
    if match is None or match["base"] not in draws:
        return None
    values = draws[match["base"]]
    index = tuple(int(i) - 1 for i in match["index"].split(",")) if match["index"] else ()
    if values.ndim != 2 + len(index):
        return None
    return values[(..., *index)]


# -- statistics ------------------------------------------------------------------------------
def _dataset(scalars: dict[str, Any]) -> Any:
    import arviz as az

    return az.convert_to_dataset(dict(scalars))


def _values(result: Any, names: list[str]) -> dict[str, float]:
    return {name: float(result[name]) for name in names}


def reference_moments(reference: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Mean, sd and bulk ESS of every reference scalar."""
    import arviz as az

    names = list(reference)
    ess = _values(az.ess(_dataset(reference), method="bulk"), names)
    return {
        name: {
            "mean": float(reference[name].mean()),
            "sd": float(reference[name].std(ddof=1)),
            "ess": ess[name],
        }
        for name in names
    }


def check(
    sluice_scalars: dict[str, Any], moments: dict[str, dict[str, float]]
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Bulk ESS, R-hat and the z-score against the reference of every scalar."""
    import arviz as az

    names = list(sluice_scalars)
    data = _dataset(sluice_scalars)
    ess = _values(az.ess(data, method="bulk"), names)
    rhat = _values(az.rhat(data), names)
    mcse = _values(az.mcse(data, method="mean"), names)
    z = {}
    for name in names:
        ref = moments[name]
        scale = math.sqrt(mcse[name] ** 2 + ref["sd"] ** 2 / ref["ess"])
        z[name] = (float(sluice_scalars[name].mean()) - ref["mean"]) / scale
    return ess, rhat, z


# -- one measurement -----------------------------------------------------------------------------
def kernel(mass_matrix: str) -> Any:
    import sluice

    if mass_matrix == "diag":
        return sluice.nuts(mass_matrix="diag")
    if mass_matrix == "low_rank":
        try:
            return sluice.nuts(mass_matrix="low_rank")
        except TypeError as error:
            raise SystemExit(
                f"this sluice has no low-rank mass matrix (sluice.nuts(mass_matrix='low_rank'): "
                f"{error}); run with --mass-matrix diag"
            ) from error
    raise SystemExit(f"unknown mass matrix {mass_matrix!r}; choose from {MASS_MATRICES}")


def dimension(model: Any) -> int:
    """Number of unconstrained scalars of the model."""
    import jax

    point = model.init(jax.random.key(0)) if callable(model.init) else model.init
    return int(sum(leaf.size for leaf in jax.tree.leaves(point)))


def _worst(values: Any, pick: Any) -> float:
    """``pick`` (min or max) of the values; NaN if any is NaN (a chain that did not move)."""
    values = list(values)
    return math.nan if any(math.isnan(v) for v in values) else pick(values)


def measure(
    posterior: str,
    model: Any,
    moments: dict[str, dict[str, float]],
    mass_matrix: str,
    seed: int,
    warmup: int,
    draws: int,
) -> dict[str, Any]:
    import sluice

    record: dict[str, Any] = {"posterior": posterior, "mass_matrix": mass_matrix, "seed": seed}
    t0 = time.perf_counter()
    run = sluice.sample(model, chains=CHAINS, warmup=warmup, draws=draws, seed=seed,
                        kernel=kernel(mass_matrix), progress=False)  # fmt: skip
    wall = time.perf_counter() - t0
    recorded = {name: scalar(run.draws, name) for name in moments}
    missing = sorted(name for name, values in recorded.items() if values is None)
    if missing:
        raise RuntimeError(f"{posterior}: the model records no {', '.join(missing)}")
    ess, rhat, z = check(recorded, moments)
    max_rhat = _worst(rhat.values(), max)
    gradients = int(run.info.num_gradients_warmup) + int(run.info.num_gradients)
    min_ess = _worst(ess.values(), min)
    worst = max(z, key=lambda name: math.inf if math.isnan(z[name]) else abs(z[name]))
    record.update({
        "dim": dimension(model),
        "chains": CHAINS, "warmup": warmup, "draws": draws,
        "gradients": gradients,
        "gradients_warmup": int(run.info.num_gradients_warmup),
        "gradients_sampling": int(run.info.num_gradients),
        "min_ess_bulk": min_ess,
        "min_ess_scalar": min(ess, key=ess.get),
        "grads_per_ess": gradients / min_ess,
        "grads_per_ess_sampling": int(run.info.num_gradients) / min_ess,
        "max_rhat": max_rhat,
        "divergent": int(run.sample_stats["diverging"].sum()),
        "wall_s": wall,
        "max_abs_z": abs(z[worst]),
        "worst_scalar": worst,
        "ok": abs(z[worst]) < Z_LIMIT and not max_rhat > RHAT_LIMIT,
        "scalars": len(z),
    })  # fmt: skip
    return record


# -- summary --------------------------------------------------------------------------------------
def summarize(records: list[dict[str, Any]], posteriors: list[str], masses: list[str]) -> list:
    rows = []
    for posterior in posteriors:
        per_mass = {}
        for mass in masses:
            mine = [r for r in records if (r["posterior"], r["mass_matrix"]) == (posterior, mass)]
            done = [r for r in mine if "error" not in r]
            if not mine:
                continue
            row: dict[str, Any] = {
                "posterior": posterior, "mass_matrix": mass, "runs": len(done),
                "dim": done[0]["dim"] if done else None,
                **{k: median([r[k] for r in done]) for k in (
                    "gradients", "min_ess_bulk", "grads_per_ess", "grads_per_ess_sampling",
                    "divergent", "wall_s")},
                "max_rhat": _worst((r["max_rhat"] for r in done), max) if done else None,
                "max_abs_z": max((r["max_abs_z"] for r in done), default=None),
                "worst_scalar": max(done, key=lambda r: r["max_abs_z"])["worst_scalar"]
                if done else None,
                "ratio": None,
            }  # fmt: skip
            failed = len(mine) - len(done)
            bad = sum(not r["ok"] for r in done)
            row["check"] = (
                "ok" if not failed and not bad else
                f"FAIL ({bad}/{len(done)})" if not failed else f"error ({failed}/{len(mine)})"
            )  # fmt: skip
            per_mass[mass] = row
            rows.append(row)
        diag, low = per_mass.get("diag"), per_mass.get("low_rank")
        if diag and low and diag["grads_per_ess"] and low["grads_per_ess"]:
            low["ratio"] = diag["grads_per_ess"] / low["grads_per_ess"]
    return rows


def main(argv: list[str] | None = None) -> int:
    import posteriordb_models

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posteriordb", default=None,
                        help="a posteriordb checkout (default: $POSTERIORDB)")  # fmt: skip
    parser.add_argument("--posteriors", default=None,
                        help=f"comma-separated (default all {len(posteriordb_models.MODELS)})")  # fmt: skip
    parser.add_argument("--mass-matrix", default=",".join(MASS_MATRICES),
                        help="comma-separated from diag,low_rank (default both)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (medians)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--json", default=None, help="write the machine, records and rows here")
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_POSTERIORS)} posteriors, {QUICK_WARMUP} + {QUICK_DRAWS}")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="print the posteriors and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(posteriordb_models.MODELS))
        return 0

    db = database(args.posteriordb)
    if args.posteriors:
        posteriors = args.posteriors.split(",")
    else:
        posteriors = list(QUICK_POSTERIORS if args.quick else posteriordb_models.MODELS)
    unknown = [p for p in posteriors if p not in posteriordb_models.MODELS]
    if unknown:
        parser.error(f"no translation of {unknown}; choose from {list(posteriordb_models.MODELS)}")
    masses = args.mass_matrix.split(",")
    for mass in masses:
        kernel(mass)  # fails now, not an hour in, if a mass matrix is unknown or missing
    warmup = args.warmup or (QUICK_WARMUP if args.quick else WARMUP)
    draws = args.draws or (QUICK_DRAWS if args.quick else DRAWS)

    import jax

    inputs = {}
    for posterior in posteriors:
        data, reference = load(db, posterior)
        inputs[posterior] = (
            posteriordb_models.build(posterior, data),
            reference_moments(reference),
        )

    records = []
    for seed in range(args.seeds):
        for posterior in posteriors:
            model, moments = inputs[posterior]
            for mass in masses:
                try:
                    record = measure(posterior, model, moments, mass, seed, warmup, draws)
                except Exception as error:  # one failed run must not lose the others
                    traceback.print_exc()
                    record = {"posterior": posterior, "mass_matrix": mass, "seed": seed,
                              "error": f"{type(error).__name__}: {error}"}  # fmt: skip
                records.append(record)
                print(json.dumps(record), file=sys.stderr, flush=True)

    rows = summarize(records, posteriors, masses)
    print(f"{CHAINS} chains x ({warmup} warmup + {draws} draws), seeds 0..{args.seeds - 1}; "
          f"check: max abs z < {Z_LIMIT} against posteriordb's reference draws, "
          f"max R-hat <= {RHAT_LIMIT}\n")  # fmt: skip
    machine = {**machine_info(), "backend": jax.default_backend()}
    settings = {"chains": CHAINS, "warmup": warmup, "draws": draws, "seeds": args.seeds,
                "z_limit": Z_LIMIT, "rhat_limit": RHAT_LIMIT}  # fmt: skip
    areas.emit("posteriordb", rows, args.json, machine=machine, command=" ".join(sys.argv),
               settings=settings, records=records)  # fmt: skip
    return 0 if all("error" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
