"""Draws on disk: a Zarr store that grows chunk by chunk, resumes exactly, and runs no code.

Along ``chain`` a Zarr chunk is one chain (one process's block beyond
:data:`ONE_CHAIN_CHUNKS_UP_TO` chains), along ``draw`` one sluice chunk, so writes
never share a Zarr chunk; after every chunk the draws are synced and a
checkpoint committed, and every byte a reader trusts is checked
(:mod:`sluice.io.integrity`). docs/architecture.md ("Sinks, stores and
checkpoints") gives the store's layout and its commit protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import uuid
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from sluice._version import __version__
from sluice.io.arviz import dim_names
from sluice.io.checkpoint import FORMAT, VERSION, Checkpoint, StoreError
from sluice.io.durable import atomic_write, fsync_directory, fsync_file, sync_chunks, sync_tree
from sluice.io.leftovers import (
    HALF_CREATED,
    half_created,
    leftovers,
    prepare_for_writing,
    remove_leftovers,
    remove_store,
)
from sluice.io.leftovers import is_sluice_store as _is_sluice_store
from sluice.io.lock import StoreLock, StoreLockedError
from sluice.io.sinks import Layout

__all__ = [
    "COMMIT",
    "StoreError",
    "StoreLockedError",
    "StoreWriteError",
    "ZarrSink",
    "open_datatree",
    "open_store",
]

COMMIT = "sluice-commit.json"
READABLE_VERSIONS = (1, 2, 3)  # store formats open_store reads (1: .npz checkpoints)
CHECKED_FROM = 3  # the first store format whose chunks and metadata carry checksums
LAYOUT_GROUPS = ("posterior", "sample_stats", "log_likelihood")  # laid out (chain, draw, ...)
# Checkpoints of these sluice versions restore into this one (a test writes and
# restores each: tests/io/test_reliability.py).
COMPATIBLE_CHECKPOINTS = (__version__,)
# Up to this many chains a Zarr chunk holds one chain: any process layout then writes
# disjoint chunks. Beyond it, one process's block (fewer files).
ONE_CHAIN_CHUNKS_UP_TO = 64
_INTACT = "The previous checkpoint is intact: {resume} continues from it"
# the running totals of a checkpoint that add up over the processes' blocks
_SUMMED_TOTALS = ("num_gradients_warmup", "num_gradients", "num_divergent", "_sum_acceptance")


class StoreWriteError(OSError):
    """Writing a chunk failed (disk full, permissions...); the store stays resumable."""


@contextlib.contextmanager
def _quiet_zarr() -> Any:
    """Zarr warns about the checkpoint, a file that is not part of the hierarchy."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component of a Zarr")
        yield


def _checkpoint_name(process: int, parity: int) -> str:
    return f"sluice-checkpoint-p{process}-{parity}.ckpt"


