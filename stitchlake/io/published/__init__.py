"""Writing a table's rows as a new version of a Delta Lake or Iceberg table, keeping the last few versions.

Why a copy and not metadata over our own files: a stitched table's base files hold internal `_sl__*` columns,
tombstoned stream groups, deleted keys and values still missing their column defaults; Delta and Iceberg readers
would return them as they are. So each publish writes the read-optimized rows once, as the format's own Parquet
files, in one atomic commit of that format: a reader sees the previous version or the new one, never a mix.

One module per format (`delta.py`, `iceberg.py`) over what they share (`target.py`); `PUBLISHERS` names each
format's parts, so services never branch on a format.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from stitchlake.errors import ConflictError
from stitchlake.io.published import delta, iceberg
from stitchlake.io.published.delta import delta_options, write_delta
from stitchlake.io.published.iceberg import (
    catalog_location,
    check_iceberg_catalog,
    default_catalog_file,
    iceberg_catalog,
    write_iceberg,
)
from stitchlake.io.published.target import OWNER_MARK, OWNER_PROPERTY, Publication, Published, Target
from stitchlake.vocabulary import PublishFormat

__all__ = [
    "OWNER_MARK",
    "OWNER_PROPERTY",
    "PUBLISHERS",
    "Publication",
    "Published",
    "Publisher",
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


@dataclass(frozen=True)
class Publisher:
    """One publish format's parts. Each takes the target and the config's catalog properties (Delta ignores them)."""

    #: Write the rows as the format's next version (the namespace: Iceberg's; Delta has none).
    write: Callable[[Publication, Target, Mapping[str, str], str], Published]
    #: Whether the format is published at the target (namespace, table name).
    exists: Callable[[Target, Mapping[str, str], str, str], bool]
    #: Refuse a target the format cannot publish to, before any work (UsageError).
    check: Callable[[Target, Mapping[str, str]], None]
    #: Where the format's catalog lives, for the result ("": no catalog).
    catalog: Callable[[Target, Mapping[str, str]], str]
    #: What the format calls a version, in reports.
    version_word: str = "version"
    #: Whether a catalog names the format's tables (`<namespace>.<table name>`): then the table is its catalog and
    #: name, wherever its files are; else its location is its name.
    named: bool = False


def _write_delta(publication: Publication, target: Target, _catalog: Mapping[str, str], _namespace: str) -> Published:
    return delta.write_delta(publication, target)  # looked up when called: a test wraps it to die after the commit


def _write_iceberg(publication: Publication, target: Target, catalog: Mapping[str, str], namespace: str) -> Published:
    return iceberg.write_iceberg(publication, target, catalog, namespace)  # looked up when called, as delta's


def _delta_exists(target: Target, _catalog: Mapping[str, str], _namespace: str, _name: str) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(target.location, storage_options=delta_options(target)))


def _iceberg_exists(target: Target, catalog_properties: Mapping[str, str], namespace: str, name: str) -> bool:
    """The default SQLite catalog is only opened when its file exists: asking must not create one."""
    if not catalog_properties and (target.local_folder is None or not os.path.exists(default_catalog_file(target))):
        return False
    return bool(iceberg_catalog(target, catalog_properties).table_exists((namespace, name)))


#: Every publish format and its parts: the one place a format is added (architecture.md says how).
PUBLISHERS: dict[PublishFormat, Publisher] = {
    PublishFormat.DELTA: Publisher(
        write=_write_delta,
        exists=_delta_exists,
        check=lambda _target, _catalog: None,
        catalog=lambda _target, _catalog: "",
    ),
    PublishFormat.ICEBERG: Publisher(
        write=_write_iceberg,
        exists=_iceberg_exists,
        check=check_iceberg_catalog,
        catalog=catalog_location,
        version_word="snapshot",
        named=True,
    ),
}


def published_table_exists(
    fmt: PublishFormat, target: Target, catalog_properties: Mapping[str, str], namespace: str, name: str
) -> bool:
    """Whether `fmt` is published at the target (its publishes may be archived off the timeline)."""
    return PUBLISHERS[fmt].exists(target, catalog_properties, namespace, name)


@contextmanager
def commit_conflicts(what: str) -> Iterator[None]:
    """A commit of the format refused because another writer committed first is a write conflict (exit 3)."""
    from deltalake.exceptions import CommitFailedError
    from pyiceberg.exceptions import CommitFailedException

    try:
        yield
    except (CommitFailedError, CommitFailedException) as exc:
        raise ConflictError(f"{what}: {exc}; nothing was published — run again") from exc
