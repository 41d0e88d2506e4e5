"""Writing a table's rows as a new version of a Delta Lake or Iceberg table, keeping the last few versions.

Why a copy and not metadata over our own files: a stitched table's base files hold internal `_sl__*` columns,
tombstoned stream groups, deleted keys and values still missing their column defaults; Delta and Iceberg readers
would return them as they are. So each publish writes the read-optimized rows once, as the format's own Parquet
files, in one atomic commit of that format: a reader sees the previous version or the new one, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stitchlake.errors import UsageError
from stitchlake.storage import Storage, storage_for
from stitchlake.storage.registry import scheme_of

if TYPE_CHECKING:
    import pyarrow as pa

#: Delta operations that are a publish (the others, e.g. VACUUM, are bookkeeping versions).
_DELTA_WRITES = ("WRITE", "CREATE TABLE", "CREATE OR REPLACE TABLE")
#: Our S3 settings (`storage.s3.client_settings`) as delta-rs and pyiceberg's FileIO name them.
_DELTA_S3 = {
    "endpoint": "AWS_ENDPOINT_URL",
    "region": "AWS_REGION",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
    "allow_http": "AWS_ALLOW_HTTP",
}
_ICEBERG_S3 = {
    "endpoint": "s3.endpoint",
    "region": "s3.region",
    "access_key_id": "s3.access-key-id",
    "secret_access_key": "s3.secret-access-key",
    "session_token": "s3.session-token",
}
#: pyiceberg writes through pyarrow's S3 client (the AWS C++ SDK), whose default request checksums S3-compatible
#: stores such as Ceph's gateway refuse (411 MissingContentLength on every upload). Checksums only where an API
#: requires them is an SDK setting AWS itself accepts; it is read from the environment when a client is created.
_SDK_CHECKSUMS = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}


@dataclass(frozen=True)
class Target:
    """Where one format is published (a local folder or an `s3://` prefix) and the table's `storage:` settings,
    with which delta-rs and pyiceberg reach the same store as the table's own client does."""

    location: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def on_s3(self) -> bool:
        return scheme_of(self.location) == "s3"

    def storage(self, location: str | None = None) -> Storage:
        return storage_for(location or self.location, self.storage_options)

    def s3_settings(self) -> dict[str, str]:
        return self.storage().client_settings()


@dataclass(frozen=True)
class Published:
    """The version a publish made: Delta's table version, or Iceberg's snapshot id (with the table's name), and
    where that table is (a REST catalog chooses its tables' locations itself)."""

    version: int
    table_location: str
    identifier: str = ""
    removed_files: int = 0


def delta_options(target: Target) -> dict[str, str] | None:
    """delta-rs `storage_options` for the target (None on local disk). delta-rs commits a version with S3's
    conditional PUT, so publishes racing for the same version cannot overwrite each other's log entry."""
    settings = target.s3_settings()
    return {_DELTA_S3[name]: value for name, value in settings.items()} if target.on_s3 else None


def write_delta(rows: pa.Table, target: Target, name: str, retain: int, partition_by: Sequence[str] = ()) -> Published:
    """Overwrite the Delta table at the target with `rows` (its schema replaces the old one: an alter may have
    added, dropped or widened columns), partitioned like the stitched table so readers prune partitions; then
    delete the files only versions older than the last `retain` publishes need."""
    from deltalake import DeltaTable, write_deltalake

    options = delta_options(target)
    write_deltalake(
        target.location,
        rows,
        mode="overwrite",
        schema_mode="overwrite",
        name=name,
        partition_by=list(partition_by) or None,
        storage_options=options,
    )
    table = DeltaTable(target.location, storage_options=options)
    version = table.version()
    writes = sorted(int(h["version"]) for h in table.history() if h.get("operation") in _DELTA_WRITES)
    kept = [v for v in writes if v <= version][-retain:]
    removed = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, keep_versions=kept)
    return Published(version, target.location, removed_files=len(removed))


