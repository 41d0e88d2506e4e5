"""The JVM reader's infrastructure (docs/spark-reader.md, issue 35): the jar's `stitchlake` source planned by the
Python planner, its columnar scan of log-free slices, file checks, pushdown, writes handed to the Python source,
and the Python source as the fallback without the jar.

The reader runs in a session of its own process (tests/support/jvm_session.py: a JVM's classpath is fixed at start and
the suite's `spark` fixture has no jar); the expected rows come from `stitchlake.read` in this process.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stitchlake.api import Table
from stitchlake.io import datafiles
from stitchlake.jobs.spark_conf import reader_jar
from stitchlake.merge import stitch
from stitchlake.paths import TIMELINE_DIR
from stitchlake.reading.filters import prune
from stitchlake.reading.snapshot import plan_slices
from tests.support.histories import events
from tests.support.jvm_session import JvmError, JvmSession, jvm_session
from tests.support.spark_native_reader import decode
from tests.support.tables import MODELS, THREE_STREAMS, batch, evolved_table, new_table, write_table_yaml

#: Every test here starts a JVM (Spark or the merge harness).
pytestmark = pytest.mark.spark

ORDERS, PAYMENTS, SHIPMENTS = MODELS


@pytest.fixture(scope="module")
def jvm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JvmSession]:
    assert reader_jar().is_file(), f"the JVM reader is not built ({reader_jar()}): run make setup"
    with jvm_session(tmp_path_factory.mktemp("jvm") / "stderr.txt") as session:
        yield session


def built(root: Path, buckets: int = 2, document: dict[str, Any] | None = None) -> Table:
    """A table with every stream written (deletes too), compacted: every slice log-free."""
    table = new_table(root, document or copy.deepcopy(THREE_STREAMS), buckets=buckets)
    for number, model in enumerate((ORDERS, PAYMENTS, SHIPMENTS, ORDERS, PAYMENTS)):
        table.write(model.name, batch(model, events(model, range(number * 4, 40), number)))
    table.compact()
    return table


def location(table: Table) -> str:
    return table.storage.describe()


def expected(table: Table, **read: Any) -> list[dict[str, Any]]:
    return sorted(table.read(**read).to_pylist(), key=lambda r: r["k"])


def through_jvm(jvm: JvmSession, table: Table, select: str = "*", where: str = "true", **options: str) -> Any:
    """The rows of a `format("stitchlake")` read, by key, and its physical plan."""
    chained = "".join(f".option({k!r}, {v!r})" for k, v in options.items())
    answer = jvm.run(
        f"frame = spark.read.format('stitchlake'){chained}.load({location(table)!r}).where({where!r})"
        f".selectExpr(*{select.split(', ')!r})\n"
        "result = {'rows': rows(frame), 'plan': plan_text(frame)}"
    )
    got = [{k: decode(v) for k, v in row.items()} for row in answer["rows"]]
    return sorted(got, key=lambda r: r["k"]), answer["plan"]


def count(jvm: JvmSession, table: Table) -> int:
    return int(jvm.run(f"result = spark.read.format('stitchlake').load({location(table)!r}).count()"))


def counter(jvm: JvmSession, name: str) -> int:
    return int(jvm.run(f"result = spark._jvm.io.stitchlake.spark.io.DataFileReader.{name}()"))


def test_a_compacted_table_and_a_read_optimized_read_equal_stitchlake_read(jvm: JvmSession, tmp_path: Path) -> None:
    table = built(tmp_path)
    want = expected(table)
    assert len(want) > 20 and any(r["carrier"] == "none" for r in want)  # a default shown where a stream has none
    got, plan = through_jvm(jvm, table)
    assert got == want
    # Every slice is log-free: Spark's vectorized Parquet reader, columnar, no Python worker.
    assert "BatchScan stitchlake" in plan and " columnar" in plan and re.search(r"slices=(\d+) \(log-free \1\)", plan)
    assert "ColumnarToRow" in plan and "Python" not in plan
    assert count(jvm, table) == len(want)  # no column read at all: liveness still decides

    # Logs on top: a read-optimized read still reads only the bases, as stitchlake's does.
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(30, 50), 7)))
    got, plan = through_jvm(jvm, table, mode="read_optimized")
    assert got == expected(table, mode="read_optimized") and " columnar" in plan
    assert got != expected(table)  # (the logs do change the snapshot)


def test_base_files_whose_delete_flags_are_all_false_are_read_without_them(jvm: JvmSession, tmp_path: Path) -> None:
    """Base files carry row-group statistics of each stream's delete flag. Where they say every row shows every
    stream (each key written by every stream, none deleted), a read of the file this JVM verified reads the output
    columns alone, as Spark's own scan would, and the first read, which verifies the file whole with its flags,
    passes its rows through too; a file where some row hides a stream is read with its flags, which decide row by
    row. Either way the rows are stitchlake's."""
    full = new_table(tmp_path / "full", copy.deepcopy(THREE_STREAMS), buckets=2)
    for number, model in enumerate((ORDERS, PAYMENTS, SHIPMENTS)):
        rows = [{**row, "deleted": False} for row in events(model, range(30), number)]
        full.write(model.name, batch(model, rows))
    full.compact()
    bases = [s.base for s in full.view().latest_slices(None) if s.base]
    assert bases
    for base in bases:
        flags = pq_statistics(full, base.path, [f"_sl__{m.name}__del" for m in MODELS])
        assert flags == [(False, False, 0)] * 3, flags  # min, max, nulls: every row shows every stream
    partial = built(tmp_path / "partial")  # keys some stream never wrote, and deletes
    for table in (full, partial):
        want = expected(table)
        before = counter(jvm, "basesReadWithoutFlags")
        assert through_jvm(jvm, table)[0] == want  # the first read verifies each file whole
        assert through_jvm(jvm, table)[0] == want
        assert through_jvm(jvm, table, select="k, paid, carrier")[0] == [
            {"k": r["k"], "paid": r["paid"], "carrier": r["carrier"]} for r in want
        ]
        assert count(jvm, table) == len(want)
        passed = counter(jvm, "basesReadWithoutFlags") - before
        assert passed == (4 * len(bases) if table is full else 0), passed


