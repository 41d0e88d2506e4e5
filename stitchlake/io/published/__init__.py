"""Writing a table's rows as a new version of a Delta Lake or Iceberg table, keeping the last few versions.

Why a copy and not metadata over our own files: a stitched table's base files hold internal `_sl__*` columns,
tombstoned stream groups, deleted keys and values still missing their column defaults; Delta and Iceberg readers
would return them as they are. So each publish writes the read-optimized rows once, as the format's own Parquet
files, in one atomic commit of that format: a reader sees the previous version or the new one, never a mix.

One module per format (`delta.py`, `iceberg.py`) over what they share (`target.py`); the checks below span both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from stitchlake.errors import ConflictError
from stitchlake.io.published.delta import delta_options, write_delta
from stitchlake.io.published.iceberg import (
    catalog_location,
    check_iceberg_catalog,
    default_catalog_file,
    iceberg_catalog,
    write_iceberg,
)
from stitchlake.io.published.target import OWNER_MARK, OWNER_PROPERTY, Publication, Published, Target

__all__ = [
    "OWNER_MARK",
    "OWNER_PROPERTY",
    "Publication",
    "Published",
    "Target",
    "catalog_location",
    "check_iceberg_catalog",
    "commit_conflicts",
    "delta_options",
    "iceberg_catalog",
    "published_table_exists",
    "write_delta",
    "write_iceberg",
]


def published_table_exists(
    fmt: str, target: Target, catalog_properties: Mapping[str, str], namespace: str, name: str
) -> bool:
    """Whether `fmt` is published at the target (its publishes may be archived off the timeline). The default
    SQLite catalog is only opened when its file exists: asking must not create one."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(target.location, storage_options=delta_options(target)))
    if not catalog_properties and (target.local_folder is None or not os.path.exists(default_catalog_file(target))):
        return False
    return bool(iceberg_catalog(target, catalog_properties).table_exists((namespace, name)))


@contextmanager
def commit_conflicts(what: str) -> Iterator[None]:
    """A commit of the format refused because another writer committed first is a write conflict (exit 3)."""
    from deltalake.exceptions import CommitFailedError
    from pyiceberg.exceptions import CommitFailedException

    try:
        yield
    except (CommitFailedError, CommitFailedException) as exc:
        raise ConflictError(f"{what}: {exc}; nothing was published — run again") from exc
