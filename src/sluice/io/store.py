"""Draws on disk: a Zarr store that grows chunk by chunk and resumes exactly.

Layout of a store (Zarr format 3, readable by xarray as a DataTree)::

    run.zarr/
      zarr.json                  root attributes: {"sluice": {format, version, description, ...}}
      posterior/<name>           (chain, draw, ...) one Zarr chunk per sluice chunk
      sample_stats/<name>        (chain, draw)
      log_likelihood/<name>      (chain, draw, ...)
      observed_data/<name>
      sluice-checkpoint-p<P>-<parity>.ckpt  process P's chains' state after a chunk
      sluice-commit.json                     which parity is complete, and where

After every chunk each process writes its chains' draws (Zarr chunks along
chains are one process's block, so writes never collide), then its state to
the checkpoint file of the current parity (0, 1, 0, ...). After a barrier,
process 0 replaces the commit record atomically (temporary file, flush,
rename). A crash at any moment leaves the committed parity's files intact;
draws written past the committed iteration are written again on resume.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from sluice.io.arviz import dim_names
from sluice.io.checkpoint import FORMAT, VERSION, Checkpoint, StoreError, atomic_write
from sluice.io.sinks import Layout

__all__ = ["COMMIT", "StoreError", "StoreWriteError", "ZarrSink", "open_store"]

COMMIT = "sluice-commit.json"


class StoreWriteError(OSError):
    """Writing a chunk failed (disk full, permissions...); the store stays resumable."""


@contextlib.contextmanager
def _quiet_zarr() -> Any:
    """Zarr warns about the checkpoint, a file that is not part of the hierarchy."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component of a Zarr")
        yield


def _is_sluice_store(path: Path) -> bool:
    meta = path / "zarr.json"
    if not meta.is_file():
        return False
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except (OSError, ValueError):
        return False
    return attrs.get("sluice", {}).get("format") == FORMAT


def _checkpoint_name(process: int, parity: int) -> str:
    return f"sluice-checkpoint-p{process}-{parity}.ckpt"