def pq_statistics(table: Table, path: str, columns: list[str]) -> list[Any]:
    """Each column's (min, max, null count) in a Parquet data file of one row group (None: no statistics)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(table.storage.describe(path)).metadata
    assert meta.num_row_groups == 1
    group = meta.row_group(0)
    found = {group.column(i).path_in_schema: group.column(i).statistics for i in range(group.num_columns)}
    return [(s.min, s.max, s.null_count) if s is not None and s.has_min_max else None for s in map(found.get, columns)]


def test_explain_shows_the_jvm_scan_reading_only_the_pruned_columns(jvm: JvmSession, tmp_path: Path) -> None:
    table = built(tmp_path)
    got, plan = through_jvm(jvm, table, select="k, amount", where="p = 'even'")
    assert got == [{"k": r["k"], "amount": r["amount"]} for r in expected(table) if r["p"] == "even"]
    scan = next(line for line in plan.splitlines() if "BatchScan" in line)
    assert re.search(r"columns=\[k, (p, amount|amount, p)\] ", scan), scan  # (p: Spark filters on it again)
    assert "pushed=[EqualTo(p,even)" in scan, scan


def test_a_flipped_byte_in_a_base_file_is_an_error_naming_the_file(jvm: JvmSession, tmp_path: Path) -> None:
    table = built(tmp_path, buckets=1)
    planned = plan_slices(table.config, table.view(), None, prune(table.config, None))[0].base
    assert planned is not None
    base = Path(table.storage.describe(planned.path))
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0x04
    base.write_bytes(bytes(data))
    with pytest.raises(JvmError) as failed:
        through_jvm(jvm, table)
    message = str(failed.value)
    assert str(base) in message and "checksum mismatch" in message, message
    # Spark carries it as Python names it, so `stitch read --engine spark` exits as `stitch read` would (1).
    from stitchlake.spark.errors import unwrap

    kind, code, said = unwrap(failed.value)
    assert (kind, code) == ("CorruptFileError", 1) and str(base) in said, (kind, code, said)


def test_a_file_read_before_is_read_again_by_its_columns_and_a_damaged_page_still_fails(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """Once a JVM has verified a file whole, its later reads take only the parts they need (column chunks, and the
    stretches between them), each checked against the digest taken of it then; `spark.stitchlake.verify = every`
    verifies the whole file on every read instead."""
    import pyarrow.parquet as pq

    table = built(tmp_path, buckets=1)
    want = expected(table)
    assert through_jvm(jvm, table)[0] == want  # the first read verifies the base file whole
    verified = counter(jvm, "filesVerified")
    assert through_jvm(jvm, table)[0] == want and counter(jvm, "filesVerified") == verified  # none again
    planned = plan_slices(table.config, table.view(), None, prune(table.config, None))[0].base
    assert planned is not None
    base = Path(table.storage.describe(planned.path))
    chunk = pq.ParquetFile(base).metadata.row_group(0).column(pq.ParquetFile(base).schema_arrow.names.index("amount"))
    last = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size - 1
    data = bytearray(base.read_bytes())
    data[last] ^= 0x04  # inside the last data page of `amount`
    base.write_bytes(bytes(data))
    assert through_jvm(jvm, table, select="k, status")[0] == [{"k": r["k"], "status": r["status"]} for r in want]
    with pytest.raises(JvmError) as failed:
        through_jvm(jvm, table, select="k, amount")
    message = str(failed.value)
    assert str(base) in message and "checksum mismatch in bytes" in message, message
    jvm.run("spark.conf.set('spark.stitchlake.verify', 'every')")
    try:
        with pytest.raises(JvmError, match=r"checksum mismatch \(its commit recorded"):
            through_jvm(jvm, table, select="k, status")
        jvm.run("spark.conf.set('spark.stitchlake.verify', 'sometimes')")  # a typo is refused, never ignored
        with pytest.raises(JvmError, match=r"spark.stitchlake.verify must be 'first' .* or 'every' .*got 'sometimes'"):
            through_jvm(jvm, table, select="k, status")
    finally:
        jvm.run("spark.conf.unset('spark.stitchlake.verify')")


def test_a_read_option_reaches_that_reads_tasks_only(jvm: JvmSession, tmp_path: Path) -> None:
    """A read's options go into the Hadoop conf its tasks get (as `fs.s3a.*` keys given per read do), and the driver
    keeps the confs it broadcast by their settings (`StitchScan.BroadcastConfs`): a read with `spark.stitchlake.verify
    = every` as an option verifies the file whole again, and the reads before and after it, without the option,
    share one conf that does not."""
    table = built(tmp_path, buckets=1)
    want = expected(table)
    assert through_jvm(jvm, table)[0] == want  # the first read verifies the base file whole
    verified = counter(jvm, "filesVerified")
    assert through_jvm(jvm, table)[0] == want and counter(jvm, "filesVerified") == verified
    assert through_jvm(jvm, table, **{"spark.stitchlake.verify": "every"})[0] == want
    again = counter(jvm, "filesVerified")
    assert again > verified, "the option did not reach the tasks"
    assert through_jvm(jvm, table)[0] == want and counter(jvm, "filesVerified") == again, "the option outlived its read"


def test_the_sessions_off_heap_vectors_setting_decodes_slices_off_the_heap_with_the_same_rows(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """`spark.sql.columnVector.offheap.enabled`, the setting Spark's own Parquet scan follows, makes the reader decode
    a slice's files off the heap too (each slice's vectors freed when the next begins): the same rows, merged (logs
    of a `nulls: ignore` stream over the bases) and log-free; without it, none off the heap."""
    table = built(tmp_path)
    table.write(PAYMENTS.name, batch(PAYMENTS, events(PAYMENTS, range(10, 30), 9)))
    want = expected(table)
    before = counter(jvm, "offHeapReaders")
    assert through_jvm(jvm, table)[0] == want and counter(jvm, "offHeapReaders") == before
    jvm.run("spark.conf.set('spark.sql.columnVector.offheap.enabled', 'true')\nresult = None")
    try:
        assert through_jvm(jvm, table)[0] == want
        assert counter(jvm, "offHeapReaders") > before, "the setting did not reach the tasks"
        table.compact()
        assert through_jvm(jvm, table)[0] == expected(table)
    finally:
        jvm.run("spark.conf.unset('spark.sql.columnVector.offheap.enabled')\nresult = None")


def windowed(jvm: JvmSession) -> int:
    return int(jvm.run("result = spark._jvm.io.stitchlake.spark.merge.SliceInputs.windowedSlices()"))


@contextlib.contextmanager
def batches_of(jvm: JvmSession, rows: int) -> Iterator[None]:
    """The session's Parquet batches (and so the reader's windows) of `rows` rows while the block runs."""
    jvm.run(f"spark.conf.set('spark.sql.parquet.columnarReaderBatchSize', '{rows}')\nresult = None")
    try:
        yield
    finally:
        jvm.run("spark.conf.unset('spark.sql.parquet.columnarReaderBatchSize')\nresult = None")


#: Prefixes that put string keys in an order where UTF-8 bytes matter (multi-byte characters beside ASCII ones).
PREFIXES = ("é", "a", "Ω", "z", "ä", "日", "Z")


def string_keyed(rows: pa.Table) -> pa.Table:
    return rows.set_column(0, "k", pa.array([f"{PREFIXES[k % 7]}{k}" for k in rows.column("k").to_pylist()]))


def unpartitioned() -> dict[str, Any]:
    document = copy.deepcopy(THREE_STREAMS)
    del document["table"]["partition_by"]
    return document


def string_keys() -> dict[str, Any]:
    document = copy.deepcopy(THREE_STREAMS)
    document["table"]["key"] = {"k": "string"}
    return document


@pytest.mark.parametrize(
    ("document", "keys"),
    [(copy.deepcopy(THREE_STREAMS), None), (unpartitioned(), None), (string_keys(), string_keyed)],
    ids=["key-and-partition", "one-integer-key", "string-keys"],
)
def test_slices_of_key_ordered_files_are_merged_window_by_window_with_the_rows_of_the_python_merge(
    jvm: JvmSession, tmp_path: Path, document: dict[str, Any], keys: Callable[[pa.Table], pa.Table] | None
) -> None:
    """Files marked as in key order (every file written now) are merged window by window, holding a batch of each
    file: batches of 5 rows make each file several windows, with keys every file lacks and keys one file alone has,
    over base files and logs; keys compared as a composite (key, partition), as one integer, or as UTF-8 strings."""
    shaped = keys or (lambda rows: rows)
    table = new_table(tmp_path, document)
    for number, model in enumerate((ORDERS, PAYMENTS, SHIPMENTS, ORDERS, PAYMENTS)):
        table.write(model.name, shaped(batch(model, events(model, range(number * 4, 40), number))))
    table.compact()
    table.write(PAYMENTS.name, shaped(batch(PAYMENTS, events(PAYMENTS, range(10, 30), 9))))
    table.write(SHIPMENTS.name, shaped(batch(SHIPMENTS, events(SHIPMENTS, range(25, 60, 3), 4))))
    want = expected(table)
    with batches_of(jvm, 5):
        before = windowed(jvm)
        assert through_jvm(jvm, table)[0] == want
        pruned = [{"k": row["k"], "paid": row["paid"]} for row in want if row["paid"] is not None and row["paid"] > 100]
        assert through_jvm(jvm, table, select="k, paid", where="paid > 100")[0] == pruned
        assert windowed(jvm) >= before + 2, "no slice was merged by windows"


def test_files_whose_numbers_are_dictionary_encoded_merge_by_their_values_not_their_dictionary_ids(
    jvm: JvmSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stitchlake dictionary-encodes only text, but a file whose keys, versions and positions are dictionary-encoded
    (another writer's choice) reaches the merge as Spark vectors holding dictionary ids: the windows' bounds and
    order check, the key index and the versions must read the values, whole runs of them included."""
    monkeypatch.setattr(datafiles, "parquet_encodings", lambda schema, delta_positions=False: {"use_dictionary": True})
    table = built(tmp_path, document=unpartitioned())
    table.write(PAYMENTS.name, batch(PAYMENTS, events(PAYMENTS, range(10, 30), 9)))
    monkeypatch.undo()
    with batches_of(jvm, 5):
        assert through_jvm(jvm, table)[0] == expected(table)


