"""Optimistic concurrency (`concurrency.mode: optimistic`): several writers of one stream, conflicts by file group.

In `lock_free` mode a stream has one live writer at a time and writers never conflict. In `optimistic` mode several
writers of a stream may run at once (a backfill beside the live job). Two writes of one stream into the same file
group conflict; so does a write into a file group a pending compaction or erase plan will rewrite. Writers of other
streams never do (their columns are disjoint).

- **At publish**, under the lock: a write conflicts with a deltacommit of its stream that completed since the write
  began, or with a pending rewrite plan, on a common file group; it aborts (exit 3) and leaves nothing behind.
- **Early**, before writing a batch of file groups: the writer records the file groups it is about to write in one
  small marker object (`.stitch/markers/<instant>/groups/<token>.json`: one object per batch of file groups, not per
  data file, so listing stays cheap on object stores), then checks the same rules and, besides, the group markers
  of live writers of its stream that began *before* it. A conflict aborts before any data file is written. The
  earlier writer is never stopped early by a later one, so two overlapping writers cannot stop each other.

Which footprints clash is one small rule (`ConflictRule`): file-group overlap by default; a finer rule (say, key
overlap) can replace it by recording a different footprint.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable

from stitchlake.errors import ConflictError
from stitchlake.paths import MARKERS_DIR
from stitchlake.storage import Storage
from stitchlake.timeline.actions import HOLDS_FILE_GROUPS
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DataFile, DeltaCommit, DeltaCommitPlan, RewritePlan
from stitchlake.timeline.timeline import Timeline

#: A file group: (partition path, file group id).
FileGroup = tuple[str, str]
Footprint = frozenset[Hashable]


class ConflictRule(ABC):
    """What a write touches, and when two writes' footprints clash."""

    @abstractmethod
    def footprint(self, groups: Iterable[FileGroup]) -> Footprint:
        """The footprint of a write into these file groups."""

    @abstractmethod
    def clash(self, mine: Footprint, theirs: Footprint) -> str | None:
        """A description of where two footprints overlap (for the message), or None."""


class FileGroupOverlap(ConflictRule):
    """Two writes conflict when they touch a common file group."""

    def footprint(self, groups: Iterable[FileGroup]) -> Footprint:
        return frozenset(groups)

    def clash(self, mine: Footprint, theirs: Footprint) -> str | None:
        common = sorted(str(_show(g)) for g in mine & theirs)
        if not common:
            return None
        more = f" and {len(common) - 1} more" if len(common) > 1 else ""
        return f"file group {common[0]}{more}"


DEFAULT_RULE: ConflictRule = FileGroupOverlap()


def groups_of(files: Iterable[DataFile]) -> set[FileGroup]:
    return {(f.partition, f.file_group) for f in files}


def check_completed_and_planned(
    timeline: Timeline, requested: str, stream: str, mine: Footprint, rule: ConflictRule = DEFAULT_RULE
) -> None:
    """The publish-time rules: same-stream deltacommits completed since the write began (`requested`), and
    pending rewrites."""
    for other in timeline.completed([Action.DELTACOMMIT], since=requested):
        if other.requested == requested:
            continue
        commit = timeline.commit(other)
        if not isinstance(commit, DeltaCommit) or commit.stream != stream:
            continue
        where = rule.clash(mine, rule.footprint(groups_of(commit.added)))
        if where is not None:
            raise ConflictError(
                f"deltacommit {other.requested} of stream {stream} completed while this write ran and wrote {where} "
                "too (concurrency.mode: optimistic); nothing was published — run again"
            )
    for other in timeline.pending(HOLDS_FILE_GROUPS):
        plan = timeline.plan(other)
        if not isinstance(plan, RewritePlan):
            continue
        where = rule.clash(mine, rule.footprint(plan.groups))
        if where is not None:
            remedy = "`stitch compact` runs it" if other.action == Action.COMPACTION else "`stitch clean` undoes it"
            raise ConflictError(
                f"{other.action} {other.requested} is pending on {where}, which this write touches too "
                f"(concurrency.mode: optimistic); nothing was published — run again after it completes (if its "
                f"process died, {remedy})"
            )


def groups_marker_folder(instant: str) -> str:
    return f"{MARKERS_DIR}/{instant}/groups"


def record_groups(storage: Storage, instant: str, groups: Iterable[FileGroup]) -> None:
    """Note, before writing them, the file groups a batch of this write is about to write (one small object)."""
    body = json.dumps(sorted([list(g) for g in groups])).encode("utf-8")
    storage.write_bytes(f"{groups_marker_folder(instant)}/{uuid.uuid4().hex}.json", body)


def recorded_groups(storage: Storage, instant: str) -> set[FileGroup]:
    """Every file group a (live) writer noted it is writing."""
    found: set[FileGroup] = set()
    folder = groups_marker_folder(instant)
    for name in storage.list_names(folder):
        if not name.endswith(".json"):
            continue
        try:
            found.update((str(p), str(g)) for p, g in json.loads(storage.read_bytes(f"{folder}/{name}")))
        except (FileNotFoundError, ValueError, TypeError):
            continue  # gone with its writer, or being written: a writer checks again at publish
    return found


def check_early(
    storage: Storage,
    requested: str,
    stream: str,
    groups: Iterable[FileGroup],
    alive: Callable[[str], bool],
    rule: ConflictRule = DEFAULT_RULE,
) -> None:
    """Before writing `groups`: record them, then abort (exit 3) if the write is already doomed."""
    wanted = set(groups)
    record_groups(storage, requested, wanted)
    mine = rule.footprint(wanted)
    timeline = Timeline.load(storage)
    check_completed_and_planned(timeline, requested, stream, mine, rule)
    for other in timeline.pending([Action.DELTACOMMIT]):
        if other.requested >= requested:
            continue  # only writers that began earlier stop us early; a later one loses at its own checks
        plan = timeline.plan(other)
        if not isinstance(plan, DeltaCommitPlan) or plan.stream != stream or not alive(other.requested):
            continue
        where = rule.clash(mine, rule.footprint(recorded_groups(storage, other.requested)))
        if where is not None:
            raise ConflictError(
                f"live writer {other.requested} of stream {stream}, begun before this one, is writing {where} "
                "(concurrency.mode: optimistic, early conflict detection); stopped before writing any data — "
                "run again after it finishes"
            )


def _show(group: Hashable) -> str:
    if isinstance(group, tuple) and len(group) == 2:
        partition, file_group = group
        return f"{partition}/{file_group}" if partition else str(file_group)
    return str(group)