class ZarrSink:
    """Stream draws, sample stats and log-likelihood to a Zarr store, with checkpoints.

    Parameters
    ----------
    path, overwrite
        Directory of the store (created). An existing sluice store is replaced
        only with ``overwrite=True``; a directory that is not one, never.
    compressors
        Zarr compressors for the draws (default: none; float draws compress
        poorly).
    model_source
        A record of the model script's path and SHA-256 (set by ``sluice sample
        FILE.py``), which ``sluice resume --model`` checks.
    durable
        Sync every chunk's draws to disk before its checkpoint is committed
        (default), so that a power cut loses nothing committed; ``False`` is
        faster on slow disks.

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
        durable: bool = True,
    ) -> None:
        self.path = Path(path)
        self.overwrite = overwrite
        self.compressors = compressors
        self.model_source = model_source
        self.durable = durable
        self._root: Any = None
        self._arrays: dict[str, dict[str, Any]] = {}
        self._manifest: dict[str, list[int]] | None = None  # of the metadata (integrity)
        self._lock = StoreLock(self.path)

    # -- creating --------------------------------------------------------------
    def open(self, layout: Layout, description: dict[str, Any]) -> None:
        """Create the store (process 0), or attach to the one process 0 created."""
        if layout.process_index > 0:
            self._reopen()
            self.attach(layout)
        else:
            self._create(layout, description)

    def _reopen(self) -> None:
        fresh = ZarrSink.open_existing(self.path)
        self._root, self._arrays = fresh._root, fresh._arrays

    def attach(self, layout: Layout) -> None:
        """Write this process's chains (``layout.local_chains``) of an existing store.

        Refused when they would share a Zarr chunk with another process's chains
        (a resume on a layout whose blocks do not align with the store's chunks).
        """
        first, last = layout.local_range
        arrays = [a for names in self._arrays.values() for a in names.values()]
        c = arrays[0].chunks[0] if arrays else 1  # chains per Zarr chunk
        if first % c or (last % c and last != layout.chains):
            raise StoreError(
                f"cannot write {self.path} from this process layout: the store was "
                f"created with Zarr chunks of {c} chains (the creating run's blocks), and "
                f"process {layout.process_index} of this run writes chains "
                f"[{first}, {last}), which would share a chunk with another process. "
                f"Resume it with the layout it was created with ({c} chain slots per "
                "process), or on one process"
            )
        if layout.process_index == 0:
            self._lock.acquire()
            prepare_for_writing(Path(os.path.realpath(self.path)))
        self._local = (first, last)

    def _create(self, layout: Layout, description: dict[str, Any]) -> None:
        if self._root is not None:  # reopened by resume() with no checkpoint: start afresh
            self.overwrite = True
        self._lock.acquire()  # before looking: a live writer's store is never replaced
        real = Path(os.path.realpath(self.path))
        remove_leftovers(real)
        replaces = self._refuse_or_replace(real)
        # The new store is built beside its place and renamed into it: a kill before
        # that rename leaves no store, only a staging folder the next writer removes.
        staging = real.with_name(f".{real.name}.creating-{uuid.uuid4().hex[:12]}")
        self._build(staging, layout, description)
        sync_tree(staging)  # the empty store is on disk before any draw
        if replaces:  # moved aside first: a kill leaves the old store, or no store
            doomed = real.with_name(f".{real.name}.deleting-{uuid.uuid4().hex[:12]}")
            os.replace(real, doomed)
        os.replace(staging, real)  # onto nothing, or onto an empty folder
        fsync_directory(real.parent)
        if replaces:
            remove_store(doomed)
        self._reopen()
        self._manifest = _integrity().metadata_digests(self.path)  # what commits record
        self.attach(layout)

    def _refuse_or_replace(self, real: Path) -> bool:
        """Whether a store at ``real`` is to be replaced; raises where it must stay."""
        if not real.exists() or (real.is_dir() and not any(real.iterdir())):
            return False
        if _is_sluice_store(real):
            if self.overwrite:
                return True
            raise FileExistsError(
                f"{self.path} already holds a sluice run ({self._state()}); continue it with "
                f"sluice.resume({str(self.path)!r}) (CLI: sluice resume), or replace it with "
                "ZarrSink(..., overwrite=True) (CLI: --overwrite)"
            )
        if half_created(real):
            if self.overwrite:
                return True
            raise FileExistsError(f"{self.path} {HALF_CREATED}")
        raise FileExistsError(
            f"{self.path} exists and is not a sluice store; refusing to overwrite it"
        )

    def _build(self, staging: Path, layout: Layout, description: dict[str, Any]) -> None:
        """Create the store's hierarchy, with its empty arrays, at ``staging``."""
        import jax
        import zarr

        draw_chunk = min(layout.chunk_size or layout.num_draws, layout.num_draws)
        chain_chunk = _chain_chunk(layout)
        root = zarr.open_group(
            staging,
            mode="w-",
            zarr_format=3,
            attributes={
                "sluice": {
                    "format": FORMAT,
                    "version": VERSION,
                    "versions": {"sluice": __version__, "jax": jax.__version__},
                    "description": description,
                    "model_source": self.model_source,
                    "layout": {"draws": layout.num_draws, "warmup": layout.warmup},
                }
            },
        )
        options = _integrity().array_options()  # of every array but the draws
        for group, names in layout.groups.items():
            g = root.create_group(group)
            for name, size in (("chain", layout.chains), ("draw", layout.num_draws)):
                g.create_array(
                    name, data=np.arange(size, dtype=np.int64), dimension_names=(name,), **options
                )
            for name, (shape, dtype) in names.items():
                fill = np.nan if np.issubdtype(dtype, np.floating) else 0
                g.create_array(
                    name,
                    shape=(layout.chains, layout.num_draws, *shape),
                    chunks=(chain_chunk, draw_chunk, *shape),
                    dtype=dtype,
                    fill_value=fill,
                    dimension_names=("chain", "draw", *dim_names(name, len(shape), layout.dims)),
                    **_integrity().array_options(self.compressors),
                )
        for group, values in (layout.constant_groups or {}).items():
            g = root.create_group(group)
            for name, value in values.items():
                value = np.asarray(value)
                g.create_array(
                    name,
                    data=value,
                    dimension_names=dim_names(name, value.ndim, layout.dims),
                    **options,
                )
        self._write_coords(root, layout, options)

    @staticmethod
    def _write_coords(root: Any, layout: Layout, options: dict[str, Any]) -> None:
        """The model's coordinate values (e.g. school names) in every group using their dim."""
        for dim, values in (layout.coords or {}).items():
            values = np.asarray(values)
            for _, group in root.groups():
                used = any(dim in (a.metadata.dimension_names or ()) for _, a in group.arrays())
                if used and dim not in group:
                    if values.dtype.kind in "UO":  # variable-length text has a Zarr v3 spec
                        text = group.create_array(
                            dim, shape=values.shape, dtype=str, dimension_names=(dim,), **options
                        )
                        text[:] = values.astype(object)
                    else:
                        group.create_array(dim, data=values, dimension_names=(dim,), **options)

    # -- writing ---------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self, what: str, then: str = _INTACT) -> Any:
        """An :class:`OSError` of the body, raised as a :class:`StoreWriteError` that says
        how to go on (``then``)."""
        try:
            yield
        except OSError as error:
            raise StoreWriteError(
                error.errno,
                f"could not {what}: {error.strerror or error}. "
                + then.format(resume=f"sluice.resume({str(self.path)!r})"),
            ) from error

    def write(self, start: int, chunk: dict[str, dict[str, np.ndarray]]) -> None:
        first, last = self._local
        for group, names in chunk.items():
            for name, values in names.items():
                stop = start + values.shape[1]
                array = self._arrays[group][name]
                with self._writing(
                    f"write draws {start}..{stop - 1} to {self.path}",
                    "The store is resumable from its last complete chunk: {resume}",
                ):
                    array[first:last, start:stop] = values
                    if self.durable:
                        sync_chunks(self.path, array, (first, last), (start, stop))

    def save_checkpoint(self, checkpoint: Checkpoint, process: int = 0, parity: int = 0) -> None:
        """Write this process's checkpoint file of the given parity (atomically)."""
        with self._writing(f"write the checkpoint of {self.path}"):
            atomic_write(self.path / _checkpoint_name(process, parity), checkpoint.write_to)

    def commit(self, checkpoint: Checkpoint, parity: int, process_count: int) -> None:
        """Declare the checkpoint files of ``parity`` complete (process 0, after a barrier)."""
        record = {
            "format": FORMAT,
            "version": VERSION,
            "next_iteration": checkpoint.next_iteration,
            "parity": parity,
            "process_count": process_count,
            "sequence": checkpoint.sequence,
            "metadata": self._manifest,
        }
        with self._writing(f"commit the checkpoint of {self.path}"):
            self._write_record(record)

    def stop(self, draws: int, process: int = 0) -> None:
        """Record that the run ended, converged, after ``draws`` draws per chain: process 0
        says so in the commit record, then cuts the arrays (readers cut to the committed
        draws in between); the others, after it, reopen the cut arrays."""
        if process != 0:
            self._arrays = ZarrSink.open_existing(self.path, writable=False)._arrays
            return
        record = self._commit_record()
        if record is None or record["next_iteration"] - self._recorded_layout()["warmup"] != draws:
            raise StoreError(f"{self.path}: cannot mark {draws} draws per chain as the end")
        record["stopped"] = int(draws)
        if self._manifest is not None:  # each cut array's document: as it is, or once cut
            integrity = _integrity()
            for array, shape in self._cut_arrays(draws):
                name = f"{array.path}/zarr.json"
                cut = integrity.resized_digest(array, shape)
                self._manifest[name] = sorted({*self._manifest[name], cut})
            record["metadata"] = self._manifest
        try:
            self._write_record(record)
        except OSError as error:
            raise StoreWriteError(
                error.errno, f"could not record the end of the run in {self.path}: {error}"
            ) from error
        with _quiet_zarr():
            for array, shape in self._cut_arrays(draws):
                array.resize(shape)
                fsync_file(self.path / array.path / "zarr.json")

    def _cut_arrays(self, draws: int) -> list[tuple[Any, tuple[int, ...]]]:
        """The arrays :meth:`stop` cuts to ``draws`` draws, with their new shapes: each
        group's draws and its ``draw`` coordinate."""
        with _quiet_zarr():
            cut = [(a, (a.shape[0], draws, *a.shape[2:])) for n in self._arrays.values()
                   for a in n.values()]  # fmt: skip
            return cut + [(self._root[group]["draw"], (draws,)) for group in self._arrays]

    def _write_record(self, record: dict[str, Any]) -> None:
        """Replace the commit record (atomically), under a CRC-32 of its fields."""
        record = {k: v for k, v in record.items() if k != "crc32"}
        record["crc32"] = _record_crc(record)
        atomic_write(self.path / COMMIT, json.dumps(record).encode())

    def stopped(self) -> int | None:
        """Draws per chain where ``until`` ended the run, if it did."""
        value = (self._commit_record() or {}).get("stopped")
        return value if isinstance(value, int) else None

    def keep_summary(self, result: dict[str, Any], draws: int) -> None:
        """Keep the run's finalized default summary of ``draws`` draws per chain beside
        the draws (:mod:`sluice.io.stored_summary`), for ``sluice summary``."""
        from sluice.io.stored_summary import write_summary

        write_summary(self.path, result, draws)
        record = self._commit_record()
        if record is not None and record.get("version", 0) >= CHECKED_FROM:
            self._write_record({**record, "summary": True})  # its absence is then damage

    def kept_summary(self) -> bool:
        """Whether the commit record says the run kept its summary in the store."""
        return bool((self._commit_record() or {}).get("summary"))

    def close(self) -> None:
        """Release the store's lock (the run is over, or failed)."""
        self._lock.release()

    # -- reopening -------------------------------------------------------------
    @classmethod
    def open_existing(cls, path: str | os.PathLike, *, writable: bool = True) -> ZarrSink:
        """Reopen a store: to continue writing it (see :func:`sluice.resume`), or
        read-only (``writable=False``: stores of formats 1 and 2 too, unchecked).

        A store of format 3 is checked first (:mod:`sluice.io.integrity`);
        ``writable=True`` also checks every committed chunk once. Damage is a
        :class:`StoreError` naming the file."""
        import zarr

        path = Path(path)
        if not path.exists():
            left = leftovers(Path(os.path.realpath(path)))
            killed = (f": a run creating or replacing it was killed before it was complete (it "
                      f"left {left[0].name}, which the next run writing {path} removes); start "
                      "the run again" if left else "")  # fmt: skip
            raise FileNotFoundError(f"no store at {path}{killed}")
        sink = cls(path)
        record = sink._commit_record()
        store = _integrity().checked_store(path, record, path / COMMIT, writable, LAYOUT_GROUPS)
        if not _is_sluice_store(path):
            if half_created(path):
                raise StoreError(f"{path} {HALF_CREATED}")
            raise StoreError(
                f"{path} is not a sluice store (no sluice metadata in {path / 'zarr.json'})"
            )
        store.draws = None if record is None else sink.draws_done()  # committed, per chain
        try:
            root = zarr.open_group(store, mode="r+" if writable else "r", zarr_format=3)
            meta = root.attrs["sluice"]
        except StoreError:
            raise
        except Exception as error:
            raise StoreError(f"{path}/zarr.json is damaged: {error}") from error
        version = meta.get("version")
        readable = (VERSION,) if writable else READABLE_VERSIONS
        if version not in readable:
            hint = (f"continues format {VERSION} only, whose chunks carry checksums: finish the "
                    "run with the sluice that started it, or sample it again"
                    if writable and version in READABLE_VERSIONS
                    else f"reads formats {READABLE_VERSIONS}")  # fmt: skip
            raise StoreError(
                f"{path} was written in store format {version} ({path / 'zarr.json'}); "
                f"this sluice {hint}"
            )
        sink._root, sink._manifest = root, store.manifest
        sink.model_source = meta.get("model_source")
        try:
            with _quiet_zarr():
                sink._arrays = {
                    group: {
                        n: a.with_config({"write_empty_chunks": True})
                        for n, a in root[group].arrays()
                        if n not in ("chain", "draw")
                    }
                    for group in LAYOUT_GROUPS
                    if group in root
                }
        except StoreError:
            raise
        except Exception as error:
            raise StoreError(f"{path} is damaged: {error}") from error
        if "posterior" not in sink._arrays and (path / COMMIT).exists():
            raise StoreError(f"{path} is damaged: it has a checkpoint but no posterior group")
        if writable:
            store.check_committed()  # a resume never builds on damaged draws
        return sink

    def description(self) -> dict[str, Any]:
        return self._root.attrs["sluice"]["description"]

    def _commit_record(self) -> dict[str, Any] | None:
        path = self.path / COMMIT
        if not path.exists():
            # Checkpoint k + 1 is written only after commit k: a checkpoint of sequence
            # >= 1 without a commit record means the record was lost.
            for file in sorted(self.path.glob("sluice-checkpoint-p*-*.ckpt")):
                if Checkpoint.from_file(file).sequence >= 1:
                    raise StoreError(
                        f"{path} is missing, but {file.name} is a later checkpoint: the "
                        "store is damaged (its committed draws are unknown)"
                    )
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise StoreError(
                f"the commit record {path} is damaged and cannot be read: {error}"
            ) from error
        if not isinstance(record, dict):
            raise StoreError(f"the commit record {path} is damaged: not a JSON object")
        if "crc32" in record and record["crc32"] != _record_crc(record):
            raise StoreError(f"the commit record {path} is damaged: checksum mismatch")
        if record.get("format") != FORMAT:
            raise StoreError(f"{path} is not a sluice commit record")
        if "crc32" not in record or not isinstance(record.get("metadata"), dict):
            # records of format 3 carry both; older ones may lack them
            version = self._root_attribute(lambda meta: int(meta["version"]))
            if "version" in record or "metadata" in record or version >= CHECKED_FROM:
                lacks = "checksum" if "crc32" not in record else "manifest of the metadata"
                raise StoreError(f"the commit record {path} is damaged: it has no {lacks}")
        missing = [k for k in ("next_iteration", "parity", "process_count", "sequence")
                   if not isinstance(record.get(k), int)]  # fmt: skip
        if missing:
            raise StoreError(f"the commit record {path} is damaged: no valid {missing}")
        return record

    def _root_attribute(self, read: Any) -> Any:
        """``read`` applied to the sluice attributes of the root ``zarr.json``, read from
        disk; damage is a :class:`StoreError`."""
        path = self.path / "zarr.json"
        try:
            return read(json.loads(path.read_text())["attributes"]["sluice"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise StoreError(f"{path} is damaged: {error!r}") from error

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
        for p, part in enumerate(parts):
            written = part.sluice_version or "before 0.1.0"
            if written not in COMPATIBLE_CHECKPOINTS:
                raise StoreError(
                    f"the checkpoint {_checkpoint_name(p, record['parity'])} of {self.path} was "
                    f"written by sluice {written}; this is sluice {__version__}, whose "
                    "checkpoints are not known to be compatible with it: finish the run with "
                    f"sluice {written}, or start it again"
                )
        first = parts[0]
        carry = [np.concatenate(leaves) for leaves in zip(*(p.carry for p in parts), strict=True)]
        totals = dict(first.totals)
        for part in parts[1:]:
            for name in _SUMMED_TOTALS:
                totals[name] += part.totals[name]
            if "_chain_totals" in part.totals:  # each process's rows are its own chains'
                totals["_chain_totals"] = (
                    np.asarray(totals["_chain_totals"]) + np.asarray(part.totals["_chain_totals"])
                ).tolist()
        return dataclasses.replace(
            first, next_iteration=record["next_iteration"], carry=carry, totals=totals
        )

    def _state(self) -> str:
        """How far the store's run went, for messages (damage is described, not raised)."""
        try:
            total = self._recorded_layout()["draws"]
            done = self.draws_done()
        except StoreError as error:
            return f"damaged: {error}"
        if self.stopped() is not None:
            return f"complete: converged after {done} of at most {total} draws per chain"
        return "complete" if done == total else f"{done} of {total} draws per chain so far"

    def _recorded_layout(self) -> dict[str, int]:
        """``{"draws": ..., "warmup": ...}``: the draws per chain the store was created for
        and the warmup before them (a commit record's ``next_iteration`` counts both), from
        its recorded :class:`Layout` or, in older stores, its run's config."""

        def read(meta: dict[str, Any]) -> dict[str, int]:
            recorded = meta.get("layout") or meta["description"]["config"]
            return {"draws": int(recorded["draws"]), "warmup": int(recorded["warmup"])}

        return self._root_attribute(read)

    def draws_done(self) -> int:
        """Draws per chain written and covered by the committed checkpoint (0 before the
        first commit); a damaged commit record or metadata is a :class:`StoreError`."""
        record = self._commit_record()
        if record is None:
            return 0
        return max(0, record["next_iteration"] - self._recorded_layout()["warmup"])

    def check_compatible(
        self, description: dict[str, Any], *, allow_model_change: bool = False
    ) -> None:
        """Raise :class:`StoreError` naming the first setting or model property that differs
        from the run that wrote this store (:func:`sluice.io.identity.check_same_run`)."""
        from sluice.io.identity import check_same_run

        check_same_run(
            self.path, self.description(), description, allow_model_change=allow_model_change
        )

    def kept(self) -> dict[str, dict[str, Any]]:
        """``{group: {name: zarr.Array}}``: arrays index like NumPy and read lazily."""
        return self._arrays


def open_datatree(path: str | os.PathLike, *, partial: bool = True) -> Any:
    """Open a store as an ``xarray.DataTree`` (ArviZ 1.x's layout: one child per group),
    lazily and read-only. An unfinished run's store is cut to the draws covered by its
    checkpoint (``partial=False`` refuses it instead)."""
    import xarray as xr

    path = Path(path)
    sink = ZarrSink.open_existing(path, writable=False)  # checked: sluice.io.integrity
    allocated = sink._recorded_layout()["draws"]
    done = sink.draws_done()
    total = done if sink.stopped() is not None else allocated  # converged early: complete
    if done < total and not partial:
        raise StoreError(f"{path} holds an unfinished run ({done}/{total} draws per chain)")
    if sink.stopped() is not None:  # the arrays are cut one by one after the record says so
        uncut = [a for a, shape in sink._cut_arrays(done) if a.shape != shape]
        if uncut and len(uncut) < len(sink._cut_arrays(done)):
            raise StoreError(
                f"{path / uncut[0].path / 'zarr.json'} still has the draws of the run's full "
                f"length: the run stopped at {done} draws per chain and was interrupted while "
                f"its arrays were cut; sluice.resume({str(path)!r}) finishes cutting them"
            )
    with _quiet_zarr():
        tree = xr.open_datatree(  # read through the store that checks every chunk
            sink._root.store, engine="zarr", consolidated=False, zarr_format=3, mode="r"
        )
    if done < allocated:  # the arrays are allocated for every draw the run was given
        tree = tree.isel(draw=slice(0, done), missing_dims="ignore")
    return tree


def open_store(path: str | os.PathLike, *, partial: bool = True) -> Any:
    """Open a store as an ``arviz.InferenceData``, lazily and read-only (no draws are
    read yet); see :func:`open_datatree`."""
    from sluice.io.arviz import import_arviz

    return import_arviz().InferenceData.from_datatree(open_datatree(path, partial=partial))


def _chain_chunk(layout: Layout) -> int:
    """Chains per Zarr chunk: one (any layout writes disjoint chunks), or one process's
    block of chain slots for runs of many chains."""
    if layout.chains <= ONE_CHAIN_CHUNKS_UP_TO:
        return 1
    return min(layout.chains_per_process or layout.chains, layout.chains)


def _integrity() -> Any:
    """:mod:`sluice.io.integrity`, imported on first use (it imports Zarr)."""
    from sluice.io import integrity

    return integrity


def _record_crc(record: dict[str, Any]) -> int:
    fields = {k: v for k, v in record.items() if k != "crc32"}
    return zlib.crc32(json.dumps(fields, sort_keys=True).encode())