def test_slices_of_files_that_do_not_say_they_are_in_key_order_are_read_whole_with_the_same_rows(
    jvm: JvmSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose files carry no key-order entry (written before it) is merged from its files read whole."""
    monkeypatch.setattr(stitch, "marked_key_ordered", lambda rows: rows)
    table = built(tmp_path)
    table.write(PAYMENTS.name, batch(PAYMENTS, events(PAYMENTS, range(10, 30), 9)))
    with batches_of(jvm, 5):
        before = windowed(jvm)
        assert through_jvm(jvm, table)[0] == expected(table)
        assert windowed(jvm) == before, "a file without the entry was merged by windows"


@pytest.mark.parametrize("where", ["within", "between"])
def test_a_file_marked_in_key_order_whose_keys_are_not_fails_the_read_naming_it(
    jvm: JvmSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A window holds a key's rows only if every file's keys rise: a file that says so and does not (changed after it
    was written) fails the read, naming the file, rather than showing a key twice; whether two keys are out of order
    within one batch or across two (batches of 5 rows, the second's keys below the first's)."""
    table = built(tmp_path, buckets=1)

    def misordered(config: Any, rows: pa.Table) -> pa.Array:
        ordered = pc.sort_indices(rows, sort_keys=[("k", "ascending"), ("p", "ascending")]).to_pylist()
        if where == "within":
            return pa.array(ordered[::-1])
        runs = [ordered[i : i + 5] for i in range(0, len(ordered), 5)]
        return pa.array([row for run in runs[::-1] for row in run])

    monkeypatch.setattr(stitch, "key_order", misordered)
    table.write(PAYMENTS.name, batch(PAYMENTS, events(PAYMENTS, range(10, 30), 9)))
    with batches_of(jvm, 5), pytest.raises(JvmError) as failed:
        through_jvm(jvm, table)
    message = str(failed.value)
    assert "marked as in key order with one row per key, but a key does not rise above" in message, message
    assert ".log" in message, message


def test_a_missing_data_file_fails_the_read_naming_it_whether_or_not_this_jvm_verified_it_before(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """A file a completed instant names is damage when storage lacks it, never an empty read: so says the read that
    would load only its checked segments (verified before) and the one that reads it whole (`verify = every`). A
    clean completed before the read planned (its requested and inflight files stay on the timeline) does not make
    it "the table changed"."""
    table = built(tmp_path, buckets=1)
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(0, 40), 9)))
    table.compact()
    assert table.clean(policy="keep_latest_commits", retain=1).result.deleted
    assert through_jvm(jvm, table)[0] == expected(table)  # this JVM verifies the base file
    planned = plan_slices(table.config, table.view(), None, prune(table.config, None))[0].base
    assert planned is not None
    base = Path(table.storage.describe(planned.path))
    base.unlink()
    for verify in ("first", "every"):
        jvm.run(f"spark.conf.set('spark.stitchlake.verify', {verify!r})")
        try:
            with pytest.raises(JvmError) as failed:
                through_jvm(jvm, table, select="k, amount")
        finally:
            jvm.run("spark.conf.unset('spark.stitchlake.verify')")
        message = str(failed.value)
        assert str(base) in message and "data file is missing (named by a completed instant)" in message, message
        assert "stitchlake.errors.CorruptFileError" in message and "table changed" not in message, message