def iceberg_catalog(target: Target | str, properties: Mapping[str, str] | None = None) -> Any:
    """The catalog of the published Iceberg tables: pyiceberg's catalog for `properties` (a REST or SQL catalog),
    by default a SQLite `SqlCatalog` in the target folder, which is also the warehouse. On S3 the FileIO gets the
    table's S3 settings, and the catalog must be given: a SQLite file cannot live on an object store."""
    from pyiceberg.catalog import load_catalog

    target = target if isinstance(target, Target) else Target(target)
    chosen = dict(properties or {})
    io = {_ICEBERG_S3[name]: value for name, value in target.s3_settings().items() if name in _ICEBERG_S3}
    check_iceberg_catalog(target, chosen)
    if target.on_s3:
        for name, value in _SDK_CHECKSUMS.items():
            os.environ.setdefault(name, value)
        defaults = {"type": "sql", "warehouse": target.location.rstrip("/"), **io}
    else:
        Path(target.location).mkdir(parents=True, exist_ok=True)
        defaults = {
            "type": "sql",
            "uri": f"sqlite:///{os.path.join(target.location, 'catalog.db')}",
            "warehouse": Path(target.location).as_uri(),
        }
    if chosen and chosen.get("type", "sql") != "sql":
        defaults = {"warehouse": defaults["warehouse"], **io}  # a REST catalog has its own idea of where tables go
    return load_catalog("stitchlake", **{**defaults, **chosen})


def check_iceberg_catalog(target: Target, properties: Mapping[str, str]) -> None:
    """Refuse the default SQLite catalog for a target on an object store: SQLite needs a file on a disk."""
    if target.on_s3 and "uri" not in properties and properties.get("type", "sql") == "sql":
        raise UsageError(
            f"publishing Iceberg to {target.location} needs a catalog that is not a file on the object store: "
            "set publish.iceberg_catalog (a REST catalog, or type: sql with a database uri)"
        )


def write_iceberg(
    rows: pa.Table,
    target: Target,
    catalog_properties: Mapping[str, str],
    namespace: str,
    name: str,
    retain: int,
    partition_by: Sequence[str] = (),
) -> Published:
    """Overwrite the Iceberg table `namespace.name` with `rows` (evolving its schema by name first), partitioned
    by identity on the stitched table's partition columns; expire the snapshots older than the last `retain`
    publishes, and delete the data files no kept snapshot reads."""
    catalog = iceberg_catalog(target, catalog_properties)
    catalog.create_namespace_if_not_exists(namespace)
    identifier = (namespace, name)
    if catalog.table_exists(identifier):
        table = catalog.load_table(identifier)
        gone = [field.name for field in table.schema().fields if field.name not in rows.schema.names]
        with table.update_schema() as update:
            update.union_by_name(rows.schema)
            for column in gone:
                update.delete_column(column)
        _partition_by(table, partition_by)
        table.overwrite(rows)
    else:
        table = catalog.create_table(identifier, schema=rows.schema)
        _partition_by(table, partition_by)
        table.append(rows)
    table = catalog.load_table(identifier)
    current = table.current_snapshot()
    assert current is not None
    removed = _expire(table, retain, target)
    return Published(current.snapshot_id, table.location(), identifier=f"{namespace}.{name}", removed_files=removed)


def _partition_by(table: Any, columns: Sequence[str]) -> None:
    """Identity partitions on `columns`, unless the spec already has them (a publish before partitioning did not
    is evolved: Iceberg keeps old files under their old spec)."""
    from pyiceberg.transforms import IdentityTransform

    spec = table.spec()
    have = {table.schema().find_column_name(f.source_id) for f in spec.fields if f.transform == IdentityTransform()}
    missing = [c for c in columns if c not in have]
    if missing:
        with table.update_spec() as update:
            for column in missing:
                update.add_identity(column)


def _expire(table: Any, retain: int, target: Target) -> int:
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
    kept = {
        _without_file_scheme(task.file.file_path)
        for snapshot in table.snapshots()
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()
    }
    location = _without_file_scheme(table.location()).rstrip("/")
    storage = target.storage(location)
    unread = [
        info.path
        for info in storage.list_files("data")
        if info.path.endswith(".parquet") and f"{location}/{info.path}" not in kept
    ]
    storage.delete_many(unread)
    return len(unread)


def _without_file_scheme(location: str) -> str:
    return location[len("file://") :] if location.startswith("file://") else location
