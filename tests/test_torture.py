"""The torture test (issue 7): a CI-sized run of scripts/torture.py, proof that its checker can fail, and the
races it found, pinned down one by one.

The CI-sized run is real: separate writer, compactor, cleaner and reader processes on one table, SIGKILLed and
frozen at random, then `stitch clean` and re-run ingests, every read checked against the reference merge. The
checker tests corrupt a copy of that run's workdir (a read with a row too many or too few, a read that saw a
commit its snapshot did not have, a rogue row in the table, an orphan file, a pending instant) and expect a
violation, so a checker that cannot fail would fail here.

The race tests replay, in-process and deterministically, the interleavings the torture run found: a process
frozen past its heartbeat's expiry (a "zombie") is presumed dead and rolled back or reset, and must then never
publish; a rollback must never undo an instant that completed after it was chosen.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from script_modules import load_script
from tables import MODELS, THREE_STREAMS, batch, new_table

from stitchlake.errors import BusyError, StitchError
from stitchlake.services import compaction
from stitchlake.services import rollback as rollback_module
from stitchlake.services.clean import clean
from stitchlake.services.rollback import failed_instants, rollback_failed
from stitchlake.table import Table
from stitchlake.timeline.instant import Action
from stitchlake.transaction import Transaction
from stitchlake.write import write

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "torture.py"
#: CI size: under a minute on two idle cores, about two on busy ones; two writers per stream (cron overlap).
CI_ARGS = ["--rounds", "6", "--keys", "600", "--seed", "5", "--readers", "2", "--writers-per-stream", "2"]


torture = load_script("torture")


# ------------------------------------------------------------------------------------------ the CI-sized run


@pytest.fixture(scope="module")
def storm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], subprocess.CompletedProcess[str]]:
    base = tmp_path_factory.mktemp("torture")
    work, summary = base / "work", base / "summary.json"
    argv = [sys.executable, str(SCRIPT), *CI_ARGS, "--workdir", str(work), "--summary-json", str(summary)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert summary.exists(), f"no summary; exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return work, json.loads(summary.read_text(encoding="utf-8")), done


def test_ci_sized_torture_run_has_no_violation_and_really_tortured(
    storm: tuple[Path, dict[str, Any], subprocess.CompletedProcess[str]],
) -> None:
    _work, summary, done = storm
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert summary["violations"] == 0, summary["violation_messages"]
    assert "violations 0" in done.stdout
    # Not vacuous: processes were killed while the rounds ran (not only at the end), reads were checked,
    # and every kind of actor got work done.
    assert summary["kills_during_rounds"] > 0, summary["kills_by_cause"]
    assert summary["kills"] >= summary["kills_during_rounds"]
    assert summary["reads_checked"] > 0
    commits = summary["commits"]
    assert commits["deltacommits"] >= 3 * 6, commits  # every landing file went in (exactly once: checked)
    assert commits["compactions"] > 0 and commits["cleans"] > 0, commits


# ---------------------------------------------------------------------------------- the checker can fail


@pytest.fixture
def case(storm: tuple[Path, dict[str, Any], subprocess.CompletedProcess[str]], tmp_path: Path) -> Path:
    """A private copy of the run's workdir to corrupt (its config uses paths relative to the workdir)."""
    work = tmp_path / "case"
    shutil.copytree(storm[0], work, symlinks=True)
    return work


