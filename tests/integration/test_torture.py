"""The torture test (issues 7 and 17): a CI-sized run of scripts/torture/, proof that its checker can fail,
and the races it found, pinned down one by one.

The CI-sized run is real: separate writer, compactor, cleaner, restorer, archiver and reader processes on one
table, SIGKILLed and frozen at random (some inside the lock, past its lease), then `stitch clean`, re-run
ingests and `stitch archive`, every read checked against the reference merge. The checker tests corrupt a copy
of that run's workdir (a read with a row too many or too few, a read that saw a commit its snapshot did not
have or a state that never existed, a rogue row in the table, an orphan file, a pending instant, an instant
that vanished from timeline and archive, one archived beyond the checkpoint horizon, a checkpoint that forgot
a consumed file, a horizon that moved backwards, a landing file ingested twice or out of arrival order, a
Kafka-fed stream's lost or repeated event or overlapping offset ranges) and expect a violation, so a checker that
cannot fail would fail here.

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
import yaml

from scripts import module_argv, torture
from scripts.torture.common import FINISH_LOG, read_lines
from scripts.torture.supervisor import force_an_archive
from scripts.torture.tablefiles import list_timeline
from stitchlake.api import Table
from stitchlake.checksums import seal
from stitchlake.errors import BusyError, StitchError
from stitchlake.layout.fsview import DataFile, FileSlice
from stitchlake.services.rewrites import compaction
from stitchlake.services.undo import rollback as rollback_module
from stitchlake.services.undo.recovery import failed_instants, rollback_failed
from stitchlake.services.upkeep.clean import clean
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.actions import WRITES_DATA
from stitchlake.timeline.instant import Action, Instant, State
from stitchlake.timeline.metadata import DeltaCommit, DeltaCommitPlan
from stitchlake.timeline.timeline import delete_instant
from stitchlake.writing.writer import write
from tests.support.processes import ended
from tests.support.tables import MODELS, SHORT_BEATS, batch, new_table

ROOT = Path(__file__).resolve().parents[2]
TORTURE = module_argv("torture")
#: CI size: about a minute on two idle cores, two on busy ones; two writers per stream (cron overlap), a
#: restorer and two archivers racing each other.
CI_ARGS = ["--rounds", "7", "--keys", "600", "--seed", "5", "--readers", "2", "--writers-per-stream", "2"]
CI_ARGS += ["--restorers", "1", "--archivers", "2", "--kafka-rounds", "3"]


def run_torture(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run scripts.torture; however it ends (a timeout, a failure here), nothing of it is left running: its
    workers may be frozen (SIGSTOP), so the whole tree is killed, not only the supervisor. The deadline only turns
    a hang into a failure: a round gives up by itself after --round-timeout seconds without progress."""
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with ended(process):
        out, err = process.communicate(timeout=3600)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


# ------------------------------------------------------------------------------------------ the CI-sized run


@pytest.fixture(scope="module")
def storm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], subprocess.CompletedProcess[str]]:
    base = tmp_path_factory.mktemp("torture")
    work, summary = base / "work", base / "summary.json"
    argv = [*TORTURE, *CI_ARGS, "--workdir", str(work), "--summary-json", str(summary)]
    done = run_torture(argv)
    assert summary.exists(), f"no summary; exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return work, json.loads(summary.read_text(encoding="utf-8")), done


def test_ci_sized_torture_run_has_no_violation_and_really_tortured(
    storm: tuple[Path, dict[str, Any], subprocess.CompletedProcess[str]],
) -> None:
    work, summary, done = storm
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert summary["violations"] == 0, "\n".join(summary["violation_messages"])
    assert "violations 0" in done.stdout
    # Not vacuous: processes were killed while the rounds ran (not only at the end), reads were checked,
    # and every kind of actor got work done. None of it is left to chance: the last round lasts until each
    # duty is done (a restore tried, a savepoint made, ...) and a kill happened (forced if chance gave none).
    assert summary["duties_owed"] == [], summary["duties_owed"]
    assert summary["kills_during_rounds"] > 0, summary["kills_by_cause"]
    assert summary["kills"] >= summary["kills_during_rounds"]
    assert summary["reads_checked"] > 0
    commits, events = summary["commits"], summary["worker_events"]
    assert commits["deltacommits"] > 0, commits  # every landing file went in, exactly once and in order: checked
    assert commits["compactions"] > 0, commits
    assert events.get("clean", 0) > 0, events  # cleans ran (one with nothing to delete records no instant)
    # The new actors ran: savepoints were made and restores tried (they are often refused while writers are
    # alive; the restorer tries one as soon as it has a savepoint), and the archive really archived (the final
    # `stitch archive` at least).
    assert events.get("savepoint", 0) > 0 and events.get("restoring", 0) > 0, events
    assert commits["archived"] > 0 and commits["horizon"], commits
    assert events.get("horizon", 0) > 0, events  # readers and archivers recorded the horizons they saw
    # Keys were erased while the writers wrote them (the reads hold each erase to dropping exactly the events
    # committed before it).
    assert events.get("erase", 0) > 0, events
    # The Kafka-fed stream (its own table, a real broker): rounds ran, ingests were SIGKILLed inside their instant
    # (chosen by their progress, a round added if none was), and records went in exactly once (checked).
    kafka = summary["kafka"]
    assert kafka["rounds"] == 3 and kafka["produced"] > 0 and kafka["kills"] > 0, kafka
    # The workers are stitch writers and never import pandas, as `stitch` does not (cli/without_pandas.py).
    stops = [r for log in sorted((work / "logs").glob("*.jsonl")) for r in read_lines(log) if r.get("event") == "stop"]
    assert stops and not [r for r in stops if r.get("pandas") is not False], stops


