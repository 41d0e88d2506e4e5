"""Crash and race interleavings found by review, replayed deterministically in-process.

Each test builds the exact interleaving (a crashed instant, a stalled lease, a compaction planned between a
rollback's checks and its request, a failure right after a publish) with real tables on disk; the only
interference is a wrapper that delays or fails one call of the code under test, as a stall or an I/O error would.
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import stitchlake.table.transaction as transaction_module
from stitchlake.concurrency.markers import marked_files
from stitchlake.errors import (
    BusyError,
    ConflictError,
    LockLost,
    NotFoundError,
    PlanGone,
    PlanUndone,
    StitchError,
    UsageError,
)
from stitchlake.services.rewrites import compaction
from stitchlake.services.undo import restore
from stitchlake.services.undo.recovery import rollback_failed
from stitchlake.services.undo.rollback import rollback
from stitchlake.services.upkeep import clean, savepoint
from stitchlake.spark.write import FilesWritten, StitchWriter
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import CleanCommit, CleanPlan, DeltaCommit, DeltaCommitPlan, RestorePlan, RollbackPlan
from stitchlake.writing.batch import prepare
from stitchlake.writing.writer import write, write_file_groups
from tests.support.tables import (
    MODELS,
    SHORT_BEATS,
    batch,
    lock_held_elsewhere,
    new_table,
    until_expired,
    write_table_yaml,
)

FAST = SHORT_BEATS
ORDERS = MODELS[0]


def _rows(value: int, keys: range = range(4)) -> Any:
    return batch(ORDERS, [{"k": k, "amount": value, "status": f"s{value}", "ots": value} for k in keys])


def _dead(txn: Transaction) -> None:
    """The process running `txn` died: its heartbeat stops and expires."""
    assert txn.heartbeat is not None
    txn.heartbeat.stop(delete=True)
    txn.heartbeat = None
    time.sleep(0.5)


def _sorted(table: Any) -> Any:
    return table.sort_by("k")


def test_a_crashed_restore_and_the_crashed_rollback_it_covers_both_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore's plan lists the crashed rollback; finishing them oldest first waited on each other forever
    (every `stitch clean` and `rollback --failed` exited 4). Restores now go first."""
    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    point = savepoint.create(table, name="before")
    at_savepoint = _sorted(table.read(as_of="before"))
    write(table, "orders", _rows(2))
    crashed_rollback = Transaction.begin(table, Action.ROLLBACK, RollbackPlan(reason="t"))
    _dead(crashed_rollback)
    # A plan recorded before restores finished crashed rollbacks first (one still pending on an upgraded table).
    monkeypatch.setattr(restore, "_unfinished", lambda timeline: [])
    crashed_restore = restore.begin_restore(table, "before")
    _dead(crashed_restore)

    rollback_failed(table)
    assert not table.timeline().pending()
    assert _sorted(table.read()).equals(at_savepoint)
    assert point.instant is not None
    rollback_failed(table)  # and again: nothing left to do, no refusal


