"""Whether a run explored its posterior: the checks of CmdStan's ``diagnose`` and ArviZ.

The sampler's evidence (divergences, transitions at the maximum tree depth,
E-BFMI below 0.3; Betancourt 2016, arXiv:1604.00695) is told at the end of
sampling, the draws' (R-hat above 1.01, bulk or tail ESS below 100 per chain;
Vehtari et al. 2021, Bayesian Analysis 16(2)) where the summary is read, as a
:class:`DiagnosticWarning`; ``run.diagnose()`` gives the full report.
docs/architecture.md ("The host loop") says where each is counted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sluice.mcmc.kernels import LOW_RANK_MAX_DIM
from sluice.mcmc.metric import LowRank

__all__ = [
    "Diagnosis",
    "DiagnosticWarning",
    "Problem",
    "convergence_problems",
    "raised_target",
    "sampler_problems",
    "stored_sampler_problems",
]

MAX_R_HAT = 1.01
MIN_ESS_PER_CHAIN = 100
MIN_E_BFMI = 0.3
NAMED = 3  # elements named in a message


class DiagnosticWarning(UserWarning):
    """A run shows signs that it did not explore its posterior (see :mod:`sluice.runtime.diagnostics`)."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One failed check: ``kind`` (``divergences``, ``tree_depth``, ``e_bfmi``, ``r_hat``,
    ``ess``) and what it means for the run."""

    kind: str
    message: str


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """The failed checks of a run; true when there is any. ``str()`` is the report."""

    problems: tuple[Problem, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.problems)

    def __iter__(self) -> Any:
        return iter(self.problems)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(p.kind for p in self.problems)

    def __str__(self) -> str:
        if not self.problems:
            return (
                "No problems detected: no divergences, no transition at the maximum tree "
                f"depth, E-BFMI >= {MIN_E_BFMI}, R-hat <= {MAX_R_HAT}, bulk and tail ESS >= "
                f"{MIN_ESS_PER_CHAIN} per chain."
            )
        return "\n".join(f"- {p.message}" for p in self.problems)


def _share(count: int, total: int) -> str:
    return f"{count:,} of {total:,} transitions ({count / max(total, 1):.1%})"


def _chains(values: np.ndarray) -> str:
    return ", ".join(f"chain {c}: {v:,}" for c, v in enumerate(values) if v)


def sampler_problems(info: Any) -> list[Problem]:
    """The sampler's evidence in a :class:`~sluice.runtime.run.RunInfo` (module docstring)."""
    depth = getattr(info.kernel, "max_tree_depth", None)
    low_rank = _kept_directions(getattr(info, "inverse_mass_matrix", None))
    setting = getattr(info.kernel, "target_accept", None)
    raised = raised_target(getattr(info, "target_accept", None), setting)
    return _sampler_problems(
        info.chain_divergent, info.chain_saturated, info.e_bfmi, info.draws, depth, low_rank,
        setting, raised,
    )  # fmt: skip


def raised_target(adapted: Any, setting: float | None) -> float | None:
    """The largest target a warmup ended with (``adapted``, per chain; float32) where it
    is above the kernel's ``setting``: raised after divergences; else ``None``."""
    if adapted is None or setting is None:
        return None
    reached = round(float(np.max(adapted)), 3)
    return reached if reached > setting else None


def _kept_directions(inverse_mass_matrix: Any) -> bool:
    """Whether a run's metric is low rank with a direction kept in some chain."""
    if not isinstance(inverse_mass_matrix, LowRank):
        return False
    return bool(np.any(np.asarray(inverse_mass_matrix.values) != 1.0))


def stored_sampler_problems(sample_stats: Any, max_tree_depth: int | None) -> list[Problem]:
    """The sampler's evidence in a run's recorded sample statistics (``diverging``,
    ``tree_depth``, ``energy``: ``(chain, draw)`` arrays, where the kernel records them)."""
    diverging = np.asarray(sample_stats["diverging"]) if "diverging" in sample_stats else None
    chains, draws = diverging.shape if diverging is not None else (0, 0)
    divergent = np.zeros(chains, np.int64) if diverging is None else diverging.sum(1)
    saturated = np.zeros(chains, np.int64)
    if max_tree_depth is not None and "tree_depth" in sample_stats:
        saturated = (np.asarray(sample_stats["tree_depth"]) >= max_tree_depth).sum(1)
    e_bfmi = np.full(chains, np.nan)
    if "energy" in sample_stats and draws > 1:
        energy = np.asarray(sample_stats["energy"], np.float64)
        e_bfmi = np.square(np.diff(energy, axis=1)).mean(1) / energy.var(1, ddof=1)
    return _sampler_problems(divergent, saturated, e_bfmi, draws, max_tree_depth)


