"""Progress bars for the host loop (advanced once per chunk)."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["ChunkProgress"]


class ChunkProgress:
    """A bar over iterations per chain, advanced per chunk, showing chunk k/n and draws/s.

    Quiet when ``enabled`` is false or stderr is not a terminal (tqdm's rule).
    """

    def __init__(
        self, desc: str, total: int, chunk_size: int, chains: int, enabled: bool, initial: int = 0
    ) -> None:
        self.total = total
        self.num_chunks = -(-total // chunk_size)
        self.chains = chains
        self.chunks_done = -(-initial // chunk_size)  # resumed runs start part-way
        self.initial = initial
        self.start = time.perf_counter()
        self._bar: Any = None
        if enabled and total > 0:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit="it",
                file=sys.stderr,
                disable=None,
                dynamic_ncols=True,
                leave=True,
            )

    def advance(self, n: int) -> None:
        self.chunks_done += 1
        if self._bar is None:
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        done = self._bar.n + n - self.initial
        self._bar.set_postfix_str(
            f"chunk {self.chunks_done}/{self.num_chunks}, {done * self.chains / elapsed:,.0f} draws/s",
            refresh=False,
        )
        self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> ChunkProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
