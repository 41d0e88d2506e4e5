"""Publishing as a Delta Lake table with delta-rs: one version per publish, older versions cut by a full vacuum."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from stitchlake.errors import ConflictError, StitchError, UsageError
from stitchlake.io.published.target import OWNER_MARK, Publication, Published, Target
from stitchlake.storage.registry import is_uri, without_file_scheme

if TYPE_CHECKING:
    from pyarrow import Schema

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


def delta_options(target: Target) -> dict[str, str] | None:
    """delta-rs `storage_options` for the target (None on local disk). delta-rs commits a version with S3's
    conditional PUT, so publishes racing for the same version cannot overwrite each other's log entry."""
    if target.local_folder is not None:
        return None
    return {_DELTA_S3[name]: value for name, value in target.client_settings().items()}


def write_delta(publication: Publication, target: Target) -> Published:
    """Overwrite the Delta table at the target with the rows (their schema replaces the old one: an alter may have
    added, dropped or widened columns), partitioned like the stitched table so readers prune partitions; then
    delete the files only versions older than the last `retain` publishes need, and the files no version lists
    (a crashed writer's)."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    options = delta_options(target)
    current = (
        DeltaTable(target.location, storage_options=options)
        if DeltaTable.is_deltatable(target.location, storage_options=options)
        else None
    )
    owned = current is None or _owner_of(current, target, publication)
    statistics = skipping_statistics(publication.rows.schema)
    if current is not None and any(current.metadata().configuration.get(k) != v for k, v in statistics.items()):
        # delta-rs takes `configuration` only when it creates a table: a table published before (or a column
        # widened to a double since) gets its statistics columns set here, a version of its own.
        current.alter.set_table_properties(
            statistics, raise_if_not_exists=False, commit_properties=CommitProperties(max_commit_retries=0)
        )
    publication.before_commit()
    before = _data_files(target)
    try:
        # The version after the one loaded, or none: delta-rs would retry a commit that lost its version on top of
        # the winner (an overwrite of a version with no file conflicts with nothing), and a table found missing
        # would be overwritten if another publish created it meanwhile (a run frozen past its heartbeat, woken).
        write_deltalake(
            current if current is not None else target.location,
            publication.rows,
            mode="overwrite" if current is not None else "error",
            schema_mode="overwrite" if current is not None else None,
            name=publication.name,
            description=f"{OWNER_MARK}{publication.table_id}",
            partition_by=list(publication.partition_by) or None,
            configuration=statistics,
            storage_options=options if current is None else None,
            commit_properties=CommitProperties(max_commit_retries=0),
        )
    except Exception as exc:
        if current is None and DeltaTable.is_deltatable(target.location, storage_options=options):
            raise ConflictError(
                f"a published Delta table appeared at {target.location} after this publish found none (another "
                "publish made it meanwhile); nothing was published"
            ) from exc
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


def skipping_statistics(schema: Schema) -> dict[str, str]:
    """The columns a version's files carry min/max statistics of: none holding a float. delta-rs leaves NaN out of
    a float's min and max, while Spark orders NaN above every number, so Spark would skip a file holding a NaN
    that `WHERE w > 5` must return."""
    import pyarrow as pa

    def has_float(kind: pa.DataType) -> bool:
        if pa.types.is_floating(kind):
            return True
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return has_float(kind.value_type)
        if pa.types.is_map(kind):
            return has_float(kind.key_type) or has_float(kind.item_type)
        return pa.types.is_struct(kind) and any(has_float(kind.field(i).type) for i in range(kind.num_fields))

    kept = ["`" + f.name.replace("`", "``") + "`" for f in schema if not has_float(f.type)]  # keys are never floats
    return {"delta.dataSkippingStatsColumns": ",".join(kept)}


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
    base = without_file_scheme(location).rstrip("/")
    base = base if is_uri(base) else os.path.abspath(base)
    found = without_file_scheme(uri)
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
