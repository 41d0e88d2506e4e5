"""Each job's handler: its request run over `stitchlake.engine.Engine`, in this process (`LocalEngine`) or in a
spark-submit job's driver (`SparkEngine`), returning its service's typed result. `jobs.specs` names each job's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from stitchlake.errors import InputRejected
from stitchlake.jobs.requests import (
    ArchiveRequest,
    CleanRequest,
    CompactRequest,
    EraseRequest,
    IngestRequest,
    RescaleRequest,
    RestoreRequest,
    RollbackRequest,
    SavepointRequest,
)
from stitchlake.services.rewrites import compaction, erase, rescale
from stitchlake.services.undo import recovery, restore, rollback
from stitchlake.services.upkeep import archive, clean, savepoint
from stitchlake.services.writes import ingest
from stitchlake.table.transaction import Transaction
from stitchlake.vocabulary import SavepointAction

if TYPE_CHECKING:
    from stitchlake.engine import Engine
    from stitchlake.services.rewrites.compaction import CompactionResult
    from stitchlake.services.rewrites.erase import EraseResult
    from stitchlake.services.rewrites.rescale import RescaleResult
    from stitchlake.services.undo.restore import RestoreResult
    from stitchlake.services.undo.rollback import RollbackResult
    from stitchlake.services.upkeep.archive import ArchiveResult
    from stitchlake.services.upkeep.clean import CleanResult
    from stitchlake.services.writes.ingest import IngestResult
    from stitchlake.table.handle import TableHandle
    from stitchlake.timeline.instant import Instant
    from stitchlake.timeline.savepoints import Savepoint

Progress = Callable[[str], None]
R = TypeVar("R")
#: Files a delete task takes (object stores delete one key per request: many tasks help).
DELETES_PER_TASK = 64


def run_ingest(table: TableHandle, request: IngestRequest, engine: Engine, progress: Progress) -> IngestResult:
    claim = Transaction.attach(table, request.instant) if request.instant else None
    result = ingest.ingest(
        table,
        engine,
        request.stream,
        list(request.sources) or None,
        request.max_files,
        request.reingest_changed,
        claim,
        progress,
        max_records=request.max_records,
        reset_offsets=request.reset_offsets,
    )
    return result


def run_compact(
    table: TableHandle, request: CompactRequest, engine: Engine, progress: Progress
) -> CompactionResult | None:
    return _run_plan("compaction", compaction.pending_plans, compaction.run, table, request.instant, engine, progress)


def run_rescale(
    table: TableHandle, request: RescaleRequest, engine: Engine, progress: Progress
) -> RescaleResult | None:
    return _run_plan("rescale", rescale.runnable_plans, rescale.run, table, request.instant, engine, progress)


def _run_plan(
    what: str,
    pending: Callable[[TableHandle], list[Instant]],
    run: Callable[[TableHandle, str | None, Engine], R],
    table: TableHandle,
    instant: str | None,
    engine: Engine,
    progress: Progress,
) -> R | None:
    """Run the plan `instant`, or the oldest pending one. Compactions and rescales run their plans alike: with no
    plan named and none pending there is nothing to run, which is exit 0, not an error."""
    if instant is None and not pending(table):
        return None
    progress(f"running {what} {instant or '(oldest pending)'}")
    return run(table, instant, engine)


def run_clean(table: TableHandle, request: CleanRequest, engine: Engine, progress: Progress) -> CleanResult:
    clean.checked_policy(table, request.policy)  # refused before failed work is finished, not halfway
    if request.dry_run:
        timeline = table.timeline()
        targets, resets, unfinished = recovery.failed_instants(table, timeline)
        result = clean.clean(table, request.policy, request.retain, dry_run=True)
        result.rolled_back = [t.requested for t in targets]
        result.reset_compactions = [r.requested for r in resets]
        result.finished = [f"{i.action} {i.requested}" for i in recovery.to_finish(timeline, unfinished)]
        result.message = (
            f"would delete {len(result.deleted) + len(result.orphans)} file(s) and roll back {len(targets)} "
            "failed write(s)"
        )
        if result.finished:
            result.message += f"; would finish crashed {', '.join(result.finished)}"
        return result
    rolled = recovery.rollback_failed(table)
    progress(rolled.message)

    def delete_all(paths: list[str]) -> int:
        chunks = [paths[i : i + DELETES_PER_TASK] for i in range(0, len(paths), DELETES_PER_TASK)]
        storage = table.storage
        return sum(engine.map(lambda chunk: sum(1 for path in chunk if storage.delete(path)), chunks))

    result = clean.clean(table, request.policy, request.retain, deleter=delete_all)
    result.rolled_back = rolled.rolled_back
    result.reset_compactions = rolled.reset_compactions
    result.message += f"; rolled back {len(rolled.rolled_back)} failed write(s)"
    if rolled.finished:
        result.message += f"; finished crashed {', '.join(rolled.finished)}"
    result.finished = rolled.finished
    return result


def run_erase(table: TableHandle, request: EraseRequest, engine: Engine, progress: Progress) -> EraseResult:
    keys = erase.load_keys(request.keys, table.storage_options)
    if request.purge:  # a crashed write's files may hold the keys, and nothing else under the table may
        rolled = recovery.rollback_failed(table)
        if rolled.instant is not None or rolled.finished:
            progress(rolled.message)
    progress(f"erasing {keys.num_rows} key(s)")
    try:
        return erase.erase(table, keys, request.purge, engine)
    except InputRejected as exc:  # the keys file's own problem: name it, as every exit 5 names its file
        if exc.file is not None:
            raise
        raise InputRejected(f"{request.keys}: {exc}", file=request.keys, column=exc.column) from None


def run_rollback(table: TableHandle, request: RollbackRequest, engine: Engine, progress: Progress) -> RollbackResult:
    if request.failed:
        return recovery.rollback_failed(table)
    if request.stream is not None:
        return rollback.rollback_stream(table, request.stream)
    return rollback.rollback(table, request.instant or "")


def run_savepoint(table: TableHandle, request: SavepointRequest, engine: Engine, progress: Progress) -> Savepoint:
    if request.action is SavepointAction.CREATE:
        return savepoint.create(table, request.instant, request.name)
    return savepoint.delete(table, request.savepoint or "")


def run_restore(table: TableHandle, request: RestoreRequest, engine: Engine, progress: Progress) -> RestoreResult:
    return restore.restore(table, request.savepoint, request.force)


def run_archive(table: TableHandle, request: ArchiveRequest, engine: Engine, progress: Progress) -> ArchiveResult:
    return archive.archive(table, request.keep)