def test_a_file_a_clean_removed_after_the_query_was_planned_fails_the_read_saying_to_run_it_again(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """Spark's tasks cannot plan again as the local read does: a query planned before a compaction and a clean that
    removed its slice's files says the table moved on under it (naming the clean) and to run it again, not damage;
    run again, it reads the new state."""
    table = built(tmp_path, buckets=1)
    jvm.run(f"frame = spark.read.format('stitchlake').load({location(table)!r})\nresult = plan_text(frame)")
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(0, 40), 9)))
    table.compact()
    assert table.clean(policy="keep_latest_commits", retain=1).result.deleted, "the planned slice's files are gone"
    clean = table.timeline().latest_completed(["clean"])
    assert clean is not None
    with pytest.raises(JvmError) as failed:
        jvm.run("result = rows(frame)")
    message = str(failed.value)
    assert "stitchlake.errors.DataFileMissing" in message, message
    assert "the table changed after this query was planned" in message, message
    assert f"clean {clean.requested} completed {clean.completed}" in message, message
    assert "run the query again" in message, message
    assert through_jvm(jvm, table)[0] == expected(table)


def test_a_spark_read_job_whose_planned_files_a_clean_removes_meanwhile_plans_again(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """`stitch read --engine spark` plans its read more than once (the plan shown, the count, the sample); a clean
    that removed a planned slice's files in between failed the job, telling the operator to run it again. The job
    plans again once by itself, with "now" pinned anew, and returns one state of the table."""
    table = built(tmp_path, buckets=1)
    yaml_file = write_table_yaml(tmp_path, {**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "buckets": 1}})
    sample = tmp_path / "sample.arrow"
    answer = jvm.run(
        "import stitchlake\n"
        "from stitchlake.jobs.requests import SparkReadRequest\n"
        "from stitchlake.spark.read_job import run_read\n"
        "from tests.support.histories import events\n"
        "from tests.support.tables import ORDERS, batch\n"
        f"table = stitchlake.open({str(yaml_file)!r})\n"
        "said = []\n"
        "def progress(text):\n"
        "    said.append(text)\n"
        "    if len(said) == 1:  # planned and shown: now a compaction and a clean replace the planned slice\n"
        "        table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(0, 40), 9)))\n"
        "        table.compact()\n"
        "        assert table.clean(policy='keep_latest_commits', retain=1).result.deleted\n"
        f"request = SparkReadRequest(limit=0, sample={str(sample)!r})\n"
        "done = run_read(spark, table, request, progress)\n"
        "result = {'rows': done.rows, 'said': said}\n"
    )
    assert answer["rows"] == len(expected(table)), answer
    assert any("planning it again" in text for text in answer["said"]), answer["said"]
    import pyarrow as pa

    with pa.OSFile(str(sample)) as source:
        got = pa.ipc.open_file(source).read_all()
    assert sorted(got.to_pylist(), key=lambda r: r["k"]) == expected(table)


def test_a_missing_file_with_the_timeline_unreadable_is_reported_missing_claiming_neither_damage_nor_a_race(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """Whether a clean or restore removed the file since planning is read off the timeline; when the timeline
    cannot be listed either, the task cannot tell, so it names the file as missing and says neither "damage" nor
    "the table changed"."""
    table = built(tmp_path, buckets=1)
    jvm.run(f"frame = spark.read.format('stitchlake').load({location(table)!r})\nresult = plan_text(frame)")
    planned = plan_slices(table.config, table.view(), None, prune(table.config, None))[0].base
    assert planned is not None
    gone = Path(table.storage.describe(planned.path))
    gone.unlink()
    timeline = Path(table.storage.describe(TIMELINE_DIR))
    hidden = timeline.with_name("timeline-away")
    timeline.rename(hidden)
    try:
        with pytest.raises(JvmError) as failed:
            jvm.run("result = rows(frame)")
    finally:
        hidden.rename(timeline)
    message = str(failed.value)
    assert "stitchlake.errors.DataFileMissing" in message, message
    assert f"{gone}: data file is missing" in message, message
    assert "named by a completed instant" not in message and "table changed" not in message, message


def test_a_planner_that_stops_answering_fails_the_read_and_the_next_read_starts_a_new_one(
    jvm: JvmSession, tmp_path: Path
) -> None:
    table = built(tmp_path, buckets=1)
    stuck = tmp_path / "stuck-python"
    stuck.write_text("#!/bin/sh\nexec sleep 300\n")  # starts, reads nothing, answers nothing
    stuck.chmod(0o755)
    timeout, python = "spark.stitchlake.planner.timeout", "spark.stitchlake.python"
    given = jvm.run(f"result = spark.conf.get({python!r})")
    jvm.run(f"spark.conf.set({timeout!r}, 'soon')")
    with pytest.raises(JvmError, match=re.escape(f"{timeout} must be a whole number of seconds")):
        through_jvm(jvm, table)
    jvm.run(f"spark.conf.set({timeout!r}, '2'); spark.conf.set({python!r}, {str(stuck)!r})")
    try:
        with pytest.raises(JvmError) as failed:
            through_jvm(jvm, table)
        message = str(failed.value)
        assert "did not answer within 2 s (spark.stitchlake.planner.timeout)" in message and str(stuck) in message
    finally:
        jvm.run(f"spark.conf.unset({timeout!r}); spark.conf.set({python!r}, {given!r})")
    got, _ = through_jvm(jvm, table)
    assert got == expected(table)


def planners_under(pid: int) -> list[int]:
    """Planner processes (`python -m stitchlake.spark.planner`) descended from process `pid`."""
    parents: dict[int, int] = {}
    planners = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if b"stitchlake.spark.planner" in (entry / "cmdline").read_bytes():
                planners.append(int(entry.name))
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue

    def descends(child: int) -> bool:
        while child > 1:
            child = parents.get(child, 0)
            if child == pid:
                return True
        return False

    return [planner for planner in planners if descends(planner)]


def test_a_session_starts_its_planner_before_its_first_read(tmp_path: Path) -> None:
    table = built(tmp_path)
    with jvm_session(tmp_path / "stderr.txt") as session:
        assert session.run("result = spark.conf.get('spark.jars')").endswith("stitchlake-spark.jar")
        assert len(planners_under(session.process.pid)) == 1, "register() starts the planner with the session"
        got, _ = through_jvm(session, table)
        assert got == expected(table)
        assert len(planners_under(session.process.pid)) == 1, "the first read used the planner started before it"


def test_key_filters_skip_row_groups_and_stream_filters_apply_after_the_merge(jvm: JvmSession, tmp_path: Path) -> None:
    table = built(tmp_path, buckets=1)  # a base per partition (even, odd keys): keys 0..39
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(100, 110), 3)))  # a log: keys 100..109
    skipped, read = counter(jvm, "rowGroupsSkipped"), counter(jvm, "rowGroupsRead")
    got, plan = through_jvm(jvm, table, where="k >= 100")
    assert got == [r for r in expected(table) if r["k"] >= 100] and len(got) > 5
    assert "rowGroupFilter=" in plan and "GreaterThanOrEqual(k,100)" in plan, plan
    # The bases' row groups hold no key >= 100 (their statistics say so): skipped; the logs' are read.
    assert counter(jvm, "rowGroupsSkipped") - skipped == 2
    assert counter(jvm, "rowGroupsRead") - read == 2
    # A stream column's filter skips nothing (its stored values are not what a merged row shows).
    got, plan = through_jvm(jvm, table, where="amount < 500")
    assert got == [r for r in expected(table) if r["amount"] is not None and r["amount"] < 500]
    assert "rowGroupFilter=" not in plan