def _crashed_clean(table: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A clean that deleted its files and died before its commit; the files it deleted."""
    deleted: list[str] = []

    def deleted_then_died(tbl: Any, txn: Transaction, deleter: Any) -> Any:
        assert isinstance(txn.plan, CleanPlan) and txn.plan.delete
        deleted.extend(txn.plan.delete)
        clean.local_delete(tbl)([*txn.plan.delete, *txn.plan.orphans])
        _dead(txn)
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(clean, "_execute", deleted_then_died)
        with pytest.raises(KeyboardInterrupt):
            clean.clean(table, policy="keep_latest_file_versions", retain=1)
    return deleted


def test_a_restore_finishes_a_crashed_clean_instead_of_undoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore undid a crashed clean: the files it had deleted were then recorded nowhere, a time-travel read of
    the state they held failed on a missing file, and that state could even be savepointed and restored to."""
    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    first = table.timeline().completed([Action.DELTACOMMIT])[0]
    compaction.compact(table, "all")  # the first commit's slices are older than the latest from here on
    write(table, "orders", _rows(2))
    savepoint.create(table, name="sp")
    write(table, "orders", _rows(3))
    deleted = _crashed_clean(table, monkeypatch)
    assert [i.action for i in table.timeline().pending()] == [Action.CLEAN]

    result = restore.restore(table, "sp")

    timeline = table.timeline()
    assert not timeline.pending()
    cleans = timeline.completed([Action.CLEAN])
    finished = timeline.commit(cleans[0])
    assert len(cleans) == 1 and isinstance(finished, CleanCommit) and set(finished.deleted) == set(deleted)
    assert result.finished == [f"clean {cleans[0].requested}"] and "finished crashed clean" in result.message
    assert _sorted(table.read()).equals(_sorted(table.read(as_of="sp")))
    with pytest.raises(UsageError):  # the state the clean removed is refused as cleaned, never read half-way
        savepoint.create(table, first.requested, name="older")


def test_a_restore_is_refused_while_a_clean_runs_even_with_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    savepoint.create(table, name="sp")
    write(table, "orders", _rows(2))
    running = Transaction.begin(table, Action.CLEAN, CleanPlan(delete=(), orphans=(), policy="keep_latest_commits"))
    try:
        with pytest.raises(BusyError, match="cannot undo it"):
            restore.restore(table, "sp", force=True)
        assert [i.action for i in table.timeline().pending()] == [Action.CLEAN]
    finally:
        running.abort()


def test_a_rollback_whose_lease_ran_out_before_its_request_undoes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback checked its target under the lock, then stalled past its lease; the frozen writer woke, took
    the lock and published. Requesting the rollback after that would delete a completed commit's files."""
    document = copy.deepcopy(FAST)
    document["concurrency"]["lock"]["expire_s"] = 1
    table = new_table(tmp_path, document)
    writer = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    stream = table.config.stream("orders")
    files = write_file_groups(
        table, stream, prepare(table.config, stream, _rows(1), source="t"), writer.time, writer.mark
    )
    _dead(writer)  # presumed dead, but only frozen

    original = getattr(transaction_module, "write_requested")  # noqa: B009 - patched where it is used
    stalling, published = threading.Event(), threading.Event()

    def stalled(*args: Any, **kwargs: Any) -> Any:
        if args[2] == Action.ROLLBACK:
            # The rollback stalls inside its critical section until the writer has taken the lock over (past the
            # 1 s lease) and published: events, not sleeps, so a busy machine cannot reorder them.
            stalling.set()
            assert published.wait(timeout=600), "the writer never published"
        return original(*args, **kwargs)

    monkeypatch.setattr(transaction_module, "write_requested", stalled)
    outcome: dict[str, Any] = {}

    def run_rollback() -> None:
        try:
            outcome["result"] = rollback_failed(table)
        except Exception as error:
            outcome["error"] = error

    racing = threading.Thread(target=run_rollback)
    racing.start()
    try:
        assert stalling.wait(timeout=600), "the rollback never reached its request"
        writer.complete(DeltaCommit(stream="orders", added=tuple(files), rows=4))  # the writer wakes up, publishes
    finally:
        published.set()
        racing.join(timeout=600)
    assert isinstance(outcome.get("error"), LockLost), outcome
    assert not table.timeline().pending([Action.ROLLBACK])
    assert sorted(table.read().column("k").to_pylist()) == [0, 1, 2, 3]


def test_a_rollback_refuses_a_commit_a_compaction_absorbed_after_its_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stitch rollback T` checked T outside the lock; a compaction planned meanwhile absorbed T's logs. Undoing
    T then broke every later `compact --run` for good; the rollback now re-checks under the lock."""
    import stitchlake.services.undo.rollback as rollback_module

    table = new_table(tmp_path, FAST)
    for value in (1, 2, 3):
        last = write(table, "orders", _rows(value))
    original = rollback_module.run_rollback

    def compaction_planned_meanwhile(*args: Any, **kwargs: Any) -> Any:
        compaction.schedule(table, "all")
        return original(*args, **kwargs)

    monkeypatch.setattr(rollback_module, "run_rollback", compaction_planned_meanwhile)
    with pytest.raises(UsageError, match="absorbed by compaction"):
        rollback(table, last.instant)
    monkeypatch.undo()
    compaction.run(table)
    assert set(table.read().column("amount").to_pylist()) == {3}


def test_a_failure_right_after_the_publish_leaves_the_commit_standing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tidying markers failed after the completed file was created; the error path aborted the instant and
    deleted a commit that readers had already seen."""
    table = new_table(tmp_path, FAST)
    original = getattr(transaction_module, "delete_markers")  # noqa: B009 - patched where it is used
    calls: list[str] = []

    def flaky(storage: Any, instant: str) -> None:
        calls.append(instant)
        if len(calls) == 1:
            raise OSError(5, "I/O error on the markers folder")
        original(storage, instant)

    monkeypatch.setattr(transaction_module, "delete_markers", flaky)
    result = write(table, "orders", _rows(1))
    assert table.timeline().get(result.instant).is_completed  # type: ignore[union-attr]
    assert sorted(table.read().column("k").to_pylist()) == [0, 1, 2, 3]
    assert not table.storage.exists(f".stitch/heartbeats/{result.instant}")  # and the heartbeat stopped


def _spark_writer(table: Any, instant: str) -> StitchWriter:
    """A writer of `table` (made of FAST) as a Spark job opens it: by its config, which holds its lock settings."""
    config = write_table_yaml(Path(table.path).parent, FAST, name="writer.yaml")
    return StitchWriter({"path": table.path, "config": str(config), "stream": "orders", "instant": instant})


def _table_with_one_landing_file(tmp_path: Path) -> Any:
    """A table whose orders stream has one landing file (4 keys) waiting to be ingested."""
    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(_rows(1), landing / "part-0001.parquet")
    document = copy.deepcopy(FAST)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": str(landing)}
    return new_table(tmp_path, document)


def test_an_ingest_job_that_froze_after_choosing_its_files_does_not_publish_them_twice(tmp_path: Path) -> None:
    """The job of a claim (e.g. a spark-submit job of `stitch ingest`) froze past its heartbeat after choosing its
    landing files; a second ingest took the same file; the frozen job must not publish it a second time."""
    from stitchlake.engine import LocalEngine
    from stitchlake.services.writes.ingest import claim, ingest

    table = _table_with_one_landing_file(tmp_path)
    frozen = claim(table, "orders")

    class FreezingEngine(LocalEngine):
        def write_stream(self, *args: Any, **kwargs: Any) -> Any:
            written = super().write_stream(*args, **kwargs)
            _dead(frozen)  # frozen past the heartbeat: a second ingest runs meanwhile
            assert table.ingest("orders").result.source_files == 1
            return written

    with pytest.raises(ConflictError, match=r"part-0001\.parquet"):
        ingest(table, FreezingEngine(), "orders", txn=frozen)
    frozen.abort()  # a claim handed to a job is undone by whoever took it, as `stitchlake.jobs.launch.execute` does
    timeline = table.timeline()
    assert len(timeline.completed([Action.DELTACOMMIT])) == 1 and not timeline.pending()
    assert sorted(table.read().column("k").to_pylist()) == [0, 1, 2, 3]


def test_a_claim_another_claim_took_over_while_it_looked_dead_publishes_nothing(tmp_path: Path) -> None:
    """`make partitions` seed 3018 round 23 (S3): an ingest cut from S3 and its lock right after writing its
    requested instant, before its first beat, looked dead; an ingest of the same stream on another host claimed it
    and committed. Healed, the first read what was left after that commit and published it too: no record twice,
    but two claims of one stream both committed while both pending. A claim taken over while it looked dead now
    refuses (exit 3, nothing published), whether the one that took it over has completed or still writes."""
    from stitchlake.engine import LocalEngine
    from stitchlake.services.writes.ingest import claim, ingest

    table = _table_with_one_landing_file(tmp_path)
    landing = tmp_path / "landing"
    asleep = claim(table, "orders")
    _dead(asleep)
    assert table.ingest("orders").result.source_files == 1  # took the stream over, and committed
    pq.write_table(_rows(2, range(4, 8)), landing / "part-0002.parquet")  # more to take, nothing taken twice
    with pytest.raises(ConflictError, match=r"lost its claim on stream orders to instant \d+"):
        ingest(table, LocalEngine(), "orders", txn=asleep)
    asleep.abort()

    asleep = claim(table, "orders")
    _dead(asleep)
    taker = claim(table, "orders")  # still writing, its heartbeat alive, when the first one wakes
    with pytest.raises(ConflictError, match=f"lost its claim on stream orders to instant {taker.time}"):
        ingest(table, LocalEngine(), "orders", txn=asleep)
    asleep.abort()
    ingest(table, LocalEngine(), "orders", txn=taker)  # the live one publishes
    timeline = table.timeline()
    assert len(timeline.completed([Action.DELTACOMMIT])) == 2 and not timeline.pending()
    assert sorted(table.read().column("k").to_pylist()) == list(range(8))


def test_a_job_leaves_the_claim_it_was_handed_to_its_owner(tmp_path: Path) -> None:
    """A job that fails (or is interrupted) after its tasks wrote files does not undo the claim of the command that
    started it: its tasks may still be writing (a Spark task outlives the driver's exception by a moment), and a
    file written after the markers went would be left behind unnamed. The owner undoes it once the job ended."""
    from stitchlake.engine import LocalEngine
    from stitchlake.services.writes.ingest import claim, ingest

    table = _table_with_one_landing_file(tmp_path)
    owned = claim(table, "orders")

    class FailingEngine(LocalEngine):
        def write_stream(self, *args: Any, **kwargs: Any) -> Any:
            super().write_stream(*args, **kwargs)
            raise KeyboardInterrupt  # as the driver of a job is, when its command is interrupted

    with pytest.raises(KeyboardInterrupt):
        ingest(table, FailingEngine(), "orders", txn=owned)
    written = marked_files(table.storage, owned.time)
    assert written and all(table.storage.exists(path) for path in written), "the job undid a claim it did not own"
    assert [i.requested for i in table.timeline().pending()] == [owned.time]
    owned.abort()
    assert not any(table.storage.exists(path) for path in written) and not table.timeline().pending()
    assert table.ingest("orders").result.source_files == 1


def test_a_spark_abort_after_the_commit_published_keeps_it(tmp_path: Path) -> None:
    table = new_table(tmp_path, FAST)
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"), heartbeat=False)
    stream = table.config.stream("orders")
    files = write_file_groups(table, stream, prepare(table.config, stream, _rows(1), source="t"), txn.time, txn.mark)
    messages: list[Any] = [FilesWritten(files=files, rows=4)]
    writer = _spark_writer(table, txn.time)
    writer.commit(messages)
    writer.abort(messages)  # e.g. Spark failing the job after the commit returned
    assert table.timeline().get(txn.time).is_completed  # type: ignore[union-attr]
    assert sorted(table.read().column("k").to_pylist()) == [0, 1, 2, 3]


def test_a_job_attaching_to_an_instant_taken_back_meanwhile_is_a_conflict_not_an_ambiguous_failure(
    tmp_path: Path,
) -> None:
    """A Spark job's launcher paused past its lease: `stitch clean` rolled its instant back before the driver
    attached. The driver refuses with exit 3 (nothing published, run again), as a fenced in-process writer does."""
    table = new_table(tmp_path, copy.deepcopy(FAST))
    launched = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream=ORDERS.name))
    _dead(launched)
    rollback_failed(table)
    assert table.timeline().get(launched.instant.requested) is None
    with pytest.raises(ConflictError, match="was taken back by another process") as refused:
        Transaction.attach(table, launched.instant.requested)
    assert refused.value.exit_code == 3
    write(table, ORDERS.name, _rows(1))
    done = table.timeline().completed()[-1]
    with pytest.raises(ConflictError, match=f"was completed at {done.completed}"):
        Transaction.attach(table, done.requested)


def _with_savepoint(tmp_path: Path, document: dict[str, Any] = FAST) -> Any:
    """A table with a write, savepoint "before" after it, and a second write: what a restore can undo."""
    table = new_table(tmp_path, document)
    write(table, "orders", _rows(1))
    savepoint.create(table, name="before")
    write(table, "orders", _rows(2))
    return table


def _restored_after_planning(monkeypatch: pytest.MonkeyPatch, module: Any, table: Any) -> list[str]:
    """`module.schedule` (compaction's or rescale's) followed at once by a restore to "before", as another process
    would run one between the plan and its run: the plans it undid, in order."""
    original = module.schedule
    undone: list[str] = []

    def restored_right_after_planning(*args: Any, **kwargs: Any) -> Any:
        planned = original(*args, **kwargs)
        assert planned is not None
        restore.restore(table, "before")
        undone.append(planned)
        return planned

    monkeypatch.setattr(module, "schedule", restored_right_after_planning)
    return undone


@pytest.mark.parametrize("layer", ["service", "job"])
def test_a_plan_a_restore_undid_before_its_run_is_a_conflict_not_a_missing_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str
) -> None:
    """`stitch compact` wrote its plan, then a restore (which removes pending plans) ran before the run took the
    plan: the run said "not a compaction on the timeline", exit 2, as if the operator had named a wrong instant
    (found by the torture test on S3). It is a conflict now (exit 3: run again), and a later run compacts."""
    from stitchlake.jobs import launch

    table = _with_savepoint(tmp_path)
    write(table, "orders", _rows(3))
    undone = _restored_after_planning(monkeypatch, compaction, table)
    with pytest.raises(PlanUndone, match=r"undone by restore") as caught:
        if layer == "service":
            compaction.compact(table, "all")
        else:
            launch.compact(table, strategy="all", engine="local")
    assert caught.value.exit_code == 3 and len(undone) == 1 and undone[0] in str(caught.value)
    # Its own plan: a new run plans anew, so this one is retried (`--retries`), unlike a plan named by the caller.
    assert type(caught.value) is PlanUndone and caught.value.retry_helps, type(caught.value)
    assert table.timeline().get(undone[0]) is None and not table.timeline().pending()
    monkeypatch.undo()

    write(table, "orders", _rows(4))
    write(table, "orders", _rows(5))
    done = compaction.compact(table, "all")
    assert done is not None and done.file_groups > 0
    assert set(table.read().column("amount").to_pylist()) == {5}


@pytest.mark.parametrize("layer", ["service", "job"])
@pytest.mark.parametrize("meanwhile", ["restored", "run elsewhere"])
def test_pending_plans_undone_or_run_elsewhere_before_their_resumed_run_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str, meanwhile: str
) -> None:
    """Plain `stitch compact` first runs the pending plans nobody runs; one a restore removed, or another process
    ran, between the listing and its run is skipped, not reported as a missing plan (exit 2) or as "already
    completed, nothing to run" (exit 2)."""
    from stitchlake.jobs import launch
    from stitchlake.services.rewrites import pending

    table = _with_savepoint(tmp_path)
    first = table.timeline().completed([Action.DELTACOMMIT])[0]
    stale = compaction.schedule(table, "all")
    assert stale is not None
    listed = compaction.runnable_plans(table)
    assert [p.requested for p in listed] == [stale]
    if meanwhile == "restored":
        restore.restore(table, "before")
    else:
        compaction.run(table, stale)  # another process
    monkeypatch.setattr(compaction, "runnable_plans", lambda *_a, **_k: listed)  # the listing taken before
    if layer == "service":
        assert compaction.resume_pending(table) == []
    else:
        done = launch.compact(table, engine="local")  # skips the listed plan, then plans anew (nothing qualifies)
        assert done.resumed == [] and stale not in {i.requested for i in table.timeline().pending()}
    assert not table.timeline().pending()
    # an instant still on the timeline, but no plan: not-found stands
    with pytest.raises(NotFoundError, match="is not a compaction"), pending.undone_meanwhile(table, first.requested):
        compaction.run(table, first.requested)


def test_a_plan_another_process_ran_between_planning_and_running_is_busy_not_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan has no heartbeat until a run takes it, so another `stitch compact` may run it first: ours is told so
    (exit 4), not "already completed; nothing to run" (exit 2, "fix your command")."""
    from stitchlake.errors import BusyError

    table = new_table(tmp_path, FAST)
    for value in (1, 2):
        write(table, "orders", _rows(value))
    original = compaction.schedule

    def run_elsewhere_right_after_planning(*args: Any, **kwargs: Any) -> Any:
        planned = original(*args, **kwargs)
        compaction.run(table, planned)
        return planned

    monkeypatch.setattr(compaction, "schedule", run_elsewhere_right_after_planning)
    with pytest.raises(BusyError, match="run by another process meanwhile"):
        compaction.compact(table, "all")


@pytest.mark.parametrize("layer", ["service", "job"])
def test_a_rescale_plan_a_restore_undid_before_its_run_is_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str
) -> None:
    """The rescale's own plan, removed by a restore before its run took it: PlanUndone (exit 3), and the table
    keeps its bucket count."""
    from stitchlake.jobs import launch
    from stitchlake.services.rewrites import rescale as rescales

    table = _with_savepoint(tmp_path)
    _restored_after_planning(monkeypatch, rescales, table)
    with pytest.raises(PlanUndone, match="undone by restore"):
        if layer == "service":
            rescales.rescale(table, 4)
        else:
            launch.rescale(table, 4, engine="local")
    assert not table.timeline().pending() and table.layout().default == 2


def test_running_a_named_plan_a_restore_undid_earlier_is_a_conflict_naming_the_restore(tmp_path: Path) -> None:
    """`stitch compact --run --instant T` (a scheduled run, e.g. an Airflow task after the schedule task) whose plan
    a restore removed in between: exit 3 naming the restore, as the docs say, not exit 2 "not a compaction on the
    timeline", which tells the operator their command was wrong. A time that never was a plan stays exit 2."""
    from stitchlake.jobs import launch

    table = _with_savepoint(tmp_path)
    write(table, "orders", _rows(7))
    ingested = table.timeline().completed([Action.DELTACOMMIT])[-1].requested
    planned = compaction.schedule(table, "all")
    assert planned is not None
    restore.restore(table, "before")
    restored = table.timeline().completed([Action.RESTORE])[-1].requested
    retried: list[str] = []
    with pytest.raises(PlanGone, match=f"compaction plan {planned} was undone by restore {restored}") as caught:
        launch.with_retries(
            2, lambda: launch.compact(table, run_only=True, instant=planned, engine="local"), retried.append
        )
    assert caught.value.exit_code == 3 and retried == [], "running the same named plan again cannot help"
    # ... as a Spark job's error too, rebuilt by its class name in the launcher
    from stitchlake.jobs.spark_submit import error_for

    rebuilt = error_for("PlanGone", str(caught.value))
    assert isinstance(rebuilt, PlanGone) and not rebuilt.retry_helps
    for wrong in ("20200101000000000", ingested):  # never an instant; an ingest the restore undid
        with pytest.raises(NotFoundError, match="is not a compaction") as missing:
            launch.compact(table, run_only=True, instant=wrong, engine="local")
        assert missing.value.exit_code == 2


@pytest.mark.parametrize("where", ["a partition the erase never saw", "a bucket the erase never saw"])
def test_a_write_of_an_erased_key_the_erase_did_not_plan_for_is_a_conflict_not_a_survivor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """While an erase runs, a write of one of its keys completes into a file group the erase did not plan (a new
    partition, or a bucket of the partition that had no file yet): that event was committed before the erase,
    so the erase must refuse (exit 3, retry) as for a write into a planned group. It used to check the planned
    groups only, and the key stayed readable after "erased"."""
    import pyarrow as pa

    from stitchlake.layout.bucket import bucket_of
    from stitchlake.services.rewrites import erase

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 2)))  # key 1: partition odd has its bucket's file group only
    late = 1
    racing = _rows(2, range(1, 2))
    if where.startswith("a partition"):
        racing = racing.set_column(racing.schema.get_field_index("p"), "p", pa.array(["elsewhere"]))
    else:

        def bucket(k: int) -> int:
            return int(bucket_of([pa.array([k], pa.int64())], 2)[0])

        late = next(k for k in range(3, 99, 2) if bucket(k) != bucket(1))  # odd too: key 1's partition
        racing = _rows(2, range(late, late + 1))
    original = erase.erase_file_group

    def write_meanwhile(*args: Any, **kwargs: Any) -> Any:
        write(table, "orders", racing)
        return original(*args, **kwargs)

    monkeypatch.setattr(erase, "erase_file_group", write_meanwhile)
    keys = pa.table({"k": pa.array(sorted({1, late}), pa.int64())})
    with pytest.raises(ConflictError, match="wrote an erased key while the erase ran") as caught:
        erase.erase(table, keys)
    assert caught.value.exit_code == 3
    monkeypatch.undo()
    done = erase.erase(table, keys)  # the retry erases the late write too
    assert done.erased_keys >= 1 and table.read().num_rows == 0


def test_a_plan_gone_when_its_run_takes_it_over_is_a_conflict(tmp_path: Path) -> None:
    """Found by the run, gone by the time it takes the lock to take it over (a restore in between): PlanUndone, not
    "another process finished it"."""
    table = _with_savepoint(tmp_path)
    planned = compaction.schedule(table, "all")
    assert planned is not None
    found = table.timeline().get(planned)
    assert found is not None
    restore.restore(table, "before")
    with pytest.raises(PlanUndone, match="gone from the timeline"):
        Transaction.take_over(table, found, "compaction")


def test_an_inline_compaction_whose_plan_a_restore_undid_is_skipped_and_the_ingest_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compaction.inline` after an ingest: its plan undone before it ran is no failure of the ingest (which the
    caller would report as exit 1, "committed, but the inline compaction after it failed")."""
    from types import SimpleNamespace

    from stitchlake.engine import LocalEngine
    from stitchlake.services.writes.ingest import compact_inline

    document = copy.deepcopy(FAST)
    document["compaction"] = {"inline": True, "after_delta_commits": 1}
    table = _with_savepoint(tmp_path, document)
    _restored_after_planning(monkeypatch, compaction, table)
    said: list[str] = []
    ingested = SimpleNamespace(instant="20260101000000000", message="ingested")
    assert compact_inline(table, LocalEngine(), ingested, said.append) is None  # type: ignore[arg-type]
    assert any("inline compaction skipped" in line and "undone" in line for line in said), said
    assert not table.timeline().pending()


@pytest.mark.parametrize("layer", ["service", "job"])
def test_a_pending_rescale_a_restore_undid_before_its_resumed_run_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str
) -> None:
    """`stitch rescale` first runs the pending rescales nobody runs; one a restore removed between the listing and
    its run is skipped, and the rescale asked for runs."""
    from stitchlake.jobs import launch
    from stitchlake.services.rewrites import rescale as rescales

    table = _with_savepoint(tmp_path)
    stale = rescales.schedule(table, 3)
    assert stale is not None
    listed = rescales.runnable_plans(table)
    assert [p.requested for p in listed] == [stale]
    restore.restore(table, "before")
    monkeypatch.setattr(rescales, "runnable_plans", lambda *_a, **_k: listed)  # the listing taken before
    if layer == "service":
        done = rescales.rescale(table, 4)
        assert done is not None and done.buckets == 4
    else:
        ran = launch.rescale(table, 4, engine="local")
        assert ran.resumed == [] and ran.last is not None and ran.last.result is not None
    assert not table.timeline().pending() and table.layout().default == 4


def test_a_writer_that_begins_while_a_restore_plans_is_not_rolled_back_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore checks for live writers at once, and again under the lock as it plans: one that began in
    between is refused as busy (exit 4) without --force, not undone with the rest."""
    from stitchlake.errors import BusyError

    table = new_table(tmp_path, FAST)
    table.write("orders", batch(ORDERS, _rows(1).to_pylist()))
    savepoint.create(table, name="before")
    started: list[Transaction] = []
    original = Transaction.begin_planned

    def a_writer_begins_first(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("plan") is not None and not started:  # the restore's own begin: a writer begins just before
            monkeypatch.setattr(Transaction, "begin_planned", original)
            started.append(Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="payments")))
        return original(*args, **kwargs)

    monkeypatch.setattr(Transaction, "begin_planned", a_writer_begins_first)
    try:
        with pytest.raises(BusyError, match="live writers are running"):
            restore.begin_restore(table, "before")
        assert [i.requested for i in table.timeline().pending()] == [started[0].time], "the writer stands alone"
    finally:
        for txn in started:
            txn.abort()