def _a_read(work: Path, minimum_rows: int = 2) -> tuple[dict[str, Any], Path]:
    for path in sorted((work / "reads").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["error"] is None and record["mode"] != "current-moved" and record.get("rows", 0) >= minimum_rows:
            return record, path
    raise AssertionError("the run recorded no usable read")


def _check_reads(work: Path) -> list[str]:
    report = torture.Report()
    torture.check_reads(work, torture.Reference(work), report)
    return report.violations


def _check_table(work: Path) -> list[str]:
    report = torture.Report()
    torture.check_table(work, torture.Reference(work), report)
    return report.violations


def test_a_read_with_an_extra_row_fails_the_check_only_run(case: Path) -> None:
    record, _ = _a_read(case)
    path = case / "reads" / f"{record['name']}.parquet"
    data = pq.read_table(path)
    extra = data.slice(0, 1).set_column(0, "order_id", pa.array([1], pa.int64()))
    pq.write_table(pa.concat_tables([data, extra]), path)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check-only", "--workdir", str(case)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert f"VIOLATION: read {record['name']}" in done.stdout
    assert "keys in the table that should not be" in done.stdout
    assert "violations 1," in done.stdout


def test_a_read_missing_a_committed_row_is_a_violation(case: Path) -> None:
    record, _ = _a_read(case)
    path = case / "reads" / f"{record['name']}.parquet"
    data = pq.read_table(path)
    pq.write_table(data.slice(1), path)
    violations = _check_reads(case)
    assert len(violations) == 1 and "keys missing from the table" in violations[0], violations


def test_a_read_that_saw_a_commit_its_snapshot_lacked_is_a_violation(case: Path) -> None:
    """As if the reader had seen rows of a commit that was not (yet) complete at its snapshot."""
    record, path = _a_read(case)
    assert record["visible"], record
    record["visible"] = record["visible"][:-1]
    path.write_text(json.dumps(record), encoding="utf-8")
    violations = _check_reads(case)
    assert len(violations) == 1 and f"read {record['name']}" in violations[0], violations


def test_a_table_with_a_rogue_row_is_a_violation(case: Path) -> None:
    table = torture.open_torture_table(case)
    rogue = pa.table(
        {
            "order_id": pa.array([1], pa.int64()),
            "order_date": pa.array(["2026-11-20"]).cast(pa.date32()),
            "pay_status": ["paid"],
            "paid_amount": [1.0],
            "pay_ts": pa.array([0], pa.timestamp("us", tz="UTC")),
        }
    )
    table.write("payments", rogue)
    violations = _check_table(case)
    assert any("final table vs ground truth" in v and "should not be" in v for v in violations), violations


def test_an_orphan_file_and_a_pending_instant_are_violations(case: Path) -> None:
    table = torture.open_torture_table(case)
    live = table.view().live_files()[0]
    orphan = case / "table" / live.path.replace(live.path.rsplit("_", 1)[1], "0123456789.log.parquet")
    shutil.copyfile(case / "table" / live.path, orphan)
    (case / "table" / ".stitch" / "timeline" / "29991231000000000.deltacommit.requested").write_text("{}")
    violations = _check_table(case)
    assert any("orphan data file" in v for v in violations), violations
    assert any("still pending" in v for v in violations), violations


# ------------------------------------------------------------------------------ the races, deterministically

FAST = copy.deepcopy(THREE_STREAMS)
FAST["concurrency"] = {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}, "lock": {"wait_s": 20, "expire_s": 10}}
ORDERS = MODELS[0]


def _rows(*keys: int) -> pa.Table:
    return batch(ORDERS, [{"k": k, "amount": k * 10, "status": "new", "ots": k} for k in keys])


def _freeze(txn: Transaction) -> None:
    """What a SIGSTOP does to a writer: its heartbeat stops (and then expires); the writer itself lives on."""
    assert txn.heartbeat is not None
    txn.heartbeat.stop(delete=False)
    txn.heartbeat = None
    time.sleep(0.5)


def _data_files(table: Table) -> set[str]:
    return {p for p in table.storage.walk_files() if not p.startswith(".stitch/")}


class Crash(Exception):
    pass