def test_value_column_filters_skip_row_groups_only_of_base_files_whose_rows_show_every_stream(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """Issue 35 point 1: in a log-free slice whose base file's delete flags are all false, the stored values are the
    values a read shows, so a filter on a value column skips row groups by their statistics. Where a flag is set
    (that stream's columns show their default), or a column is missing from the file (added since: its default),
    or a column's type in the file is narrower than the table's (widened since), nothing is skipped by it."""
    table = new_table(tmp_path, copy.deepcopy(THREE_STREAMS), buckets=1)  # a base per partition (even, odd)
    for number, model in enumerate((ORDERS, PAYMENTS, SHIPMENTS)):
        rows = [{**r, "deleted": False} for r in events(model, range(0, 40), number)]
        table.write(model.name, batch(model, rows))
    table.compact()
    assert through_jvm(jvm, table)[0] == expected(table)  # this JVM reads (and verifies) the two base files once
    skipped, flagless = counter(jvm, "rowGroupsSkipped"), counter(jvm, "basesReadWithoutFlags")
    got, plan = through_jvm(jvm, table, where="amount >= 1000")  # amounts are below 1000
    assert got == [] and "shownRowGroupFilter=" in plan and "GreaterThanOrEqual(amount,1000)" in plan, plan
    assert counter(jvm, "rowGroupsSkipped") - skipped == 2
    assert counter(jvm, "basesReadWithoutFlags") - flagless == 2
    got, _plan = through_jvm(jvm, table, where="amount < 500 AND status = 'a'")
    assert got == [r for r in expected(table) if r["amount"] < 500 and r["status"] == "a"] and got

    # Orders deleted for key 3 (odd): its base's orders flag is set there, so `amount IS NULL` holds for key 3
    # although no stored amount is null; the even base's rows all show every stream and are skipped.
    table.write(ORDERS.name, batch(ORDERS, [{"k": 3, "amount": 1, "status": "a", "ots": 5000, "deleted": True}]))
    table.compact()
    assert through_jvm(jvm, table)[0] == expected(table)
    skipped = counter(jvm, "rowGroupsSkipped")
    got, _plan = through_jvm(jvm, table, where="amount IS NULL")
    assert [r["k"] for r in got] == [3] and got == [r for r in expected(table) if r["amount"] is None]
    assert counter(jvm, "rowGroupsSkipped") - skipped == 1

    def before(evolving: Table) -> None:
        evolving.write("a", pa.table({"k": [1, 2, 3], "v": pa.array([1, 2, None], pa.int32()), "s": ["x", "y", None]}))
        evolving.compact()

    evolved = evolved_table(tmp_path / "evolved", before)  # v widened to long, `when` added (2026-11-21)
    assert through_jvm(jvm, evolved)[0] == expected(evolved)
    got, plan = through_jvm(jvm, evolved, where="v >= 2")  # int32 in the file: Parquet cannot compare, reads all
    assert [r["k"] for r in got] == [2] and "shownRowGroupFilter=" in plan, plan
    skipped = counter(jvm, "rowGroupsSkipped")
    got, _plan = through_jvm(jvm, evolved, where="v >= 2 AND k >= 100")  # the key's predicate still skips
    assert got == [] and counter(jvm, "rowGroupsSkipped") - skipped == 1
    got, _plan = through_jvm(jvm, evolved, where="`when` = DATE'2026-11-21'")  # not in the file: its default
    assert got == expected(evolved) and len(got) == 3


def test_a_timestamp_filter_skips_row_groups_by_the_instant_it_names_before_1582_too(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """Spark hands a timestamp filter's value as a `java.sql.Timestamp` rebased onto the Julian calendar: read as it
    is, an instant of 1500 was days off, and a row group whose newest value lay between the two was skipped."""
    import datetime as dt

    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["shipments"]["columns"]["shipped_at"] = "timestamp"
    table = new_table(tmp_path, document, buckets=1)  # a base per partition: odd keys shipped in 1500, even in 2020
    utc = dt.UTC
    for number, model in enumerate((ORDERS, PAYMENTS, SHIPMENTS)):
        rows = [{**r, "deleted": False} for r in events(model, range(0, 20), number)]
        written = batch(model, rows)
        if model is SHIPMENTS:
            when = [dt.datetime(1500 if r["k"] % 2 else 2020, 1, 10, tzinfo=utc) for r in rows]
            written = written.append_column("shipped_at", pa.array(when, pa.timestamp("us", tz="UTC")))
        table.write(model.name, written)
    table.compact()
    assert through_jvm(jvm, table)[0] == expected(table)  # the base files read (and verified) once
    skipped = counter(jvm, "rowGroupsSkipped")
    got, plan = through_jvm(jvm, table, where="shipped_at > TIMESTAMP'1500-01-08 00:00:00'")
    assert got == expected(table) and len(got) == 20 and "shownRowGroupFilter=" in plan, plan
    assert counter(jvm, "rowGroupsSkipped") - skipped == 0
    got, _plan = through_jvm(jvm, table, where="shipped_at < TIMESTAMP'1500-01-12 00:00:00'")
    assert [r["k"] for r in got] == list(range(1, 20, 2))
    assert counter(jvm, "rowGroupsSkipped") - skipped == 1  # the even keys' file, all of 2020


def test_a_plan_given_as_the_plan_option_is_read_as_planned_as_text_or_as_a_file(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """`.option("plan", ...)` (docs/spark-reader.md): the plan document the planner makes, handed over as its JSON or
    as a file holding it, is read as planned, the planner not asked: a write after the plan is not in the read."""
    from stitchlake.spark import planner

    table = built(tmp_path / "t")
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(30, 50), 21)))  # slices with logs too
    planned_rows = expected(table)
    document = planner.plan({"path": location(table)}, None, [], {})
    text = json.dumps(document)
    file = tmp_path / "plan.json"
    file.write_text(text, encoding="utf-8")
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(45, 60), 22)))  # after the plan
    assert expected(table) != planned_rows
    for given in (text, str(file)):
        got, plan = through_jvm(jvm, table, plan=given)
        assert got == planned_rows and " merged" in plan, plan


