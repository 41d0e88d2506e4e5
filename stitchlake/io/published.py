"""Writing a table's rows as a new version of a Delta Lake or Iceberg table, keeping the last few versions.

Why a copy and not metadata over our own files: a stitched table's base files hold internal `_sl__*` columns,
tombstoned stream groups, deleted keys and values still missing their column defaults; Delta and Iceberg readers
would return them as they are. So each publish writes the read-optimized rows once, as the format's own Parquet
files, in one atomic commit of that format: a reader sees the previous version or the new one, never a mix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from stitchlake.errors import ConflictError, StitchError, UsageError
from stitchlake.storage import Storage, storage_for
from stitchlake.storage.registry import scheme_of

if TYPE_CHECKING:
    import pyarrow as pa

#: Who published a table, in its Delta description and as an Iceberg table property: the stitched table's id.
OWNER_MARK = "stitchlake table "
OWNER_PROPERTY = "stitchlake.table-id"
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


@dataclass(frozen=True)
class Publication:
    """One publish: the rows, whose they are, what to keep, and the check to run right before the format's commit
    (once the current version is loaded, so that a commit landing after the check is a conflict, not lost)."""

    rows: pa.Table
    name: str
    table_id: str
    retain: int
    partition_by: Sequence[str] = ()
    #: Recreate the published table: no older version, log entry or manifest survives (after `erase --purge`).
    fresh: bool = False
    before_commit: Callable[[], None] = field(default=lambda: None)
    #: Told the version right after the format's commit, before the bookkeeping that follows it (expiry, vacuum):
    #: from then on the version exists, whatever interrupts the publish.
    committed: Callable[[int], None] = field(default=lambda version: None)


def write_delta(publication: Publication, target: Target) -> Published:
    """Overwrite the Delta table at the target with the rows (their schema replaces the old one: an alter may have
    added, dropped or widened columns), partitioned like the stitched table so readers prune partitions; then
    delete the files only versions older than the last `retain` publishes need, and the files no version lists
    (a crashed writer's)."""
    from deltalake import DeltaTable, write_deltalake

    options = delta_options(target)
    current = (
        DeltaTable(target.location, storage_options=options)
        if DeltaTable.is_deltatable(target.location, storage_options=options)
        else None
    )
    owned = current is None or _owner_of(current, target, publication)
    publication.before_commit()
    before = _data_files(target)
    try:
        write_deltalake(
            current if current is not None else target.location,
            publication.rows,
            mode="overwrite",
            schema_mode="overwrite",
            name=publication.name,
            description=f"{OWNER_MARK}{publication.table_id}",
            partition_by=list(publication.partition_by) or None,
            storage_options=options if current is None else None,
        )
    except Exception as exc:
        loaded = current.version() if current is not None else None
        if loaded is not None and not target.storage().exists(f"_delta_log/{loaded:020d}.json"):
            raise ConflictError(
                f"the published Delta table at {target.location} had its history cut (an erase with --purge) after "
                f"this publish loaded version {loaded}; nothing was published"
            ) from exc
        raise
    table = DeltaTable(target.location, storage_options=options)
    publication.committed(table.version())
    if publication.fresh and current is not None:
        return _cut_history(table, target, before)
    if not owned:  # published before tables recorded their owner: record it once
        table.alter.set_table_description(f"{OWNER_MARK}{publication.table_id}")
    writes = sorted(int(h["version"]) for h in table.history() if h.get("operation") in _DELTA_WRITES)
    version, kept = writes[-1], writes[-publication.retain :]
    # `full`: also the files no version lists, which a publish that crashed before its commit wrote (one presumed
    # dead that commits later conflicts with this commit). vacuum names every file the log has ever removed,
    # deleted by an earlier vacuum or not: count what went.
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, keep_versions=kept, full=True)
    return Published(version, target.location, removed_files=len(before - _data_files(target)))