def _crash_at(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    """Make `module.name` die like a SIGKILLed process: the heartbeats begun meanwhile stop (and expire)."""
    from stitchlake.concurrency.heartbeat import Heartbeat

    started: list[Heartbeat] = []
    original_start = Heartbeat.start

    def start(self: Heartbeat) -> Heartbeat:
        started.append(self)
        return original_start(self)

    def crash(*_args: Any, **_kwargs: Any) -> Any:
        for beat in started:
            beat.stop(delete=False)
        time.sleep(0.5)
        raise Crash

    monkeypatch.setattr(Heartbeat, "start", start)
    monkeypatch.setattr(module, name, crash)


def test_a_zombie_writer_cannot_publish_while_its_rollback_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the torture run: a rollback recorded its plan and crashed; the frozen writer woke and published;
    finishing the rollback then deleted the published files, leaving a completed commit without its data."""
    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, 2))
    zombie = Transaction.begin(table, Action.DELTACOMMIT, {"stream": "orders"})
    _freeze(zombie)

    _crash_at(monkeypatch, rollback_module, "undo")
    with pytest.raises(Crash):
        rollback_failed(table)  # the rollback's plan (undo the zombie) is on the timeline, nothing undone
    monkeypatch.undo()

    with pytest.raises(StitchError, match="being rolled back"):
        write(table, "orders", _rows(3, 4), txn=zombie)  # it wakes up and carries on: refused at publish
    rollback_failed(table)  # finishing the crashed rollback
    clean(table)  # and the files the zombie wrote after the plan are orphans, removed
    assert sorted(table.read().column("k").to_pylist()) == [1, 2]
    assert not table.timeline().pending()
    assert _data_files(table) == {f.path for f in table.view().live_files()}


def test_a_rollback_never_undoes_an_instant_that_completed_after_it_was_chosen(tmp_path: Path) -> None:
    table = new_table(tmp_path, FAST)
    slow = Transaction.begin(table, Action.DELTACOMMIT, {"stream": "orders"})
    _freeze(slow)
    timeline = table.timeline()
    targets, resets, _ = failed_instants(table, timeline)
    assert [t.requested for t in targets] == [slow.time]
    write(table, "orders", _rows(1), txn=slow)  # not dead after all: it publishes
    with pytest.raises(BusyError, match="changed since it was chosen"):
        rollback_module._run(table, timeline, targets, resets, "failed writes")
    assert table.read().column("k").to_pylist() == [1]
    assert not table.timeline().pending([Action.ROLLBACK])


def _planned_compaction(table: Table) -> str:
    write(table, "orders", _rows(1, 2, 3))
    write(table, "orders", _rows(2, 5))
    planned = compaction.schedule(table)
    assert planned is not None
    return planned


def _compact_files(table: Table, txn: Transaction, operations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [compaction.compact_file_group(table, op, txn.time, txn.mark) for op in operations]


def _frozen_compaction(tmp_path: Path) -> tuple[Table, str, pa.Table, Transaction, list[dict[str, Any]]]:
    """A compaction run that wrote its base files and then froze past its heartbeat (not yet published)."""
    table = new_table(tmp_path, FAST)
    planned = _planned_compaction(table)
    before = table.read().sort_by("k")
    zombie, operations = compaction.start_run(table, planned)
    files = _compact_files(table, zombie, operations)
    _freeze(zombie)
    return table, planned, before, zombie, files


def test_a_zombie_compaction_cannot_publish_after_it_was_reset(tmp_path: Path) -> None:
    """A compaction frozen past its heartbeat is reset by clean (its files deleted, back to requested); when it
    wakes it must not publish base files that no longer exist."""
    table, planned, before, zombie, files = _frozen_compaction(tmp_path)
    assert rollback_failed(table).reset_compactions == [planned]
    with pytest.raises(StitchError, match="reset or taken over"):
        compaction.finish(zombie, files)
    compaction.run(table, planned)  # the plan runs again, as designed
    assert table.read().sort_by("k").equals(before)
    clean(table)
    assert _data_files(table) == {f.path for f in table.view().live_files()}


def test_a_zombie_compaction_cannot_publish_after_another_run_took_its_plan_over(tmp_path: Path) -> None:
    """The second run deleted the first attempt's files when it took over; the first must not publish them."""
    table, planned, before, zombie, files = _frozen_compaction(tmp_path)
    rescuer, operations = compaction.start_run(table, planned)  # takes over: the zombie's files are gone
    with pytest.raises(StitchError, match="reset or taken over"):
        compaction.finish(zombie, files)
    compaction.finish(rescuer, _compact_files(table, rescuer, operations))
    assert table.read().sort_by("k").equals(before)
    assert all(table.storage.exists(f.path) for f in table.view().live_files())


def test_a_resumed_run_waits_while_a_rollback_resets_its_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = new_table(tmp_path, FAST)
    planned = _planned_compaction(table)
    crashed, _ = compaction.start_run(table, planned)
    _freeze(crashed)

    _crash_at(monkeypatch, rollback_module, "reset_compaction")
    with pytest.raises(Crash):
        rollback_failed(table)  # a rollback that resets the compaction is pending
    with pytest.raises(BusyError, match="being rolled back or reset"):
        compaction.run(table, planned)


def test_a_landing_file_is_ingested_once_even_when_its_first_writer_froze_midway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cron overlap plus a stall: the first ingest is presumed dead, a second one ingests the same file, and the
    first wakes up: it must not publish that file a second time."""
    import stitchlake.ingest as ingest_module
    from stitchlake.concurrency.heartbeat import Heartbeat

    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(_rows(1, 2, 3), landing / "part-0001.parquet")
    document = copy.deepcopy(FAST)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": str(landing)}
    table = new_table(tmp_path, document)

    beats: list[Heartbeat] = []
    original_start, original_concat = Heartbeat.start, ingest_module.concat_batches
    second: list[Any] = []
    frozen: list[bool] = []

    def start(self: Heartbeat) -> Heartbeat:
        beats.append(self)
        return original_start(self)

    def concat_then_freeze(batches: list[Any]) -> Any:
        if not frozen:  # the first writer, files read, freezes past its heartbeat; a second writer runs
            frozen.append(True)
            for beat in beats:
                beat.stop(delete=False)
            time.sleep(0.5)
            second.append(ingest_module.ingest_local(table, "orders"))
        return original_concat(batches)

    monkeypatch.setattr(Heartbeat, "start", start)
    monkeypatch.setattr(ingest_module, "concat_batches", concat_then_freeze)
    with pytest.raises(StitchError, match=r"ingested by instant \d+ of another process while it ran"):
        ingest_module.ingest_local(table, "orders")
    assert second[0].source_files == 1
    timeline = table.timeline()
    sources = [s["name"] for i in timeline.completed([Action.DELTACOMMIT]) for s in timeline.metadata(i)["sources"]]
    assert sources == ["part-0001.parquet"]
    assert not timeline.pending()
    assert sorted(table.read().column("k").to_pylist()) == [1, 2, 3]
    assert _data_files(table) == {f.path for f in table.view().live_files()}


def test_a_publish_that_stalls_past_its_lock_lease_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the torture run: a compactor froze while writing its completed file, holding the lock; the lease
    ran out, clean took the lock and reset the compaction (deleting its base files), then the frozen write
    finished and published a commit naming them."""
    from stitchlake.errors import LockLost
    from stitchlake.storage import LocalStorage

    document = copy.deepcopy(FAST)
    document["concurrency"]["lock"] = {"wait_s": 20, "expire_s": 0.3}
    table = new_table(tmp_path, document)
    slow = Transaction.begin(table, Action.DELTACOMMIT, {"stream": "orders"})
    original = LocalStorage._write_temp

    def stalled_write(self: LocalStorage, full: str, data: bytes) -> str:
        if full.endswith(".deltacommit"):
            time.sleep(0.5)  # frozen in the middle of publishing, past the lease
        return original(self, full, data)

    monkeypatch.setattr(LocalStorage, "_write_temp", stalled_write)
    with pytest.raises(LockLost, match="before we could publish"):
        write(table, "orders", _rows(1), txn=slow)
    monkeypatch.undo()
    assert not table.timeline().completed([Action.DELTACOMMIT])
    assert not [n for n in table.storage.list_names(".stitch/timeline") if n.startswith(".")]  # no temp left
    write(table, "orders", _rows(2))  # the lock was given back: the table works on
    assert table.read().column("k").to_pylist() == [2]