def test_a_micro_batch_spark_replays_after_its_commit_was_archived_adds_nothing(tmp_path: Path) -> None:
    """A `df.writeStream` micro-batch committed, and the driver died before Spark recorded it. While the query was
    down the table moved on, erased the batch's key, and archived the batch's commit. The replay looked for the
    batch on the active timeline only: it committed again, and the erased key came back."""
    import pyarrow as pa

    from stitchlake.services.upkeep.archive import archive
    from stitchlake.services.writes.streaming import BatchAlreadyCommitted, batch_instant, exactly_once
    from stitchlake.spark.write import publish, write_task
    from stitchlake.timeline.metadata import StreamBatch

    table = new_table(tmp_path, FAST)
    batch = StreamBatch("query-1", 5)

    def run_batch() -> str | None:
        instant = batch_instant(table, "orders", batch)
        if instant is not None:
            written = write_task(table, "orders", instant, iter(_rows(100, range(42, 43)).to_batches()))
            publish(table, "orders", instant, [written], {}, batch, exactly_once("orders", batch))
        return instant

    first = run_batch()
    assert first is not None and run_batch() is None  # replayed at once: known as committed
    for value in range(3):
        write(table, "orders", _rows(value))
    table.erase(pa.table({"k": pa.array([42], pa.int64())}))
    assert archive(table, keep=2).archived >= 3
    assert table.timeline().get(first) is None, "the batch's commit is archived"

    assert run_batch() is None
    assert 42 not in table.read().column("k").to_pylist()
    # A run of it that began before the archive is refused at its publish, under the lock.
    check, timeline = exactly_once("orders", batch), table.timeline()
    with pytest.raises(BatchAlreadyCommitted, match="archived since"):
        check(timeline, timeline.completed([Action.ERASE])[-1])
    archive(table, keep=1)  # a later archive keeps what the one before it knew
    assert run_batch() is None