def test_optimistic_mode_torture_run_has_no_violation_in_ten_rounds(tmp_path: Path) -> None:
    """Issue 14: concurrency.mode optimistic, two writers per stream running at once, with the same kills,
    freezes, restores and archives; writers that overlap conflict (exit 3) and run again, as cron would."""
    work, summary = tmp_path / "work", tmp_path / "summary.json"
    args = [*CI_ARGS, "--rounds", "10", "--seed", "3", "--mode", "optimistic", "--kafka-rounds", "0"]
    argv = [*TORTURE, *args, "--workdir", str(work), "--summary-json", str(summary)]
    done = run_torture(argv)
    assert summary.exists(), f"no summary; exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    found = json.loads(summary.read_text(encoding="utf-8"))
    assert done.returncode == 0 and found["violations"] == 0, "\n".join(found["violation_messages"])
    assert found["kills_during_rounds"] > 0 and found["commits"]["deltacommits"] > 0
    conflicts = 0
    committed_by: dict[str, set[str]] = {}
    for log in (work / "logs").glob("writer-*.jsonl"):
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a SIGKILL
            if record.get("error") == "ConflictError" and "optimistic" in record.get("message", ""):
                conflicts += 1
            if record.get("event") == "commit":
                stream = log.stem.split("-")[1]
                committed_by.setdefault(stream, set()).add(log.stem)
    assert conflicts > 0, "no two writers of a stream ever overlapped: the run did not test optimistic mode"
    assert any(len(writers) > 1 for writers in committed_by.values()), committed_by


def test_torture_run_on_s3_has_no_violation(tmp_path: Path, s3_bucket: Any) -> None:
    """Issue 10: the same storm with the table on the S3 server (RGW): the storage-based lock, conditional-put
    commits, heartbeats and markers all on S3; the checker reads the table's files through `Storage` too. The
    landing files stay on local disk."""
    import os

    from stitchlake.storage.registry import storage_for

    work, summary = tmp_path / "work", tmp_path / "summary.json"
    table = f"{s3_bucket.url}/torture"
    args = [*CI_ARGS, "--rounds", "5", "--keys", "400", "--seed", "7", "--readers", "1", "--table", table]
    args += ["--kafka-rounds", "0"]  # the Kafka phase has a local table of its own: the CI-sized run has it
    argv = [*TORTURE, *args, "--workdir", str(work), "--summary-json", str(summary)]
    env = {**os.environ, **s3_bucket.env}
    done = run_torture(argv, env)
    assert summary.exists(), f"no summary; exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    found = json.loads(summary.read_text(encoding="utf-8"))
    assert done.returncode == 0 and found["violations"] == 0, "\n".join(found["violation_messages"])
    assert found["kills_during_rounds"] > 0 and found["commits"]["deltacommits"] > 0, found
    assert found["reads_checked"] > 0 and found["commits"]["compactions"] > 0, found
    assert not (work / "table").exists(), "the table was on local disk"
    stored = storage_for(table, s3_bucket.options)
    assert stored.exists(".stitch/table.json") and stored.list_names(".stitch/timeline")


def test_rounds_that_time_out_are_reported_and_are_no_violation(tmp_path: Path) -> None:
    """A round that makes no progress for --round-timeout seconds is given up (a busy machine, or a hang) and
    reported as such: it says the run tortured less than asked, not that the table broke. The checks still run
    in full on what happened (the checker's own failures are tested below, on a copy of the CI run)."""
    work, summary = tmp_path / "work", tmp_path / "summary.json"
    args = ["--rounds", "2", "--keys", "200", "--seed", "2", "--readers", "1", "--restorers", "0", "--archivers", "0"]
    args += ["--kill-every", "0", "--pause-every", "0", "--fault-rate", "0", "--round-timeout", "0.01"]
    done = run_torture([*TORTURE, *args, "--workdir", str(work), "--summary-json", str(summary)])
    found = json.loads(summary.read_text(encoding="utf-8"))
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert found["violations"] == 0, "\n".join(found["violation_messages"])
    assert found["rounds_timed_out"] >= 1, found  # the first round at least: its writers are still starting
    assert f"{found['rounds_timed_out']} round(s) timed out: no progress for 0s" in done.stdout
    assert "violations 0" in done.stdout


def test_the_final_pass_runs_a_plan_left_behind_before_the_ingests_it_would_stop(tmp_path: Path) -> None:
    """In optimistic mode a compaction plan a killed compactor left makes a write over its file groups stop (exit
    3, as documented) until the plan runs. The final pass after the storm therefore runs such plans before it
    re-runs the ingests: in that order CI once found the last payments files never ingested."""
    work = tmp_path / "work"
    settings = torture.Settings(
        workdir=str(work), table=str(work / "table"), rounds=2, keys=100, seed=1, readers=0, writers_per_stream=2,
        kill_every=0, pause_every=0, fault_rate=0, round_seconds=0, round_timeout=60, buckets=1,
        log_format="parquet", retain=8, heartbeat_interval=0.5, heartbeat_expire=1.0, lock_expire=2.0,
        mode="optimistic",
    )  # fmt: skip
    torture.prepare(settings)
    config = str(work / torture.CONFIG_NAME)
    first, second = torture.staged_files(work, "payments")[:2]
    ingest = ("ingest", "-c", config, "--stream", "payments", "--engine", "local")
    torture.land(work, "payments", first)
    assert torture.run_cli(work, *ingest)["instant"]
    planned = torture.run_cli(work, "compact", "-c", config, "--schedule")
    assert planned["exit"] == 0, planned
    torture.land(work, "payments", second)
    stopped = torture.run_cli(work, *ingest)  # the rule the final pass has to live with
    assert stopped["exit"] == 3 and "`stitch compact` runs it" in stopped["stdout"], stopped
    said: list[str] = []
    assert torture.finish(settings, said.append) == [], said
    table = torture.open_torture_table(work)
    assert not table.timeline().pending(), table.timeline().pending()
    ingested = {name for _, meta in torture.History.load(torture.table_dir(work)).live_deltacommits()
                for name in torture.sources_of(meta)}  # fmt: skip
    assert {first.name, second.name} <= ingested, ingested


# ---------------------------------------------------------------------------------- the checker can fail


@pytest.fixture
def case(storm: tuple[Path, dict[str, Any], subprocess.CompletedProcess[str]], tmp_path: Path) -> Path:
    """A private copy of the run's workdir to corrupt (its config uses paths relative to the workdir)."""
    work = tmp_path / "case"
    shutil.copytree(storm[0], work, symlinks=True)
    return work


