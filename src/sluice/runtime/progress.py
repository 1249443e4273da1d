"""Progress of the host loop, updated once per chunk, with what the chunk measured.

On a terminal or in a notebook: a bar (tqdm) per phase, whose postfix shows the
chunk, draws per second and the sampler's state; elsewhere one line per chunk on
stderr with the same fields. Silent with ``progress=False``, and on every process
but process 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ChunkProgress", "format_fields"]


def _interactive(stream: Any) -> bool:
    """A terminal, or a Jupyter kernel's output stream."""
    if getattr(stream, "isatty", lambda: False)():
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


# the progress line's fields, in order: (key, format)
_FIELDS = (
    ("elbo", "ELBO {:.4g}"),
    ("divergent", "{:,} divergent"),
    ("saturated", "{:,} at max depth"),
    ("step_size", "step {:.3g}"),
    ("target_accept", "target {:.2f}"),  # where the warmup raised it (divergences)
    ("grads_per_draw", "{:.1f} grads/draw"),
    ("max_r_hat", "max R-hat {:.3f}"),
    ("min_ess", "min ESS {:,.0f}"),
    ("max_mcse", "max MCSE {:.3g}"),
)


def format_fields(fields: dict[str, Any]) -> str:
    """``3 divergent, step 0.42, 7.1 grads/draw, max R-hat 1.003, min ESS 812`` (a count of
    transitions at the maximum tree depth only where there are some)."""
    return ", ".join(
        form.format(fields[k])
        for k, form in _FIELDS
        if fields.get(k) is not None and not (k == "saturated" and not fields[k])
    )


class ChunkProgress:
    """Progress over iterations per chain, advanced per chunk.

    Parameters
    ----------
    desc, total, chunk_size, chains
        The phase's label, its iterations per chain, the chunk size and the
        number of chains (draws per second count every chain).
    enabled
        Show anything at all.
    initial
        Iterations already done (a resumed run).
    bounds
        Where the phase's chunks end, when not every ``chunk_size`` iterations
        (the warmup's also end at its adaptation windows' ends).
    stream
        Where to write (default stderr); a bar when it is a terminal or a
        notebook, lines otherwise.
    """

    def __init__(
        self,
        desc: str,
        total: int,
        chunk_size: int,
        chains: int,
        enabled: bool,
        initial: int = 0,
        stream: Any = None,
        bounds: Sequence[int] | None = None,
    ) -> None:
        self.desc = desc
        self.total = total
        if bounds is None:
            bounds = [*range(chunk_size, total, chunk_size), total] if total > 0 else []
        self.num_chunks = len(bounds)
        self.chains = chains
        self.chunks_done = sum(b <= initial for b in bounds)  # resumed runs start part-way
        self.initial = initial
        self.done = initial
        self.start = time.perf_counter()
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self._bar: Any = None
        if self.enabled and _interactive(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit="it",
                file=self.stream,
                initial=initial,
                dynamic_ncols=True,
                leave=True,
            )

    def advance(self, n: int, **fields: Any) -> None:
        """``n`` more iterations per chain; ``fields`` for :func:`format_fields`."""
        self.chunks_done += 1
        self.done += n
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = (self.done - self.initial) * self.chains / elapsed
        head = f"chunk {self.chunks_done}/{self.num_chunks}, {rate:,.0f} draws/s"
        extra = format_fields(fields)
        text = f"{head}, {extra}" if extra else head
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(n)
        else:
            print(f"{self.desc}: {self.done}/{self.total} ({text})", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> ChunkProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