def test_an_archive_while_an_older_state_is_savepointed_stops_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive ran while a savepoint of an older state was being made: only completed savepoints held it back,
    so it archived past the state, the savepoint completed pinning nothing readable (read and restore refused as
    "older than the archived timeline"), and every later archive stopped at it for good."""
    from stitchlake.services.upkeep.archive import archive

    table = new_table(tmp_path, FAST)
    for value in range(4):
        write(table, "orders", _rows(value))
    second = table.timeline().completed([Action.DELTACOMMIT])[1]
    complete = Transaction.complete
    archived: list[Any] = []

    def archive_first(txn: Transaction, *args: Any, **kwargs: Any) -> Any:
        if txn.instant.action == Action.SAVEPOINT and not archived:
            archived.append(archive(table, keep=1))
        return complete(txn, *args, **kwargs)

    monkeypatch.setattr(Transaction, "complete", archive_first)
    savepoint.create(table, second.requested, name="old")
    monkeypatch.undo()
    assert archived and archived[0].archived == 1, archived  # the first commit only: the state pinned stays
    assert _sorted(table.read(as_of="old")).equals(_sorted(table.read(as_of=second.requested)))
    restore.restore(table, "old")
    assert table.timeline().completed([Action.DELTACOMMIT])[-1].requested == second.requested


def test_a_crashed_restore_finished_by_recovery_still_says_it_undid_an_erase(tmp_path: Path) -> None:
    """`rollback --failed` (and the nightly clean) finished a crashed restore and said only "finished crashed
    restore": an erase it undid, whose keys read again, went unmentioned; and a restore that crashed after undoing
    the erase no longer knew of it at all."""
    import pyarrow as pa

    from stitchlake.services.undo.rollback import undo

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    savepoint.create(table, name="before")
    table.erase(pa.table({"k": pa.array([2], pa.int64())}))
    erase = table.timeline().completed([Action.ERASE])[0].requested
    crashed = restore.begin_restore(table, "before")
    plan = crashed.plan
    _dead(crashed)
    assert isinstance(plan, RestorePlan)
    undo(table, next(t for t in plan.targets if t.requested == erase))  # it died right after undoing the erase

    result = rollback_failed(table)
    assert result.finished == [f"restore {crashed.time}"]
    assert f"the restore undid erase {erase}" in result.message and "read again" in result.message
    assert 2 in table.read().column("k").to_pylist()


def test_a_savepoint_named_by_the_state_two_savepoints_pin_is_refused_as_ambiguous(tmp_path: Path) -> None:
    """Two savepoints of a quiet table pin one state; `savepoint delete <that instant>` deleted the older one."""
    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    first, second = savepoint.create(table, name="monday"), savepoint.create(table, name="tuesday")
    assert first.of_instant == second.of_instant
    with pytest.raises(UsageError, match=r"2 savepoints pin .*monday, tuesday"):
        savepoint.delete(table, first.of_instant)
    assert savepoint.delete(table, "tuesday").name == "tuesday"
    assert savepoint.delete(table, first.of_instant).name == "monday"  # one left: no doubt which


def test_a_publish_whose_answer_is_lost_while_another_process_completed_the_instant_is_refused_and_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline read again after a lost answer shows the instant completed at another time: another attempt's
    commit. This one is refused (exit 3) and deletes nothing: the files may be that commit's."""
    from stitchlake.storage.local import LocalStorage

    table = new_table(tmp_path, FAST)
    create = LocalStorage.put_if_absent

    def another_completed_it(self: LocalStorage, path: str, data: bytes, ready: Any = None) -> bool:
        if not path.endswith(".deltacommit"):
            return create(self, path, data, ready)
        if ready is not None:
            ready()
        _requested, _, rest = path.rpartition("/")[2].partition("_")
        create(self, path.replace(f"_{rest}", f"_{int(rest.split('.')[0]) + 1}.deltacommit"), data)
        raise OSError(5, "the store did not answer")

    monkeypatch.setattr(LocalStorage, "put_if_absent", another_completed_it)
    with pytest.raises(ConflictError, match="was completed by another process"):
        write(table, "orders", _rows(1))
    monkeypatch.undo()
    assert len(table.timeline().completed([Action.DELTACOMMIT])) == 1
    assert _sorted(table.read()).column("amount").to_pylist() == [1, 1, 1, 1]  # its files were kept