def _cut_history(table: Any, target: Target, before: set[str]) -> Published:
    """After `erase --purge`: the version just written becomes the table's only one. It is checkpointed, then
    every older log entry and checkpoint and every data file it does not read are deleted, so no statistic, log
    line or file holds an erased value any more.

    The version numbers go on (they never start again at 0): a publish presumed dead that loaded an older version
    and commits late finds that number taken, and the log it would check its commit against gone, and fails; a
    table recreated at version 0 would take its commit as the next version."""
    version = int(table.version())
    table.create_checkpoint()
    storage = target.storage()
    kept = {_relative(uri, target.location) for uri in table.file_uris()}
    doomed = []
    for info in storage.list_files(""):
        if info.path.startswith("_delta_log/"):
            name = info.path.removeprefix("_delta_log/")
            number = name.split(".", 1)[0]
            if number.isdigit() and int(number) < version:
                doomed.append(info.path)
        elif info.path not in kept:
            doomed.append(info.path)
    storage.delete_many(doomed)
    return Published(version, target.location, removed_files=len(before - _data_files(target)))


def _relative(uri: str, location: str) -> str:
    """A data file's URI as a path under the table's location (refused if it is not under it: deleting by a
    wrong name would delete the file a version reads)."""
    base = _without_file_scheme(location).rstrip("/")
    base = base if "://" in base else os.path.abspath(base)
    found = _without_file_scheme(uri)
    if not found.startswith(base + "/"):
        raise StitchError(f"the Delta table at {location} lists {uri}, which is not under it; nothing was deleted")
    return found[len(base) + 1 :]


def _owner_of(current: Any, target: Target, publication: Publication) -> bool:
    """Whether the Delta table at the target records this stitched table as its owner (False: it records none);
    another owner, or another table name, is refused: it is never overwritten."""
    metadata = current.metadata()
    owner = (metadata.description or "").removeprefix(OWNER_MARK) if metadata.description else ""
    if (owner and owner != publication.table_id) or (metadata.name and metadata.name != publication.name):
        raise UsageError(
            f"{target.location} holds the published Delta table of another stitched table ({metadata.name!r}, "
            f"table id {owner or 'unknown'}): give this table its own publish.location"
        )
    return bool(owner)


def _data_files(target: Target) -> set[str]:
    """The Parquet files under a Delta table's folder (relative paths), its log left out."""
    try:
        listed = target.storage().list_files("")
    except FileNotFoundError:
        return set()
    return {f.path for f in listed if f.path.endswith(".parquet") and not f.path.startswith("_delta_log/")}


def iceberg_catalog(target: Target | str, properties: Mapping[str, str] | None = None) -> Any:
    """The catalog of the published Iceberg tables: pyiceberg's catalog for `properties` (a REST or SQL catalog),
    by default a SQLite `SqlCatalog` in the target folder, which is also the warehouse. On S3 the FileIO gets the
    table's S3 settings, and the catalog must be given: a SQLite file cannot live on an object store."""
    from pyiceberg.catalog import load_catalog

    target = target if isinstance(target, Target) else Target(target)
    if not target.on_s3 and scheme_of(target.location) in ("", "file"):
        target = Target(os.path.abspath(target.location.removeprefix("file://")), target.storage_options)
    chosen = dict(properties or {})
    io = {_ICEBERG_S3[name]: value for name, value in target.s3_settings().items() if name in _ICEBERG_S3}
    check_iceberg_catalog(target, chosen)
    if target.on_s3:
        for name, value in _SDK_CHECKSUMS.items():
            os.environ.setdefault(name, value)
    if chosen.get("type", "sql") != "sql":
        # A REST catalog chooses where its tables live (and may take `warehouse` to pick a catalog): ours is not
        # sent unless the properties name one.
        return load_catalog("stitchlake", **{**io, **chosen})
    return load_catalog("stitchlake", **{**_sql_defaults(target), **io, **chosen})


