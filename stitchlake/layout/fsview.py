"""The file-system view: which data files exist, built from completed instants — never from listing.

A file no completed instant names is invisible, so a crashed writer's half-written files can never leak into
a read, and reads need no directory listing on object stores (design.md §3).

File slices follow the completion-time rule (design.md §5): a log belongs to the slice whose base instant is the
greatest rewrite (compaction or erase) *requested* before the log's commit *completed*. A completed rescale of a
partition starts a new slice in every file group of it at its requested time, whether it wrote a base file there
or not: the partition's older files are laid out by another bucket count (`layout.rescales`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from stitchlake.errors import StitchError, UsageError
from stitchlake.layout.names import BASE, LOG
from stitchlake.layout.rescales import BucketLayout, RescaleRecord, layout_at, records, resets
from stitchlake.timeline.actions import kind_of
from stitchlake.timeline.archive import Checkpoint
from stitchlake.timeline.metadata import CleanCommit, DataFile, EraseCommit, FileSlice, RewritePlan
from stitchlake.timeline.timeline import Timeline

__all__ = ["DataFile", "FileGroupKey", "FileSlice", "FileSystemView"]

FileGroupKey = tuple[str, str]
#: The policy a purge records in its clean (`services.clean.purge_file_groups`, run by `stitch delete --purge`).
PURGE_POLICY = "purge"


class FileSystemView:
    """Live files by file group, plus what cleaning removed and which rewrites are pending."""

    def __init__(
        self,
        files: Iterable[DataFile],
        deleted: dict[str, str] | None = None,
        pending_rewrites: dict[FileGroupKey, str] | None = None,
        horizon: str | None = None,
        purged: dict[str, tuple[str, str]] | None = None,
        rescales: list[RescaleRecord] | None = None,
        buckets: int = 0,
    ) -> None:
        self.groups: dict[FileGroupKey, list[DataFile]] = defaultdict(list)
        for item in files:
            self.groups[(item.partition, item.file_group)].append(item)
        for items in self.groups.values():
            items.sort(key=lambda f: (f.completed, f.path))
        self.deleted = deleted or {}
        self.pending_rewrites = pending_rewrites or {}
        #: Oldest completion time whose state is still fully described (archive checkpoint), if any.
        self.horizon = horizon
        #: Deleted files that an erase's purge removed (not the retention): path -> that erase's requested and
        #: completion times (empty if it is no longer on the active timeline).
        self.purged = purged or {}
        #: Completed rescales, oldest first, and per partition the (requested, completed) times of those that
        #: rewrote it: each starts a new slice in every file group of the partition.
        self.rescales = rescales or []
        self.resets = resets(self.rescales)
        #: The table's own bucket count (`table.json`); 0 when the view was built without it.
        self.buckets = buckets

    @classmethod
    def build(cls, timeline: Timeline, checkpoint: Checkpoint | None = None, buckets: int = 0) -> FileSystemView:
        """The view from an (optional) archive checkpoint plus the active timeline's completed instants.

        `buckets` is the table's own count (`table.json`), needed only to ask for `layout`.
        """
        files: dict[str, DataFile] = {}
        horizon = None
        if checkpoint:
            horizon = checkpoint.horizon
            files = {item.path: item for item in checkpoint.files}
        deleted: dict[str, str] = {}
        purged: dict[str, tuple[str, str]] = {}
        latest_erase: dict[FileGroupKey, tuple[str, str]] = {}
        last_erase = ("", "")
        for instant in timeline.completed():
            if horizon is not None and (instant.completed or "") <= horizon:
                continue
            commit = timeline.commit(instant)
            if kind_of(instant.action).writes_data:
                for item in commit.added_files:
                    files[item.path] = item.at(instant.requested, instant.completed or "", commit.written_under)
                if isinstance(commit, EraseCommit):
                    # The groups it rewrote, and (a purge also reaches older layouts' groups) any other.
                    latest_erase.update(dict.fromkeys(commit.groups, (instant.requested, instant.completed or "")))
                    last_erase = (instant.requested, instant.completed or "")
            elif isinstance(commit, CleanCommit):
                for path in commit.deleted:
                    deleted[path] = instant.completed or ""
                    if commit.policy == PURGE_POLICY:
                        removed = files.get(path)
                        purged[path] = latest_erase.get(removed.group, last_erase) if removed else last_erase
        pending: dict[FileGroupKey, str] = {}
        for instant in timeline.pending():
            if not kind_of(instant.action).rewrites:
                continue
            plan = timeline.plan(instant)
            if isinstance(plan, RewritePlan):
                for group in plan.groups:
                    pending[group] = instant.requested
        return cls(files.values(), deleted, pending, horizon, purged, records(timeline, checkpoint), buckets)

    # ------------------------------------------------------------------------------------------ queries

    def file_groups(self, partitions: Iterable[str] | None = None) -> list[FileGroupKey]:
        wanted = set(partitions) if partitions is not None else None
        return sorted(k for k in self.groups if wanted is None or k[0] in wanted)

    def partitions(self) -> list[str]:
        return sorted({partition for partition, _ in self.groups})

    def live_files(self) -> list[DataFile]:
        """Files named by a completed instant and not yet removed by cleaning."""
        return [f for items in self.groups.values() for f in items if f.path not in self.deleted]

    def layout(self, as_of: str | None = None) -> BucketLayout:
        """The bucket count of each partition as of a completion time (None: now)."""
        if not self.buckets:
            raise StitchError("internal: this file-system view was built without the table's bucket count")
        return layout_at(self.buckets, self.rescales, as_of)

    def buckets_of(self, item: DataFile) -> int:
        """The bucket count a data file was laid out by: the one its writer recorded, else the count in force when it
        completed (a writer whose count a rescale changed is fenced, so the two agree)."""
        return item.buckets or self.layout(item.completed).buckets(item.partition)

    def reset_of(self, partition: str, as_of: str | None = None) -> str:
        """The requested time of the latest rescale of `partition` completed by `as_of` ('' if none): older files of
        the partition are laid out by another bucket count and belong to no slice from then on."""
        found = [
            requested for requested, completed in self.resets.get(partition, ()) if as_of is None or completed <= as_of
        ]
        return max(found, default="")

    def latest_slice(self, key: FileGroupKey, as_of: str | None = None) -> FileSlice | None:
        """What a read as of `as_of` merges for one file group: the newest completed base and every log after it.

        A pending rewrite only splits the logs into two slices; reading both together gives the same rows,
        so readers simply take every log newer than the last completed base. A completed rescale of the partition
        starts a slice of its own, with its base file here if it wrote one.
        """
        items = [f for f in self.groups.get(key, []) if as_of is None or f.completed <= as_of]
        if not items:
            return None
        reset = self.reset_of(key[0], as_of)
        bases = [f for f in items if f.kind == BASE and f.instant >= reset]
        base = max(bases, key=lambda f: f.instant) if bases else None
        base_instant = base.instant if base else reset
        logs = tuple(f for f in items if f.kind == LOG and f.completed > base_instant)
        if base is None and not logs:
            return None
        return FileSlice(key[0], key[1], base_instant, base, logs)

    def latest_slices(
        self,
        as_of: str | None = None,
        partitions: Iterable[str] | None = None,
        file_groups: Iterable[FileGroupKey] | None = None,
    ) -> list[FileSlice]:
        keys = list(file_groups) if file_groups is not None else self.file_groups(partitions)
        if as_of is not None and self.horizon is not None and as_of < self.horizon:
            # A refusal, not a failure: a later time or a savepoint answers it (design.md §8, exit 2).
            raise UsageError(
                f"as of {as_of} is older than the archived timeline (its state is only kept from "
                f"{self.horizon}); pick a later time or a savepoint"
            )
        out = [s for s in (self.latest_slice(k, as_of) for k in keys) if s is not None]
        for item in out:
            for data_file in item.files:
                if data_file.path in self.purged:
                    raise UsageError(self._purged_message(as_of, data_file.path))
                if data_file.path in self.deleted:
                    raise UsageError(
                        f"reading as of {as_of} needs {data_file.path}, which clean removed at "
                        f"{self.deleted[data_file.path]}; that time is outside the retention, and its state can no "
                        "longer be read or pinned (to keep such states, raise clean.retain or savepoint them before "
                        "clean runs)"
                    )
        return out

    def _purged_message(self, as_of: str | None, path: str) -> str:
        erase, completed = self.purged[path]
        by = f"erase {erase}" if erase else "an erase"
        return (
            f"reading as of {as_of} needs {path}, which {by} purged at {self.deleted[path]} "
            "(`stitch delete --purge`): the erased keys' older copies were deleted on purpose, so the state before "
            "that erase can no longer be read in the file groups it rewrote. Read as of the erase or later"
            f"{f' (--as-of {completed} shows the table right after it, without those keys)' if completed else ''}; "
            "neither the retention nor a savepoint can bring the older state back"
        )

    def slices(self, key: FileGroupKey, include_pending: bool = True) -> list[FileSlice]:
        """Every slice of a file group by base instant, the newest (possibly pending) last."""
        items = self.groups.get(key, [])
        bases = sorted((f for f in items if f.kind == BASE), key=lambda f: f.instant)
        instants = [b.instant for b in bases] + [requested for requested, _ in self.resets.get(key[0], ())]
        pending = self.pending_rewrites.get(key)
        if include_pending and pending and pending not in instants:
            instants.append(pending)
        instants = ["", *sorted(set(instants))]
        by_base = {b.instant: b for b in bases}
        out: list[FileSlice] = []
        for position, start in enumerate(instants):
            end = instants[position + 1] if position + 1 < len(instants) else None
            logs = tuple(
                f for f in items if f.kind == LOG and f.completed > start and (end is None or f.completed < end)
            )
            base = by_base.get(start)
            if start == "" and not logs:
                continue
            out.append(FileSlice(key[0], key[1], start, base, logs))
        return out
