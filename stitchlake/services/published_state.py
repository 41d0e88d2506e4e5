"""Where each format is published and whether it is behind the table, read off the timeline: what a publish
decides before it runs, what an erase reports as out of reach, and what `stitch status` shows, without publishing
(nor importing what publishing needs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stitchlake.io.published import PUBLISHERS, Target, published_table_exists
from stitchlake.paths import PUBLISHED_DIR
from stitchlake.storage.registry import local_place
from stitchlake.timeline.actions import CHANGES_PUBLISHED_ROWS, REWRITES
from stitchlake.timeline.archive import archived_batches_newest_first, archived_instants, horizon_of, load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import PublishCommit, PublishPlan
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import PublishFormat

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


def published_location(table: TableHandle, fmt: PublishFormat) -> str:
    """Where `fmt` is published: by default `.stitch/published/<format>` inside the table; with
    `publish.location`, `<location>/<table name>/<format>`, so tables sharing a location never share a published
    table. A local folder or an `s3://` prefix alike (delta-rs and pyiceberg reach the store with the table's
    `storage:` settings)."""
    spec = table.config.publish
    if spec.location:
        return f"{spec.location.rstrip('/')}/{table.config.table.name}/{fmt.value}"
    return f"{table.path.rstrip('/')}/{PUBLISHED_DIR}/{fmt.value}"


def published_identifier(table: TableHandle, fmt: PublishFormat) -> str:
    """The name a publish of `fmt` records: `<namespace>.<table name>` for a format a catalog names (Iceberg: a
    catalog finds it by that), none for one whose location is its name (Delta)."""
    if not PUBLISHERS[fmt].named:
        return ""
    return f"{table.config.publish.iceberg_namespace}.{table.config.table.name}"


def moved_since(table: TableHandle, fmt: PublishFormat, commit: PublishCommit) -> bool:
    """Whether the config now points `fmt` somewhere else than `commit` published it (another `publish.location`,
    another Iceberg namespace or catalog). An Iceberg table is its catalog and name: a catalog given in the config
    says where its tables live whatever `publish.location` says (the default one is a file at the location)."""
    renamed = bool(commit.identifier) and commit.identifier != published_identifier(table, fmt)
    if PUBLISHERS[fmt].named and commit.catalog:
        return renamed or not same_catalog(commit.catalog, current_catalog(table, fmt))
    return renamed or _place(commit.location) != _place(published_location(table, fmt))


def same_catalog(recorded: str, now: str) -> bool:
    """Whether a recorded catalog is the one named now; a record from before catalogs were named with their
    `warehouse` or `prefix` (a bare URI) is taken for the same catalog at that URI."""
    return recorded == now or (" (" not in recorded and now.split(" (", 1)[0] == recorded)


def current_catalog(table: TableHandle, fmt: PublishFormat) -> str:
    """Where the config now has readers find the published table of `fmt` (`PublishCommit.catalog`; "": none)."""
    target = Target(published_location(table, fmt), table.config.storage.options)
    return PUBLISHERS[fmt].catalog(target, table.config.publish.iceberg_catalog)


def _place(location: str) -> str:
    """A location spelled one way: a path on this machine absolute (a `file://` URI as its path), no trailing `/`.
    Another spelling of the same folder is no move: called "left behind", the live published table would be the
    one an operator is told to delete."""
    return local_place(location).rstrip("/") or "/"


def left_behind(table: TableHandle, timeline: Timeline | None = None) -> list[str]:
    """Published tables of this table that the config no longer points at (`publish.location` or the Iceberg
    namespace changed since they were published) and that still exist: no publish reaches them any more, so they
    keep the rows they had, an erase's keys too. Read off the publishes on the timeline and in the archive."""
    timeline = timeline or table.timeline()
    commits = [timeline.commit(i) for i in timeline.completed([Action.PUBLISH])]
    commits += [entry.commit for entry in archived_instants(table.storage)]
    found: dict[tuple[str, str, str], str] = {}
    for commit in commits:
        if not isinstance(commit, PublishCommit):
            continue
        fmt = commit.format
        target = Target(commit.location, table.config.storage.options)
        # A catalog given in the config is where its table is, whatever location the publish had.
        given = bool(commit.catalog) and commit.catalog != PUBLISHERS[fmt].catalog(target, {})
        where = (fmt.value, commit.catalog if given else _place(commit.location), commit.identifier)
        if where in found or not moved_since(table, fmt, commit):
            continue
        namespace, _, name = commit.identifier.rpartition(".")
        properties = _catalog_of(table, target, commit)
        try:
            there = properties is None or published_table_exists(
                fmt, target, properties, namespace, name or table.config.table.name
            )
        except Exception:  # a store or catalog that cannot answer: name it all the same
            there = True
        if there:
            place = f" in catalog {commit.catalog}" if given else f" at {commit.location}"
            found[where] = f"{fmt.value} {commit.identifier or commit.table_location or commit.location}" + (
                place if commit.identifier else ""
            )
    return sorted(found.values())


def _catalog_of(table: TableHandle, target: Target, commit: PublishCommit) -> dict[str, str] | None:
    """The catalog properties that reach the table `commit` published: the config's when it is the same catalog,
    the default one's when it was the default at its location; None for a catalog the config no longer names (its
    credentials are not known here: the table is named, not looked for)."""
    configured = table.config.publish.iceberg_catalog
    fmt = commit.format
    if not commit.catalog or same_catalog(commit.catalog, current_catalog(table, fmt)):
        return configured
    if commit.catalog == PUBLISHERS[fmt].catalog(target, {}):  # the default catalog at its location
        return {}
    return None


