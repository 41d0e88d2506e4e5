"""Cleaning (design.md §4, §5): delete file slices no reader within the retention can need.

Never deleted: any file of a file group's latest slice, any file a savepoint's snapshot reads, any file a
pending compaction or erase plan lists. The plan is computed under the table lock (so a savepoint cannot
appear halfway) and recorded in the clean instant, which the file-system view then honours: a time-travel
read that would need a cleaned file says so instead of returning less data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.concurrency.markers import delete_markers, instants_with_markers, marked_files
from stitchlake.config.choices import CleanPolicy, clean_policy
from stitchlake.layout.fsview import DataFile, FileSystemView
from stitchlake.layout.names import BASE, LOG, parse_name
from stitchlake.layout.partition import in_layout
from stitchlake.paths import TABLE_JSON, is_meta
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import REWRITES, WRITES_DATA
from stitchlake.timeline.archive import load_checkpoint
from stitchlake.timeline.clock import from_millis, now_millis
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import CleanCommit, CleanPlan, RewritePlan, SavepointPlan
from stitchlake.timeline.savepoints import savepoints
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

#: Deletes paths (the Spark engine distributes this; in-process it is a plain loop).
Deleter = Callable[[list[str]], int]


@dataclass
class CleanResult:
    instant: str | None
    policy: str
    deleted: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    reset_compactions: list[str] = field(default_factory=list)
    dry_run: bool = False
    message: str = ""
    #: Crashed restores, rollbacks and cleans the clean finished from their recorded plans first.
    finished: list[str] = field(default_factory=list)


def local_delete(table: TableHandle) -> Deleter:
    def run(paths: list[str]) -> int:
        return sum(1 for path in paths if table.storage.delete(path))

    return run


def retention_start(timeline: Timeline, policy: CleanPolicy, retain: int, now_ms: int | None = None) -> str | None:
    """The earliest time reads must still work at, for the time-based policies (None: keep everything)."""
    if policy is CleanPolicy.KEEP_LATEST_HOURS:
        return from_millis((now_millis() if now_ms is None else now_ms) - retain * 3_600_000)
    done = timeline.completed(WRITES_DATA)
    if len(done) <= retain:
        return None
    return done[-retain].completed


def needed_as_of(view: FileSystemView, at: str) -> set[str]:
    """Files a read as of `at` merges."""
    out: set[str] = set()
    for key in view.file_groups():
        fslice = view.latest_slice(key, at)
        if fslice is not None:
            out.update(f.path for f in fslice.files)
    return out


def _by_group(files: Iterable[DataFile]) -> dict[tuple[str, str], list[DataFile]]:
    groups: dict[tuple[str, str], list[DataFile]] = {}
    for item in files:
        groups.setdefault((item.partition, item.file_group), []).append(item)
    return groups


def _expendable_since(files: list[DataFile], cut: str, resets: Sequence[tuple[str, str]] = ()) -> list[DataFile]:
    """Files older than the slice in force at `cut`: bases superseded by then and logs that base absorbed. A
    rescale of the partition completed by then (`resets`: its requested and completed times) starts a slice too,
    with or without a base file in this group."""
    starts = [f.instant for f in files if f.kind == BASE and f.completed <= cut]
    starts += [requested for requested, completed in resets if completed <= cut]
    if not starts:
        return []
    current = max(starts)
    return [f for f in files if (f.kind == BASE and f.instant < current) or (f.kind == LOG and f.completed < current)]


def _expendable_versions(files: list[DataFile], keep: int, resets: Sequence[tuple[str, str]] = ()) -> list[DataFile]:
    """Files of all but the latest `keep` slices (versions) of a file group (a rescale of its partition starts one)."""
    bases = sorted({f.instant for f in files if f.kind == BASE} | {requested for requested, _ in resets})
    if len(bases) < keep:
        return []
    oldest_kept = bases[len(bases) - keep]
    return [
        f
        for f in files
        if (f.kind == BASE and f.instant < oldest_kept) or (f.kind == LOG and f.completed < oldest_kept)
    ]


def protected(timeline: Timeline, view: FileSystemView, purging: bool = False) -> set[str]:
    """Files a savepoint reads (one being made too), a pending rewrite plan lists or a running publish reads (as
    of its own time, a compaction may have superseded them since), plus every latest slice. An erase's purge
    keeps neither a running publish's nor a savepoint-to-be's: erased keys go, a publish that was reading them
    fails and publishes again, and a savepoint of a state before the erase is refused when it completes."""
    keep = needed_as_of(view, "9" * 17)
    for _instant, savepoint in savepoints(timeline):
        keep.update(savepoint.files)
    keep |= pending_rewrite_files(timeline)
    if purging:
        return keep
    for pending in timeline.pending([Action.SAVEPOINT]):
        plan = timeline.plan(pending)
        if isinstance(plan, SavepointPlan):
            keep.update(plan.files)
    for publish in timeline.pending([Action.PUBLISH]):
        keep |= needed_as_of(view, publish.requested)
    return keep


def pending_rewrite_files(timeline: Timeline) -> set[str]:
    """Every file a pending compaction or erase plan will merge."""
    out: set[str] = set()
    for instant in timeline.pending(REWRITES):
        plan = timeline.plan(instant)
        if isinstance(plan, RewritePlan):
            out |= plan.planned_files
    return out


def plan(table: TableHandle, timeline: Timeline, view: FileSystemView, policy: CleanPolicy, retain: int) -> list[str]:
    """Paths the policy allows deleting, in a stable order."""
    groups = _by_group(view.live_files())
    doomed: list[DataFile] = []
    if policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS:
        for key, files in groups.items():
            doomed += _expendable_versions(files, retain, view.resets.get(key[0], []))
    else:
        cut = retention_start(timeline, policy, retain)
        if cut is not None:
            for key, files in groups.items():
                doomed += _expendable_since(files, cut, view.resets.get(key[0], []))
    keep = protected(timeline, view)
    return sorted({f.path for f in doomed} - keep)


def orphans(table: TableHandle) -> list[str]:
    """Data files no instant names and no pending writer has marked (a safety net after crashes).

    Order matters: files are listed first, then markers, then the timeline — a writer always marks a file
    before creating it and publishes before unmarking, so a file it is writing is seen in one or the other.
    """
    storage = table.storage
    files = attributable_files(table, storage.walk_files())
    marked = {path for instant in instants_with_markers(storage) for path in marked_files(storage, instant)}
    timeline = table.timeline()
    view = FileSystemView.build(timeline, load_checkpoint(storage))
    known = {f.path for items in view.groups.values() for f in items} | set(view.deleted)
    known |= pending_rewrite_files(timeline)
    return sorted(p for p in files if p not in known and p not in marked)


def attributable_files(table: TableHandle, paths: Iterable[str]) -> list[str]:
    """Files clean may call its own: data file names in the table's partition folders, outside any other table.

    Everything else under the table folder (a table nested inside, files a person put there) is not ours to delete.
    """
    listed = list(paths)
    foreign = {p[: -len(TABLE_JSON)] for p in listed if p.endswith(f"/{TABLE_JSON}")}
    names = table.config.table.partition_names
    out = []
    for path in listed:
        if is_meta(path) or any(path.startswith(root) for root in foreign):
            continue
        folder, _, name = path.rpartition("/")
        if parse_name(name) is not None and in_layout(folder, names):
            out.append(path)
    return out


def _tidy(table: TableHandle) -> None:
    """Leftovers of finished instants: markers and heartbeats nobody needs any more.

    Listed first, the timeline read after: an instant creates its requested file before its markers and its beat,
    so whatever the listing finds belongs to an instant the timeline then shows pending, unless it has finished.
    Read the other way round, a writer that began in between had its markers taken: its files, unmarked and not
    yet published, were then an orphan sweep's to delete, after which it published a commit naming them.
    """
    marked = instants_with_markers(table.storage)
    beats = heartbeats.list_beats(table.storage)
    pending = {i.requested for i in table.timeline().pending()}
    for instant in marked:
        if instant not in pending:
            delete_markers(table.storage, instant)
    expire = table.config.concurrency.heartbeat.expire_s
    for beat in beats:
        if beat not in pending and heartbeats.is_expired(table.storage, beat, expire):
            heartbeats.delete(table.storage, beat)


def purge_files(table: TableHandle, select: Callable[[FileSystemView], set[str]]) -> CleanResult:
    """A clean that removes the files `select` picks from the view, whatever the retention (erase purge): the
    latest slices and files a pending rewrite plan or a savepoint still needs stay (the caller deletes those
    savepoints first)."""

    def make_plan(fresh: Timeline, _requested: str) -> CleanPlan | None:
        view = FileSystemView.build(fresh, load_checkpoint(table.storage), table.base_buckets)
        doomed = tuple(sorted(select(view) - protected(fresh, view, purging=True)))
        return CleanPlan(policy="purge", retain=1, delete=doomed) if doomed else None

    txn = Transaction.begin_planned(table, Action.CLEAN, plan=make_plan)
    if txn is None:
        return CleanResult(None, "purge", message="nothing to purge")
    return _execute(table, txn, None)


def finish_clean(table: TableHandle, instant: Instant, deleter: Deleter | None = None) -> CleanResult:
    """Finish a crashed clean from its recorded plan."""
    return _execute(table, Transaction.resume(table, instant, "clean"), deleter)


def _execute(table: TableHandle, txn: Transaction, deleter: Deleter | None) -> CleanResult:
    plan = txn.plan
    assert isinstance(plan, CleanPlan)
    (deleter or local_delete(table))([*plan.delete, *plan.orphans])
    txn.complete(CleanCommit(deleted=plan.delete, orphans=plan.orphans, policy=plan.policy))
    return CleanResult(txn.time, str(plan.policy), list(plan.delete), list(plan.orphans))


def checked_policy(table: TableHandle, policy: CleanPolicy | str | None) -> CleanPolicy:
    """The clean policy to apply; refused (exit 2) before anything is touched if it is not one."""
    return clean_policy(policy or table.config.clean.policy)


def clean(
    table: TableHandle,
    policy: CleanPolicy | str | None = None,
    retain: int | None = None,
    dry_run: bool = False,
    deleter: Deleter | None = None,
) -> CleanResult:
    """Delete what the retention policy allows and any orphan files (failed writes are `recovery`'s job).

    Deleting nothing records nothing: a clean with an empty plan leaves the timeline alone.
    """
    table.require()
    chosen = checked_policy(table, policy)
    keep = retain if retain is not None else table.config.clean.retain
    if dry_run:
        timeline = table.timeline()
        doomed = plan(table, timeline, table.view(timeline), chosen, keep)
        return CleanResult(None, chosen, doomed, orphans(table), dry_run=True)
    leftovers = orphans(table)

    def make_plan(fresh: Timeline, _requested: str) -> CleanPlan | None:
        view = FileSystemView.build(fresh, load_checkpoint(table.storage))
        doomed = plan(table, fresh, view, chosen, keep)
        if not doomed and not leftovers:
            return None
        return CleanPlan(policy=chosen, retain=keep, delete=tuple(doomed), orphans=tuple(leftovers))

    txn = Transaction.begin_planned(table, Action.CLEAN, plan=make_plan)
    result = _execute(table, txn, deleter) if txn is not None else CleanResult(None, chosen)
    _tidy(table)
    result.message = f"deleted {len(result.deleted)} file(s) ({chosen}, retain {keep}), {len(result.orphans)} orphan(s)"
    return result
