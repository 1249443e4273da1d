"""The result of :func:`sluice.sample`: draws (if kept), statistics, summary, InferenceData."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

__all__ = ["Run", "RunInfo"]


@dataclasses.dataclass
class RunInfo:
    """Settings, timings and sampler totals of a run."""

    chains: int
    warmup: int
    draws: int
    chunk_size: int
    seed: int
    kernel: Any
    chain_method: str
    num_devices: int
    compile_seconds: float = 0.0  # ahead-of-time compilation in this run (0 when reused)
    warmup_seconds: float = 0.0  # initialisation and warmup, without compilation
    sampling_seconds: float = 0.0  # drawing and writing, without compilation
    total_seconds: float = 0.0
    num_gradients_warmup: int = 0
    num_gradients: int = 0
    num_divergent: int = 0
    mean_acceptance: float = float("nan")
    step_size: np.ndarray | None = None
    inverse_mass_matrix: np.ndarray | None = None
    _sum_acceptance: float = 0.0

    def add_counters(self, counters: Any) -> None:
        """Add one chunk's per-chain counters (this process's real chains)."""
        self.num_gradients += int(np.sum(counters.num_gradients, dtype=np.int64))
        self.num_divergent += int(np.sum(counters.num_divergent, dtype=np.int64))
        self._sum_acceptance += float(np.sum(counters.sum_acceptance, dtype=np.float64))
        self.mean_acceptance = self._sum_acceptance / (self.chains * self.draws)

    _PERSISTED = (
        "compile_seconds",
        "warmup_seconds",
        "sampling_seconds",
        "num_gradients_warmup",
        "num_gradients",
        "num_divergent",
        "_sum_acceptance",
    )
    _SUMMED = ("num_gradients_warmup", "num_gradients", "num_divergent", "_sum_acceptance")

    def to_dict(self) -> dict[str, Any]:
        """The running totals a checkpoint carries (JSON-able)."""
        return {name: getattr(self, name) for name in self._PERSISTED}

    def restore(self, totals: dict[str, Any]) -> None:
        for name in self._PERSISTED:
            setattr(self, name, totals.get(name, 0))

    def totals(self) -> dict[str, Any]:
        """The totals that add up over processes."""
        return {name: getattr(self, name) for name in self._SUMMED}

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
        statistic: Any,
        stats_states: Any,
        local_chains: slice | None = None,
    ):
        self.model = model
        self.sink = sink
        self.info = info
        #: the chains whose draws this process holds (all of them in a single process)
        self.local_chains = local_chains if local_chains is not None else slice(0, info.chains)
        self._statistic = statistic
        self._stats_states = stats_states

    # -- draws ----------------------------------------------------------------
    def _group(self, group: str) -> dict[str, np.ndarray]:
        data = getattr(self.sink, "data", None)
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
    @property
    def stats_per_chain(self) -> list[Any]:
        """Finalized statistics of each chain."""
        finalize = jax.jit(self._statistic.finalize)
        return [
            jax.device_get(finalize(jax.tree.map(lambda x, c=c: x[c], self._stats_states)))
            for c in range(self.info.chains)
        ]

    @property
    def stats(self) -> Any:
        """Finalized statistics, merged over all chains."""
        return jax.device_get(jax.jit(self._statistic.finalize)(self.merged_stats_state()))

    def merged_stats_state(self) -> Any:
        """The statistic state of all chains merged (a pairwise tree of merges)."""
        merge = jax.jit(self._statistic.merge)
        states = [
            jax.tree.map(lambda x, c=c: x[c], self._stats_states) for c in range(self.info.chains)
        ]
        while len(states) > 1:
            merged = [merge(a, b) for a, b in zip(states[::2], states[1::2], strict=False)]
            states = merged + ([states[-1]] if len(states) % 2 else [])
        return states[0]

    # -- reports ------------------------------------------------------------------
    def to_arviz(self) -> Any:
        """An ``arviz.InferenceData`` with posterior, sample_stats, log_likelihood, observed_data."""
        if hasattr(self.sink, "path"):  # a store on disk: open it lazily
            from sluice.store import open_store

            return open_store(self.sink.path)
        from sluice.arviz import to_inference_data

        return to_inference_data(self)

    def summary(self, **kwargs: Any) -> Any:
        """A pandas DataFrame like ``arviz.summary``: mean, sd, hdi, mcse, ess, r_hat."""
        from sluice.arviz import import_arviz

        return import_arviz().summary(self.to_arviz(), **kwargs)

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Run({i.chains} chains x {i.draws} draws, warmup {i.warmup}, chunk {i.chunk_size}, "
            f"{i.num_divergent} divergent, {i.sampling_seconds:.2f}s sampling)"
        )