class ZarrSink:
    """Stream draws, sample stats and log-likelihood to a Zarr store, with checkpoints.

    Parameters
    ----------
    path
        Directory of the store (created). An existing sluice store is never
        overwritten unless ``overwrite=True``; a directory that is not a
        sluice store is never overwritten.
    overwrite
        Replace an existing sluice store at ``path``.
    compressors
        Zarr compressors for the draws (default: none; float draws compress
        poorly and compression costs time on the host).
    model_source
        Where the model comes from (set by ``sluice sample FILE.py``), so that
        ``sluice resume`` can reload it.

    Examples
    --------
    >>> import tempfile, jax.numpy as jnp, sluice
    >>> path = tempfile.mkdtemp() + "/run.zarr"
    >>> run = sluice.sample(lambda x: -0.5 * jnp.sum(x**2), init=jnp.zeros(2), chains=2,
    ...                     warmup=50, draws=40, chunk_size=10, sink=sluice.ZarrSink(path),
    ...                     progress=False)
    >>> sluice.open(path).posterior["x"].shape
    (2, 40, 2)
    """

    keeps_draws = True
    _local: tuple[int, int] = (0, 0)

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        overwrite: bool = False,
        compressors: Any = None,
        model_source: dict[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.overwrite = overwrite
        self.compressors = compressors
        self.model_source = model_source
        self._root: Any = None
        self._arrays: dict[str, dict[str, Any]] = {}

    # -- creating --------------------------------------------------------------
    def open(self, layout: Layout, description: dict[str, Any]) -> None:
        """Create the store (process 0), or attach to the one process 0 created."""
        if layout.process_index > 0:
            self._attach_created(layout)
        else:
            self._create(layout, description)

    def _attach_created(self, layout: Layout) -> None:
        fresh = ZarrSink.open_existing(self.path)
        self._root, self._arrays = fresh._root, fresh._arrays
        self.attach(layout)

    def attach(self, layout: Layout) -> None:
        """Write this process's chains (``layout.local_chains``) of an existing store."""
        self._local = layout.local_range

    def _create(self, layout: Layout, description: dict[str, Any]) -> None:
        import zarr

        if self._root is not None:  # reopened by resume() with no checkpoint: start afresh
            self.overwrite = True
        if self.path.exists() and any(self.path.iterdir()):
            if not _is_sluice_store(self.path):
                raise FileExistsError(
                    f"{self.path} exists and is not a sluice store; refusing to overwrite it"
                )
            if not self.overwrite:
                raise FileExistsError(
                    f"{self.path} already holds a sluice run ({self._state()}); continue it with "
                    f"sluice.resume({str(self.path)!r}) (CLI: sluice resume), or replace it with "
                    "ZarrSink(..., overwrite=True) (CLI: --overwrite)"
                )
            # Move it aside atomically before deleting it: a kill at any moment
            # leaves either the old store or none at `path`, never half of one.
            doomed = self.path.with_name(f"{self.path.name}.deleting-{uuid.uuid4().hex[:8]}")
            os.replace(self.path, doomed)
            shutil.rmtree(doomed)
        draw_chunk = min(description["config"]["chunk_size"], layout.num_draws)
        chain_chunk = min(layout.chains_per_process or layout.chains, layout.chains)
        # The root group is created with its sluice attributes in one write: a
        # run killed while creating arrays leaves a store that resume() recreates.
        root = zarr.open_group(
            self.path,
            mode="w",
            zarr_format=3,
            attributes={
                "sluice": {
                    "format": FORMAT,
                    "version": VERSION,
                    "description": description,
                    "model_source": self.model_source,
                }
            },
        )
        for group, names in layout.groups.items():
            g = root.create_group(group)
            self._coords(g, layout.chains, layout.num_draws)
            self._arrays[group] = {}
            for name, (shape, dtype) in names.items():
                fill = np.nan if np.issubdtype(dtype, np.floating) else 0
                self._arrays[group][name] = g.create_array(
                    name,
                    shape=(layout.chains, layout.num_draws, *shape),
                    chunks=(chain_chunk, draw_chunk, *shape),
                    dtype=dtype,
                    fill_value=fill,
                    compressors=self.compressors,
                    dimension_names=("chain", "draw", *dim_names(name, len(shape), layout.dims)),
                )
        for group, values in (layout.constant_groups or {}).items():
            g = root.create_group(group)
            for name, value in values.items():
                value = np.asarray(value)
                g.create_array(
                    name, data=value, dimension_names=dim_names(name, value.ndim, layout.dims)
                )
        self._write_coords(root, layout)
        self._root = root
        self.attach(layout)

    @staticmethod
    def _write_coords(root: Any, layout: Layout) -> None:
        """The model's coordinate values (e.g. school names) in every group using their dim."""
        for dim, values in (layout.coords or {}).items():
            values = np.asarray(values)
            for _, group in root.groups():
                used = any(dim in (a.metadata.dimension_names or ()) for _, a in group.arrays())
                if used and dim not in group:
                    if values.dtype.kind in "UO":  # variable-length text has a Zarr v3 spec
                        text = group.create_array(
                            dim, shape=values.shape, dtype=str, dimension_names=(dim,)
                        )
                        text[:] = values.astype(object)
                    else:
                        group.create_array(dim, data=values, dimension_names=(dim,))

    @staticmethod
    def _coords(group: Any, chains: int, draws: int) -> None:
        for name, size in (("chain", chains), ("draw", draws)):
            group.create_array(name, data=np.arange(size, dtype=np.int64), dimension_names=(name,))

    # -- writing ---------------------------------------------------------------
    def write(self, start: int, chunk: dict[str, dict[str, np.ndarray]]) -> None:
        n = 0
        first, last = self._local
        try:
            for group, names in chunk.items():
                for name, values in names.items():
                    n = values.shape[1]
                    self._arrays[group][name][first:last, start : start + n] = values
        except OSError as error:
            raise StoreWriteError(
                error.errno,
                f"could not write draws {start}..{start + n - 1} to {self.path}: "
                f"{error.strerror or error}. The store is resumable from its last complete chunk: "
                f"sluice.resume({str(self.path)!r})",
            ) from error

    def save_checkpoint(self, checkpoint: Checkpoint, process: int = 0, parity: int = 0) -> None:
        """Write this process's checkpoint file of the given parity (atomically)."""
        try:
            atomic_write(self.path / _checkpoint_name(process, parity), checkpoint.write_to)
        except OSError as error:
            raise StoreWriteError(
                error.errno,
                f"could not write the checkpoint of {self.path}: "
                f"{error.strerror or error}. The previous checkpoint is intact: "
                f"sluice.resume({str(self.path)!r}) continues from it",
            ) from error

    def commit(self, checkpoint: Checkpoint, parity: int, process_count: int) -> None:
        """Declare the checkpoint files of ``parity`` complete (process 0, after a barrier)."""
        record = {
            "format": FORMAT,
            "next_iteration": checkpoint.next_iteration,
            "parity": parity,
            "process_count": process_count,
            "sequence": checkpoint.sequence,
        }
        try:
            atomic_write(self.path / COMMIT, json.dumps(record).encode())
        except OSError as error:
            raise StoreWriteError(
                error.errno,
                f"could not commit the checkpoint of {self.path}: "
                f"{error.strerror or error}. The previous checkpoint is intact: "
                f"sluice.resume({str(self.path)!r}) continues from it",
            ) from error

    def close(self) -> None:
        pass

    # -- reopening -------------------------------------------------------------
    @classmethod
    def open_existing(cls, path: str | os.PathLike) -> ZarrSink:
        """Reopen a store to continue writing it (see :func:`sluice.resume`)."""
        import zarr

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no store at {path}")
        if not _is_sluice_store(path):
            raise StoreError(f"{path} is not a sluice store (no sluice metadata in zarr.json)")
        root = zarr.open_group(path, mode="r+", zarr_format=3)
        meta = root.attrs["sluice"]
        if meta.get("version") != VERSION:
            raise StoreError(
                f"{path} was written by store format {meta.get('version')}, not {VERSION}"
            )
        sink = cls(path, model_source=meta.get("model_source"))
        sink._root = root
        layout_groups = ("posterior", "sample_stats", "log_likelihood")
        try:
            with _quiet_zarr():
                sink._arrays = {
                    group: {n: a for n, a in root[group].arrays() if n not in ("chain", "draw")}
                    for group in layout_groups
                    if group in root
                }
        except Exception as error:
            raise StoreError(f"{path} is damaged: {error}") from error
        if "posterior" not in sink._arrays and (path / COMMIT).exists():
            raise StoreError(f"{path} is damaged: it has a checkpoint but no posterior group")
        return sink

    def description(self) -> dict[str, Any]:
        return self._root.attrs["sluice"]["description"]

    def _commit_record(self) -> dict[str, Any] | None:
        path = self.path / COMMIT
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise StoreError(
                f"the commit record {path} is damaged and cannot be read: {error}"
            ) from error
        if record.get("format") != FORMAT:
            raise StoreError(f"{path} is not a sluice commit record")
        return record

    def load_checkpoint(self) -> Checkpoint | None:
        """The last committed checkpoint, all processes' chain blocks concatenated in order;
        ``None`` if the run stopped before its first chunk ended."""
        record = self._commit_record()
        if record is None:
            return None
        parts = [
            Checkpoint.from_file(self.path / _checkpoint_name(p, record["parity"]))
            for p in range(record["process_count"])
        ]
        if any(part.sequence != record["sequence"] for part in parts):
            raise StoreError(f"the checkpoint files of {self.path} disagree with its commit record")
        first = parts[0]
        carry = [np.concatenate(leaves) for leaves in zip(*(p.carry for p in parts), strict=True)]
        totals = dict(first.totals)
        for part in parts[1:]:
            for name in (
                "num_gradients_warmup",
                "num_gradients",
                "num_divergent",
                "_sum_acceptance",
            ):
                totals[name] += part.totals[name]
        return Checkpoint(
            first.config,
            record["next_iteration"],
            first.stats_ready,
            carry,
            totals,
            record["sequence"],
        )

    def _state(self) -> str:
        try:
            total = json.loads((self.path / "zarr.json").read_text())["attributes"]["sluice"][
                "description"
            ]["config"]["draws"]
        except (OSError, ValueError, KeyError):
            return "unreadable settings"
        done = self.draws_done()
        return "complete" if done == total else f"{done} of {total} draws per chain so far"

    def _draws_done_or_none(self) -> int | None:
        try:
            record = self._commit_record()
            warmup = json.loads((self.path / "zarr.json").read_text())["attributes"]["sluice"][
                "description"
            ]["config"]["warmup"]
        except (StoreError, OSError, ValueError, KeyError):
            return 0
        return 0 if record is None else max(0, record["next_iteration"] - warmup)

    def draws_done(self) -> int:
        """Draws per chain written and covered by the checkpoint."""
        return self._draws_done_or_none() or 0

    def check_compatible(self, description: dict[str, Any]) -> None:
        """Raise :class:`StoreError` naming the first setting or model property that differs."""
        stored = self.description()
        what_model = {
            "dim": "the model's number of parameters",
            "dtype": "the model's parameter dtype",
            "draws": "the names or shapes of the recorded quantities",
            "program": "the model's log-density, transform or log-likelihood program",
            "data": "the model's data values",
            "name": "the model's name",
        }
        checks = [("config", key, f"the setting {key!r}") for key in sorted(stored["config"])]
        checks += [("model", key, what) for key, what in what_model.items()]
        for section, key, what in checks:
            old = stored[section].get(key)
            new = json.loads(json.dumps(description[section].get(key)))
            if old != new:
                detail = "" if key in ("program", "data") else f" (stored {old!r}, now {new!r})"
                raise StoreError(
                    f"cannot resume {self.path}: {what} differs from the run that wrote it{detail}"
                )

    def kept(self) -> dict[str, dict[str, Any]]:
        """``{group: {name: zarr.Array}}``: arrays index like NumPy and read lazily."""
        return self._arrays


def open_store(path: str | os.PathLike, *, partial: bool = True) -> Any:
    """Open a store as an ``arviz.InferenceData``, lazily (no draws are read yet).

    An unfinished run's store is cut to the draws covered by its checkpoint
    (``partial=False`` refuses it instead).
    """
    import xarray as xr

    from sluice.io.arviz import import_arviz

    path = Path(path)
    if not _is_sluice_store(path):
        raise StoreError(f"{path} is not a sluice store (no sluice metadata in zarr.json)")
    sink = ZarrSink.open_existing(path)
    total = sink.description()["config"]["draws"]
    done = sink.draws_done()
    if done < total and not partial:
        raise StoreError(f"{path} holds an unfinished run ({done}/{total} draws per chain)")
    with _quiet_zarr():
        tree = xr.open_datatree(path, engine="zarr", consolidated=False, zarr_format=3)
    if done < total:
        tree = tree.isel(draw=slice(0, done), missing_dims="ignore")
    return import_arviz().InferenceData.from_datatree(tree)
