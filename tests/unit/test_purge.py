"""`stitch delete --purge` reaches every copy the table holds (issue 24): after it, no file under the table or the
published tables holds an erased person's values, quarantined rows and quarantined landing files included.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_purge.py).
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import stitchlake
from stitchlake.services.upkeep.savepoint import list_savepoints
from tests.support.tables import write_table_yaml


def test_an_undecodable_avro_value_is_purged_though_its_key_is_no_text(tmp_path: Path) -> None:
    """An Avro value keeps its numbers as varints, not text: a key's digits never show in it, so a quarantined
    Avro value whose key is unknown is removed by any purge; a JSON value is searched for the key's text."""
    import fastavro

    from stitchlake.io import kafka
    from stitchlake.services.rewrites.purge import _rows_hit

    document = {
        "table": {"name": "people", "path": str(tmp_path / "table"), "key": {"k": "long"}, "buckets": 1},
        "streams": {"events": {"columns": {"email": "string", "ets": "long"}, "ordering": "ets"}},
    }
    cfg = write_table_yaml(tmp_path, document)
    table = stitchlake.open(str(cfg))
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "e",
            "fields": [{"name": "k", "type": "long"}, {"name": "email", "type": "string"}],
        }
    )
    encoded = io.BytesIO()
    fastavro.schemaless_writer(encoded, schema, {"k": 123456, "email": "person@example.org"})
    truncated = encoded.getvalue()[:-3]  # what a consumer cannot decode
    assert b"123456" not in truncated
    rows = pa.table(
        {
            kafka.TOPIC: ["t", "t"],
            kafka.PARTITION: ["0", "0"],
            kafka.OFFSET: ["1", "2"],
            kafka.VALUE: [truncated.decode("utf-8", "replace"), '{"k": 8, "email": "other@example.org"'],
            "_reason": ["undecodable", "undecodable"],
        }
    )
    hit = _rows_hit(table, rows, pa.table({"k": pa.array([123456], pa.int64())}))
    assert hit.tolist() == [True, False], "the Avro value goes; another key's JSON text stays"


def test_a_quarantined_row_of_an_erased_key_is_purged_whatever_partition_the_keys_file_names(tmp_path: Path) -> None:
    """A keys file may carry the partition columns; a row set aside for its partition value (null, unparsable)
    still holds the erased person's values, so only the key decides whether it goes."""
    from stitchlake.services.rewrites.purge import _rows_hit

    document = {
        "table": {
            "name": "people",
            "path": str(tmp_path / "table"),
            "key": {"k": "long"},
            "partition_by": {"day": "date"},
            "buckets": 1,
        },
        "streams": {"events": {"columns": {"email": "string", "ets": "long"}, "ordering": "ets"}},
    }
    table = stitchlake.open(str(write_table_yaml(tmp_path, document)))
    rows = pa.table(
        {
            "k": ["17", "18", "19"],
            "day": [None, "18/11/2026", "2026-11-20"],
            "email": ["a@example.org", "b@example.org", "c@example.org"],
            "_reason": ["null partition value day", "unparsable value in day", "other"],
        }
    )
    day = dt.date(2026, 11, 20)
    keys = pa.table({"k": pa.array([17, 18], pa.int64()), "day": pa.array([day, day], pa.date32())})
    assert _rows_hit(table, rows, keys).tolist() == [True, True, False]


def _data_files_holding(root: Path, key: int) -> list[str]:
    """Data files (outside .stitch/) with a record of `key`, tombstones included."""
    import pyarrow.parquet as pq

    found = []
    for path in root.rglob("*.parquet"):
        if ".stitch" not in path.parts and key in pq.read_table(path, columns=["k"]).column("k").to_pylist():
            found.append(str(path.relative_to(root)))
    return found


