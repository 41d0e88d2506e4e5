"""Writing a table's rows as a new version of a Delta Lake or Iceberg table, keeping the last few versions.

Why a copy and not metadata over our own files: a stitched table's base files hold internal `_sl__*` columns,
tombstoned stream groups, deleted keys and values still missing their column defaults; Delta and Iceberg readers
would return them as they are. So each publish writes the read-optimized rows once, as the format's own Parquet
files, in one atomic commit of that format: a reader sees the previous version or the new one, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

#: Delta operations that are a publish (the others, e.g. VACUUM, are bookkeeping versions).
_DELTA_WRITES = ("WRITE", "CREATE TABLE", "CREATE OR REPLACE TABLE")


@dataclass(frozen=True)
class Published:
    """The version a publish made: Delta's table version, or Iceberg's snapshot id (with the table's name)."""

    version: int
    identifier: str = ""
    removed_files: int = 0


def write_delta(rows: pa.Table, location: str, name: str, retain: int) -> Published:
    """Overwrite the Delta table at `location` with `rows` (its schema replaces the old one: an alter may have
    added, dropped or widened columns); then delete the files only versions older than the last `retain`
    publishes need."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(location, rows, mode="overwrite", schema_mode="overwrite", name=name)
    table = DeltaTable(location)
    version = table.version()
    writes = sorted(int(h["version"]) for h in table.history() if h.get("operation") in _DELTA_WRITES)
    kept = [v for v in writes if v <= version][-retain:]
    removed = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, keep_versions=kept)
    return Published(version, removed_files=len(removed))


def iceberg_catalog(location: str, properties: Mapping[str, str] | None = None) -> Any:
    """The catalog of the published Iceberg tables: pyiceberg's catalog for `properties` (a REST or SQL catalog),
    by default a SQLite `SqlCatalog` in `location`, with `location` as the warehouse."""
    from pyiceberg.catalog import load_catalog

    Path(location).mkdir(parents=True, exist_ok=True)
    defaults = {
        "type": "sql",
        "uri": f"sqlite:///{os.path.join(location, 'catalog.db')}",
        "warehouse": Path(location).as_uri(),
    }
    chosen = dict(properties or {})
    if chosen and chosen.get("type", "sql") != "sql":
        defaults = {"warehouse": defaults["warehouse"]}  # a REST catalog has its own idea of where tables go
    return load_catalog("stitchlake", **{**defaults, **chosen})


def write_iceberg(
    rows: pa.Table, location: str, catalog_properties: Mapping[str, str], namespace: str, name: str, retain: int
) -> Published:
    """Overwrite the Iceberg table `namespace.name` with `rows` (evolving its schema by name first), expire the
    snapshots older than the last `retain` publishes, and delete the data files no kept snapshot reads."""
    catalog = iceberg_catalog(location, catalog_properties)
    catalog.create_namespace_if_not_exists(namespace)
    identifier = (namespace, name)
    if catalog.table_exists(identifier):
        table = catalog.load_table(identifier)
        gone = [field.name for field in table.schema().fields if field.name not in rows.schema.names]
        with table.update_schema() as update:
            update.union_by_name(rows.schema)
            for column in gone:
                update.delete_column(column)
        table.overwrite(rows)
    else:
        table = catalog.create_table(identifier, schema=rows.schema)
        table.append(rows)
    table = catalog.load_table(identifier)
    current = table.current_snapshot()
    assert current is not None
    removed = _expire(table, retain)
    return Published(current.snapshot_id, identifier=f"{namespace}.{name}", removed_files=removed)


def _expire(table: Any, retain: int) -> int:
    """Keep the snapshots of the last `retain` publishes (an overwrite is a delete then an append snapshot)."""
    from pyiceberg.table.snapshots import Operation

    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    publishes = [s for s in snapshots if s.summary is not None and s.summary.operation == Operation.APPEND]
    if len(publishes) <= retain:
        return 0
    oldest_kept = publishes[-retain].timestamp_ms
    expired = [s.snapshot_id for s in snapshots if s.timestamp_ms < oldest_kept]
    if not expired:
        return 0
    table.maintenance.expire_snapshots().by_ids(expired).commit()
    table = table.refresh()
    kept_files = {
        task.file.file_path
        for snapshot in table.snapshots()
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()
    }
    removed = 0
    data = Path(_local(table.location())) / "data"
    for path in data.rglob("*.parquet") if data.is_dir() else []:
        if path.as_uri() not in kept_files and str(path) not in kept_files:
            path.unlink()
            removed += 1
    return removed


def _local(location: str) -> str:
    return location[len("file://") :] if location.startswith("file://") else location