def test_a_write_through_format_stitchlake_still_works(jvm: JvmSession, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = built(tmp_path)
    config = write_table_yaml(tmp_path, {**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "buckets": 2}})
    before = len(table.timeline().completed())
    jvm.run(
        "from pyspark.sql import Row\n"
        "frame = spark.createDataFrame([Row(k=500, p='even', amount=7, status='new', ots=1, op='I')])\n"
        f"frame.write.format('stitchlake').option('stream', 'orders').option('config', {str(config)!r})"
        f".mode('append').save({location(table)!r})\n"
    )
    assert len(table.timeline().completed()) == before + 1
    want = expected(table)
    assert {"k": 500, "amount": 7, "status": "new"}.items() <= next(r for r in want if r["k"] == 500).items()
    got, plan = through_jvm(jvm, table)  # a slice with a log now: merged, into batches
    assert got == want and " merged batches" in plan and count(jvm, table) == len(want)

    # A streaming write too (the JVM table hands it to the Python source's stream writer).
    landing = tmp_path / "landing"
    landing.mkdir()
    rows_in = {"k": [501, 502], "p": ["odd", "even"], "amount": [8, 9], "status": ["a", None], "ots": [1, 1]}
    pq.write_table(pa.table({**rows_in, "op": ["I", "I"]}), landing / "part.parquet")
    jvm.run(
        "source = spark.readStream.schema('k long, p string, amount long, status string, ots long, op string')"
        f".parquet({str(landing)!r})\n"
        f"query = source.writeStream.format('stitchlake').option('stream', 'orders').option('config', {str(config)!r})"
        f".option('checkpointLocation', {str(tmp_path / 'checkpoint')!r}).trigger(availableNow=True)"
        f".start({location(table)!r})\n"
        "query.awaitTermination()"
    )
    got, _ = through_jvm(jvm, table)
    assert got == expected(table) and {501, 502} <= {r["k"] for r in got}


def test_incremental_reads_are_merged_and_diffed_by_the_jvm_reader(jvm: JvmSession, tmp_path: Path) -> None:
    """Issue 35 point 2: `since`/`until` reads (with and without before-images) are read by the JVM reader, not
    handed to the Python source, and give the change rows of `stitchlake.read`: updates, deletes, an erase and a
    rescale inside the range (carried keys hashed again under the new bucket count), pruned columns."""
    table = built(tmp_path)
    first = table.timeline().completed()[-1].completed  # the compaction
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(20, 60), 11)))
    middle = table.timeline().completed()[-1].completed
    assert first is not None and middle is not None
    table.rescale(3)
    table.write(PAYMENTS.name, batch(PAYMENTS, events(PAYMENTS, range(0, 30), 12)))
    table.erase(pa.table({"k": pa.array([1, 2, 25, 59], pa.int64())}))
    ranges: list[dict[str, str]] = [
        {"since": first},
        {"since": first, "before_images": "true"},
        {"since": middle},
        {"until": middle},
    ]
    for options in ranges:
        got, plan = through_jvm(jvm, table, **options)
        read = table.read(
            since=options.get("since"), until=options.get("until"), before_images="before_images" in options
        )
        want = sorted(read.to_pylist(), key=lambda r: (r["k"], r["_op"]))
        assert sorted(got, key=lambda r: (r["k"], r["_op"])) == want, options
        assert len(want) > 10 and "changes since=" in plan and "Python" not in plan
    ops = {r["_op"] for r in through_jvm(jvm, table, since=first, before_images="true")[0]}
    assert ops == {"I", "-U", "+U", "D"}
    got, plan = through_jvm(jvm, table, select="k, _op", where="_op = 'D'", since=middle)
    assert got == sorted(({"k": r["k"], "_op": "D"} for r in want_deleted(table, middle)), key=lambda r: r["k"])
    assert "columns=[k, _op]" in plan
    assert "reading with the Python data source" not in jvm.stderr()


def want_deleted(table: Table, since: str) -> list[dict[str, Any]]:
    return [r for r in table.read(since=since).to_pylist() if r["_op"] == "D"]