@pytest.mark.parametrize("lost", ["an error", "a stop"])
def test_a_publish_whose_answer_is_lost_after_the_create_landed_keeps_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    """The completed file was created, then the store's answer was lost (an S3 timeout or 5xx after the PUT
    landed) or a stop came right after: the writer took itself for unpublished and aborted, deleting the data
    files of its own published commit: every read then failed on a missing file, and the landing files counted as
    consumed. The commit stands now: an error after the create is a success, a stop says the instant was published."""
    from stitchlake.errors import COMPLETED_BEFORE_STOP
    from stitchlake.storage.local import LocalStorage

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    create = LocalStorage.put_if_absent

    def answer_lost(self: LocalStorage, path: str, data: bytes, ready: Any = None) -> bool:
        created = create(self, path, data, ready)
        if path.endswith(".deltacommit"):
            if lost == "a stop":
                raise KeyboardInterrupt
            raise OSError(5, "the store did not answer")
        return created

    monkeypatch.setattr(LocalStorage, "put_if_absent", answer_lost)
    if lost == "a stop":
        with pytest.raises(KeyboardInterrupt) as stopped:
            write(table, "orders", _rows(2))
        assert any(note.startswith(COMPLETED_BEFORE_STOP) for note in stopped.value.__notes__)
    else:
        write(table, "orders", _rows(2))
    monkeypatch.undo()
    assert not table.timeline().pending()
    assert len(table.timeline().completed([Action.DELTACOMMIT])) == 2
    assert _sorted(table.read()).column("amount").to_pylist() == [2, 2, 2, 2]


