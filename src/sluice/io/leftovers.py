"""What a store's writer must not follow, and what dead writers leave behind.

A writer (process 0, holding the store's lock) calls :func:`prepare_for_writing`
before it writes. Only what is recognisably sluice's is removed: a folder of the
names it leaves that holds anything else stays.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

from sluice.io.checkpoint import FORMAT, StoreError

__all__ = [
    "HALF_CREATED",
    "half_created",
    "is_sluice_store",
    "leftovers",
    "prepare_for_writing",
    "remove_leftovers",
    "remove_store",
]

HALF_CREATED = (
    "holds a sluice store whose creation was interrupted before it was complete (no "
    "draws, nothing to resume); start the run again with ZarrSink(..., overwrite=True) "
    "(CLI: --overwrite), which removes it"
)
# Temporary files of a write in progress: sluice's (atomic_write: ".NAME.<hex>.tmp") and
# Zarr's ("NAME.<hex>.partial"). Under the lock, one that exists belongs to a dead writer.
_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$|^.+\.[0-9a-f]{32}\.partial$")
_ZARR_ROOT_PARTIAL = re.compile(r"^zarr\.[0-9a-f]{32}\.partial$")


def is_sluice_store(path: Path) -> bool:
    """Whether ``path`` holds a root ``zarr.json`` with sluice's store attributes."""
    meta = path / "zarr.json"
    if not meta.is_file():
        return False
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except (OSError, ValueError):
        return False
    return attrs.get("sluice", {}).get("format") == FORMAT


def half_created(path: Path) -> bool:
    """A folder left by a sluice run killed before its store's root metadata was renamed
    into place: nothing in it but Zarr's temporary root metadata, naming a sluice store."""
    try:
        entries = list(path.iterdir())
    except OSError:
        return False
    if not entries or not all(_ZARR_ROOT_PARTIAL.match(e.name) and e.is_file() for e in entries):
        return False
    return any(FORMAT.encode() in e.read_bytes() for e in entries)


def leftovers(real: Path) -> list[Path]:
    """Folders beside the store that sluice left while creating or replacing it and that
    a kill interrupted: ``.NAME.creating-<hex>``, ``.NAME.deleting-<hex>``."""
    pattern = re.compile(rf"^\.{re.escape(real.name)}\.(creating|deleting)-[0-9a-f]{{12}}$")
    try:
        siblings = list(real.parent.iterdir())
    except OSError:
        return []
    return [p for p in siblings if pattern.match(p.name) and p.is_dir() and not p.is_symlink()]


def remove_leftovers(real: Path) -> None:
    """Remove the leftovers of dead writers beside the store (under its lock); only those
    that are recognisably sluice's: a store, a half-created one, or empty."""
    for folder in leftovers(real):
        if is_sluice_store(folder) or half_created(folder) or not any(folder.iterdir()):
            remove_store(folder)


def remove_store(path: Path) -> None:
    """Delete a store, its root metadata last: a kill part way leaves a folder that is
    still recognisably a sluice store (or empty), which the next writer removes."""
    for entry in path.iterdir():
        if entry.name == "zarr.json":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (path / "zarr.json").unlink(missing_ok=True)
    path.rmdir()


def prepare_for_writing(store: Path) -> None:
    """Before process 0 writes a store (holding its lock): refuse a store that holds a
    symbolic link (a write would follow it out of the store), then remove the temporary
    files and folders of writers that died."""
    links, temporary, folders = [], [], [str(store)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    links.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif _TEMPORARY.match(entry.name):
                    temporary.append(entry.path)
    if links:
        shown = ", ".join(os.path.relpath(p, store) for p in sorted(links)[:3])
        more = f" and {len(links) - 3} more" if len(links) > 3 else ""
        raise StoreError(
            f"{store} holds symbolic links ({shown}{more}); sluice never writes through a "
            "link inside a store (the write could land outside it). Replace them by the "
            "files or folders they point to, then run again"
        )
    for path in temporary:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    remove_leftovers(store)