@pytest.mark.s3
def test_a_table_on_s3_is_read_by_the_jvm_reader_through_s3a(
    s3_bucket: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Hadoop's S3 connector on the classpath (hadoop-aws of PySpark's Hadoop), a table on S3 is read by the
    JVM reader, its files through `s3a://` with the settings the planner hands over (the session has no `fs.s3a.*`
    but a credentials provider that reads keys from them only): log-free slices columnar, slices with logs merged;
    nothing is handed to the Python source."""
    from scripts import spark_envs

    jars = spark_envs.s3a_jars(spark_envs.pyspark_hadoop_version()).fetch()
    for name, value in s3_bucket.env.items():
        monkeypatch.setenv(name, value)
    document = copy.deepcopy(THREE_STREAMS)
    document["table"]["path"] = f"{s3_bucket.url}/wide"
    table = built(tmp_path, document=document)
    simple = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"  # fs.s3a.access.key and secret.key, nothing else
    only_given = {"spark.hadoop.fs.s3a.aws.credentials.provider": simple}
    with jvm_session(tmp_path / "s3-stderr.txt", jars, only_given) as s3a:
        got, plan = through_jvm(s3a, table)
        assert got == expected(table) and " columnar" in plan
        table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(30, 50), 7)))
        got, plan = through_jvm(s3a, table)
        assert got == expected(table) and " merged" in plan
        assert location(table).startswith("s3://") and "BatchScan stitchlake" in plan
        assert "reading with the Python data source" not in s3a.stderr()


#: A session with the reader switched off (its jar not on the classpath): what `format("stitchlake")` gives there.
WITHOUT_THE_JAR = """
import json, sys
from pyspark.sql import SparkSession
from stitchlake.spark.session import register
spark = register(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate())
frame = spark.read.format("stitchlake").load(sys.argv[1])
print(json.dumps({
    "python": "(Python)" in frame._jdf.queryExecution().executedPlan().toString(),
    "rows": sorted((r.asDict() for r in frame.collect()), key=lambda r: r["k"]),
    "alias": sorted(spark.read.format("stitchlake_python").load(sys.argv[1]).columns),
}, default=str))
"""


def test_without_the_jar_the_python_source_reads_with_a_one_line_notice(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    table = built(tmp_path)
    env = {**os.environ, "STITCHLAKE_JVM_READER": "0", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_JAR, location(table)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    notice = f"stitchlake: the JVM reader is not on the classpath ({reader_jar()}); reading with the Python data source"
    assert [line for line in done.stderr.splitlines() if line.startswith("stitchlake:")] == [notice]
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["python"]
    assert answer["rows"] == json.loads(json.dumps(expected(table), default=str))
    assert answer["alias"] == sorted(table.read().column_names)


def test_the_jvm_xxh3_is_pythons_for_every_length_to_300_and_large_inputs(tmp_path: Path) -> None:
    import subprocess

    import xxhash

    chance = random.Random(35)
    sizes = [*range(301), 1024, 4096, 65_537, 1_000_003]
    paths, want = [], []
    for size in sizes:
        data = chance.randbytes(size)
        path = tmp_path / str(size)
        path.write_bytes(data)
        paths.append(str(path))
        want.append(f"xxh3:{xxhash.xxh3_64_hexdigest(data)}")
    done = subprocess.run(
        ["java", "-cp", str(reader_jar()), "io.stitchlake.spark.io.Xxh3", *paths],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.split() == want


def test_avro_logs_are_read_and_merged_through_the_jvm(jvm: JvmSession, tmp_path: Path) -> None:
    document = copy.deepcopy(THREE_STREAMS)
    document["table"]["log_format"] = "avro"
    table = new_table(tmp_path, document, buckets=1)
    for number, model in enumerate((ORDERS, PAYMENTS, SHIPMENTS)):
        table.write(model.name, batch(model, events(model, range(number * 3, 30), number)))
    table.compact()
    table.write(PAYMENTS.name, batch(PAYMENTS, events(PAYMENTS, range(10, 40), 9)))
    assert any(Path(location(table)).rglob("*.avro"))
    got, plan = through_jvm(jvm, table)
    assert got == expected(table) and " merged" in plan


def test_a_catalog_table_using_stitchlake_is_read_by_the_jvm(jvm: JvmSession, tmp_path: Path) -> None:
    table = built(tmp_path)
    answer = jvm.run(
        f"spark.sql(\"CREATE TABLE jvm_orders USING stitchlake OPTIONS (path '{location(table)}')\")\n"
        "frame = spark.sql('SELECT k, amount, carrier FROM jvm_orders WHERE k < 20')\n"
        "result = {'rows': rows(frame), 'plan': plan_text(frame)}\n"
        "spark.sql('DROP TABLE jvm_orders')"
    )
    want = [{"k": r["k"], "amount": r["amount"], "carrier": r["carrier"]} for r in expected(table) if r["k"] < 20]
    assert sorted(answer["rows"], key=lambda r: r["k"]) == want
    assert "BatchScan stitchlake" in answer["plan"] and "columns=[k, amount, carrier]" in answer["plan"]
    # A catalog table of changes: the range kept with the table, read by the JVM reader too.
    since = table.timeline().completed()[0].completed
    answer = jvm.run(
        f"spark.sql(\"CREATE TABLE jvm_changes USING stitchlake OPTIONS (path '{location(table)}', "
        f"since '{since}')\")\n"
        "frame = spark.sql('SELECT k, _op, _streams FROM jvm_changes')\n"
        "result = {'rows': rows(frame), 'plan': plan_text(frame)}\n"
        "spark.sql('DROP TABLE jvm_changes')"
    )
    changes = table.read(since=since, columns=["k"]).select(["k", "_op", "_streams"]).to_pylist()
    assert sorted(answer["rows"], key=lambda r: r["k"]) == sorted(changes, key=lambda r: r["k"]) and changes
    assert f"changes since={since}" in answer["plan"]


def test_files_of_an_older_schema_read_widened_and_with_added_columns_defaulted(
    jvm: JvmSession, tmp_path: Path
) -> None:
    import pyarrow as pa

    def before(table: Table) -> None:
        table.write("a", pa.table({"k": [1, 2, 3], "v": pa.array([1, 2, None], pa.int32()), "s": ["x", "y", None]}))
        table.write("gone", pa.table({"k": [1, 4], "g": [5, 6]}))
        table.compact()

    table = evolved_table(tmp_path, before)
    got, plan = through_jvm(jvm, table)  # the base, written before the alter: log-free
    assert got == expected(table) and " columnar" in plan
    assert {r["k"] for r in got} == {1, 2, 3} and {str(r["when"]) for r in got} == {"2026-11-21"}
    table.write("a", pa.table({"k": [2, 5], "v": [2**40, 7], "s": ["z", None]}))
    got, plan = through_jvm(jvm, table)
    assert got == expected(table) and " merged" in plan and {r["k"] for r in got} == {1, 2, 3, 5}


def nested_table(tmp_path: Path) -> tuple[Table, str]:
    """A table whose shipments carry a struct column, compacted once and written after: its slices have logs. Also
    the compaction's time, for incremental reads over the writes after it."""
    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["shipments"]["columns"]["parcel"] = "struct<a:long,b:string>"
    table = new_table(tmp_path, document, buckets=2)
    parcel = pa.struct([("a", pa.int64()), ("b", pa.string())])

    def shipments(keys: range, seed: int) -> pa.Table:
        rows = events(SHIPMENTS, keys, seed)
        values = [None if r["k"] % 5 == 0 else {"a": r["k"] * seed, "b": f"box{r['k']}"} for r in rows]
        return batch(SHIPMENTS, rows).append_column("parcel", pa.array(values, parcel))

    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(0, 30), 1)))
    table.write(SHIPMENTS.name, shipments(range(0, 30), 2))
    table.compact()
    compacted = table.timeline().completed()[-1].completed
    assert compacted is not None
    table.write(SHIPMENTS.name, shipments(range(10, 40), 3))
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(20, 40), 4)))
    table.write(SHIPMENTS.name, shipments(range(35, 45), 5))
    return table, compacted


def by_key_and_op(row: dict[str, Any]) -> tuple[Any, str]:
    return row["k"], row["_op"]


def with_parcel_parts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"k": r["k"], "amount": r["amount"], "pa": (r["parcel"] or {}).get("a"), "pb": (r["parcel"] or {}).get("b")}
        for r in rows
    ]


def test_a_nested_column_is_merged_into_rows_and_flat_columns_into_batches(jvm: JvmSession, tmp_path: Path) -> None:
    """Merged slices reach Spark as batches of gathered columns when every column read is flat, and as rows when
    one is a struct, array or map (Spark's generated code reads no nested column of a batch here): both the same
    rows as `stitch read`."""
    table, _ = nested_table(tmp_path)
    want = expected(table)
    assert any(r["parcel"] is not None for r in want) and any(r["parcel"] is None for r in want)

    got, plan = through_jvm(jvm, table, select="k, amount, parcel.a AS pa, parcel.b AS pb")
    assert got == with_parcel_parts(want) and " merged rows" in plan
    got, plan = through_jvm(jvm, table, select="k, amount, carrier")
    assert got == [{"k": r["k"], "amount": r["amount"], "carrier": r["carrier"]} for r in want]
    assert " merged batches" in plan