def test_a_commit_naming_a_file_this_disk_does_not_hold_is_refused_before_it_is_published(tmp_path: Path) -> None:
    """A table on local disk with a Spark cluster: executors on other machines wrote the files to their own disks,
    and the commit named files no reader here could find. Any commit (an ingest, a compaction, an erase) is
    refused before it is published."""
    from stitchlake.timeline.metadata import DataFile

    table = new_table(tmp_path, FAST)
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    elsewhere = DataFile("p=even/00000_elsewhere.log.parquet", "p=even", "00000", "log", "orders", 1, 1, "c")
    with pytest.raises(StitchError, match=r"1 data file\(s\) instant .* wrote are not on this machine"):
        txn.complete(DeltaCommit(stream="orders", added=(elsewhere,)))
    txn.abort()
    assert table.timeline().completed() == [] and not table.timeline().pending()


def test_an_instant_is_marked_inflight_under_the_lock_that_requested_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer frozen between its requested file and its inflight mark was presumed dead and rolled back; woken, it
    marked the rolled-back instant inflight again: a pending instant holding its stream with no requested plan. The
    mark is now made in the same critical section (fenced), where no rollback can come between."""
    table = new_table(tmp_path, FAST)
    held: list[bool] = []
    from stitchlake.timeline.timeline import write_inflight as marked

    def write_inflight(*args: Any, **kwargs: Any) -> Any:
        held.append(lock_held_elsewhere(table))
        return marked(*args, **kwargs)

    monkeypatch.setattr(transaction_module, "write_inflight", write_inflight)
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    assert held == [True]
    txn.abort()


def test_an_erase_checks_under_the_lock_every_write_its_snapshot_missed_not_only_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase lists the timeline once after its rewrite, then re-checks under the lock the writes that completed
    after the newest time it saw. A listing is no atomic cut: it can miss a commit created while it ran beside a
    later one it saw, and that write of an erased key was then checked by neither pass (the key stayed readable
    after "erased"). The snapshot now says which commits it checked, and the lock's pass checks every other."""
    import pyarrow as pa

    from stitchlake.services.rewrites import erase
    from stitchlake.table.handle import TableHandle

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 2)))
    original, listing = erase.erase_file_group, TableHandle.timeline
    missed: list[str] = []

    def write_meanwhile(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if not missed:
            write(table, "orders", _rows(2, range(1, 2)))  # writes erased key 1
            missed.append(table.timeline().completed([Action.DELTACOMMIT])[-1].requested)
            write(table, "orders", _rows(3, range(3, 4)))  # a later commit of another key, which the listing sees

            def stale_once(handle: TableHandle) -> Any:
                found = listing(handle)
                if len(missed) == 1:
                    missed.append("listed")
                    found._instants.pop(missed[0])
                return found

            monkeypatch.setattr(TableHandle, "timeline", stale_once)
        return out

    monkeypatch.setattr(erase, "erase_file_group", write_meanwhile)
    keys = pa.table({"k": pa.array([1], pa.int64())})
    with pytest.raises(ConflictError, match=f"deltacommit {missed[0] if missed else ''}.*wrote an erased key"):
        erase.erase(table, keys)
    assert missed[1:] == ["listed"], "the snapshot after the rewrite missed the write"
    monkeypatch.undo()
    assert erase.erase(table, keys).erased_keys == 1 and [r["k"] for r in table.read().to_pylist()] == [3]


def test_a_resumed_runs_attempt_token_is_written_behind_the_fence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed rewrite writes its attempt token over the crashed run's. It was fenced, then written by the store's
    default client, which retries for minutes on S3: the token could land after the lease, over that of a run that
    took the instant over meanwhile. The write now gets the fence as its `ready` (on S3: the bounded client the
    fence keeps room for on the lease), and a fence refused there writes nothing."""
    from stitchlake.concurrency.lock import FileSystemLock
    from stitchlake.storage.local import LocalStorage
    from stitchlake.timeline.timeline import read_inflight

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1))
    planned = compaction.schedule(table, "all")
    assert planned is not None
    found = table.timeline().get(planned)
    assert found is not None
    before = read_inflight(table.storage, found)
    writes, written = [], LocalStorage.write_atomic

    def recorded(self: LocalStorage, path: str, data: bytes, ready: Any = None) -> None:
        writes.append((path, ready is not None))
        written(self, path, data, ready)

    def lost(self: FileSystemLock) -> None:
        raise LockLost("our lease ran out while the token was made")

    monkeypatch.setattr(LocalStorage, "write_atomic", recorded)
    monkeypatch.setattr(FileSystemLock, "fence", lost)
    with pytest.raises(LockLost):
        Transaction.resume(table, found, "compaction")
    assert [fenced for path, fenced in writes if path.endswith(".inflight")] == [True]
    assert read_inflight(table.storage, found) == before


def test_an_erase_refuses_a_late_write_of_a_stream_an_alter_dropped_meanwhile(tmp_path: Path) -> None:
    """The lock's re-check reads each late write's files for the erased keys, by the stream's columns. A stream an
    alter dropped meanwhile has none in the config any more, and its write was skipped as holding nothing: the key
    it wrote stayed in a file the purge no longer reaches. Unknown columns cannot say "no key": it refuses."""
    import pyarrow as pa

    from stitchlake.services.rewrites.erase import _late_writes
    from stitchlake.table.handle import TableHandle

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 2)))
    latest = table.timeline().latest_completed()
    assert latest is not None and latest.completed is not None
    payments = MODELS[1]
    late = write(table, payments.name, batch(payments, [{"k": 1, "paid": 5, "note": "n", "pts": 1}]))
    keys = pa.table({"k": pa.array([1], pa.int64())})
    kept = {name: spec for name, spec in table.config.streams.items() if name != payments.name}
    dropped = TableHandle(table.config.model_copy(update={"streams": kept}), table.storage)
    assert _late_writes(dropped, dropped.timeline(), keys, latest.completed) == [late.instant]
    assert _late_writes(table, table.timeline(), keys, latest.completed) == [late.instant]  # read, and found
    other = pa.table({"k": pa.array([3], pa.int64())})
    assert _late_writes(table, table.timeline(), other, latest.completed) == []


def test_a_restore_while_an_erase_purges_is_refused_and_the_keys_stay_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stitch delete --purge` commits its erase, then purges older copies with a live beat. A restore to an older
    savepoint planned meanwhile: `finish_purges` left the live purge alone and the plan never looked, so the
    restore took the erase back (a report the erasing operator never saw), and the purge, finding nothing left to
    do, said it was done. The plan refuses while a purge of an erase after its state runs (exit 4)."""
    import pyarrow as pa

    from stitchlake.services.rewrites import purge as purge_module
    from stitchlake.services.undo import restore as restore_module

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 5)))
    savepoint.create(table, name="before")
    original = purge_module.older_copies
    refused: list[BusyError] = []

    def restore_meanwhile(*args: Any) -> Any:
        if not refused:
            with pytest.raises(BusyError, match=r"still purging older copies of its keys") as caught:
                restore_module.begin_restore(table, "before")  # another operator, while the purge beats
            refused.append(caught.value)
        return original(*args)

    monkeypatch.setattr(purge_module, "older_copies", restore_meanwhile)
    done = table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True).result
    assert refused and refused[0].exit_code == 4
    assert done.purged_savepoints, "the savepoint that held key 1 was purged"
    assert 1 not in {r["k"] for r in table.read().to_pylist()}
    assert not [i for i in table.timeline().instants if i.action == Action.RESTORE]


