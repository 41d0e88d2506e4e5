"""The nine ways to lose or corrupt data an adversarial trial found (issue 16), one test each, at the mechanism.

Each test reproduces the trial's attack deterministically (a frozen process is a hook that runs the rival to
completion at the exact moment the victim would have been frozen) and checks that nothing is lost or shown wrong.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import stitchlake
from stitchlake.api import Table
from stitchlake.errors import BusyError, ConfigError, ConflictError, InputRejected, StitchError
from stitchlake.services.undo.restore import begin_restore
from stitchlake.services.undo.rollback import rollback
from stitchlake.services.upkeep.savepoint import create
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit
from tests.support.tables import QUARANTINING, new_table_file


def land(root: Path, number: int, rows: list[tuple[int, int, int]]) -> None:
    """Landing file `number` of stream orders with (k, amount, ots) rows."""
    folder = root / "landing" / "orders"
    folder.mkdir(parents=True, exist_ok=True)
    keys, amounts, times = (list(column) for column in zip(*rows, strict=True))
    pq.write_table(
        pa.table({"k": pa.array(keys, pa.int64()), "amount": amounts, "ots": times}), folder / f"f{number:03d}.parquet"
    )


def rows_of(table: Table) -> dict[int, dict[str, Any]]:
    return {row["k"]: row for row in table.read().to_pylist()}


def consumed(table: Table) -> list[str]:
    timeline = table.timeline()
    names: list[str] = []
    for instant in timeline.completed([Action.DELTACOMMIT]):
        commit = timeline.commit(instant)
        assert isinstance(commit, DeltaCommit)
        names += list(commit.consumed())
    return sorted(names)


# ------------------------------------------------------------------------- 1. ingest during a restore


def test_ingest_is_refused_while_a_restore_undoes_history_alive_or_crashed(tmp_path: Path) -> None:
    table, _ = new_table_file(tmp_path, QUARANTINING)
    for number in range(2):
        land(tmp_path, number, [(1, number, 10 + number)])
        table.ingest("orders")
    create(table, name="early")
    for number in range(2, 5):
        land(tmp_path, number, [(1, number, 10 + number)])
        table.ingest("orders")
    for number in range(5, 8):
        land(tmp_path, number, [(1, number, 10 + number)])
    restore = begin_restore(table, "early")  # requested with its plan, not yet executed: a restore in progress
    with pytest.raises(BusyError, match=r"restore \d+ is undoing"):
        table.ingest("orders")
    assert consumed(table) == [f"f{n:03d}.parquet" for n in range(5)], "the refused ingest consumed something"
    assert restore.heartbeat is not None
    restore.heartbeat.stop(delete=False)  # the restore's process dies half-way: still refused
    with pytest.raises(BusyError, match="restore"):
        table.ingest("orders")


def test_an_ingest_that_began_before_a_rollback_of_a_commit_does_not_publish_after_it(tmp_path: Path) -> None:
    """The ingest chose its files while commit C counted as consumed; C's rollback un-consumes them, so
    publishing newer files first would later flip ties. The ingest must refuse (exit 3, retry)."""
    table, _ = new_table_file(tmp_path, QUARANTINING)
    land(tmp_path, 0, [(1, 0, 10)])
    table.ingest("orders")
    land(tmp_path, 1, [(1, 1, 10)])
    first = table.ingest("orders").result
    land(tmp_path, 2, [(1, 2, 10)])
    import stitchlake.engine as engine_module

    original = getattr(engine_module, "write_file_groups")  # noqa: B009 - patched where the engine uses it

    def rollback_meanwhile(*args: Any, **kwargs: Any) -> Any:
        rollback(stitchlake.open(tmp_path / "table.yaml"), first.instant or "")
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "write_file_groups", rollback_meanwhile)
        with pytest.raises(ConflictError, match="roll"):
            table.ingest("orders")
    assert consumed(table) == ["f000.parquet"]
    table.ingest("orders")  # the retry takes f001 then f002, in arrival order
    assert rows_of(table)[1]["amount"] == 2


# ------------------------------------------------------------------------------- 2. archive fencing


# ------------------------------------------------------------------------- 3. init over existing data


def test_init_never_recreates_table_json_over_an_existing_timeline(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, QUARANTINING)
    table.write("payments", pa.table({"k": [1, 2], "paid": [1.0, 2.0], "pts": [1.0, 1.0]}))
    properties = tmp_path / "table" / ".stitch" / "table.json"
    properties.unlink()
    with pytest.raises(StitchError, match=r"table\.json"):
        stitchlake.open(config).read()
    document = yaml.safe_load(config.read_text())
    document["table"]["buckets"] = 8
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="timeline"):
        stitchlake.open(config).init()
    assert not properties.exists(), "init wrote table.json over data written with other properties"


# ------------------------------------------------------------------------------------ 4. nested tables


def test_tables_may_not_nest_and_clean_leaves_a_foreign_table_alone(tmp_path: Path) -> None:
    outer, outer_config = new_table_file(tmp_path, QUARANTINING)
    outer.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": [1.0]}))
    document = yaml.safe_load(outer_config.read_text())
    document["table"]["path"] = "table/inner"
    nested = tmp_path / "nested.yaml"
    nested.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="inside"):
        stitchlake.open(nested).init()
    # A table put inside anyway (e.g. copied there) is not the outer table's to clean.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    document["table"]["path"] = str(elsewhere / "inner")
    inner, _ = new_table_file(elsewhere, document, "inner.yaml")
    inner.write("payments", pa.table({"k": [7], "paid": [7.0], "pts": [1.0]}))
    os.rename(elsewhere / "inner", tmp_path / "table" / "inner")
    copied = sorted(p for p in (tmp_path / "table" / "inner").rglob("*") if p.is_file())
    result = outer.clean().result
    assert not result.orphans
    assert sorted(p for p in (tmp_path / "table" / "inner").rglob("*") if p.is_file()) == copied
    with pytest.raises(ConfigError, match="inside"):
        stitchlake.open(outer_config).init()  # and the outer table says so when asked


# ------------------------------------------------------------------------------------ 5. NaN ordering


def test_a_nan_ordering_value_is_a_bad_row_not_a_version_that_wins_forever(tmp_path: Path) -> None:
    table, _ = new_table_file(tmp_path, QUARANTINING)
    result = table.write("payments", pa.table({"k": [1, 2], "paid": [1.0, 2.0], "pts": [float("nan"), 1.0]}))
    assert result.bad_rows == 1
    table.write("payments", pa.table({"k": [1], "paid": [5.0], "pts": [3.0]}))
    assert rows_of(table)[1]["paid"] == 5.0
    quarantined = pq.read_table(table.storage.describe(result.quarantine or "")).to_pylist()
    assert quarantined[0]["_reason"] == "NaN ordering value pts"
    failing, _ = new_table_file(tmp_path / "strict", {**QUARANTINING, "bad_rows": "fail"})
    with pytest.raises(InputRejected, match="NaN ordering value pts"):
        failing.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": [float("nan")]}))


# ------------------------------------------------------------------------------------- 6. alias bombs


# ------------------------------------------------------------------------------------------ 7. masking


# ----------------------------------------------------------------------- the unclear cases of the trial


def test_a_flipped_byte_in_a_log_file_is_an_error_never_wrong_rows(tmp_path: Path) -> None:
    table, _ = new_table_file(tmp_path, QUARANTINING)
    for start in range(0, 300, 100):
        keys = list(range(start, start + 100))
        table.write("payments", pa.table({"k": keys, "paid": [float(k) for k in keys], "pts": [1.0] * 100}))
    expected = table.read().sort_by("k")
    log = next(p for p in (tmp_path / "table").rglob("*.log.parquet"))
    original = log.read_bytes()
    wrong = []
    for position in range(4, len(original) - 8, max(1, len(original) // 150)):
        damaged = bytearray(original)
        damaged[position] ^= 0xFF
        log.write_bytes(bytes(damaged))
        try:
            got = stitchlake.open(tmp_path / "table.yaml").read().sort_by("k")
        except StitchError:
            continue
        if not got.equals(expected):
            wrong.append(position)
    log.write_bytes(original)
    assert not wrong, f"byte flips at {wrong} gave wrong rows with no error"


def test_an_instant_far_ahead_of_the_clock_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stitchlake.timeline import clock

    table, _ = new_table_file(tmp_path, QUARANTINING)
    real = clock.now_millis()
    monkeypatch.setattr(clock, "now_millis", lambda: real + 10 * 365 * 86_400_000)  # a host 10 years ahead
    table.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": [1.0]}))
    monkeypatch.setattr(clock, "now_millis", lambda: real)
    with pytest.raises(StitchError, match="ahead of this host's clock") as refused:
        table.write("payments", pa.table({"k": [2], "paid": [2.0], "pts": [1.0]}))
    assert "max_clock_skew_s" in str(refused.value)
    assert len(table.timeline().completed()) == 1


def test_a_read_retries_once_when_clean_removed_a_slice_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stitchlake.reading.snapshot as reader

    table, config = new_table_file(tmp_path, QUARANTINING)
    for value in range(3):
        table.write("payments", pa.table({"k": [1, 2, 3], "paid": [float(value)] * 3, "pts": [float(value)] * 3}))
    expected = table.read().sort_by("k")
    original = reader.read_slice
    raced: list[bool] = []

    def slow_reader(*args: Any, **kwargs: Any) -> Any:
        if not raced:  # the reader planned its slices; meanwhile a compaction and `clean --retain 1` run
            raced.append(True)
            other = stitchlake.open(config)
            other.compact()
            other.clean(retain=1)
        return original(*args, **kwargs)

    monkeypatch.setattr(reader, "read_slice", slow_reader)
    assert table.read().sort_by("k").equals(expected)


@pytest.mark.parametrize(("code", "words"), [(28, "no space left on device"), (13, "permission denied")])
def test_disk_full_and_permission_errors_name_the_file_and_what_to_do(
    code: int, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from stitchlake.cli import app as cli_app

    def fail() -> None:
        raise OSError(code, os.strerror(code), "/data/table/x.parquet")

    with pytest.raises(typer.Exit) as exited:
        cli_app.run_command(fail)
    assert exited.value.exit_code == 1
    err = capsys.readouterr().err
    assert "unexpected" not in err
    assert "/data/table/x.parquet" in err and words in err.lower()


def test_a_partition_value_too_long_for_a_folder_name_is_a_bad_row(tmp_path: Path) -> None:
    table, _ = new_table_file(tmp_path / "t", QUARANTINING)
    document = json.loads(json.dumps(QUARANTINING))
    document["table"]["partition_by"] = {"region": "string"}
    table, _ = new_table_file(tmp_path, document, "p.yaml")
    result = table.write(
        "payments", pa.table({"k": [1, 2], "region": ["x" * 300, "eu"], "paid": [1.0, 2.0], "pts": [1.0, 1.0]})
    )
    assert result.bad_rows == 1
    quarantined = pq.read_table(table.storage.describe(result.quarantine or "")).to_pylist()
    assert quarantined[0]["_reason"].startswith("partition value too long region")
    assert [row["k"] for row in table.read().to_pylist()] == [2]


def test_nanosecond_timestamps_are_truncated_to_microseconds(tmp_path: Path) -> None:
    document = json.loads(json.dumps(QUARANTINING))
    document["streams"]["payments"]["columns"]["pts"] = "timestamp"
    table, _ = new_table_file(tmp_path, document, "ts.yaml")
    stamps = pa.array([1_700_000_000_123_456_789], pa.timestamp("ns", tz="UTC"))
    result = table.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": stamps}))
    assert result.bad_rows == 0
    assert table.read().column("pts")[0].value == 1_700_000_000_123_456


def test_yaml_columns_in_another_order_describe_the_same_table(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, QUARANTINING)
    table.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": [1.0]}))
    document = yaml.safe_load(config.read_text())
    document["streams"]["payments"]["columns"] = {"pts": "double", "paid": "double"}
    document["streams"] = {"payments": document["streams"]["payments"], "orders": document["streams"]["orders"]}
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    reordered = stitchlake.open(config)
    reordered.write("payments", pa.table({"k": [2], "paid": [2.0], "pts": [1.0]}))
    assert reordered.read().column_names == table.read().column_names  # the table's own order


def test_erase_with_purge_leaves_no_copy_of_the_keys_in_savepoints_or_old_slices(tmp_path: Path) -> None:
    from stitchlake.services.rewrites.erase import erase

    table, _ = new_table_file(tmp_path, QUARANTINING)
    table.write("payments", pa.table({"k": [1, 2], "paid": [11.0, 22.0], "pts": [1.0, 1.0]}))
    create(table, name="before")
    table.write("payments", pa.table({"k": [1], "paid": [111.0], "pts": [2.0]}))
    erase(table, pa.table({"k": [1]}), purge=True)
    assert [row["k"] for row in table.read().to_pylist()] == [2]
    assert not [s for s in table.timeline().completed([Action.SAVEPOINT])], "a savepoint still pins key 1"
    for path in (tmp_path / "table").rglob("*.parquet"):
        if ".stitch" in path.parts:
            continue
        keys = pq.read_table(path, columns=["k"]).column("k").to_pylist()
        assert 1 not in keys, f"{path} still holds key 1"


def test_archive_keeps_a_data_commit_active_so_a_restored_table_can_be_savepointed_again(tmp_path: Path) -> None:
    """Archiving the savepointed commit and then restoring to it left no data commit on the active timeline: a
    table full of rows refused every savepoint ("no completed commit to savepoint yet"; the torture's restorer
    in CI). Archive keeps the savepointed commit and the latest data commit; a table of cleans keeps its commit."""
    from stitchlake.services.undo.restore import restore

    table, _ = new_table_file(tmp_path, QUARANTINING)
    table.write("payments", pa.table({"k": [1, 2], "paid": [11.0, 22.0], "pts": [1.0, 1.0]}))
    pinned = table.timeline().latest_completed([Action.DELTACOMMIT])
    create(table, name="first")
    for paid in (2.0, 3.0, 4.0):
        table.write("payments", pa.table({"k": [1], "paid": [paid], "pts": [paid]}))
    table.archive(keep=0)
    assert pinned in table.timeline().completed(), "the savepointed commit left the active timeline"
    restore(table, "first", False)
    assert rows_of(table)[1]["paid"] == 11.0
    assert create(table, name="again").savepoint_of, "a restored table with rows refused a savepoint"

    other, _ = new_table_file(tmp_path / "other", QUARANTINING)
    other.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": [1.0]}))
    for _ in range(3):
        other.clean()
    other.archive(keep=0)
    assert other.timeline().completed([Action.DELTACOMMIT]), "archive took the only data commit"
    assert create(other, name="sp").savepoint_of


def test_a_restore_that_undoes_an_erase_says_the_erased_keys_read_again(tmp_path: Path) -> None:
    """A restore to before an erase (without --purge, which removes such savepoints) brings the erased keys back,
    as documented; the operator hears it in the restore's own report, not from a reader later."""
    from stitchlake.services.rewrites.erase import erase
    from stitchlake.services.undo.restore import restore

    table, _ = new_table_file(tmp_path, QUARANTINING)
    table.write("payments", pa.table({"k": [1, 2], "paid": [11.0, 22.0], "pts": [1.0, 1.0]}))
    create(table, name="before")
    erased = erase(table, pa.table({"k": [1]}))
    done = restore(table, "before")
    assert done.undone_erases == [f"{erased.instant}: 1 key(s)"]
    assert f"the restore undid erase {erased.instant}: 1 key(s): the keys they erased read again" in done.message
    assert sorted(row["k"] for row in table.read().to_pylist()) == [1, 2]
    create(table, name="again")
    assert restore(table, "again").undone_erases == []