def test_a_savepoint_made_while_a_purge_runs_does_not_keep_the_erased_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge deletes the savepoints that pin older copies of the erased keys, then cleans those copies. A
    savepoint of a state before the erase completing in between used to be kept, and with it the copies: a read
    as of it, or a restore to it, brought the erased key back. It is refused now (exit 2: one planned before the
    erase completed is exit 3, below), and nothing holds the key."""
    from stitchlake.errors import UsageError
    from stitchlake.services.rewrites import purge as purge_module
    from stitchlake.timeline.instant import Action
    from tests.support.published_history import history

    table = history(tmp_path / "t")
    before = table.timeline().latest_completed([Action.COMPACTION])
    assert before is not None and _data_files_holding(tmp_path / "t", 1)
    original = purge_module.purge_files  # type: ignore[attr-defined]
    refused: list[Exception] = []

    def savepoint_first(*args: Any) -> Any:
        try:
            table.savepoint(name="late", instant=before.requested)
        except UsageError as exc:
            refused.append(exc)
        return original(*args)

    monkeypatch.setattr(purge_module, "purge_files", savepoint_first)
    table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True)
    monkeypatch.undo()
    assert refused and "(--purge) completed after the state" in str(refused[0]), refused
    assert [s.name for s in list_savepoints(table)] == []
    assert _data_files_holding(tmp_path / "t", 1) == [], "an older copy of the erased key survived the purge"
    with pytest.raises(UsageError, match=r"\(--purge\) completed after the state"):
        table.savepoint(instant=before.requested)  # and asked again later: refused up front


@pytest.mark.parametrize("finisher", ["rollback --failed", "restore"])
def test_a_purge_that_failed_after_its_erase_committed_is_finished_before_any_read_shows_the_keys_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finisher: str
) -> None:
    """The erase commits, then its purge deletes the savepoints and older slices that hold the keys. A purge that
    failed in between left them and nothing ran it again: a read as of the savepoint, or a restore to it, brought
    the erased key back, though no restore may. Reads of older states are refused until `rollback --failed` (or
    a restore, first thing) finishes the purge."""
    from stitchlake.errors import NotFoundError, StitchError, UsageError
    from stitchlake.services.rewrites import erase as erase_module
    from stitchlake.timeline.instant import Action
    from tests.support.published_history import MODEL, history, rows_of
    from tests.support.tables import batch

    table = history(tmp_path / "t")
    table.savepoint(name="before")

    def failed(*args: Any) -> Any:
        raise OSError("the store went away")

    monkeypatch.setattr(erase_module, "purge_copies", failed)
    with pytest.raises(StitchError, match=r"completed, but its purge failed.*rollback --failed"):
        table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True)
    monkeypatch.undo()
    assert 1 not in [row["k"] for row in rows_of(table.read())]
    assert _data_files_holding(tmp_path / "t", 1), "the purge failed: the older copies are still there"
    with pytest.raises(UsageError, match="whose purge did not finish"):
        table.read(as_of="before")

    # Until it is finished the erase stays on the active timeline, where recovery finds it.
    erase = table.timeline().latest_completed([Action.ERASE])
    assert erase is not None
    table.write("orders", batch(MODEL["orders"], [{"k": 50, "amount": 5, "status": "new", "ots": 1}]))
    table.savepoint(name="after")  # a state after the erase: the purge, run again, must leave it and its files
    table.compact("all")

    if finisher == "restore":
        with pytest.raises(NotFoundError, match="no savepoint 'before'"):  # the purge went first: it pinned the key
            table.restore("before")
    else:
        assert any("purge of erase" in item for item in table.rollback().result.finished)
    assert [s.name for s in list_savepoints(table)] == ["after"]
    assert 50 in [row["k"] for row in rows_of(table.read(as_of="after"))]
    assert _data_files_holding(tmp_path / "t", 1) == [], "an older copy of the erased key survived the purge"
    assert 1 not in [row["k"] for row in rows_of(table.read())]
    assert table.rollback().result.finished == []  # finished once: nothing left to finish


def test_an_erase_whose_purge_did_not_finish_is_not_archived(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Archived, nothing would find it to finish its purge: the older copies would stay for good."""
    from stitchlake.services.rewrites import erase as erase_module
    from stitchlake.timeline.instant import Action
    from tests.support.published_history import MODEL, history
    from tests.support.tables import batch

    table = history(tmp_path / "t")
    monkeypatch.setattr(erase_module, "purge_copies", lambda *a: (_ for _ in ()).throw(OSError("gone")))
    with pytest.raises(Exception, match="its purge failed"):
        table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True)
    monkeypatch.undo()
    erase = table.timeline().latest_completed([Action.ERASE])
    assert erase is not None
    for k in range(60, 64):
        table.write("orders", batch(MODEL["orders"], [{"k": k, "amount": 5, "status": "new", "ots": 1}]))
    assert table.archive(keep=1).result.archived > 0
    assert table.timeline().get(erase.requested) is not None
    table.rollback()
    table.archive(keep=1)
    assert table.timeline().get(erase.requested) is None  # finished: archived like any other