def test_merged_rows_and_the_change_feed_are_merged_window_by_window_with_the_rows_of_the_python_merge(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """Where every file of a slice is in key order, rows (an output with a nested column) and the incremental
    reads' diff are merged window by window too, holding a batch of each file: in 5-row batches (several windows
    per file, each row's struct a view onto a window's vectors), the rows of `stitchlake.read`."""
    table, compacted = nested_table(tmp_path)
    want = expected(table)
    with batches_of(jvm, 5):
        before = windowed(jvm)
        got, plan = through_jvm(jvm, table, select="k, amount, parcel.a AS pa, parcel.b AS pb")
        assert got == with_parcel_parts(want) and " merged rows" in plan
        assert windowed(jvm) >= before + 2, "no slice of merged rows was merged by windows"
        for options in ({"since": compacted}, {"since": compacted, "before_images": "true"}):
            before = windowed(jvm)
            got, plan = through_jvm(jvm, table, select="k, _op, amount, parcel.a AS pa, parcel.b AS pb", **options)
            read = table.read(since=compacted, before_images="before_images" in options).to_pylist()
            changes = [{**part, "_op": row["_op"]} for part, row in zip(with_parcel_parts(read), read, strict=True)]
            assert sorted(got, key=by_key_and_op) == sorted(changes, key=by_key_and_op), options
            assert len(read) > 10 and "changes since=" in plan and "Python" not in plan
            assert windowed(jvm) >= before + 2, "no slice of the change feed was merged by windows"


def test_a_non_finite_default_reaches_the_jvm_reader_as_the_python_merge_fills_it(
    jvm: JvmSession, tmp_path: Path
) -> None:
    """A `double` column may default to nan or inf (the config takes them); the planner's answer is JSON, which
    has neither, and the planner died on it: every JVM read of the table failed. The defaults travel as text."""
    import math

    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["shipments"]["columns"]["weight"] = {"type": "double", "default": "nan"}
    document["streams"]["shipments"]["columns"]["height"] = {"type": "double", "default": "-inf"}
    table = new_table(tmp_path, document, buckets=2)
    table.write(ORDERS.name, batch(ORDERS, events(ORDERS, range(0, 10), 1)))
    shipped = batch(SHIPMENTS, events(SHIPMENTS, range(0, 4), 2))
    table.write(
        SHIPMENTS.name,
        shipped.append_column("weight", pa.array([1.5, None, 2.0, 3.0])).append_column(
            "height", pa.array([1.0, 2.0, None, 4.0])
        ),
    )

    def shown(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        def text(v: Any) -> Any:
            return repr(v) if isinstance(v, float) and not math.isfinite(v) else v

        return [(r["k"], text(r["weight"]), text(r["height"])) for r in rows]

    want = shown(expected(table))
    assert ("nan" in {w for _k, w, _h in want}) and ("-inf" in {h for _k, _w, h in want}), want
    got, _plan = through_jvm(jvm, table, select="k, weight, height")
    assert shown(got) == want


def test_one_field_of_a_struct_is_read_by_the_jvm_reader(jvm: JvmSession, tmp_path: Path) -> None:
    """`SELECT parcel.b`: Spark prunes the struct to the field read (nested schema pruning is on by default)."""
    table, _ = nested_table(tmp_path)
    want = with_parcel_parts(expected(table))
    got, _plan = through_jvm(jvm, table, select="k, parcel.b AS pb")
    assert got == [{"k": r["k"], "pb": r["pb"]} for r in want]


#: Conditions a generated read draws from: (Spark SQL, `stitch read --where`), on key, partition and stream columns.
CONDITIONS = [
    ("k >= {n}", "k>={n}"),
    ("k < {n}", "k<{n}"),
    ("k = {n}", "k={n}"),
    ("p = 'even'", "p=even"),
    ("amount >= {m}", "amount>={m}"),
    ("status = 'a'", "status=a"),
    ("note != 'b'", "note!=b"),
    ("paid < {m}", "paid<{m}"),
    ("carrier = 'none'", "carrier=none"),
]


def test_generated_tables_read_through_spark_with_pruned_columns_and_filters_match_stitch_read(
    jvm: JvmSession,
) -> None:
    """The path Spark itself takes, which the merge harness of test_jvm_conformance.py does not: `pruneColumns`,
    the filters Spark pushes (row groups skipped by key and partition statistics, stream conditions applied after
    the merge), log-free slices read natively (`LogFreeReader`, its all-false delete flags skipped, value columns'
    statistics used). Random histories (tests/integration/test_merge_property.py: deletes in every stream, ties,
    nulls: ignore, a commit-time stream, compactions, erases, rescales) with Parquet or Avro logs, compacted at the
    end or not, each read with a random column subset and random conditions, the last as of a random earlier
    instant: the rows `stitch read` returns with the same columns, `--where` and `--as-of`."""
    import shutil
    import tempfile

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.support.merge_steps import run_steps, steps

    names = ["p", *ORDERS.columns, *PAYMENTS.columns, *SHIPMENTS.columns]
    reads = st.tuples(
        st.lists(st.sampled_from(names), unique=True, max_size=4),
        # Each condition at most once: `--where k=1,k=2` means k in (1, 2) (filters.conditions), Spark's AND none.
        st.lists(
            st.tuples(st.sampled_from(CONDITIONS), st.integers(0, 7), st.integers(0, 3)),
            max_size=2,
            unique_by=lambda c: c[0],
        ),
    )

    examples = int(os.environ.get("SPARK_READ_EXAMPLES", "50"))

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        plan=steps(),
        log_format=st.sampled_from(["parquet", "avro"]),
        compact=st.booleans(),
        asked=st.lists(reads, min_size=3, max_size=3),
        travel=st.integers(0, 63),
    )
    def check(plan: list[tuple[str, Any]], log_format: str, compact: bool, asked: list[Any], travel: int) -> None:
        root = Path(tempfile.mkdtemp(prefix="stitch-jvm-read-"))
        try:
            table = run_steps(root, plan, log_format)
            if compact:
                table.compact()
            times = [i.completed for i in table.timeline().completed() if i.completed is not None]
            for number, (columns, conditions) in enumerate(asked):
                chosen = ["k", *(n for n in names if n in columns)]
                spark = " AND ".join(c[0].format(n=n, m=m) for c, n, m in conditions) or "true"
                local = [c[1].format(n=n, m=m) for c, n, m in conditions]
                # The last read is of an earlier state (time travel), chosen among every completed instant.
                travelled = {"as_of": times[travel % len(times)]} if number == 2 else {}
                want = expected(table, columns=chosen, filter=local or None, **travelled)
                got, _plan = through_jvm(jvm, table, select=", ".join(chosen), where=spark, **travelled)
                assert got == want, (chosen, spark, travelled)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    check()
