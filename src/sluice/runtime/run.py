"""The result of :func:`sluice.sample`: draws (if kept), statistics, summary, InferenceData."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from sluice.io.sinks import ResumableSink
from sluice.runtime import statistics as run_statistics
from sluice.runtime.config import RunConfig
from sluice.runtime.diagnostics import (
    Diagnosis,
    DiagnosticWarning,
    convergence_problems,
    sampler_problems,
)
from sluice.stats import nested
from sluice.stats.streaming_readout import rounding

__all__ = ["Run", "RunInfo"]


@dataclasses.dataclass
class RunInfo:
    """Settings (:class:`~sluice.runtime.config.RunConfig`), timings and sampler totals."""

    config: RunConfig
    num_devices: int = 1
    compile_seconds: float = 0.0  # ahead-of-time compilation in this run (0 when reused)
    warmup_seconds: float = 0.0  # initialisation and warmup, without compilation
    sampling_seconds: float = 0.0  # drawing and writing, without compilation
    total_seconds: float = 0.0
    num_gradients_warmup: int = 0
    num_gradients: int = 0
    num_divergent: int = 0
    mean_acceptance: float = float("nan")
    params: Any = None  # the kernel's tuned parameters per chain (leading chain axis)
    step_size: np.ndarray | None = None  # HMC family: the tuned step size of each chain
    inverse_mass_matrix: np.ndarray | None = None  # and its inverse mass matrix
    # sluice's HMC family: the step-size adaptation's last target per chain (its
    # target_accept, or divergent_target_accept after divergences in the last window)
    target_accept: np.ndarray | None = None
    _sum_acceptance: float = 0.0
    converged_at: int | None = None  # draws per chain where ``until`` stopped the run
    # per chain: divergent, saturated, draws with an energy, sum E, sum E**2, sum of the
    # squared steps E_t - E_{t-1}, last E (float64; each chain's row is nonzero on the
    # process that owns it only, so that rows add up over processes)
    _chain_totals: np.ndarray | None = None

    _CHAIN_COLUMNS = 7

    def __post_init__(self) -> None:
        if self._chain_totals is None:
            self._chain_totals = np.zeros((self.config.chains, self._CHAIN_COLUMNS))

    @property
    def chains(self) -> int:
        return self.config.chains

    @property
    def warmup(self) -> int:
        return self.config.warmup

    @property
    def draws(self) -> int:
        """Draws per chain: the setting, or fewer where ``until`` stopped the run."""
        return self.config.draws if self.converged_at is None else self.converged_at

    @property
    def chunk_size(self) -> int:
        return self.config.chunk_size

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def kernel(self) -> Any:
        return self.config.kernel

    @property
    def chain_method(self) -> str:
        return self.config.chain_method

    def add_counters(self, counters: Any, chains: slice, n: int) -> None:
        """Add one sampling chunk's per-chain counters of ``n`` iterations (this process's
        real chains, the global chains ``chains``)."""
        self.num_gradients += int(np.sum(counters.num_gradients, dtype=np.int64))
        self.num_divergent += int(np.sum(counters.num_divergent, dtype=np.int64))
        self._sum_acceptance += float(np.sum(counters.sum_acceptance, dtype=np.float64))
        self.mean_acceptance = self._sum_acceptance / (self.chains * self.draws)
        rows = self._chain_totals[chains]
        rows[:, 0] += np.asarray(counters.num_divergent)
        rows[:, 1] += np.asarray(counters.num_saturated)
        first, last, s1, s2, d2 = np.asarray(counters.energy, np.float64).T
        # the chunk's sums are relative to its first energy: made absolute in float64
        rows[:, 3] += s1 + n * first
        rows[:, 4] += s2 + 2 * first * s1 + n * first**2
        joined = rows[:, 2] > 0  # the step into the chunk from the previous one's last
        rows[:, 5] += d2 + np.where(joined, (first - rows[:, 6]) ** 2, 0.0)
        rows[:, 6] = last
        rows[:, 2] += n

    @property
    def chain_divergent(self) -> np.ndarray:
        """Divergent transitions after warmup, per chain."""
        return self._chain_totals[:, 0].astype(np.int64)

    @property
    def chain_saturated(self) -> np.ndarray:
        """Transitions after warmup that reached the kernel's max tree depth, per chain."""
        return self._chain_totals[:, 1].astype(np.int64)

    @property
    def num_saturated(self) -> int:
        """Transitions after warmup that reached the kernel's max tree depth."""
        return int(self.chain_saturated.sum())

    @property
    def e_bfmi(self) -> np.ndarray:
        """The energy Bayesian fraction of missing information of each chain's draws, as
        ArviZ's ``bfmi``: ``mean((E_t - E_{t-1})**2) / var(E)`` (``ddof=1``); NaN for a
        kernel that reports no energy or a chain of fewer than two draws."""
        n, s1, s2, d2 = self._chain_totals[:, 2:6].T
        with np.errstate(invalid="ignore", divide="ignore"):
            squares = s2 - s1**2 / n  # (n - 1) var(E)
            value = d2 / squares
        return np.where((n > 1) & (squares > 0), value, np.nan)

    _SUMMED = ("num_gradients_warmup", "num_gradients", "num_divergent", "_sum_acceptance")
    _PERSISTED = ("compile_seconds", "warmup_seconds", "sampling_seconds", *_SUMMED)

    def to_dict(self) -> dict[str, Any]:
        """The running totals a checkpoint carries (JSON-able)."""
        totals = {name: getattr(self, name) for name in self._PERSISTED}
        return {**totals, "_chain_totals": self._chain_totals.tolist()}

    def restore(self, totals: dict[str, Any], chains: slice, main: bool) -> None:
        """Continue from a checkpoint's ``totals``: the run's totals on process 0
        (``main``), the per-chain rows of its own ``chains`` on every process."""
        if main:
            for name in self._PERSISTED:
                setattr(self, name, totals.get(name, 0))
        rows = np.asarray(totals.get("_chain_totals", self._chain_totals), np.float64)
        if rows.shape == self._chain_totals.shape:
            self._chain_totals[chains] = rows[chains]

    def totals(self) -> dict[str, Any]:
        """The totals that add up over processes."""
        return {
            **{name: getattr(self, name) for name in self._SUMMED},
            "_chain_totals": self._chain_totals,
        }

    def merge_totals(self, totals: dict[str, Any]) -> None:
        for name, value in totals.items():
            setattr(self, name, value)
        self.mean_acceptance = self._sum_acceptance / (self.chains * self.draws)

    @property
    def num_chunks(self) -> int:
        return -(-self.draws // self.chunk_size)


class Run:
    """Draws and statistics of a finished (or resumed) run.

    Attributes
    ----------
    draws
        ``{name: ndarray (chain, draw, ...)}`` of the recorded quantities, when
        the sink keeps draws.
    sample_stats
        ``{name: ndarray (chain, draw)}``: ``lp``, ``acceptance_rate``,
        ``step_size``, ``tree_depth``, ``n_steps``, ``diverging``, ``energy``.
    log_likelihood
        ``{name: ndarray (chain, draw, ...)}`` when the model defines it.
    stats, stats_per_chain
        Finalized streaming statistics, merged over chains and per chain.
    info
        :class:`RunInfo`: settings, timings, gradient counts, tuned step sizes.
    """

    def __init__(
        self,
        model: Any,
        sink: Any,
        info: RunInfo,
        statistics: dict[str, Any],
        stats_states: dict[str, Any],
        local_chains: slice | None = None,
        summary_key: str | None = None,
        finalized: dict[str, Any] | None = None,
    ):
        self.model = model
        self.sink = sink
        self.info = info
        #: the chains whose draws this process holds (all of them in a single process)
        self.local_chains = local_chains if local_chains is not None else slice(0, info.chains)
        self._statistics = dict(statistics)
        self._stats_states = stats_states  # {name: state with a leading chain axis}
        self._summary_key = summary_key
        # finalized statistics (host values), by name: computed on first use, or given
        # (the default summary as the run's last reading left it)
        self._finalized: dict[str, Any] = dict(finalized or {})
        self._told = False  # the summary's diagnosis is told once per run

    # -- draws ----------------------------------------------------------------
    def _group(self, group: str) -> dict[str, np.ndarray]:
        data = self.sink.kept()
        if data is None:
            raise AttributeError(
                f"this run kept no draws (sink={type(self.sink).__name__}); use sink='memory' "
                "or a ZarrSink, or read run.stats / run.summary()"
            )
        return data.get(group, {})

    @property
    def draws(self) -> dict[str, np.ndarray]:
        return self._group("posterior")

    @property
    def sample_stats(self) -> dict[str, np.ndarray]:
        return self._group("sample_stats")

    @property
    def log_likelihood(self) -> dict[str, np.ndarray]:
        return self._group("log_likelihood")

    # -- statistics -------------------------------------------------------------
    def _chain_state(self, name: str, chain: int) -> Any:
        return jax.tree.map(lambda x: x[chain], self._stats_states[name])

    @property
    def stats_per_chain(self) -> list[dict[str, Any]]:
        """Finalized statistics of each chain: ``[{name: value}]``, one dict per chain."""
        return [
            {
                n: run_statistics.finalize(s, self._chain_state(n, c))
                for n, s in self._statistics.items()
            }
            for c in range(self.info.chains)
        ]

    @property
    def stats(self) -> dict[str, Any]:
        """Finalized statistics ``{name: value}``, merged over all chains (and hosts)."""
        return {name: self._finalize(name) for name in self._statistics}

    def _finalize(self, name: str) -> Any:
        if name not in self._finalized:
            states = [self._chain_state(name, c) for c in range(self.info.chains)]
            self._finalized[name] = run_statistics.summarize(self._statistics[name], states)
        return self._finalized[name]

    # -- reports ------------------------------------------------------------------
    def to_arviz(self) -> Any:
        """An ``arviz.InferenceData`` with posterior, sample_stats, log_likelihood, observed_data."""
        if isinstance(self.sink, ResumableSink):  # a store on disk: open it lazily
            from sluice.io.store import open_store

            return open_store(self.sink.path)
        from sluice.io.arviz import to_inference_data

        return to_inference_data(self)

    def to_datatree(self) -> Any:
        """The run's groups as an ``xarray.DataTree`` in ArviZ 1.x's layout (what
        ``arviz-base`` reads): ``posterior``, ``sample_stats``, ``log_likelihood``,
        ``observed_data``."""
        if isinstance(self.sink, ResumableSink):
            from sluice.io.store import open_datatree

            return open_datatree(self.sink.path)
        from sluice.io.arviz import to_datatree

        return to_datatree(self)

    def summary(self, *, interval: str = "hdi", round_to: Any = None, source: str = "auto") -> Any:
        """A pandas DataFrame like ``arviz.summary``: mean, sd, interval, MCSE, ESS, R-hat.

        Where the run shows signs of not having explored its posterior, the first
        summary says so in a :class:`~sluice.runtime.diagnostics.DiagnosticWarning`;
        the table's ``attrs["diagnosis"]`` holds :meth:`diagnose`'s result.

        Parameters
        ----------
        interval
            ``"hdi"`` (94% highest-density interval, as ArviZ) or ``"eti"``
            (equal-tailed).
        round_to
            ``None``: ArviZ's default rounding; ``"none"``; or a number of decimals.
        source
            ``"stats"``: from the streaming statistics; ``"draws"``: ArviZ on the
            kept draws; ``"auto"``: the statistics when the run has them.
        """
        import warnings

        round_table = rounding(round_to)
        table = self._summary_table(interval, source)
        diagnosis = self._diagnose(table)  # on the values before rounding
        table = round_table(table)
        table.attrs["diagnosis"] = diagnosis
        if diagnosis and not self._told:
            self._told = True
            warnings.warn(
                f"this run may not have explored its posterior:\n{diagnosis}",
                DiagnosticWarning,
                stacklevel=2,
            )
        return table

    def diagnose(self) -> Diagnosis:
        """The checks of CmdStan's ``diagnose`` and ArviZ on this run (divergences, maximum
        tree depth, E-BFMI, R-hat, bulk and tail ESS; :mod:`sluice.runtime.diagnostics`);
        ``print(run.diagnose())`` is the report. True when any check failed."""
        return self._diagnose(self._summary_table("hdi", "auto"))

    def _diagnose(self, table: Any) -> Diagnosis:
        problems = sampler_problems(self.info)
        problems += convergence_problems(table, self.info.chains)
        return Diagnosis(tuple(problems))

    def _summary_table(self, interval: str, source: str) -> Any:
        """The summary table, unrounded."""
        if source not in ("auto", "stats", "draws"):
            raise ValueError(f"source must be 'auto', 'stats' or 'draws', got {source!r}")
        keeps_draws = self.sink.kept() is not None
        if source == "draws" or (source == "auto" and self._summary_key is None and keeps_draws):
            from sluice.io.arviz import import_arviz

            if interval not in ("hdi", "eti"):
                raise ValueError(f"interval must be 'hdi' or 'eti', got {interval!r}")
            kwargs: dict[str, Any] = {"stat_focus": "median"} if interval == "eti" else {}
            table = import_arviz().summary(self.to_arviz(), round_to="none", **kwargs)
            if self.info.chains >= nested.MIN_CHAINS:  # many short chains: nested R-hat too
                draws = [np.asarray(v, np.float64) for v in self.draws.values()]
                x = np.concatenate([d.reshape(d.shape[0], d.shape[1], -1) for d in draws], -1)
                values = nested.nested_rhat_from_moments(
                    np.full(x.shape[0], x.shape[1]), x.mean(1),
                    x.var(1, ddof=1) if x.shape[1] > 1 else np.zeros(x.shape[::2]),
                    self.info.config.superchains or self.info.chains,
                )  # fmt: skip
                if len(values) == len(table):
                    table["nested_r_hat"] = values
            return table
        if self._summary_key is None:
            raise ValueError(
                "this run computed no summary statistics (default_stats=False)"
                + ("; use source='draws'" if keeps_draws else " and kept no draws")
                + ": sample with default_stats=True"
            )
        from sluice.stats import summary_table

        table = summary_table(self._finalize(self._summary_key), interval=interval, round_to="none")
        if self.info.chains >= nested.MIN_CHAINS:  # many short chains: nested R-hat too
            superchains = self.info.config.superchains or self.info.chains
            states = self._stats_states[self._summary_key]
            table["nested_r_hat"] = nested.nested_rhat(states, superchains)
        return table.rename(index=_arviz_labels(self.model, self._finalize(self._summary_key)))

    def plot(self, path: str | None = None, *, worst: int = 4) -> Any:
        """The convergence picture of every element, from the streamed statistics alone
        (also with ``sink=None``): histograms of R-hat and bulk/tail ESS with their
        thresholds, the ``worst`` elements, and their rank plots where draws are kept.
        See :func:`sluice.runtime.plots.plot_convergence`; returns the Figure."""
        from sluice.io.arviz import import_arviz
        from sluice.runtime.plots import plot_convergence

        kept = self.sink.kept()
        if self._summary_key is not None:
            result = self._finalize(self._summary_key)
        elif kept is not None:  # no streamed statistics: ArviZ's on the kept draws
            az = import_arviz()
            posterior = self.to_arviz().posterior
            ess_bulk, ess_tail = az.ess(posterior, method="bulk"), az.ess(posterior, method="tail")
            r_hat = az.rhat(posterior)
            result = {
                "mean": {n: np.asarray(v.mean(("chain", "draw"))) for n, v in posterior.items()},
                "r_hat": {n: np.asarray(r_hat[n]) for n in posterior},
                "ess_bulk": {n: np.asarray(ess_bulk[n]) for n in posterior},
                "ess_tail": {n: np.asarray(ess_tail[n]) for n in posterior},
            }
        else:
            raise ValueError(
                "run.plot() needs the default statistics or kept draws; this run has "
                "neither (sink=None with default_stats=False)"
            )
        return plot_convergence(
            result,
            chains=self.info.chains,
            draws=None if kept is None else kept.get("posterior"),
            worst=worst,
            path=path,
        )

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Run({i.chains} chains x {i.draws} draws, warmup {i.warmup}, chunk {i.chunk_size}, "
            f"{i.num_divergent} divergent, {i.sampling_seconds:.2f}s sampling)"
        )


def _arviz_labels(model: Any, result: dict[str, Any]) -> dict[str, str]:
    """Row labels with coordinate values where the model names them, as ArviZ writes them."""
    dims = dict(getattr(model, "dims", None) or {})
    coords = dict(getattr(model, "coords", None) or {})
    mapping: dict[str, str] = {}
    for name, value in result["mean"].items():
        shape = np.shape(value)
        names = list(dims.get(name, ()))
        if not shape or not names:
            continue
        values = [coords.get(d) for d in names]
        for index in np.ndindex(*shape):
            parts = [
                str(values[k][i]) if k < len(values) and values[k] is not None else str(i)
                for k, i in enumerate(index)
            ]
            mapping[f"{name}[{', '.join(str(i) for i in index)}]"] = f"{name}[{', '.join(parts)}]"
    return mapping