def _a_read(work: Path, minimum_rows: int = 2) -> tuple[dict[str, Any], Path]:
    """A read the checker compares in full: it succeeded, its snapshot did not move while it read (a restore
    undoing it, say), and every instant it saw is still on the final timeline (none undone later)."""
    undone = set(torture.History.load(torture.table_dir(work)).undone)
    for path in sorted((work / "reads").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        usable = record["error"] is None and record["mode"] != "current-moved" and not record.get("moved")
        live = not {instant["requested"] for instant in record["visible"]} & undone
        if usable and live and record.get("rows", 0) >= minimum_rows:
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


def _check_history(work: Path) -> list[str]:
    report = torture.Report()
    history = torture.History.load(torture.table_dir(work))
    torture.check_history(work, history, torture.Observations.load(work), report)
    return report.violations


def test_a_read_with_an_extra_row_fails_the_check_only_run(case: Path) -> None:
    record, _ = _a_read(case)
    path = case / "reads" / f"{record['name']}.parquet"
    data = pq.read_table(path)
    extra = data.slice(0, 1).set_column(0, "order_id", pa.array([1], pa.int64()))
    pq.write_table(pa.concat_tables([data, extra]), path)
    done = subprocess.run(
        [*TORTURE, "--check-only", "--workdir", str(case)],
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


def _a_read_an_erase_took_a_key_from(case: Path) -> tuple[dict[str, Any], pa.Table, list[int]] | None:
    """A read the checker compares in full whose state had an erase, and the erased keys it does not show."""
    from scripts.torture.erasures import erase_keys

    keys_of = erase_keys(case, torture.History.load(torture.table_dir(case)))
    for path in sorted((case / "reads").glob("*.json")):  # compared in full, instants undone later or not
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["error"] is not None or record["mode"] == "current-moved" or record.get("moved"):
            continue
        if not record.get("rows"):  # a row to copy
            continue
        took = {
            k for r, a, c in record["snapshot"] if a == "erase" and c <= record["until"] for k in keys_of.get(r, ())
        }
        data = pq.read_table(case / "reads" / f"{record['name']}.parquet")
        absent = sorted(took - set(data.column("order_id").to_pylist()))
        if absent:
            return record, data, absent
    return None


def _erase_and_read_after_the_run(case: Path) -> None:
    """An erase of keys the finished run's table holds (no event comes after it to bring them back), then reads
    as the run's own eraser and reader make them, until one is of a state after the erase. Whether a read during
    the storm saw an erased key before a later event wrote it again is the storm's timing, not a thing to rely on."""
    from scripts.torture.actors import Worker

    Worker("eraser:after", case, seed=7).erase()
    reader = Worker("reader:after", case, seed=7)
    for _attempt in range(20):  # a read as of a random past state may come before the erase: read again
        reader.read()
        if _a_read_an_erase_took_a_key_from(case) is not None:
            return


def test_a_read_showing_a_key_an_erase_of_its_snapshot_took_is_a_violation(case: Path) -> None:
    """The oracle holds reads to the run's erases: a read whose state had an erase, showing one of the erased
    keys that no later event created again, is a violation (as if the erase had missed it)."""

    found = _a_read_an_erase_took_a_key_from(case)
    if found is None:  # the storm's erases all took keys that came back at once: make one that stays erased
        _erase_and_read_after_the_run(case)
        found = _a_read_an_erase_took_a_key_from(case)
    assert found is not None, "no read saw an erase take a key, even one made after the run"
    record, data, absent = found
    shown = data.slice(0, 1).set_column(0, "order_id", pa.array(absent[:1], pa.int64()))
    pq.write_table(pa.concat_tables([data, shown]), case / "reads" / f"{record['name']}.parquet")
    violations = _check_reads(case)
    assert len(violations) == 1 and record["name"] in violations[0], violations
    assert "keys in the table that should not be" in violations[0], violations


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


# -------------------------------------------------------------- the timeline and the checkpoint lose nothing


def _archive_folder(work: Path) -> Path:
    return Path(torture.table_dir(work).uri) / torture.ARCHIVE_DIR


def _resealed(content: dict[str, Any]) -> bytes:
    """`content` written as the table writes it: sealed with the checksum of what it now says."""
    return seal(json.dumps({k: v for k, v in content.items() if k != "checksum"}).encode())


def _rewrite_batch_line(work: Path, requested: str, change: Any) -> None:
    """Apply `change` to the archived entry of `requested` (None drops the line)."""
    for path in _archive_folder(work).glob("*.archive.jsonl"):
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line) if line.strip() else None
            if entry is not None and entry["requested"] == requested:
                entry = change(entry)
            if entry is not None:
                lines.append(_resealed(entry).decode())
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _rewrite_meta(work: Path, instant: Any, change: Any) -> None:
    """Change a completed instant's commit metadata, wherever it lives (active timeline or archive)."""
    history = torture.History.load(torture.table_dir(work))
    if instant.requested in history.active:
        path = Path(torture.table_dir(work).uri) / torture.TIMELINE_DIR / instant.file_name
        path.write_bytes(_resealed(change(json.loads(path.read_text(encoding="utf-8")))))
    else:
        _rewrite_batch_line(work, instant.requested, lambda e: {**e, "metadata": change(e["metadata"])})


def test_an_instant_gone_from_timeline_and_archive_is_a_violation(case: Path) -> None:
    """As if an archive had deleted an instant from the active timeline without archiving it."""
    history = torture.History.load(torture.table_dir(case))
    seen = torture.Observations.load(case)
    lost = next(s for s in seen.instants if s.requested in history.archived)
    _rewrite_batch_line(case, lost.requested, lambda _entry: None)
    if lost.requested in history.active:  # its archive was killed before deleting it; a re-run would have
        instant = Instant(lost.requested, Action(lost.action), State.COMPLETED, lost.completed)
        delete_instant(torture.open_torture_table(case).storage, instant, completed_last=True)
    violations = _check_history(case)
    assert any(str(lost) in v and "vanished" in v for v in violations), violations


def test_an_instant_archived_beyond_the_horizon_is_a_violation(case: Path) -> None:
    """What an archive that wrote its batch but lost its checkpoint to an older one leaves behind."""
    history = torture.History.load(torture.table_dir(case))
    entry = next(iter(history.archived.values()))
    line = {"requested": "29991231000000000", "action": entry[0].action, "completed": "29991231000000001"}
    with (_archive_folder(case) / entry[2]).open("a", encoding="utf-8") as batch:
        batch.write(_resealed({**line, "metadata": entry[1]}).decode() + "\n")
    violations = _check_history(case)
    assert any("29991231000000000" in v and "beyond the checkpoint horizon" in v for v in violations), violations


def test_a_checkpoint_that_forgot_a_consumed_landing_file_is_a_violation(case: Path) -> None:
    history = torture.History.load(torture.table_dir(case))
    assert history.checkpoint is not None
    path = _archive_folder(case) / f"checkpoint.{history.horizon}.json"
    if not path.exists():  # a version that rewrites one checkpoint.json
        path = _archive_folder(case) / "checkpoint.json"
    content = json.loads(path.read_text(encoding="utf-8"))
    stream = next(s for s, names in content["consumed"].items() if names)
    content["consumed"][stream] = content["consumed"][stream][1:]
    path.write_bytes(_resealed(content))
    violations = _check_history(case)
    assert any(f"stream {stream} consumed" in v and "it lacks" in v for v in violations), violations


def test_a_run_that_never_archived_gets_a_forced_archive_the_checker_accepts(case: Path) -> None:
    """Restores back to a savepoint of the first commit pin the whole timeline (the archive never takes from the
    oldest savepoint on): a CI run under load once ended with nothing archived. The finish then deletes every
    savepoint, each logged first, and archives all but the newest instant; the checker accepts what it did."""
    config = str(case / torture.CONFIG_NAME)
    made = torture.run_cli(case, "savepoint", "create", "-c", config, "--name", "pinned", "--engine", "local")
    assert made["exit"] == 0 and made.get("instant"), made
    before = torture.History.load(torture.table_dir(case))
    # The storm's own finish may have forced an archive already (under load). The archive never takes the latest
    # commit that wrote data (design.md §4), so what must go is what came before it; the newest instant stays too.
    active_before = [s for s in list_timeline(torture.table_dir(case))[0] if s.action != "savepoint"]
    last_data = max((n for n, s in enumerate(active_before) if s.action in WRITES_DATA), default=len(active_before))
    archivable = active_before[: min(last_data, len(active_before) - 1)]
    exits: list[tuple[tuple[str, ...], int]] = []

    def cli(*args: str) -> dict[str, Any]:
        result = torture.run_cli(case, *args)
        exits.append((args, result["exit"]))
        return result

    done = force_an_archive(case, config, cli)
    assert exits and all(code == 0 for _args, code in exits), exits
    after = torture.History.load(torture.table_dir(case))
    archived_more = len(after.archived) > len(before.archived)
    assert done.get("horizon") and (archived_more or not archivable), (done, len(before.archived), active_before)
    completed, _pending = list_timeline(torture.table_dir(case))
    assert not [s for s in completed if s.action == "savepoint"]
    logged = {r["instant"] for r in read_lines(case / "logs" / FINISH_LOG) if r["event"] == "savepoint_delete"}
    assert made["instant"] in logged, logged
    assert _check_history(case) == []


def test_a_horizon_that_moved_backwards_is_a_violation(case: Path) -> None:
    """An observation of a newer horizon than the final checkpoint's (an archive woke up and wrote an older one)."""
    newer = {"t0": 1.0, "t1": 2.0, "horizon": "29991231000000000"}
    torture.log_line(case / "logs" / torture.HORIZONS_LOG, newer)
    violations = _check_history(case)
    assert any("moved backwards" in v and "29991231000000000" in v for v in violations), violations


def test_horizon_observations_only_conflict_when_one_ended_before_the_other_began() -> None:
    def violations(observed: list[tuple[float, float, str, str]]) -> list[str]:
        report = torture.Report()
        torture.check_horizons(observed, report)
        return report.violations

    assert violations([(0, 1, "a", "x"), (2, 3, "b", "y"), (4, 5, "b", "z")]) == []
    assert violations([(0, 3, "b", "x"), (2, 4, "a", "y")]) == []  # overlapping: either order may be true
    assert violations([(0, 1, "", "x"), (2, 3, "b", "y")]) == []
    found = violations([(0, 1, "b", "x"), (2, 3, "a", "y")])
    assert len(found) == 1 and "moved backwards" in found[0] and "x saw b" in found[0], found


def _two_deltacommits_of_a_stream(work: Path) -> tuple[Any, Any]:
    history = torture.History.load(torture.table_dir(work))
    by_stream: dict[str, list[Any]] = {}
    for instant, meta in history.live_deltacommits():
        if torture.sources_of(meta):
            by_stream.setdefault(str(meta["stream"]), []).append((instant, meta))
    first, second = next(pair for pair in by_stream.values() if len(pair) >= 2)[:2]
    return first, second


def test_a_landing_file_ingested_twice_by_live_instants_is_a_violation(case: Path) -> None:
    (_first, meta), (second, _meta) = _two_deltacommits_of_a_stream(case)
    twice = meta["sources"][0]
    _rewrite_meta(case, second, lambda m: {**m, "sources": [*m["sources"], twice]})
    violations = _check_table(case)
    name = twice["name"] if isinstance(twice, dict) else twice
    assert any("ingested more than once" in v and name in v for v in violations), violations


def test_landing_files_taken_out_of_arrival_order_are_a_violation(case: Path) -> None:
    """What an ingest that began while a restore was un-consuming files did: it took later files first."""
    (first, early), (second, late) = _two_deltacommits_of_a_stream(case)
    _rewrite_meta(case, first, lambda m: {**m, "sources": late["sources"]})
    _rewrite_meta(case, second, lambda m: {**m, "sources": early["sources"]})
    violations = _check_table(case)
    assert any("out of arrival order" in v and str(second) in v for v in violations), violations


def _kafka_case(case: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The copied run's Kafka-fed table (its config pointed at the copy) and the records its rounds produced."""
    folder = case / "kafka"
    config = folder / "kafka.yaml"
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["table"]["path"] = str(folder / "table")
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    produced = [json.loads(line) for line in (folder / "produced.jsonl").read_text(encoding="utf-8").splitlines()]
    return config, produced


def _kafka_violations(config: Path, produced: list[dict[str, Any]]) -> list[str]:
    violations: list[str] = []
    torture.kafka_check(config, produced, violations)
    return violations


def test_the_kafka_checker_finds_a_lost_or_a_repeated_event(case: Path) -> None:
    """The Kafka phase's checker on the run's own table: clean as it is; an event the table never got (one more
    produced than ingested), an event it got twice (one fewer produced), and a commit whose offset range overlaps
    the one before it (a range ingested twice) are each a violation."""
    config, produced = _kafka_case(case)
    assert produced and _kafka_violations(config, produced) == []
    lost = _kafka_violations(config, [*produced, {**produced[-1], "seq": produced[-1]["seq"] + 1}])
    partition = produced[-1]["partition"]
    assert any("lost or repeated" in v for v in lost), lost
    assert any(f"partition {partition}: recorded up to" in v for v in lost), lost
    assert any("differs from the produced records' merge" in v for v in lost), lost
    repeated = _kafka_violations(config, produced[:-1])
    assert any("lost or repeated" in v for v in repeated) and any("recorded up to" in v for v in repeated), repeated

    timeline = config.parent / "table" / torture.TIMELINE_DIR
    shifted = None
    for path in sorted(timeline.glob("*.deltacommit")):
        content = json.loads(path.read_text(encoding="utf-8"))
        ranges = [r for r in content.get("offsets", []) if r["start"] > 0 and r["end"] > r["start"]]
        if ranges:
            ranges[0]["start"] -= 1  # as if this commit had read the previous commit's last record again
            path.write_bytes(_resealed(content))
            shifted = ranges[0]
            break
    assert shifted is not None, "no commit went on from an offset above 0"
    overlap = _kafka_violations(config, produced)
    expected = f"partition {shifted['partition']}: offsets recorded from {shifted['start']}, expected"
    assert any(expected in v for v in overlap), overlap


def test_a_read_of_a_state_that_never_existed_is_a_violation(case: Path) -> None:
    """A read whose landing files skip an earlier one: what a read saw after an ingest took later files first."""
    for path in sorted((case / "reads").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["error"] is not None or record["mode"] == "current-moved":
            continue
        consumed = {s: list(record["checkpoint_consumed"].get(s, [])) for s in torture.STREAMS}
        for instant in record["visible"]:
            consumed[instant["stream"]].extend(instant["sources"])
        stream = next((s for s, names in consumed.items() if len(names) >= 2), None)
        if stream is not None:
            break
    else:
        raise AssertionError("the run recorded no read with two landing files of a stream")
    first = min(consumed[stream])
    if first in record["checkpoint_consumed"].get(stream, []):
        record["checkpoint_consumed"][stream].remove(first)
    for instant in record["visible"]:
        if first in instant["sources"]:
            instant["sources"].remove(first)
    path.write_text(json.dumps(record), encoding="utf-8")
    violations = _check_reads(case)
    assert any(record["name"] in v and "never existed" in v for v in violations), violations


def test_every_fault_point_still_finds_what_it_wraps() -> None:
    """A point whose target moved would silently test nothing; the workers report it, and so does this test."""
    script = (
        "import os; os.environ['STITCH_TORTURE_RUN_DIR'] = '/tmp'\n"
        "from scripts import torture\n"
        "print([f'{k}:{p}' for k, ps in torture.FAULT_POINTS.items() for p in ps\n"
        "       if not torture.install_fault(p + ':0', lambda record: None, 1.0, 1.0)])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# ------------------------------------------------------------------------------ the races, deterministically

FAST = SHORT_BEATS
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
    zombie = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
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
    slow = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    _freeze(slow)
    timeline = table.timeline()
    targets, resets, _ = failed_instants(table, timeline)
    assert [t.requested for t in targets] == [slow.time]
    write(table, "orders", _rows(1), txn=slow)  # not dead after all: it publishes
    with pytest.raises(BusyError, match="changed since it was chosen"):
        rollback_module.run_rollback(table, timeline, targets, resets, "failed writes")
    assert table.read().column("k").to_pylist() == [1]
    assert not table.timeline().pending([Action.ROLLBACK])


def _planned_compaction(table: Table) -> str:
    write(table, "orders", _rows(1, 2, 3))
    write(table, "orders", _rows(2, 5))
    planned = compaction.schedule(table)
    assert planned is not None
    return planned


def _compact_files(table: Table, txn: Transaction, operations: list[FileSlice]) -> list[DataFile]:
    return [compaction.compact_file_group(table, op, txn.time, txn.mark) for op in operations]


def _frozen_compaction(tmp_path: Path) -> tuple[Table, str, pa.Table, Transaction, list[DataFile], list[FileSlice]]:
    """A compaction run that wrote its base files and then froze past its heartbeat (not yet published)."""
    table = new_table(tmp_path, FAST)
    planned = _planned_compaction(table)
    before = table.read().sort_by("k")
    zombie, operations = compaction.start_run(table, planned)
    files = _compact_files(table, zombie, operations)
    _freeze(zombie)
    return table, planned, before, zombie, files, operations


def test_a_zombie_compaction_cannot_publish_after_it_was_reset(tmp_path: Path) -> None:
    """A compaction frozen past its heartbeat is reset by clean (its files deleted, back to requested); when it
    wakes it must not publish base files that no longer exist."""
    table, planned, before, zombie, files, operations = _frozen_compaction(tmp_path)
    assert rollback_failed(table).reset_compactions == [planned]
    with pytest.raises(StitchError, match="reset or taken over"):
        compaction.finish(zombie, files, operations)
    compaction.run(table, planned)  # the plan runs again, as designed
    assert table.read().sort_by("k").equals(before)
    clean(table)
    assert _data_files(table) == {f.path for f in table.view().live_files()}


def test_a_zombie_compaction_cannot_publish_after_another_run_took_its_plan_over(tmp_path: Path) -> None:
    """The second run deleted the first attempt's files when it took over; the first must not publish them."""
    table, planned, before, zombie, files, zombie_operations = _frozen_compaction(tmp_path)
    rescuer, operations = compaction.start_run(table, planned)  # takes over: the zombie's files are gone
    with pytest.raises(StitchError, match="reset or taken over"):
        compaction.finish(zombie, files, zombie_operations)
    compaction.finish(rescuer, _compact_files(table, rescuer, operations), operations)
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
    from stitchlake.concurrency.heartbeat import Heartbeat
    from stitchlake.engine import LocalEngine
    from stitchlake.services.writes.ingest import ingest

    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(_rows(1, 2, 3), landing / "part-0001.parquet")
    document = copy.deepcopy(FAST)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": str(landing)}
    table = new_table(tmp_path, document)

    beats: list[Heartbeat] = []
    original_start, original_write = Heartbeat.start, LocalEngine.write_stream
    second: list[Any] = []
    frozen: list[bool] = []

    def start(self: Heartbeat) -> Heartbeat:
        beats.append(self)
        return original_start(self)

    def write_then_freeze(engine: LocalEngine, *args: Any) -> Any:
        written = original_write(engine, *args)
        if not frozen:  # the first writer, files written, freezes past its heartbeat; a second writer runs
            frozen.append(True)
            for beat in beats:
                beat.stop(delete=False)
            time.sleep(0.5)
            second.append(ingest(table, LocalEngine(), "orders"))
        return written

    monkeypatch.setattr(Heartbeat, "start", start)
    monkeypatch.setattr(LocalEngine, "write_stream", write_then_freeze)
    with pytest.raises(StitchError, match=r"ingested by instant \d+ of another process while it ran"):
        ingest(table, LocalEngine(), "orders")
    assert second[0].source_files == 1
    timeline = table.timeline()
    commits = [timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT])]
    sources = [name for commit in commits if isinstance(commit, DeltaCommit) for name in commit.consumed()]
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

    document = copy.deepcopy(FAST)
    document["concurrency"]["lock"] = {"wait_s": 20, "expire_s": 0.3}
    table = new_table(tmp_path, document)
    slow = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    stall_writes_of(".deltacommit", monkeypatch)  # frozen in the middle of publishing, past the lease
    with pytest.raises(LockLost, match="before we could publish"):
        write(table, "orders", _rows(1), txn=slow)
    monkeypatch.undo()
    assert not table.timeline().completed([Action.DELTACOMMIT])
    assert not [n for n in table.storage.list_names(".stitch/timeline") if n.startswith(".")]  # no temp left
    write(table, "orders", _rows(2))  # the lock was given back: the table works on
    assert table.read().column("k").to_pylist() == [2]


def stall_writes_of(suffix: str, monkeypatch: pytest.MonkeyPatch, seconds: float = 0.5) -> None:
    """Local writes of files ending in `suffix` stall first: a process frozen mid-publish, past a short lease."""
    from stitchlake.storage import LocalStorage

    original = LocalStorage._write_temp

    def stalled_write(self: LocalStorage, full: str, data: bytes) -> str:
        if full.endswith(suffix):
            time.sleep(seconds)
        return original(self, full, data)

    monkeypatch.setattr(LocalStorage, "_write_temp", stalled_write)


def test_a_lost_lock_lease_is_busy_so_schedulers_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the torture run: `stitch archive` (and savepoint restore, clean) exited 1 after a stall past the
    lease, though nothing was published and a retry is safe."""
    from stitchlake.errors import LockLost

    document = copy.deepcopy(FAST)
    document["concurrency"]["lock"] = {"wait_s": 20, "expire_s": 0.3}
    table = new_table(tmp_path, document)
    stall_writes_of(".deltacommit", monkeypatch)
    with pytest.raises(LockLost) as lost:
        write(table, "orders", _rows(1))
    assert isinstance(lost.value, BusyError) and lost.value.exit_code == 4


def test_a_restore_that_fails_to_publish_stops_beating_so_it_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the torture run: a restore undid its targets, stalled past the lock lease while publishing and got
    LockLost; its heartbeat kept beating in the live process, so every ingest, compaction and clean was refused
    for as long as that process lived."""
    from stitchlake.concurrency import heartbeat as heartbeats
    from stitchlake.errors import LockLost
    from stitchlake.services.undo.restore import restore
    from stitchlake.services.upkeep.savepoint import create

    document = copy.deepcopy(FAST)
    document["concurrency"]["lock"] = {"wait_s": 20, "expire_s": 0.3}
    table = new_table(tmp_path, document)
    write(table, "orders", _rows(1))
    create(table, name="one")
    write(table, "orders", _rows(2))
    stall_writes_of(".restore", monkeypatch)
    with pytest.raises(LockLost):
        restore(table, "one")
    monkeypatch.undo()
    pending = table.timeline().pending([Action.RESTORE])
    assert len(pending) == 1, "the half-done restore stays planned, to be finished"
    assert not table.storage.exists(heartbeats.heartbeat_path(pending[0].requested)), "it no longer looks alive"
    rollback_failed(table)  # what the next `stitch clean` does: finish the crashed restore
    assert not table.timeline().pending()
    assert table.read().column("k").to_pylist() == [1]


def test_ingest_reads_consumed_files_again_when_an_archive_moves_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the torture run: ingest's lock-free read of what was consumed hit a completed instant that an
    archive (or restore) removed meanwhile, and exited 1 instead of reading the history again."""
    from stitchlake.engine import LocalEngine
    from stitchlake.services.upkeep.archive import archive
    from stitchlake.services.writes import ingest as ingest_module

    landing = tmp_path / "landing"
    landing.mkdir()
    document = copy.deepcopy(FAST)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": str(landing)}
    table = new_table(tmp_path, document)
    for number in range(1, 5):
        pq.write_table(_rows(number), landing / f"part-{number:04d}.parquet")
        ingest_module.ingest(table, LocalEngine(), "orders")
    original = getattr(ingest_module, "load_checkpoint")  # noqa: B009 - patched where ingest uses it
    archived: list[int] = []

    def checkpoint_then_archive(storage: Any) -> Any:
        found = original(storage)
        if not archived:  # between reading the checkpoint and the instants it does not cover
            archived.append(archive(table, keep=1).archived)
        return found

    monkeypatch.setattr(ingest_module, "load_checkpoint", checkpoint_then_archive)
    names = ingest_module.consumed(table, table.timeline(), "orders")
    assert archived[0] >= 3
    assert sorted(names) == [f"part-{n:04d}.parquet" for n in range(1, 5)]


def test_an_archive_killed_while_deleting_an_instant_never_gets_it_rolled_back(tmp_path: Path) -> None:
    """Found by the optimistic-mode torture run: an archiver SIGKILLed between deleting an archived instant's
    completed file and its inflight file left what looked like a dead writer's pending instant; the next clean
    rolled it back, deleting the data files of a commit the archive checkpoint still counted."""
    from stitchlake.services.upkeep.archive import archive
    from stitchlake.timeline.instant import State, pending_file_name
    from stitchlake.timeline.timeline import timeline_path

    table = new_table(tmp_path, FAST)
    first = write(table, "orders", _rows(1, 2))
    for key in range(3, 9):
        write(table, "orders", _rows(key))
    before = table.read().sort_by("k")
    assert archive(table, keep=2).archived >= 1
    # An archive run interrupted the old way: the inflight file of an archived instant is left behind.
    leftover = timeline_path(pending_file_name(first.instant, Action.DELTACOMMIT, State.INFLIGHT))
    table.storage.write_bytes(leftover, b'{"attempt": "x"}')
    assert [i.requested for i in table.timeline().pending()] == [first.instant]
    rolled = rollback_failed(table)  # what `stitch clean` runs first
    assert rolled.rolled_back == [], "an archived commit was taken for a failed write"
    assert not table.timeline().pending(), "the leftover is tidied away"
    assert table.read().sort_by("k").equals(before)
    clean(table)
    assert table.read().sort_by("k").equals(before)


def test_an_archive_deletes_an_instants_completed_file_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stitchlake.services.upkeep import archive as archive_module

    table = new_table(tmp_path, FAST)
    for key in range(1, 6):
        write(table, "orders", _rows(key))
    deleted: list[str] = []
    original = table.storage.delete

    def record(path: str) -> bool:
        deleted.append(path)
        return original(path)

    monkeypatch.setattr(table.storage, "delete", record)
    assert archive_module.archive(table, keep=1).archived >= 1
    timeline_files = [p.rsplit("/", 1)[1] for p in deleted if "/timeline/" in p and "/archive/" not in p]
    first = timeline_files[:3]
    assert first[-1].endswith(".deltacommit") and "_" in first[-1], f"completed file not last: {first}"


def test_an_archive_that_died_before_deleting_is_finished_by_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the CI torture run: an archiver killed after its batch and checkpoint, before deleting the
    archived instants' active files. The next archive plans the same instants, finds the horizon already there
    and, before this was fixed, stopped: behind a savepoint the leftovers stayed on the active timeline for good."""
    from stitchlake.services.upkeep import archive as archive_module
    from stitchlake.timeline.archive import archived_instants

    table = new_table(tmp_path, FAST)
    for key in range(1, 6):
        write(table, "orders", _rows(key))
    before = table.read().sort_by("k")

    def killed(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt("killed before the deletes")

    with monkeypatch.context() as patch:
        patch.setattr(archive_module, "delete_instant", killed)
        with pytest.raises(KeyboardInterrupt):
            archive_module.archive(table, keep=2)
    batched = {entry.instant.requested for entry in archived_instants(table.storage)}
    active = {i.requested for i in table.timeline().completed()}
    assert len(batched) == 3 and batched <= active, "archived, and still on the active timeline"
    table.savepoint("pin", instant=max(batched))  # holds the horizon where it is: only a re-run can tidy up

    again = archive_module.archive(table, keep=2)
    assert again.archived == 0 and "removed 3 archived instant(s)" in again.message, again.message
    assert not batched & {i.requested for i in table.timeline().completed()}
    assert not table.timeline().pending()
    assert table.read().sort_by("k").equals(before)
    assert archive_module.archive(table, keep=2).message.startswith("nothing to archive"), "and only once"


def test_a_clean_keeps_the_markers_of_a_writer_that_began_while_it_tidied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the optimistic-mode torture run on a loaded machine ("16 data file(s) named by the timeline are
    missing"): a clean read the timeline, then listed the markers and deleted those of every instant its timeline
    did not show pending. A writer that began in between lost its markers; the next clean's orphan sweep took its
    written, not yet published files for a crashed writer's, and deleted them after the writer had published."""
    from stitchlake.concurrency.markers import instants_with_markers, marked_files
    from stitchlake.services.upkeep import clean as clean_module
    from stitchlake.writing.badrows import Rejected
    from stitchlake.writing.batch import prepare
    from stitchlake.writing.writer import deltacommit, write_file_groups

    table = new_table(tmp_path, FAST)
    write(table, "orders", _rows(1, 2))
    stream = table.config.stream("orders")
    rows = prepare(table.config, stream, _rows(3, 4))
    began: list[Transaction] = []
    written: list[DataFile] = []
    listings: list[str] = []
    original = instants_with_markers

    def a_writer_begins_meanwhile(storage: Any) -> list[str]:
        listings.append("listed")
        if len(listings) == 2:  # the tidy's listing (the orphan sweep's is the first): a writer begins and writes
            began.append(Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders")))
            written.extend(write_file_groups(table, stream, rows, began[0].time, began[0].mark))
        return original(storage)

    monkeypatch.setattr(clean_module, "instants_with_markers", a_writer_begins_meanwhile)
    clean(table)
    monkeypatch.undo()
    assert began and written, "the clean did not list markers twice: the interleaving was not replayed"
    writer = began[0]
    assert marked_files(table.storage, writer.time) == sorted(f.path for f in written), "its markers were taken"

    assert not clean(table).orphans, "the running writer's files were taken for orphans"
    writer.complete(deltacommit(table, "orders", writer.time, written, rows.rows.num_rows, Rejected(), None))
    assert all(table.storage.exists(f.path) for f in table.view().live_files())
    assert sorted(table.read().column("k").to_pylist()) == [1, 2, 3, 4]


def test_a_savepoint_a_finished_restore_removed_meanwhile_is_busy_for_the_restorer(tmp_path: Path) -> None:
    """Found by the CI-sized run: the restorer listed savepoint sp9780n1, a crashed restore to an older savepoint
    was then finished by a cleaner (undoing sp9780n1 with the rest), and `restore sp9780n1` answered "no savepoint"
    (exit 2). That answer is right: the savepoint is gone, undone by a restore that names it. So the restorer takes
    it as "retry later", and only a savepoint still on the timeline makes that answer a failure."""
    from scripts.torture.actors import Worker
    from scripts.torture.common import read_lines
    from stitchlake.errors import NotFoundError
    from stitchlake.services.undo.restore import begin_restore, restore

    work = tmp_path / "work"
    settings = torture.Settings(
        workdir=str(work), table=str(work / "table"), rounds=2, keys=50, seed=1, readers=0, writers_per_stream=1,
        kill_every=0, pause_every=0, fault_rate=0, round_seconds=0, round_timeout=60, buckets=1,
        log_format="parquet", retain=8, heartbeat_interval=0.2, heartbeat_expire=0.6, lock_expire=2.0,
    )  # fmt: skip
    torture.prepare(settings)
    config = str(work / torture.CONFIG_NAME)
    table = torture.open_torture_table(work)
    for staged in torture.staged_files(work, "orders"):
        torture.land(work, "orders", staged)
        assert torture.run_cli(work, "ingest", "-c", config, "--stream", "orders", "--engine", "local")["instant"]
        table.savepoint(f"sp{staged.stem[-1]}")
    restorer = Worker("restorer", work, 1)
    listed = {str(meta.get("name")): seen for seen, meta in restorer.savepoints()}
    assert sorted(listed) == ["sp1", "sp2"]

    crashed = begin_restore(table, "sp1")  # planned, then killed: nothing undone yet
    _freeze(crashed)
    time.sleep(0.5)  # past the torture config's heartbeat expiry
    assert rollback_failed(table).finished, "the cleaner finishes the crashed restore"
    with restorer.unless_gone(listed["sp2"]):
        restore(table, "sp2")
    said = read_lines(work / "logs" / "restorer.jsonl")
    assert [r["error"] for r in said if r.get("event") == "busy"] == ["SavepointGone"], said

    with pytest.raises(NotFoundError), restorer.unless_gone(listed["sp1"]):  # still there: a real failure
        raise NotFoundError("no savepoint 'sp1'")


def test_a_run_frozen_as_it_took_a_compaction_over_never_deletes_the_next_runs_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that takes a crashed compaction over deletes the files its markers name. Listed after taking it over,
    the list could be a later run's: frozen right after the take-over past its heartbeat's expiry, the first run
    woke, listed the markers of the run that had taken the plan over from it meanwhile and deleted that run's
    base files, which it then published: a completed compaction naming files that no longer exist."""
    table = new_table(tmp_path, FAST)
    planned = _planned_compaction(table)
    before = table.read().sort_by("k")
    original = Transaction.resume.__func__  # type: ignore[attr-defined]
    rescuer: list[tuple[Transaction, list[FileSlice], list[DataFile]]] = []

    def frozen_after_taking_over(cls: type[Transaction], *args: Any, **kwargs: Any) -> Transaction:
        txn: Transaction = original(cls, *args, **kwargs)
        if not rescuer:  # the first run: it freezes, and a second run takes the plan over and writes its files
            _freeze(txn)
            rescuer.append((txn, [], []))
            second, operations = compaction.start_run(table, planned)
            rescuer[0] = (second, operations, _compact_files(table, second, operations))
        return txn

    monkeypatch.setattr(Transaction, "resume", classmethod(frozen_after_taking_over))
    zombie, zombie_operations = compaction.start_run(table, planned)
    monkeypatch.undo()
    second, operations, files = rescuer[0]
    assert all(table.storage.exists(f.path) for f in files), "the frozen run deleted the files of the run after it"
    with pytest.raises(StitchError, match="reset or taken over"):
        compaction.finish(zombie, _compact_files(table, zombie, zombie_operations), zombie_operations)
    compaction.finish(second, files, operations)
    assert all(table.storage.exists(f.path) for f in table.view().live_files())
    assert table.read().sort_by("k").equals(before)


def test_a_rollback_finished_by_another_process_never_resets_a_compaction_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback that resets a crashed compaction froze right after it was requested; another process finished it
    (presumed dead), and a new run took the compaction over and wrote its base files. The frozen rollback woke
    and reset the compaction anew: it deleted the files the new run had marked, and its inflight file."""
    table = new_table(tmp_path, FAST)
    planned = _planned_compaction(table)
    before = table.read().sort_by("k")
    crashed, _ = compaction.start_run(table, planned)
    _compact_files(table, crashed, list(crashed.plan.operations))  # type: ignore[attr-defined]
    _freeze(crashed)
    original = Transaction.begin.__func__  # type: ignore[attr-defined]
    rescuer: list[tuple[Transaction, list[FileSlice], list[DataFile]]] = []

    def frozen_after_requesting(cls: type[Transaction], table_: Any, action: Action, *args: Any, **kwargs: Any) -> Any:
        txn: Transaction = original(cls, table_, action, *args, **kwargs)
        if action == Action.ROLLBACK and not rescuer:
            _freeze(txn)
            rollback_module.finish_rollback(table, txn.instant)  # presumed dead: another process finishes it
            second, operations = compaction.start_run(table, planned)
            rescuer.append((second, operations, _compact_files(table, second, operations)))
        return txn

    monkeypatch.setattr(Transaction, "begin", classmethod(frozen_after_requesting))
    with pytest.raises(StitchError, match="by another process"):
        rollback_failed(table)
    monkeypatch.undo()
    second, operations, files = rescuer[0]
    assert all(table.storage.exists(f.path) for f in files), "the woken rollback deleted the new run's files"
    compaction.finish(second, files, operations)
    assert all(table.storage.exists(f.path) for f in table.view().live_files())
    assert table.read().sort_by("k").equals(before)
