"""The settings of a run, defined once: :class:`RunConfig`.

``sluice.sample`` builds one from its arguments (validated before anything is
traced); the plan resolves what the user left to sluice; the resolved config is
what a store records (:meth:`RunConfig.to_json`), what ``sluice.resume`` reads
back (:meth:`RunConfig.from_json`) and what ``run.info.config`` holds.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sluice._checks import check_count, check_int
from sluice.mcmc.kernels import get_kernel, kernel_from_config
from sluice.mcmc.protocol import Kernel
from sluice.runtime.until import Converged

__all__ = ["CHAIN_METHODS", "RunConfig"]

CHAIN_METHODS = ("auto", "vectorized", "sequential")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Every setting of an MCMC run that its draws depend on.

    Attributes
    ----------
    chains, warmup, draws, seed, until, superchains
        As in :func:`sluice.sample`.
    chunk_size, num_chunks, chain_method, default_stats
        As in :func:`sluice.sample`; resolved, ``chunk_size`` is an int,
        ``num_chunks`` is ``None`` and the others are chosen.
    kernel
        A kernel object (``"nuts"`` and ``"hmc"`` are resolved to
        :class:`~sluice.NUTS` and :class:`~sluice.HMC`).
    statistics
        Names of the run's streaming statistics (set by the plan).
    """

    chains: int = 4
    warmup: int = 1000
    draws: int = 1000
    chunk_size: int | str | None = None
    num_chunks: int | None = None
    kernel: Any = "nuts"
    chain_method: str = "auto"
    seed: int = 0
    default_stats: bool | str = "auto"
    statistics: tuple[str, ...] = ()
    until: Converged | None = None
    superchains: int | None = None

    def __post_init__(self) -> None:
        check_count("chains", self.chains)
        check_count("draws", self.draws)
        check_count("warmup", self.warmup, allow_zero=True)
        check_int("seed", self.seed)
        if self.chain_method not in CHAIN_METHODS:
            raise ValueError(
                f"chain_method must be one of {CHAIN_METHODS}, got {self.chain_method!r}"
            )
        if self.chunk_size is not None and self.num_chunks is not None:
            raise ValueError(
                f"give chunk_size or num_chunks, not both (got chunk_size={self.chunk_size!r}, "
                f"num_chunks={self.num_chunks!r})"
            )
        if self.num_chunks is not None:
            check_count("num_chunks", self.num_chunks)
        if self.chunk_size is not None and self.chunk_size != "auto":
            check_count("chunk_size", self.chunk_size)
        if not (isinstance(self.default_stats, bool) or self.default_stats == "auto"):
            raise TypeError(
                f"default_stats must be True, False or 'auto', got {self.default_stats!r}"
            )
        if self.superchains is not None:
            check_count("superchains", self.superchains)
            if self.superchains < 2 or self.chains % self.superchains:
                raise ValueError(
                    f"superchains must be at least 2 and divide chains={self.chains}, "
                    f"got superchains={self.superchains!r}"
                )
        if self.until is not None and not isinstance(self.until, Converged):
            raise TypeError(f"until must be sluice.converged(...) or None, got {self.until!r}")
        if not isinstance(self.kernel, Kernel):
            object.__setattr__(self, "kernel", get_kernel(self.kernel))
        if hasattr(self.kernel, "for_warmup"):  # NumPyro's: its schedule needs the length
            object.__setattr__(self, "kernel", self.kernel.for_warmup(int(self.warmup)))
        for name in ("chains", "draws", "warmup", "seed"):  # numpy integers become ints
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "statistics", tuple(self.statistics))

    @property
    def resolved(self) -> bool:
        """Whether nothing is left to choose (as a store records it)."""
        return (
            isinstance(self.chunk_size, int)
            and self.chain_method != "auto"
            and isinstance(self.default_stats, bool)
        )

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The JSON-able form a store records (kernel as its ``to_config()``)."""
        out = {  # num_chunks is resolved into chunk_size
            f.name: self.jsonable(f.name, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "num_chunks"
        }
        return json.loads(json.dumps(out))

    @classmethod
    def from_json(cls, data: dict[str, Any], kernel: Kernel | None = None) -> RunConfig:
        """The inverse of :meth:`to_json` (unknown keys are an error naming them).

        A kernel from another library (BlackJAX's, NumPyro's) is code, which a
        store never names: ``kernel`` is that kernel, checked against the record.
        """
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"a run config has no setting(s) {unknown}")
        recorded = data["kernel"]
        if kernel is None and recorded.get("external"):
            raise ValueError(
                f"the run used the kernel {recorded['name']!r} from another library, which a "
                "store does not hold as code: pass it again, "
                "sluice.resume(path, model, kernel=...)"
            )
        if kernel is not None:
            if hasattr(kernel, "for_warmup"):
                kernel = kernel.for_warmup(int(data["warmup"]))
            if kernel.to_config() != recorded:
                raise ValueError(
                    f"the run used the kernel {recorded!r}, not {kernel.to_config()!r}"
                )
            data["kernel"] = kernel
        else:
            if (
                recorded.get("name") in ("nuts", "hmc")
                and "divergent_target_accept" not in recorded
            ):
                # written before the warmup raised its target after divergences: it did not
                recorded = {**recorded, "divergent_target_accept": None}
            data["kernel"] = kernel_from_config(recorded)
        data["statistics"] = tuple(data.get("statistics", ()))
        data["until"] = Converged.from_json(data.get("until"))
        return cls(**data)

    @staticmethod
    def jsonable(name: str, value: Any) -> Any:
        """``value`` of setting ``name`` as it reads back from a store's JSON."""
        if name == "kernel":
            return get_kernel(value).to_config()
        if name == "statistics":
            return sorted(value)
        if name == "until":
            return None if value is None else value.to_json()
        return json.loads(json.dumps(value))
