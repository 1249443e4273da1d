"""How often a run passes an Inference Gym target, over many seeds, for variants of sluice's warmup.

``bench/inference_gym.py`` runs three seeds, too few to tell a sampler that
fails one run in ten from one that fails one in two. This study runs
``--seeds`` seeds of each target for each variant (4 chains, 1,000 warmup +
``--draws`` draws, float32, the benchmark's pass rule: every |z| under the Bonferroni
bound and the smallest bulk ESS at least 100) and prints one JSON line per run,
then the pass counts. Variants (``--variants``, separated by ``;``) of sluice, each
``setting[,setting]``:

* ``base``: the defaults;
* ``buffer=N``: a terminal buffer of ``N`` iterations (the default: 15% of the warmup);
* ``schedule=I/F/T``: Stan's initial buffer, first window and terminal buffer;
* ``target_accept=A``;
* ``variance``: Stan's variance estimator in every window (no Fisher diagonal);
* ``mass_matrix=M``: ``"diag"``, ``"low_rank"``, ...
* ``divergent=A``: ``divergent_target_accept=A`` (``none``: the warmup never raises
  its target after divergences);

and ``blackjax`` / ``numpyro`` (or ``blackjax-1core`` / ``numpyro-1core``, their chains
one after another on one device): the benchmark's own runs of those libraries
(``inference_gym.py --one``, each in a fresh process). sluice's variants run
in this process, one after another, with ``SLUICE_CPU_DEVICES`` as the
environment sets it (the draws depend on the layout: ``layout_bits.py``).

    SLUICE_CPU_DEVICES=1 PYTHONPATH=src python bench/studies/gym_seeds.py \\
        --targets sv_log_small,sv_small --variants 'base;buffer=50;blackjax' --seeds 0-9
    SLUICE_CPU_DEVICES=1 PYTHONPATH=src python bench/studies/gym_seeds.py \
        --targets sv_log_small --variants 'mass_matrix=diag;blackjax' --seeds 8 --draws 20000

Each line gives the element with the largest |z| and its sd against the truth.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def parse_seeds(text: str) -> list[int]:
    """``'0-9'`` or ``'0,3,5'`` as a list of seeds."""
    if "-" in text:
        first, last = (int(v) for v in text.split("-"))
        return list(range(first, last + 1))
    return [int(v) for v in text.split(",")]


def _settings(variant: str) -> dict[str, str]:
    out = {}
    for part in variant.split(",") if variant != "base" else []:
        key, _, value = part.partition("=")
        out[key] = value
    return out


def sluice_variant(variant: str, bench: Any) -> Any:
    """A runner like ``bench.run_sluice`` (``bench``: ``bench/inference_gym.py``, the module)
    with ``variant``'s warmup."""
    import sluice
    from sluice.mcmc import adaptation, kernels

    settings = _settings(variant)
    known = {"buffer", "schedule", "target_accept", "variance", "mass_matrix", "divergent"}
    unknown = set(settings) - known
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)} in variant {variant!r}")
    kernels.window_schedule = adaptation.window_schedule
    kernels.window_adaptation = adaptation.window_adaptation
    if "buffer" in settings:
        buffer = int(settings["buffer"])
        kernels.window_schedule = lambda n: adaptation.window_schedule(n, final_buffer=buffer)
    if "schedule" in settings:
        i, f, t = (int(v) for v in settings["schedule"].split("/"))
        kernels.window_schedule = lambda n: adaptation.window_schedule(n, i, f, t)
    if "variance" in settings:
        kernels.window_adaptation = functools.partial(
            adaptation.window_adaptation, gradient_metric=False
        )
    kwargs: dict[str, Any] = {}
    if "target_accept" in settings:
        kwargs["target_accept"] = float(settings["target_accept"])
    kernel: dict[str, Any] = {}
    if "mass_matrix" in settings or "variance" in settings:  # the variance: no low-rank fit
        kernel["mass_matrix"] = settings.get("mass_matrix", "diag")
    if "divergent" in settings:  # the terminal buffer's target after divergences
        value = settings["divergent"]
        kernel["divergent_target_accept"] = None if value == "none" else float(value)
    if kernel:
        kwargs["kernel"] = sluice.nuts(**kernel)
    return functools.partial(bench.run_sluice, **kwargs)


def one_line(record: dict[str, Any], variant: str) -> dict[str, Any]:
    return {
        "variant": variant,
        "target": record["target"],
        "seed": record["seed"],
        "passed": record["passed"],
        "max_z": round(max(record["max_z_mean"], record["max_z_sd"]), 2),
        "min_ess_bulk": round(record["min_ess_bulk"]),
        "grads": record["grads"],
        "divergent": record["divergent"],
        "step_size": round(sum(record["step_size"]) / len(record["step_size"]), 3),
        "worst_element": record["worst_element"],
        "worst_sd": round(record["worst_sd"], 4),
        "truth_sd": round(record["worst_truth_sd"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="sv_log_small,sv_small,brownian_scales")
    parser.add_argument("--variants", default="base")
    parser.add_argument("--seeds", default="0-9", help="'0-9' or '0,3,5'")
    parser.add_argument("--draws", type=int, default=1000, help="per chain, after 1,000 warmup")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import inference_gym
    from harness import run_isolated

    import sluice  # noqa: F401  (before any target starts JAX's backend)

    inference_gym.DRAWS = args.draws

    lines = []
    for variant in args.variants.split(";"):
        other = variant in inference_gym.RUNNERS and not variant.startswith("sluice")
        if not other:
            inference_gym.RUNNERS["sluice"] = sluice_variant(variant, inference_gym)
        for target in args.targets.split(","):
            for seed in parse_seeds(args.seeds):
                if other:
                    record = run_isolated(str(HERE / "inference_gym.py"), [
                        "--one", target, variant, str(seed), "--draws", str(args.draws)])  # fmt: skip
                else:
                    record = inference_gym.one(target, "sluice", seed)
                line = one_line(record, variant)
                lines.append(line)
                print(json.dumps(line), flush=True)
    for variant in args.variants.split(";"):
        for target in args.targets.split(","):
            runs = [x for x in lines if x["variant"] == variant and x["target"] == target]
            passed = sum(x["passed"] for x in runs)
            grads = sorted(x["grads"] for x in runs)[len(runs) // 2]
            print(f"{target:16s} {variant:24s} passed {passed}/{len(runs)}, median sampling "
                  f"gradients {grads:,}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