def _sampler_problems(
    chain_divergent: np.ndarray,
    chain_saturated: np.ndarray,
    e_bfmi: np.ndarray,
    draws: int,
    depth: int | None,
    low_rank: bool = False,
    target_accept: float | None = None,
    raised: float | None = None,
) -> list[Problem]:
    """``target_accept``: the kernel's setting; ``raised``: the target its warmup ended
    with where the warmup raised it (sluice's NUTS after divergences in its last window)."""
    problems = []
    total = len(chain_divergent) * draws
    num_divergent, num_saturated = int(np.sum(chain_divergent)), int(np.sum(chain_saturated))
    if num_divergent:
        metric = (
            " The metric kept low-rank directions (mass_matrix='auto' fits them on "
            f"posteriors of 2 to {LOW_RANK_MAX_DIM:,} elements): where the posterior's "
            "tails are heavy or its scales vary (a funnel), the diagonal metric can "
            "sample far better; try mass_matrix='diag'."
            if low_rank
            else ""
        )
        reached = round(max(raised or 0.0, target_accept or 0.0), 3)  # a float32 target
        suggest = 0.95 if reached < 0.95 else 0.99
        already = (
            f" The warmup already raised its target to {raised:.2f} after divergences in "
            "its last window."
            if raised is not None
            else ""
        )
        problems.append(Problem("divergences", (
            f"{_share(num_divergent, total)} diverged after warmup "
            f"({_chains(chain_divergent)}): the sampler could not follow the "
            f"posterior's curvature there, and the draws may miss that region.{already} "
            f"Raise target_accept (e.g. {suggest}), or reparameterise (a non-centred "
            f"hierarchy).{metric}")))  # fmt: skip
    if num_saturated:
        problems.append(Problem("tree_depth", (
            f"{_share(num_saturated, total)} reached the maximum tree depth "
            f"({depth}) ({_chains(chain_saturated)}): their trajectories were cut "
            "short, which costs efficiency, not correctness. Raise max_tree_depth, or "
            "improve the metric (mass_matrix='low_rank' for correlated posteriors).")))  # fmt: skip
    low = np.flatnonzero(np.asarray(e_bfmi) < MIN_E_BFMI)
    if low.size:
        shown = ", ".join(f"chain {c}: {e_bfmi[c]:.2f}" for c in low)
        problems.append(Problem("e_bfmi", (
            f"E-BFMI below {MIN_E_BFMI} ({shown}): the momentum resampling moves slowly "
            "through the energy levels, as in heavy tails or a funnel; the chains may "
            "not have explored the tails. Reparameterise, or run longer.")))  # fmt: skip
    return problems


def _worst(column: Any, largest: bool) -> str:
    """The worst (at most ``NAMED``) of a column's values, each with its element's name."""
    values = column.dropna().sort_values(ascending=not largest)
    return ", ".join(f"{name} {value:.3g}" for name, value in values.head(NAMED).items())


def convergence_problems(table: Any, chains: int) -> list[Problem]:
    """The draws' evidence in a summary table (``arviz.summary``'s columns ``r_hat``,
    ``ess_bulk``, ``ess_tail``) of a run of ``chains`` chains (module docstring)."""
    problems = []
    if "r_hat" in table and chains > 1:
        r_hat = table["r_hat"].astype(float)
        bad = r_hat > MAX_R_HAT
        if bad.any():
            problems.append(Problem("r_hat", (
                f"R-hat above {MAX_R_HAT} for {int(bad.sum()):,} of {len(r_hat):,} elements "
                f"({_worst(r_hat[bad], largest=True)}): the chains disagree; they have not "
                "mixed, or the posterior has several modes. Run longer, or check the "
                "chains' trace and rank plots.")))  # fmt: skip
    floor = MIN_ESS_PER_CHAIN * chains
    for column, what in (("ess_bulk", "bulk"), ("ess_tail", "tail")):
        if column not in table:
            continue
        ess = table[column].astype(float)
        bad = ess < floor
        if bad.any():
            problems.append(Problem("ess", (
                f"{what} ESS below {MIN_ESS_PER_CHAIN} per chain ({floor:,}) for "
                f"{int(bad.sum()):,} of {len(ess):,} elements ({_worst(ess[bad], largest=False)}): "
                f"too few effective draws for the {'intervals' if what == 'tail' else 'means'}, "
                "their MCSE and R-hat to be reliable. Draw more.")))  # fmt: skip
    return problems
