"""Markers: a record, made *before* a data file is created, that an instant is writing it.

Rolling back a failed write deletes exactly the files its markers name, so a crashed writer never leaves an
orphan behind and rollback never needs to list data folders.
"""

from __future__ import annotations

from stitchlake.paths import MARKERS_DIR
from stitchlake.storage import Storage

SUFFIX = ".marker"


def marker_path(instant: str, path: str) -> str:
    return f"{MARKERS_DIR}/{instant}/{path}{SUFFIX}"


def create_marker(storage: Storage, instant: str, path: str) -> None:
    storage.put_if_absent(marker_path(instant, path), b"")


def marked_files(storage: Storage, instant: str) -> list[str]:
    """Table-relative paths of the data files an instant started to write."""
    prefix = f"{MARKERS_DIR}/{instant}/"
    return sorted(
        p[len(prefix) : -len(SUFFIX)] for p in storage.walk_files(f"{MARKERS_DIR}/{instant}") if p.endswith(SUFFIX)
    )


def delete_marked(storage: Storage, instant: str, paths: list[str]) -> int:
    """Delete the files `paths` (an earlier listing of the instant's markers) and those markers, and nothing else:
    a later attempt at the same instant (a run that took it over) marks its own files in the same folder."""
    deleted = 0
    for path in paths:
        deleted += storage.delete(path)
        storage.delete(marker_path(instant, path))
    return deleted


def delete_markers(storage: Storage, instant: str) -> None:
    storage.delete_tree(f"{MARKERS_DIR}/{instant}")


def instants_with_markers(storage: Storage) -> list[str]:
    return sorted(storage.list_names(MARKERS_DIR))