def test_an_archive_stopped_part_way_leaves_nothing_a_rollback_may_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive writes its checkpoint, then removes the archived instants' active files. Killed in between, it left
    completed deltacommits on the active timeline that the checkpoint counts: `rollback --stream` took one as the
    stream's latest and deleted its files, and every read failed on them. A commit at or before the horizon is
    refused as archived, and the next archive removes the leftovers even with nothing new to archive."""
    from stitchlake.errors import NotFoundError, UsageError
    from stitchlake.services.upkeep import archive as archive_module
    from stitchlake.timeline.archive import horizon_of

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 5)))
    payments = MODELS[1]
    write(table, payments.name, batch(payments, [{"k": 1, "paid": 1, "note": "ok", "pts": 1}]))
    before = table.read().to_pylist()

    def killed(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt("the archive was killed while removing what it archived")

    monkeypatch.setattr(archive_module, "delete_instant", killed)
    with pytest.raises(KeyboardInterrupt):
        table.archive(keep=0)
    monkeypatch.undo()
    horizon = horizon_of(table.storage)
    assert horizon is not None
    left = [i for i in table.timeline().completed([Action.DELTACOMMIT]) if (i.completed or "") <= horizon]
    assert left, "the archived orders commit is still on the active timeline"
    with pytest.raises(UsageError, match="is archived"):
        table.rollback(stream="orders")
    with pytest.raises(UsageError, match="is archived"):
        table.rollback(instant=left[0].requested)
    assert table.read().to_pylist() == before
    tidied = table.archive(keep=100).result  # nothing new to archive: it still removes them
    assert f"removed {len(left)} archived instant(s) left on the active timeline" in tidied.message
    assert not [i for i in table.timeline().completed() if (i.completed or "") <= horizon]
    assert table.read().to_pylist() == before
    with pytest.raises(NotFoundError, match="no completed deltacommit"):
        table.rollback(stream="orders")


def test_two_overlapping_creates_of_one_savepoint_name_make_one_savepoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name check looked at completed savepoints only: two overlapping `savepoint create --name nightly` both
    completed, and `--as-of nightly` read one state while `restore --name nightly` restored the other. A pending
    savepoint of the name refuses the second (exit 4), and a name two savepoints already share is refused where it
    is looked up, not resolved to one of them."""
    from stitchlake.errors import UsageError
    from stitchlake.timeline.savepoints import find, savepoint_time

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 2)))
    begin = Transaction.begin_planned.__func__  # type: ignore[attr-defined]
    second: list[Any] = []

    def another_create_meanwhile(cls: Any, *args: Any, **kwargs: Any) -> Any:
        txn = begin(cls, *args, **kwargs)
        if not second:
            second.append(None)
            write(table, "orders", _rows(2, range(1, 2)))
            with pytest.raises(BusyError, match="named 'nightly' is being made") as caught:
                savepoint.create(table, name="nightly")
            second[0] = caught.value
        return txn

    monkeypatch.setattr(Transaction, "begin_planned", classmethod(another_create_meanwhile))
    made = savepoint.create(table, name="nightly")
    monkeypatch.undo()
    assert second[0].exit_code == 4
    assert [s.name for s in savepoint.list_savepoints(table)] == ["nightly"]
    assert find(table.timeline(), "nightly")[0].requested == made.instant
    # A table where two already share the name (made before this check): refused, never one of them.
    monkeypatch.setattr(savepoint, "_refuse_name_in_the_making", lambda *_args: None)
    monkeypatch.setattr(savepoint, "_still_pinnable", lambda *_args: None)
    monkeypatch.setattr(savepoint, "savepoints", lambda _timeline: [])  # the name check in the plan, passed
    twin = savepoint.create(table, name="nightly")
    monkeypatch.undo()
    for lookup in (find, savepoint_time):
        with pytest.raises(UsageError, match="2 savepoints are named 'nightly'"):
            lookup(table.timeline(), "nightly")
    assert find(table.timeline(), twin.instant)[0].requested == twin.instant  # by its own instant: fine

    # A create whose process died leaves the name free: a retry makes the savepoint (not exit 4 until a recovery).
    from stitchlake.timeline.metadata import SavepointPlan

    other = new_table(tmp_path / "crashed", FAST)
    write(other, "orders", _rows(1, range(1, 2)))
    latest = other.timeline().latest_completed()
    assert latest is not None and latest.completed is not None
    plan = SavepointPlan(savepoint_of=latest.completed, instant=latest.requested, name="daily")
    dead = Transaction.begin(other, Action.SAVEPOINT, plan)
    assert dead.heartbeat is not None
    dead.heartbeat.stop(delete=True)
    dead.heartbeat = None
    until_expired(other, dead.time)
    assert savepoint.create(other, name="daily").name == "daily"


