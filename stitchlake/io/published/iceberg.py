"""Publishing as an Iceberg table with pyiceberg: one snapshot per publish in the configured catalog (SQLite beside
the published tables by default, or REST), older snapshots expired and data files no snapshot lists swept."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from stitchlake.config.fields import iceberg_catalog_refusal
from stitchlake.errors import ConflictError, UsageError
from stitchlake.io.published.target import OWNER_PROPERTY, Publication, Published, Target
from stitchlake.storage.registry import without_file_scheme

#: pyiceberg writes through pyarrow's S3 client (the AWS C++ SDK), whose default request checksums S3-compatible
#: stores such as Ceph's gateway refuse (411 MissingContentLength on every upload). Checksums only where an API
#: requires them is an SDK setting AWS itself accepts; it is read from the environment when a client is created.
_SDK_CHECKSUMS = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}


_ICEBERG_S3 = {
    "endpoint": "s3.endpoint",
    "region": "s3.region",
    "access_key_id": "s3.access-key-id",
    "secret_access_key": "s3.secret-access-key",
    "session_token": "s3.session-token",
}


def iceberg_catalog(target: Target | str, properties: Mapping[str, str] | None = None) -> Any:
    """The catalog of the published Iceberg tables: pyiceberg's catalog for `properties` (a REST or SQL catalog),
    by default a SQLite `SqlCatalog` in the target folder, which is also the warehouse. On S3 the FileIO gets the
    table's S3 settings, and the catalog must be given: a SQLite file cannot live on an object store."""
    from pyiceberg.catalog import load_catalog

    target = target if isinstance(target, Target) else Target(target)
    if target.local_folder is not None:
        target = Target(target.local_folder, target.storage_options)
    chosen = dict(properties or {})
    io = {_ICEBERG_S3[name]: value for name, value in target.client_settings().items() if name in _ICEBERG_S3}
    check_iceberg_catalog(target, chosen)
    if target.local_folder is None:
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
    if target.local_folder is None:
        return {"type": "sql", "warehouse": target.location.rstrip("/")}
    Path(target.local_folder).mkdir(parents=True, exist_ok=True)
    return {
        "type": "sql",
        "uri": f"sqlite:///{default_catalog_file(target)}",
        "warehouse": Path(target.local_folder).as_uri(),
    }


def default_catalog_file(target: Target) -> str:
    """The default catalog's SQLite file, in the target folder (a target on disk only)."""
    assert target.local_folder is not None, "the default catalog is a file on disk"
    return os.path.join(target.local_folder, "catalog.db")


def catalog_location(target: Target, properties: Mapping[str, str]) -> str:
    """Where a reader finds the published Iceberg table by name: the catalog's URI, credentials left out, with the
    `warehouse` or `prefix` it names (one REST endpoint may serve several catalogs by them)."""
    uri = properties.get("uri")
    if uri is None:
        return "" if target.local_folder is None else f"sqlite:///{default_catalog_file(target)}"
    parts = urlsplit(uri)
    if parts.password is not None or parts.username is not None:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        uri = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    named = [f"{name}={properties[name]}" for name in ("warehouse", "prefix") if properties.get(name)]
    return f"{uri} ({', '.join(named)})" if named else uri


def check_iceberg_catalog(target: Target, properties: Mapping[str, str]) -> None:
    """Refuse the default SQLite catalog for a target on an object store (the config's rule, for a format it does
    not list: `stitch publish -f iceberg`, or `iceberg_catalog()` called directly)."""
    refused = iceberg_catalog_refusal(target.location, properties)
    if refused:
        raise UsageError(refused)


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
        location = without_file_scheme(table.location()).rstrip("/")
        catalog.drop_table(identifier)
        storage = target.storage(location)
        doomed = [info.path for info in storage.list_files("")]
        storage.delete_many(doomed)
        removed = sum(1 for path in doomed if path.endswith(".parquet"))
        table = None
    loaded = table.metadata.table_uuid if table is not None else None
    try:
        # One commit: readers never see the new schema or partitioning over the old rows, and a publish that fails
        # leaves the table as it was.
        if table is not None:
            missing = _missing_partitions(table, publication.partition_by)
            with table.transaction() as transaction:
                if table.properties.get(OWNER_PROPERTY) != publication.table_id:
                    transaction.set_properties({OWNER_PROPERTY: publication.table_id})
                with transaction.update_schema() as update:
                    update.union_by_name(rows.schema)
                    for column in [f.name for f in table.schema().fields if f.name not in rows.schema.names]:
                        update.delete_column(column)
                names = rows.schema.names
                with transaction.update_schema() as update:  # added columns go last: keep `stitch read`'s order
                    for before, column in pairwise(names):
                        update.move_after(column, before)
                _partition_by(transaction, missing)
                transaction.overwrite(rows)
        else:
            _create_with_rows(catalog, identifier, publication)
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