def _sql_defaults(target: Target) -> dict[str, str]:
    """The default SQL catalog: a SQLite file in the target folder, which is also the warehouse (on S3, the
    warehouse alone: the catalog's database must be given)."""
    if target.on_s3:
        return {"type": "sql", "warehouse": target.location.rstrip("/")}
    Path(target.location).mkdir(parents=True, exist_ok=True)
    return {
        "type": "sql",
        "uri": f"sqlite:///{_default_catalog_file(target)}",
        "warehouse": Path(target.location).as_uri(),
    }


def _default_catalog_file(target: Target) -> str:
    return os.path.join(os.path.abspath(target.location), "catalog.db")


def catalog_location(target: Target, properties: Mapping[str, str]) -> str:
    """Where a reader finds the published Iceberg table by name: the catalog's URI, credentials left out."""
    uri = properties.get("uri")
    if uri is None:
        return "" if target.on_s3 else f"sqlite:///{_default_catalog_file(target)}"
    parts = urlsplit(uri)
    if parts.password is None and parts.username is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def published_table_exists(
    fmt: str, target: Target, catalog_properties: Mapping[str, str], namespace: str, name: str
) -> bool:
    """Whether `fmt` is published at the target (its publishes may be archived off the timeline). The default
    SQLite catalog is only opened when its file exists: asking must not create one."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(target.location, storage_options=delta_options(target)))
    if not catalog_properties and (target.on_s3 or not os.path.exists(_default_catalog_file(target))):
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


def check_iceberg_catalog(target: Target, properties: Mapping[str, str]) -> None:
    """Refuse the default SQLite catalog for a target on an object store: SQLite needs a file on a disk."""
    if target.on_s3 and "uri" not in properties and properties.get("type", "sql") == "sql":
        raise UsageError(
            f"publishing Iceberg to {target.location} needs a catalog that is not a file on the object store: "
            "set publish.iceberg_catalog (a REST catalog, or type: sql with a database uri)"
        )


def write_iceberg(
    publication: Publication, target: Target, catalog_properties: Mapping[str, str], namespace: str
) -> Published:
    """Overwrite the Iceberg table `namespace.name` with the rows (evolving its schema by name first), partitioned
    by identity on the stitched table's partition columns; expire the snapshots older than the last `retain`
    publishes, and delete the data files only they read."""
    rows = publication.rows
    catalog = iceberg_catalog(target, catalog_properties)
    catalog.create_namespace_if_not_exists(namespace)
    identifier = (namespace, publication.name)
    table = catalog.load_table(identifier) if catalog.table_exists(identifier) else None
    if table is not None:
        owner = table.properties.get(OWNER_PROPERTY, "")
        if owner and owner != publication.table_id:
            raise UsageError(
                f"Iceberg table {namespace}.{publication.name} holds another stitched table's published rows (table "
                f"id {owner}): give this table its own publish.iceberg_namespace"
            )
    publication.before_commit()
    removed = 0
    if publication.fresh and table is not None:
        # Dropped and created anew: a publish presumed dead that loaded the old table and commits late is refused
        # by the catalog (its commit asserts the old table's UUID and snapshot); the data files it may still write
        # under the same location are swept by the next publish.
        location = _without_file_scheme(table.location()).rstrip("/")
        catalog.drop_table(identifier)
        storage = target.storage(location)
        doomed = [info.path for info in storage.list_files("")]
        storage.delete_many(doomed)
        removed = sum(1 for path in doomed if path.endswith(".parquet"))
        table = None
    loaded = table.metadata.table_uuid if table is not None else None
    try:
        if table is not None:
            with table.transaction() as transaction:
                if table.properties.get(OWNER_PROPERTY) != publication.table_id:
                    transaction.set_properties({OWNER_PROPERTY: publication.table_id})
                with transaction.update_schema() as update:
                    update.union_by_name(rows.schema)
                    for column in [f.name for f in table.schema().fields if f.name not in rows.schema.names]:
                        update.delete_column(column)
            names = rows.schema.names
            if [f.name for f in table.schema().fields] != names:  # added columns go last: keep `stitch read`'s order
                with table.update_schema() as update:
                    for before, column in pairwise(names):
                        update.move_after(column, before)
            _partition_by(table, publication.partition_by)
            table.overwrite(rows)
        else:
            table = catalog.create_table(
                identifier, schema=rows.schema, properties={OWNER_PROPERTY: publication.table_id}
            )
            _partition_by(table, publication.partition_by)
            table.append(rows)
    except Exception as exc:
        if loaded is not None and _recreated(catalog, identifier, loaded):
            raise ConflictError(
                f"the published Iceberg table {namespace}.{publication.name} was recreated (an erase with --purge) "
                "after this publish loaded it; nothing was published"
            ) from exc
        raise
    table = catalog.load_table(identifier)
    current = table.current_snapshot()
    assert current is not None
    publication.committed(current.snapshot_id)
    removed += _expire(table, publication.retain, target)
    removed += _sweep_unlisted(catalog.load_table(identifier), target)
    name = f"{namespace}.{publication.name}"
    return Published(current.snapshot_id, table.location(), identifier=name, removed_files=removed)


def _recreated(catalog: Any, identifier: tuple[str, str], loaded: Any) -> bool:
    """Whether the catalog's table is no longer the one loaded (dropped, or dropped and created anew)."""
    try:
        return bool(catalog.load_table(identifier).metadata.table_uuid != loaded)
    except Exception:  # gone, or the catalog cannot say: not ours to commit to either way
        return True


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
    """Keep the snapshots of the last `retain` publishes (an overwrite is a delete then an append snapshot) and
    delete the data files only the expired ones read. Files no snapshot ever listed stay: they may be another
    publish's, not yet committed."""
    from pyiceberg.table.snapshots import Operation

    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    publishes = [s for s in snapshots if s.summary is not None and s.summary.operation == Operation.APPEND]
    if len(publishes) <= retain:
        return 0
    oldest_kept = publishes[-retain].timestamp_ms
    expired = [s.snapshot_id for s in snapshots if s.timestamp_ms < oldest_kept]
    if not expired:
        return 0
    read_by_expired = _files_read(table, expired)
    table.maintenance.expire_snapshots().by_ids(expired).commit()
    table = table.refresh()
    unread = read_by_expired - _files_read(table, [s.snapshot_id for s in table.snapshots()])
    location = _without_file_scheme(table.location()).rstrip("/")
    table_storage = target.storage(location)
    table_storage.delete_many(sorted(path.removeprefix(f"{location}/") for path in unread))
    return len(unread)


