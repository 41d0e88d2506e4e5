"""Publishing (issue 13): the table's compacted state as a Delta Lake or Iceberg table other engines can read.

A publish is an action on the timeline. Under the lock it refuses while another live publish of the same format
runs (two would race to be the newest version, and the slower one would put an older state back), and records
its source, the newest completed rewrite (a compaction or an erase). It reads the table as `stitch read --mode
read_optimized --as-of <the publish's own time>` does — the base files of that source, under the schema in force
now (an alter's added columns, defaults and drops apply without waiting for a compaction), deleted and erased keys
gone, no `_sl__` columns — and writes those rows as the next version of the published table
(`stitchlake.io.published`), then completes with that version. The published files live apart from the table's
own files, so `stitch clean` never deletes what a published version reads; each publish keeps the last
`publish.retain_versions` versions readable and deletes the files only older versions needed.

What republishes on its own: a compaction publishes `publish.formats`; a rescale and an alter do too; an erase
and a restore, which take rows out of what readers see, republish every format the table has published, configured
or not (an erase with `--purge` then keeps only the new version, so no published version still holds the keys). A
format is republished only when it is stale: some compaction, rescale, erase, alter or restore completed after its
last publish.

A publish that stops after the format's own commit but before its instant completed leaves a published version
the timeline does not list; it shows the same state, the publish says so when it can (interrupted, or failing in
the bookkeeping after the commit), and the next publish supersedes it. Rolling the instant back does not touch the
published table. Files a crashed publish wrote and never committed are deleted by the next publish of the format
(`stitchlake.io.published`: Delta's full vacuum, Iceberg's sweep of data files no snapshot lists).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.concurrency.heartbeat import is_expired
from stitchlake.errors import (
    COMPLETED_BEFORE_STOP,
    BusyError,
    ConflictError,
    StitchError,
    Terminated,
    UsageError,
    one_of,
)
from stitchlake.io.published import (
    PUBLISHERS,
    Publication,
    Target,
    commit_conflicts,
)
from stitchlake.reading.options import ReadOptions
from stitchlake.reading.reader import read
from stitchlake.services.published_state import (
    has_base_files,
    last_publish,
    published_formats,
    published_location,
    running_format,
    stale_formats,
)
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import REWRITES
from stitchlake.timeline.archive import archived_batches_newest_first, load_checkpoint
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import EraseCommit, PublishCommit, PublishPlan
from stitchlake.timeline.timeline import Timeline
from stitchlake.vocabulary import PublishFormat, ReadMode

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

log = logging.getLogger(__name__)


@dataclass
class PublishResult:
    """What a publish made, for summaries and `--json`: `location` is where this format is published to (the
    default Iceberg catalog and warehouse too), `table_location` the published table's own files, `catalog` where
    an Iceberg reader finds it by `identifier` (a catalog URI, without credentials)."""

    instant: str
    completed: str | None
    format: PublishFormat
    location: str
    source: str
    version: int
    identifier: str
    rows: int
    removed_files: int
    table_location: str
    catalog: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PublishDeferred:
    """A format left to the publish of it that another live process was running (it publishes again if the table
    moved on meanwhile)."""

    format: PublishFormat
    deferred: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: What each format's publish did.
Published = PublishResult | PublishDeferred


def parse_format(value: str | PublishFormat) -> PublishFormat:
    return one_of(PublishFormat, value, "publish format")


#: A publish that finds its format stale again when it completes (something changed while it ran) publishes
#: again, up to this many times in all: the last publisher leaves the newest state, and nobody waits forever.
ROUNDS = 3


def publish(table: TableHandle, fmt: str | PublishFormat) -> PublishResult:
    """Publish the newest compacted state as the next version of the `fmt` table (exit 2 when nothing has been
    compacted yet and nothing was published before; exit 4 while another publish of `fmt` runs). When the table
    changed while it ran, it publishes again, so whoever publishes last leaves the newest state."""
    chosen = parse_format(fmt)
    result = _publish_once(table, chosen)
    for _ in range(ROUNDS - 1):
        if chosen not in stale_formats(table, [chosen]):
            break
        result = _publish_once(table, chosen)
    return result


def _publish_once(table: TableHandle, chosen: PublishFormat) -> PublishResult:
    table.require()
    location = published_location(table, chosen)
    target = Target(location, table.config.storage.options)
    spec = table.config.publish
    publisher = PUBLISHERS[chosen]
    publisher.check(target, spec.iceberg_catalog)
    fresh = False

    def plan(timeline: Timeline, requested: str) -> PublishPlan:
        nonlocal fresh
        expire_s = table.config.concurrency.heartbeat.expire_s
        for other in timeline.pending([Action.PUBLISH]):
            if running_format(timeline, other) == chosen and not is_expired(table.storage, other.requested, expire_s):
                raise BusyError(
                    f"publish {other.requested} of {chosen.value} is running; run again when it is done (two "
                    "publishes at once could leave the older state as the newest version)"
                )
        source = timeline.latest_completed(REWRITES)
        last = last_publish(timeline, chosen)
        if source is None and last is None and not has_base_files(table, timeline):
            raise UsageError("nothing is compacted yet: run `stitch compact` first (a publish shows base files)")
        fresh = _purged_since(table, timeline, chosen)
        return PublishPlan(format=chosen, location=location, source=(source.completed or "") if source else "")

    txn = Transaction.begin_planned(table, Action.PUBLISH, plan=plan)
    assert txn is not None and isinstance(txn.plan, PublishPlan)
    source = txn.plan.source
    committed: list[int] = []
    try:
        rows = read(table, ReadOptions(ReadMode.READ_OPTIMIZED, as_of=txn.time))
        publication = Publication(
            rows=rows,
            name=table.config.table.name,
            table_id=table.table_id,
            retain=spec.retain_versions,
            partition_by=table.config.table.partition_names,
            fresh=fresh,
            before_commit=lambda: _refuse_if_overtaken(txn, chosen),
            committed=committed.append,
        )
        with commit_conflicts(f"another writer committed to the published {chosen.value} table meanwhile"):
            made = publisher.write(publication, target, spec.iceberg_catalog, spec.iceberg_namespace)
        commit = PublishCommit(
            format=chosen,
            location=location,
            source=source,
            version=made.version,
            identifier=made.identifier,
            rows=rows.num_rows,
            removed_files=made.removed_files,
            table_location=made.table_location,
            catalog=publisher.catalog(target, spec.iceberg_catalog),
        )
        done = txn.complete(commit)
    except BaseException as exc:
        refused = txn.refusal_after(exc)
        txn.abort()
        exists = _committed_anyway(chosen, location, committed, source, txn.time)
        if exists:
            log.warning("%s", exists)
            exc.add_note(exists)
            if refused is not None:
                refused = type(refused)(f"{refused}; {exists}")
        if refused is not None:
            raise refused from exc
        if isinstance(exc, Exception) and not isinstance(exc, StitchError):
            wrapped = StitchError(
                f"publishing as {chosen.value} to {location} failed: {exc}" + (f"; {exists}" if exists else "")
            )
            for note in getattr(exc, "__notes__", ()):  # e.g. that its commit was sent and may still land
                wrapped.add_note(note)
            raise wrapped from exc
        if exists and isinstance(exc, StitchError):
            raise type(exc)(f"{exc}; {exists}") from exc
        raise
    return PublishResult(
        done.requested,
        done.completed,
        chosen,
        location,
        source,
        made.version,
        made.identifier,
        rows.num_rows,
        made.removed_files,
        made.table_location,
        commit.catalog,
    )


def _committed_anyway(fmt: PublishFormat, location: str, committed: list[int], source: str, instant: str) -> str:
    """What a publish that failed or was interrupted after its format's commit must say: that version exists and
    readers see it, though the timeline does not list it ('' when nothing was committed)."""
    if not committed:
        return ""
    what = f"the compaction or erase {source}" if source else "the table's base files"
    return (
        f"{fmt.value} version {committed[-1]} at {location} was committed before publish {instant} stopped: it "
        f"exists and readers see it (the rows of {what}), but the timeline does not list it; the next publish of "
        f"{fmt.value} supersedes it"
    )


def _purged_since(table: TableHandle, timeline: Timeline, fmt: PublishFormat) -> bool:
    """Whether an erase with `--purge` completed since the format's last publish read the table: then the next
    published version must be the only trace, history, log and manifests included. Archived instants count: an
    erase whose own publish failed may be archived before the publish run again for it. The archive is read only
    where it can hold such an erase (its horizon past the newest publish, or no publish active), newest batch first
    and no further than that publish: this runs under the table lock."""
    found = [(i, timeline.commit(i)) for i in timeline.completed([Action.PUBLISH, Action.ERASE])]
    since = _newest_publish(found, fmt)
    checkpoint = load_checkpoint(table.storage)
    if checkpoint is not None and (since is None or checkpoint.horizon >= since):
        for horizon, entries in archived_batches_newest_first(table.storage):
            found += [(e.instant, e.commit) for e in entries]
            since = _newest_publish(found, fmt)
            if since is not None and horizon < since:
                break
    return any(
        isinstance(c, EraseCommit) and c.purge and (since is None or (i.completed or "") > since) for i, c in found
    )


def _newest_publish(found: list[tuple[Instant, Any]], fmt: PublishFormat) -> str | None:
    """When the newest publish of `fmt` among `found` began (the state it read was the table's then)."""
    return max((i.requested for i, c in found if isinstance(c, PublishCommit) and c.format == fmt), default=None)


def _refuse_if_overtaken(txn: Transaction, fmt: PublishFormat) -> None:
    """Right before the format's commit, with its current version loaded: a run presumed dead while it read
    (frozen past its heartbeat) may have been rolled back, or another publish of the format begun after it may be
    running or done; committing now would put an older state back on top. A commit landing after this check
    conflicts with the version loaded before it."""
    timeline = Timeline.load(txn.table.storage)
    lost = txn.superseded(timeline)
    if lost is not None:
        raise txn.refusal(lost)
    for other in timeline.instants:
        if other.action == Action.PUBLISH and other.requested > txn.time and _format_of_any(timeline, other) == fmt:
            raise ConflictError(
                f"publish {other.requested} of {fmt.value} began while publish {txn.time} read the table; nothing "
                "was published (the newer one stands)"
            )


def _format_of_any(timeline: Timeline, instant: Instant) -> PublishFormat | None:
    """A publish's format, completed (its commit) or not (its plan)."""
    if instant.is_completed:
        commit = timeline.commit(instant)
        return commit.format if isinstance(commit, PublishCommit) else None
    return running_format(timeline, instant)


def publish_each(
    table: TableHandle, formats: Sequence[PublishFormat], defer_busy: bool = False, wait_busy: bool = False
) -> list[Published]:
    """Publish each of `formats`, trying them all: one failing never stops the others. The failures are reported
    together, as their own kind when they share one (a busy format exits 4, a conflict 3), else as StitchError.

    With `defer_busy`, a format another live publish runs is left to it (`deferred`): that publish finds its
    format stale when it completes and publishes again (unless it fails, or it was in its last round: the format
    then stays stale until the next publish). With `wait_busy`, the caller waits for that publish to end instead
    and publishes the format itself if it is still stale: what an erase needs, whose keys must leave the published
    tables whatever becomes of the other publish."""
    done: list[Published] = []
    failed: dict[str, StitchError] = {}
    for fmt in formats:
        try:
            done.append(_publish_waiting(table, fmt) if wait_busy else publish(table, fmt))
        except BusyError as exc:
            if not defer_busy or wait_busy:  # waited for what it could: busy for another reason
                failed[fmt.value] = exc
                continue
            done.append(PublishDeferred(fmt, str(exc)))
        except StitchError as exc:
            failed[fmt.value] = exc
    if failed:
        shown = ", ".join(r.format for r in done if isinstance(r, PublishResult))
        message = "; ".join(f"{fmt}: {error}" for fmt, error in failed.items())
        kinds = {type(error) for error in failed.values()}
        raise (kinds.pop() if len(kinds) == 1 else StitchError)(message + (f" (published: {shown})" if shown else ""))
    return done


#: How often a wait for another publish of a format looks at the timeline again.
WAIT_POLL_S = 0.5


def _publish_waiting(table: TableHandle, fmt: PublishFormat) -> Published:
    """Publish `fmt`, first waiting out any live publish of it (however long it runs: it beats while alive, and
    one presumed dead no longer counts); when the format is no longer stale after it, that publish did the work."""
    waited: list[str] = []
    while True:
        running = _live_publishes(table, fmt)
        if running:
            if not waited:
                log.warning("waiting for publish %s of %s to end before publishing it", running[0], fmt.value)
            waited += [r for r in running if r not in waited]
            time.sleep(WAIT_POLL_S)
            continue
        if waited and fmt not in stale_formats(table, [fmt]):
            return PublishDeferred(fmt, f"publish {', '.join(waited)} of {fmt.value} published the change")
        try:
            return publish(table, fmt)
        except BusyError:
            if _live_publishes(table, fmt):  # another began in between: wait for it too
                continue
            raise  # busy for another reason (a restore undoing, the lock): not ours to wait out


def _live_publishes(table: TableHandle, fmt: PublishFormat) -> list[str]:
    """The pending publishes of `fmt` whose process is alive (beating)."""
    timeline = table.timeline()
    expire_s = table.config.concurrency.heartbeat.expire_s
    return [
        other.requested
        for other in timeline.pending([Action.PUBLISH])
        if running_format(timeline, other) == fmt and not is_expired(table.storage, other.requested, expire_s)
    ]


def publish_after(
    table: TableHandle, what: str, formats: list[PublishFormat] | None = None, wait_busy: bool = False
) -> list[Published]:
    """Republish the stale formats of `formats` (default: every format the table has published) after `what`
    completed; a format another publish runs is left to it, or with `wait_busy` (an erase) waited for. A failure
    says `what` itself stands, and is exit 1 whatever failed: retrying `what` (exit 3) or waiting for it (exit 4)
    is not what would help.

    The retry it names is the formats it was republishing (`-f`): a plain `stitch publish` publishes
    `publish.formats` only, and an erase's keys must also leave a format the table published and the config no
    longer lists. An interrupt says `what` stands as well, so an operator is not told it was aborted."""
    stale: list[PublishFormat] = []
    try:
        stale = stale_formats(table, formats if formats is not None else published_formats(table))
        return publish_each(table, stale, defer_busy=True, wait_busy=wait_busy)
    except StitchError as exc:
        retry = _retry(table, stale)
        raise StitchError(f"{what} completed, but publishing failed: {exc} — run `{retry}` again") from exc
    except (KeyboardInterrupt, Terminated) as exc:  # a stop while publishing: what came before it stands
        exc.add_note(f"{COMPLETED_BEFORE_STOP}: {what} stands; its publish was stopped — run `{_retry(table, stale)}`")
        raise


def _retry(table: TableHandle, formats: list[PublishFormat]) -> str:
    """The command that publishes what is still stale of `formats` (all of them when the timeline cannot say)."""
    with contextlib.suppress(StitchError):
        formats = stale_formats(table, formats) or formats
    return "stitch publish" + "".join(f" -f {fmt.value}" for fmt in formats)