def test_a_purge_that_is_still_running_is_left_to_its_erase_and_an_erase_from_before_markers_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge runs after its erase committed: a `rollback --failed` (or clean) meanwhile must not run it a second
    time beside it. And a purged erase recorded before purges left a marker is finished: reads of older states
    are not refused for it, and nothing runs it again."""
    import dataclasses

    from stitchlake.services.rewrites import erase as erase_module
    from stitchlake.services.rewrites import purge as purge_module
    from stitchlake.timeline.instant import Action
    from stitchlake.timeline.metadata import EraseCommit
    from tests.support.published_history import history

    table = history(tmp_path / "t")
    finished_meanwhile: list[list[str]] = []

    def rollback_meanwhile(*_args: Any) -> list[str]:
        finished_meanwhile.append(table.rollback().result.finished)
        return []

    monkeypatch.setattr(purge_module, "_purge_quarantine", rollback_meanwhile)
    table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True)
    monkeypatch.undo()
    assert finished_meanwhile == [[]], "a recovery ran the purge a second time beside it"

    def legacy(**fields: Any) -> EraseCommit:
        return dataclasses.replace(EraseCommit(**fields), purge_marked=False)

    monkeypatch.setattr(erase_module, "EraseCommit", legacy)
    monkeypatch.setattr(erase_module, "purge_copies", lambda *a: (_ for _ in ()).throw(OSError("gone")))
    with pytest.raises(Exception, match="its purge failed"):
        table.erase(pa.table({"k": pa.array([2], pa.int64())}), purge=True)
    monkeypatch.undo()
    assert table.rollback().result.finished == []
    purged = table.timeline().completed([Action.ERASE])[-2]  # the first of the two erases above
    table.read(as_of=purged.completed)  # before the second erase: no refusal for one that predates the marker


def test_a_savepoint_planned_before_a_purge_and_completed_after_it_is_refused_not_pinning_purged_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A savepoint planned (its files listed) before an erase with --purge, completing after the purge cleaned
    them: it pinned files that no longer existed, and a restore to it left every read failing. Refused now."""
    from stitchlake.errors import ConflictError
    from stitchlake.table.transaction import Transaction
    from stitchlake.timeline.instant import Action
    from tests.support.published_history import history, rows_of

    table = history(tmp_path / "t")
    original = Transaction.complete
    erased: list[Any] = []

    def erase_first(self: Transaction, *args: Any, **kwargs: Any) -> Any:
        if self.instant.action == Action.SAVEPOINT and not erased:
            erased.append(table.erase(pa.table({"k": pa.array([1], pa.int64())}), purge=True))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transaction, "complete", erase_first)
    with pytest.raises(ConflictError, match=r"\(--purge\) completed after the state"):
        table.savepoint(name="early")
    monkeypatch.undo()
    assert erased and [s.name for s in list_savepoints(table)] == []
    assert not table.timeline().pending(), "the refused savepoint was taken back"
    assert 1 not in {r["k"] for r in rows_of(table.read())}
    assert _data_files_holding(tmp_path / "t", 1) == []


def test_a_clean_while_a_savepoint_is_made_keeps_the_files_it_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean planned while a savepoint was being made counted only completed savepoints, deleted files the new
    one pinned, and the savepoint completed anyway: a read as of it (or a restore to it) then failed. A pending
    savepoint's files are kept now."""
    from stitchlake.table.transaction import Transaction
    from stitchlake.timeline.instant import Action
    from tests.support.published_history import history, rows_of

    table = history(tmp_path / "t")
    first = table.timeline().completed([Action.DELTACOMMIT])[0]
    expected = sorted(r["k"] for r in rows_of(table.read(as_of=first.completed)))
    original = Transaction.complete
    cleaned: list[Any] = []

    def clean_first(self: Transaction, *args: Any, **kwargs: Any) -> Any:
        if self.instant.action == Action.SAVEPOINT and not cleaned:
            cleaned.append(table.clean(policy="keep_latest_file_versions", retain=1))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transaction, "complete", clean_first)
    table.savepoint(name="first", instant=first.requested)
    monkeypatch.undo()
    assert cleaned and cleaned[0].result.deleted, "the clean had older files to delete"
    assert sorted(r["k"] for r in rows_of(table.read(as_of="first"))) == expected


def test_a_purge_keeps_the_logs_written_while_its_erase_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of other keys completing while the erase ran is in the slice the erase's base starts, and the state
    right after the erase reads it. Once a compaction replaced that slice, a purge (finished later, or racing the
    compaction) took its log for an older copy and deleted it: the state at the erase's own completion, the one its
    refusals point to, could no longer be read."""
    import stitchlake.services.rewrites.erase as erase_module
    from stitchlake.services.rewrites.purge import purge
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path, buckets=1)
    orders = MODELS[0]
    table.write("orders", batch(orders, [{"k": k, "amount": k, "status": "s", "ots": 1} for k in (2, 4)]))
    rewrite = erase_module.erase_file_group
    written: list[bool] = []

    def erase_file_group(*args: Any) -> Any:
        out = rewrite(*args)
        if not written:  # another writer's commit lands between the erase's request and its completion
            written.append(True)
            table.write("orders", batch(orders, [{"k": 6, "amount": 6, "status": "s", "ots": 1}]))
        return out

    monkeypatch.setattr(erase_module, "erase_file_group", erase_file_group)
    keys = pa.table({"k": pa.array([2], pa.int64())})
    erased = table.erase(keys, purge=False).result
    monkeypatch.undo()
    assert written and erased.completed is not None
    assert sorted(r["k"] for r in table.read(as_of=erased.completed).to_pylist()) == [4, 6]
    table.compact()
    purge(table, erased.instant, keys)
    assert sorted(r["k"] for r in table.read(as_of=erased.completed).to_pylist()) == [4, 6]
    assert sorted(r["k"] for r in table.read().to_pylist()) == [4, 6]
