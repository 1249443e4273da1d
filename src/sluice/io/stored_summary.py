"""The streamed summary kept in a store: ``sluice summary run.zarr`` without reading draws.

At the end of a run process 0 writes the finalized default statistics to
``run.zarr/summary.sluice`` in the checkpoints' checked layout (numbers only: reading
it runs no code), and the commit record then says the run kept one
(``docs/reliability.md``). It is not a Zarr node: xarray and ArviZ see only the draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from sluice._jax.tree import path_name
from sluice.io.checkpoint import StoreError, read_record, write_record
from sluice.io.durable import atomic_write
from sluice.io.store import ZarrSink

__all__ = ["FILE", "read_summary", "write_summary"]

FILE = "summary.sluice"
FORMAT = "sluice-summary"


def write_summary(store: str | Path, result: dict[str, Any], draws: int) -> None:
    """Write the finalized summary ``result`` (``{output: tree}``) of ``draws`` draws per
    chain into the store at path ``store``, replacing one written before (a resumed
    run's)."""
    names, leaves, settings = [], [], {}
    for output, tree in jax.device_get(result).items():
        flat = jax.tree_util.tree_flatten_with_path(tree)[0]
        if len(flat) == 1 and flat[0][0] == ():  # a setting: quantile levels, HDI mass
            settings[output] = np.asarray(flat[0][1]).tolist()
            continue
        for path, value in flat:
            names.append([output, path_name(path)])
            leaves.append(np.asarray(value))
    meta = {"format": FORMAT, "draws": int(draws), "settings": settings, "names": names}
    atomic_write(Path(store) / FILE, lambda file: write_record(file, meta, leaves))


def read_summary(path: str | Path) -> tuple[dict[str, Any], int] | None:
    """``(result, draws)``: the summary a run streamed into the store at ``path`` and
    the draws per chain it covers; ``None`` where the store holds none (an unfinished
    run's, or one without default statistics). Damage is a :class:`StoreError`."""
    sink = ZarrSink.open_existing(path, writable=False)  # damage raises
    done = sink.draws_done()
    file = Path(path) / FILE
    if not file.exists():
        if sink.kept_summary():
            raise StoreError(
                f"the stored summary {file} is missing (the store's commit record says the "
                "run kept one); resuming the run writes it again"
            )
        return None
    try:
        meta, leaves = read_record(file)
        if meta.get("format") != FORMAT:
            raise ValueError(f"not a sluice summary (format {meta.get('format')!r})")
        result: dict[str, Any] = {}
        for (output, name), values in zip(meta["names"], leaves, strict=True):
            result.setdefault(output, {})[name] = values
        for output, value in meta["settings"].items():
            result[output] = np.asarray(value)
        draws = int(meta["draws"])
    except Exception as error:
        raise StoreError(
            f"the stored summary {file} is damaged: {error}; resuming the run writes it again"
        ) from error
    if draws != done:
        raise StoreError(
            f"the stored summary {file} covers {draws} draws per chain, the store's "
            f"checkpoint {done}: it does not belong to these draws"
        )
    return result, draws
