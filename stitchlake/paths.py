"""Every path stitchlake keeps under a table's `.stitch/` folder (design.md §3), spelled in one place.

All paths are relative to the table root, so they mean the same on local disk and in an object store.
"""

from __future__ import annotations

META_DIR = ".stitch"
TABLE_JSON = f"{META_DIR}/table.json"
TIMELINE_DIR = f"{META_DIR}/timeline"
ARCHIVE_DIR = f"{TIMELINE_DIR}/archive"
MARKERS_DIR = f"{META_DIR}/markers"
HEARTBEATS_DIR = f"{META_DIR}/heartbeats"
LOCKS_DIR = f"{META_DIR}/locks"
QUARANTINE_DIR = f"{META_DIR}/quarantine"
ERASE_DIR = f"{META_DIR}/erase"
LOGS_DIR = f"{META_DIR}/logs"
#: `stitch stream` checkpoints, one folder per stream (Spark's own bookkeeping; the table records what was ingested).
STREAMS_DIR = f"{META_DIR}/streams"
#: Published Delta Lake / Iceberg tables (`stitch publish`), one folder per format: copies clean never touches.
PUBLISHED_DIR = f"{META_DIR}/published"


def is_meta(path: str) -> bool:
    """Whether a table-relative path is stitchlake's own bookkeeping rather than table data."""
    return path == META_DIR or path.startswith(f"{META_DIR}/")


def timeline_file(name: str) -> str:
    return f"{TIMELINE_DIR}/{name}"


def quarantine_folder(instant: str) -> str:
    return f"{QUARANTINE_DIR}/{instant}"


def erase_folder(instant: str) -> str:
    return f"{ERASE_DIR}/{instant}"


def purged_marker(instant: str) -> str:
    """Written when an erase's `--purge` has removed every older copy: until then the purge is unfinished."""
    return f"{ERASE_DIR}/{instant}/purged"


def marker_folder(instant: str) -> str:
    return f"{MARKERS_DIR}/{instant}"
