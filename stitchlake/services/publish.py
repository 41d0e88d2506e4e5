"""Publishing (issue 13): the table's compacted state as a Delta Lake or Iceberg table other engines can read.

A publish is an action on the timeline. Under the lock it picks its source, the newest completed rewrite (a
compaction or an erase), and records it in its plan; it reads the table as `stitch read --mode read_optimized
--as-of <source>` does (defaults applied, deleted and erased keys gone, no `_sl__` columns) and writes those rows
as the next version of the published table (`stitchlake.io.published`), then completes with that version. The
published files live apart from the table's own files (`.stitch/published/<format>/` by default), so `stitch clean`
never deletes what a published version reads; each publish keeps the last `publish.retain_versions` versions
readable and deletes the files only older versions needed.

A publish that crashes after the format's own commit but before its instant completed leaves a published version
the timeline does not list; it shows the same state, and the next publish supersedes it. Rolling the instant back
does not touch the published table.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.config import PublishFormat
from stitchlake.errors import StitchError, UsageError
from stitchlake.io.published import Target, check_iceberg_catalog, write_delta, write_iceberg
from stitchlake.paths import PUBLISHED_DIR
from stitchlake.reader import READ_OPTIMIZED, read
from stitchlake.storage.registry import scheme_of
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import PublishCommit, PublishPlan
from stitchlake.transaction import Transaction

if TYPE_CHECKING:
    from stitchlake.table import Table
    from stitchlake.timeline.timeline import Timeline


@dataclass
class PublishResult:
    """What a publish made, for summaries and `--json`: `location` is where this format is published to (the
    default Iceberg catalog and warehouse too), `table_location` the published table's own files."""

    instant: str
    completed: str | None
    format: str
    location: str
    source: str
    version: int
    identifier: str
    rows: int
    removed_files: int
    table_location: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def published_location(table: Table, fmt: PublishFormat) -> str:
    """Where `fmt` is published: `publish.location/<format>`, by default inside the table's `.stitch/`; a local
    folder or an `s3://` prefix alike (delta-rs and pyiceberg reach the store with the table's `storage:`
    settings)."""
    spec = table.config.publish
    root = (spec.location or f"{table.path.rstrip('/')}/{PUBLISHED_DIR}").rstrip("/")
    if spec.location and _inside(root, table.path) and not _inside(root, f"{table.path.rstrip('/')}/{PUBLISHED_DIR}"):
        raise UsageError(
            f"publish.location {root!r} is inside the table folder: keep it outside, or leave it unset "
            f"({PUBLISHED_DIR} in the table)"
        )
    return f"{root}/{fmt.value}"


def _inside(location: str, folder: str) -> bool:
    """Whether `location` is `folder` or under it (local paths compared absolute, URIs as text)."""
    if scheme_of(location) in ("", "file") and scheme_of(folder) in ("", "file"):
        location, folder = os.path.abspath(location), os.path.abspath(folder)
    location, folder = location.rstrip("/"), folder.rstrip("/")
    return location == folder or location.startswith(folder + "/")


def parse_format(value: str) -> PublishFormat:
    try:
        return PublishFormat(value)
    except ValueError:
        known = ", ".join(f.value for f in PublishFormat)
        raise UsageError(f"unknown publish format {value!r} (formats: {known})") from None


def publish(table: Table, fmt: str | PublishFormat) -> PublishResult:
    """Publish the newest compacted state as the next version of the `fmt` table (exit 2 when nothing has been
    compacted yet)."""
    table.require()
    chosen = parse_format(str(fmt.value if isinstance(fmt, PublishFormat) else fmt))
    location = published_location(table, chosen)
    target = Target(location, table.config.storage.options)
    if chosen == PublishFormat.ICEBERG:
        check_iceberg_catalog(target, table.config.publish.iceberg_catalog)

    def plan(timeline: Timeline, _requested: str) -> PublishPlan:
        source = timeline.latest_completed([Action.COMPACTION, Action.ERASE])
        if source is None or source.completed is None:
            raise UsageError("nothing is compacted yet: run `stitch compact` first (a publish shows base files)")
        return PublishPlan(format=chosen.value, location=location, source=source.completed)

    txn = Transaction.begin_planned(table, Action.PUBLISH, plan=plan)
    assert txn is not None and isinstance(txn.plan, PublishPlan)
    source = txn.plan.source
    try:
        rows = read(table, mode=READ_OPTIMIZED, as_of=source)
        spec = table.config.publish
        name = table.config.table.name
        partitions = table.config.table.partition_names
        if chosen == PublishFormat.DELTA:
            made = write_delta(rows, target, name, spec.retain_versions, partitions)
        else:
            made = write_iceberg(
                rows, target, spec.iceberg_catalog, spec.iceberg_namespace, name, spec.retain_versions, partitions
            )
        commit = PublishCommit(
            format=chosen.value,
            location=location,
            source=source,
            version=made.version,
            identifier=made.identifier,
            rows=rows.num_rows,
            removed_files=made.removed_files,
            table_location=made.table_location,
        )
        done = txn.complete(commit)
    except BaseException as exc:
        refused = txn.refusal_after(exc)
        txn.abort()
        if refused is not None:
            raise refused from exc
        if isinstance(exc, Exception) and not isinstance(exc, StitchError):
            raise StitchError(f"publishing as {chosen.value} to {location} failed: {exc}") from exc
        raise
    return PublishResult(
        done.requested,
        done.completed,
        chosen.value,
        location,
        source,
        made.version,
        made.identifier,
        rows.num_rows,
        made.removed_files,
        made.table_location,
    )


def publish_configured(table: Table) -> list[PublishResult]:
    """Publish every format of `publish.formats` (after a compaction)."""
    return [publish(table, fmt) for fmt in table.config.publish.formats]