def test_an_archive_after_a_checkpoint_that_kept_no_micro_batches_keeps_the_archived_ones(tmp_path: Path) -> None:
    """A `df.writeStream` micro-batch Spark replays after its commit was archived is known by the checkpoint's
    micro-batches. A checkpoint written before checkpoints kept them has none, and the next archive took only the
    active timeline's: the batches archived before were forgotten for good, and their replays committed again.
    That archive reads the archived batches once."""
    import json

    from stitchlake.checksums import seal
    from stitchlake.services.upkeep.archive import archive
    from stitchlake.services.writes.streaming import batch_instant, exactly_once
    from stitchlake.spark.write import publish, write_task
    from stitchlake.timeline.archive import checkpoint_names, load_checkpoint
    from stitchlake.timeline.metadata import StreamBatch, dump

    table, _ = new_table_file(tmp_path, QUARANTINING)
    batch = StreamBatch("query-1", 5)

    def run_batch() -> str | None:
        instant = batch_instant(table, "payments", batch)
        if instant is not None:
            rows = pa.table({"k": [42], "paid": [1.0], "pts": [1.0]})
            written = write_task(table, "payments", instant, iter(rows.to_batches()))
            publish(table, "payments", instant, [written], {}, batch, exactly_once("payments", batch))
        return instant

    first = run_batch()
    assert first is not None
    for paid in (2.0, 3.0, 4.0):
        table.write("payments", pa.table({"k": [1], "paid": [paid], "pts": [paid]}))
    assert archive(table, keep=2).archived >= 2
    assert table.timeline().get(first) is None, "the batch's commit is archived"
    # As a stitchlake from before kept micro-batches in checkpoints wrote it.
    _horizon, path = checkpoint_names(table.storage)[-1]
    kept = load_checkpoint(table.storage)
    assert kept is not None and kept.stream_batches == {"payments": (batch,)}
    older = {k: v for k, v in dump(kept).items() if k not in ("stream_batches", "batches_kept")}
    table.storage.write_bytes(path, seal(json.dumps(older).encode()))

    for paid in (5.0, 6.0, 7.0):
        table.write("payments", pa.table({"k": [1], "paid": [paid], "pts": [paid]}))
    assert archive(table, keep=2).archived >= 2
    newest = load_checkpoint(table.storage)
    assert newest is not None and newest.stream_batches == {"payments": (batch,)}
    assert run_batch() is None, "the replay of the archived batch began a commit again"