def _create_with_rows(catalog: Any, identifier: tuple[str, str], publication: Publication) -> None:
    """A new table with its spec and rows. Where the catalog stages a create (pyiceberg's SQL catalog, the default)
    it appears with its rows in one commit, or not at all: no reader finds it empty, neither while the rows are
    written nor after a failed append (a purge's republish dropped the table before: readers find none, an error,
    never an empty table that answers every query with nothing). Not every REST catalog stages a create: there it
    is created, then its spec and rows go in one commit."""
    from pyiceberg.catalog.sql import SqlCatalog

    rows, properties = publication.rows, {OWNER_PROPERTY: publication.table_id}
    if isinstance(catalog, SqlCatalog):
        with catalog.create_table_transaction(identifier, schema=rows.schema, properties=properties) as transaction:
            _partition_by(transaction, list(publication.partition_by))
            transaction.append(rows)
        return
    table = catalog.create_table(identifier, schema=rows.schema, properties=properties)
    with table.transaction() as transaction:
        _partition_by(transaction, list(publication.partition_by))
        transaction.append(rows)


def _recreated(catalog: Any, identifier: tuple[str, str], loaded: Any) -> bool:
    """Whether the catalog's table is no longer the one loaded (dropped, or dropped and created anew)."""
    try:
        return bool(catalog.load_table(identifier).metadata.table_uuid != loaded)
    except Exception:  # gone, or the catalog cannot say: not ours to commit to either way
        return True


def _missing_partitions(table: Any, columns: Sequence[str]) -> list[str]:
    """The columns of `columns` the table's spec does not partition by identity yet (a publish before partitioning
    did not is evolved: Iceberg keeps old files under their old spec)."""
    from pyiceberg.transforms import IdentityTransform

    spec = table.spec()
    have = {table.schema().find_column_name(f.source_id) for f in spec.fields if f.transform == IdentityTransform()}
    return [c for c in columns if c not in have]


def _partition_by(transaction: Any, missing: Sequence[str]) -> None:
    """Identity partitions on `missing`, in the publish's own transaction."""
    if missing:
        with transaction.update_spec() as update:
            for column in missing:
                update.add_identity(column)


def _expire(table: Any, retain: int, target: Target) -> int:
    """Keep the snapshots of the last `retain` publishes (an overwrite is a delete then an append snapshot) and
    delete the data files only the expired ones read. Files no snapshot ever listed stay: they may be another
    publish's, not yet committed."""
    from pyiceberg.table.snapshots import Operation

    # By ancestry from the current snapshot, not by timestamp: hosts' clocks differ, and expiring by time could
    # pick the current snapshot itself.
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    chain: list[Any] = []
    step = table.current_snapshot()
    while step is not None:
        chain.append(step)
        step = by_id.get(step.parent_snapshot_id) if step.parent_snapshot_id is not None else None
    chain.reverse()
    publishes = [i for i, s in enumerate(chain) if s.summary is not None and s.summary.operation == Operation.APPEND]
    if len(publishes) <= retain:
        return 0
    expired = [s.snapshot_id for s in chain[: publishes[-retain]]]
    if not expired:
        return 0
    read_by_expired = _files_read(table, expired)
    table.maintenance.expire_snapshots().by_ids(expired).commit()
    table = table.refresh()
    unread = read_by_expired - _files_read(table, [s.snapshot_id for s in table.snapshots()])
    location = without_file_scheme(table.location()).rstrip("/")
    table_storage = target.storage(location)
    table_storage.delete_many(sorted(path.removeprefix(f"{location}/") for path in unread))
    return len(unread)


def _sweep_unlisted(table: Any, target: Target) -> int:
    """Delete the data files under the table's `data/` that no snapshot lists: a publish that crashed after writing
    them and before its commit left them. Run after this publish's own commit, it cannot take a file a commit will
    still list: publishes of a format run one at a time, and one presumed dead that commits later is refused by
    the catalog (its commit asserts the snapshot it loaded, no longer the current one)."""
    location = without_file_scheme(table.location()).rstrip("/")
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
        without_file_scheme(task.file.file_path)
        for snapshot_id in snapshot_ids
        for task in table.scan(snapshot_id=snapshot_id).plan_files()
    }