def test_a_df_write_whose_commit_landed_is_not_reported_failed_by_its_tidy_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`df.write` published, then deleting its heartbeat failed (an S3 503): the write raised, Spark aborted a
    commit that stood, and the caller retrying a write it was told failed wrote its rows twice. The tidy-up after
    the publish only warns now."""
    from stitchlake.concurrency import heartbeat

    table = new_table(tmp_path, FAST)
    config = write_table_yaml(Path(table.path).parent, FAST, name="writer.yaml")
    writer = StitchWriter({"path": table.path, "config": str(config), "stream": "orders"})
    written = writer.write(iter(_rows(1).to_batches()))

    def store_busy(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("503 SlowDown")

    monkeypatch.setattr(heartbeat, "delete", store_busy)
    writer.commit([written])  # no error: the commit stands
    monkeypatch.undo()
    (done,) = table.timeline().completed([Action.DELTACOMMIT])
    assert done.requested == writer.instant and table.read().num_rows == 4


def test_a_micro_batch_abort_takes_the_instant_back_under_the_lock(tmp_path: Path) -> None:
    """Two runs of one micro-batch (a restarted query beside a zombie driver of the same checkpoint) share its
    instant. One run's abort deleted every marked file and the instant without the lock, and could do so while the
    other held the lock to publish: a completed commit of missing files. The abort waits for the lock, and looks
    again under it (an instant completed meanwhile stays)."""
    import threading

    from stitchlake.spark.write import discard

    table = new_table(tmp_path, FAST)
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    aborted = threading.Event()

    def abort() -> None:
        discard(table, txn.time, [], abort_instant=True)
        aborted.set()

    with table.lock():  # the other run, from its last check to its completed file
        aborting = threading.Thread(target=abort)
        aborting.start()
        assert not aborted.wait(1.0), "the abort did not wait for the lock"
        assert table.timeline().get(txn.time) is not None
    aborting.join()  # it ends by itself: the lock is given back, or its wait_s runs out
    assert aborted.is_set() and table.timeline().get(txn.time) is None


def test_a_landing_micro_batch_reads_its_files_by_their_listed_names(tmp_path: Path) -> None:
    """`stitch stream` turned each name its offset holds back into a URI: `c%20d.parquet` in a `file://` folder was
    read as `c d.parquet`, which does not exist (and `#` or `?` in an S3 key was refused), so the stream failed on
    that file at every restart while `stitch ingest` read it. The batch takes the folder's files by name now, and
    a named file gone before its ingest is still an error, never skipped."""
    from stitchlake.engine import LocalEngine
    from stitchlake.services.writes.ingest import pending_files
    from stitchlake.spark.streaming import ingest_landing_batch
    from stitchlake.timeline.metadata import StreamBatch

    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(_rows(1, range(4)), landing / "c%20d #1.parquet")
    pq.write_table(_rows(2, range(100, 104)), landing / "e.parquet")
    document = copy.deepcopy(FAST)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": f"file://{landing}"}
    table = new_table(tmp_path, document)
    names = [f.name for f in pending_files(table, "orders")[0]]  # what the stream's offset names
    (landing / "e.parquet").rename(landing / "e.parquet.moved")
    with pytest.raises(UsageError, match=r"e\.parquet of stream orders does not exist"):
        ingest_landing_batch(table, LocalEngine(), "orders", names, lambda: StreamBatch("q", 0))
    (landing / "e.parquet.moved").rename(landing / "e.parquet")
    done = ingest_landing_batch(table, LocalEngine(), "orders", names, lambda: StreamBatch("q", 0))
    assert done is not None and done.source_files == 2
    assert sorted(table.read().column("k").to_pylist()) == [0, 1, 2, 3, 100, 101, 102, 103]


def test_a_commit_keeps_only_its_own_quarantine_files(tmp_path: Path) -> None:
    """A micro-batch replayed after a crash writes into the instant the crashed run began, whose bad rows were set
    aside already: the commit named only the replay's quarantine file, the crashed run's stayed beside it (the orphan
    sweep never looks under `.stitch`), and an operator reading the folder saw those bad rows twice."""
    from stitchlake.paths import quarantine_folder
    from stitchlake.writing.badrows import quarantine_rows

    table = new_table(tmp_path, {**FAST, "bad_rows": "quarantine"})
    txn = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    with_bad = batch(ORDERS, [{"k": 1, "amount": 1, "status": "a", "ots": 1}, {"k": 2, "amount": 2, "ots": None}])
    crashed = quarantine_rows(table.storage, txn.time, with_bad.slice(1), "crashed-run", txn.mark)
    done = write(table, "orders", with_bad, txn=txn)
    commit = table.timeline().commit(table.timeline().get(done.instant))  # type: ignore[arg-type]
    assert isinstance(commit, DeltaCommit) and commit.bad_rows == 1 and len(commit.quarantine_files) == 1
    assert crashed not in commit.quarantine_files and not table.storage.exists(crashed)
    left = [f.path for f in table.storage.list_files(quarantine_folder(done.instant))]
    assert left == list(commit.quarantine_files)


def test_a_purge_whose_erase_a_restore_took_back_meanwhile_does_not_say_it_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore that planned before the purge began (no restore plans while one runs) takes the erase back while
    the purge deletes older copies: the purge must not write its marker, which tells reads of older states the
    keys are gone, and says the erase was undone."""
    import pyarrow as pa

    from stitchlake.paths import purged_marker
    from stitchlake.services.rewrites import purge as purge_module
    from stitchlake.services.undo.rollback import target_of
    from stitchlake.timeline.metadata import RestorePlan

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, range(1, 5)))
    original = purge_module._purge_job_logs
    erased: list[str] = []

    def restore_planned_meanwhile(*args: Any) -> Any:
        timeline = table.timeline()
        (erase,) = timeline.completed([Action.ERASE])
        erased.append(erase.requested)
        plan = RestorePlan(targets=(target_of(table, timeline, erase),), savepoint="before", savepoint_of="0")
        Transaction.begin(table, Action.RESTORE, plan)
        return original(*args)

    monkeypatch.setattr(purge_module, "_purge_job_logs", restore_planned_meanwhile)
    with pytest.raises(StitchError, match=r"was undone by restore .* while its purge ran") as caught:
        table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True)
    assert isinstance(caught.value.__cause__, ConflictError)
    assert not table.storage.exists(purged_marker(erased[0]))