def last_publish(timeline: Timeline, fmt: PublishFormat) -> Instant | None:
    """The newest completed publish of `fmt` on the active timeline (from the completed files, which a timeline
    has read already: no request per instant on an object store)."""
    for instant in reversed(timeline.completed([Action.PUBLISH])):
        commit = timeline.commit(instant)
        if isinstance(commit, PublishCommit) and commit.format == fmt:
            return instant
    return None


def running_format(timeline: Timeline, instant: Instant) -> PublishFormat | None:
    plan = timeline.plan(instant)
    return plan.format if isinstance(plan, PublishPlan) else None


def has_base_files(table: TableHandle, timeline: Timeline) -> bool:
    """Whether any file slice has a base file (a compaction the active timeline no longer lists, archived)."""
    return any(s.base is not None for s in table.view(timeline).latest_slices(None))


def stale_formats(
    table: TableHandle, formats: list[PublishFormat], timeline: Timeline | None = None
) -> list[PublishFormat]:
    """The formats among `formats` whose last publish predates a change to what they show (it read as of its own
    request), or went to another location or Iceberg namespace; or that were never published while something is
    compacted."""
    timeline = timeline or table.timeline()
    changed = timeline.latest_completed(CHANGES_PUBLISHED_ROWS)
    out = []
    for fmt in formats:
        found = newest_publish(table, timeline, fmt)
        if found is None:
            compacted = timeline.latest_completed(REWRITES) is not None
            if compacted or has_base_files(table, timeline):
                out.append(fmt)
            continue
        last, commit, archived_change = found
        moved = moved_since(table, fmt, commit)
        latest_change = max((changed.completed or "") if changed else "", archived_change)
        if moved or latest_change > last.requested:
            out.append(fmt)
    return out


def newest_publish(
    table: TableHandle, timeline: Timeline, fmt: PublishFormat
) -> tuple[Instant, PublishCommit, str] | None:
    """The newest completed publish of `fmt` with its commit: on the active timeline, else in the archive (newest
    batch first, no further than it); with the latest completion of a change to published rows archived since it
    ('' when none is: the active timeline says the rest). None: `fmt` was never published."""
    last = last_publish(timeline, fmt)
    if last is not None:
        commit = timeline.commit(last)
        if not isinstance(commit, PublishCommit):
            return None
        return last, commit, _archived_change_since(table, timeline, last.requested)
    if load_checkpoint(table.storage) is None:
        return None
    changes: list[str] = []
    for _horizon, entries in archived_batches_newest_first(table.storage):
        for entry in entries:
            if entry.instant.action in CHANGES_PUBLISHED_ROWS:
                changes.append(entry.instant.completed or "")
            if isinstance(entry.commit, PublishCommit) and entry.commit.format == fmt:
                since = [c for c in changes if c > entry.instant.requested]
                return entry.instant, entry.commit, max(since, default="")
    return None


def _archived_change_since(table: TableHandle, timeline: Timeline, since: str) -> str:
    """The latest completion after `since` of a change to published rows that the archive holds: one that completed
    while the publish ran (after its read) is archived before the publish, which completed later."""
    horizon = horizon_of(table.storage)
    if horizon is None or horizon < since:
        return ""
    for batch_horizon, entries in archived_batches_newest_first(table.storage):
        changes = [e.instant.completed or "" for e in entries if e.instant.action in CHANGES_PUBLISHED_ROWS]
        later = [c for c in changes if c > since]
        if later:
            return max(later)
        if batch_horizon < since:
            break
    return ""


def published_formats(table: TableHandle, timeline: Timeline | None = None) -> list[PublishFormat]:
    """`publish.formats`, and every other format this table has published: on the active timeline, or found at
    its published location (its publishes may have been archived)."""
    timeline = timeline or table.timeline()
    configured = list(table.config.publish.formats)
    extra = []
    for fmt in PublishFormat:
        if fmt in configured:
            continue
        location = Target(published_location(table, fmt), table.config.storage.options)
        if last_publish(timeline, fmt) is not None or published_table_exists(
            fmt,
            location,
            table.config.publish.iceberg_catalog,
            table.config.publish.iceberg_namespace,
            table.config.table.name,
        ):
            extra.append(fmt)
    return [*configured, *extra]


@dataclass(frozen=True)
class PublishedFormat:
    """One format in `stitch status`: where it goes, its last publish (the archive's when the active timeline has
    none), and whether it is behind the table (a compaction, erase, alter or restore since that publish read it, or
    the config moved it)."""

    format: PublishFormat
    configured: bool
    location: str
    last_publish: str | None
    version: int | None
    stale: bool


def published_status(table: TableHandle, timeline: Timeline) -> list[PublishedFormat]:
    """`publish.formats` and every other format with a publish on the active timeline (from metadata only: a
    format published before the archive horizon and not configured is not probed for; a configured one's last
    publish is looked for in the archive too)."""
    configured = list(table.config.publish.formats)
    formats = [*configured, *(f for f in PublishFormat if f not in configured and last_publish(timeline, f))]
    stale = set(stale_formats(table, formats, timeline))
    out = []
    for fmt in formats:
        found = newest_publish(table, timeline, fmt)
        out.append(
            PublishedFormat(
                format=fmt,
                configured=fmt in configured,
                location=published_location(table, fmt),
                last_publish=found[0].requested if found is not None else None,
                version=found[1].version if found is not None else None,
                stale=fmt in stale,
            )
        )
    return out