def test_a_restore_leaves_a_crashed_rollback_a_pending_restores_plan_takes_back_to_that_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crashed restore's plan (recorded before restores finished crashed rollbacks first) takes back a crashed
    rollback. A new restore tried to finish that rollback first and was refused for it ("rollback X is being rolled
    back or reset by restore R; try again later"), which no waiting ends. It leaves the rollback to the pending
    restore and is refused for that restore, which `stitch rollback --failed` finishes, taking both back."""
    import copy
    import time

    from stitchlake.services.undo import restore
    from stitchlake.services.undo.recovery import rollback_failed
    from stitchlake.table.transaction import Transaction
    from stitchlake.timeline.metadata import RollbackPlan
    from tests.support.tables import new_table

    document = copy.deepcopy(QUARANTINING)
    document["concurrency"] = {
        "heartbeat": {"interval_s": 0.1, "expire_s": 0.4},
        "lock": {"wait_s": 20, "expire_s": 10},
    }
    table = new_table(tmp_path, document)

    def died(txn: Transaction) -> str:
        assert txn.heartbeat is not None
        txn.heartbeat.stop(delete=True)
        txn.heartbeat = None
        time.sleep(0.5)  # its heartbeat expires
        return txn.time

    table.write("payments", pa.table({"k": [1], "paid": [1.0], "pts": [1.0]}))
    create(table, name="before")
    table.write("payments", pa.table({"k": [1], "paid": [2.0], "pts": [2.0]}))
    crashed_rollback = died(Transaction.begin(table, Action.ROLLBACK, RollbackPlan(reason="t")))
    with monkeypatch.context() as older:  # a plan recorded before restores finished crashed rollbacks first
        older.setattr(restore, "_unfinished", lambda _timeline: [])
        crashed_restore = died(restore.begin_restore(table, "before"))

    with pytest.raises(BusyError, match=rf"restore {crashed_restore} is undoing .*`stitch rollback --failed`"):
        restore.restore(table, "before")
    assert [i.requested for i in table.timeline().pending()] == [crashed_rollback, crashed_restore]
    assert rollback_failed(table).finished == [f"restore {crashed_restore}"]
    assert not table.timeline().pending()
    assert rows_of(table)[1]["paid"] == 1.0