def _sweep_unlisted(table: Any, target: Target) -> int:
    """Delete the data files under the table's `data/` that no snapshot lists: a publish that crashed after writing
    them and before its commit left them. Run after this publish's own commit, it cannot take a file a commit will
    still list: publishes of a format run one at a time, and one presumed dead that commits later is refused by
    the catalog (its commit asserts the snapshot it loaded, no longer the current one)."""
    location = _without_file_scheme(table.location()).rstrip("/")
    listed = _files_read(table, [s.snapshot_id for s in table.snapshots()])
    storage = target.storage(location)
    try:
        found = [info.path for info in storage.list_files("data")]
    except FileNotFoundError:
        return 0
    unlisted = sorted(path for path in found if path.endswith(".parquet") and f"{location}/{path}" not in listed)
    storage.delete_many(unlisted)
    return len(unlisted)


def _files_read(table: Any, snapshot_ids: Sequence[int]) -> set[str]:
    """The data files the given snapshots read (paths without a file:// scheme)."""
    return {
        _without_file_scheme(task.file.file_path)
        for snapshot_id in snapshot_ids
        for task in table.scan(snapshot_id=snapshot_id).plan_files()
    }


def _without_file_scheme(location: str) -> str:
    return location[len("file://") :] if location.startswith("file://") else location
