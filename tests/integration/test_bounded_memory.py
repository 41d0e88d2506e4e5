"""Bounded memory (issue 27 point 2): reads, `stitch sql`, `stitch read --out`, compaction and erase hold a few file
slices at a time, never the whole table, and give exactly the rows the whole-table reads give.

Equality is checked against the reference model (tests/support/reference.py) and between the streamed and whole paths,
on a table of many slices (base-only, base + logs, logs-only), with filters, time travel and changes. Boundedness is
checked without timing: by the lifetimes of the results the scheduler hands on, by how many tasks the in-process
engine runs at once, and by the peak of Arrow's memory pool in a fresh process, streamed against whole.
"""

from __future__ import annotations

import copy
import gc
import json
import random
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from stitchlake.api import Table
from stitchlake.reading.scan import bounded
from tests.support.processes import run_stitch
from tests.support.reads import canonical_rows
from tests.support.reference import Event, expected_rows
from tests.support.tables import MODELS, THREE_STREAMS, as_rows, batch, new_table

MODEL = {m.name: m for m in MODELS}
KEYS = 400
ROOT = Path(__file__).resolve().parents[2]


def _events(rng: random.Random, stream: str, commit: int, count: int) -> list[Event]:
    model = MODEL[stream]
    out = []
    for pos in range(count):
        key = rng.randrange(1, KEYS)
        values: dict[str, Any] = {}
        for column in model.columns:
            if column in model.ordering:
                values[column] = rng.randrange(0, 50)
            elif column in ("status", "note", "carrier"):
                values[column] = rng.choice(["a", "b", None])
            else:
                values[column] = rng.choice([rng.randrange(0, 1000), None])
        out.append(Event(stream, (key,), values, rng.random() < 0.05, commit, pos))
    return out


@pytest.fixture(scope="module")
def many_slices(tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, list[Event], list[str]]:
    """16 file groups (2 partitions x 8 buckets) after writes, a compaction and more writes: slices that are a base
    file alone, a base with logs, and logs alone. Returns the table, its events (commit = order of completion) and
    the completion time of each commit."""
    table = new_table(tmp_path_factory.mktemp("bounded"), buckets=8)
    rng = random.Random(27)
    events: list[Event] = []
    completed: list[str] = []
    plan = ["orders", "payments", "shipments", "orders", "compact", "payments", "orders"]
    for step in plan:
        if step == "compact":
            assert table.compact().done is not None
            continue
        commit = len(completed) + 1
        new = _events(rng, step, commit, 300 if commit < 4 else 40)
        rows = [
            {"k": e.key[0], **e.values, "deleted": e.deleted}
            for e in sorted(new, key=lambda e: e.pos)  # positions are the rows' order
        ]
        result = table.write(step, batch(MODEL[step], rows))
        completed.append(str(result.completed))
        events += new
    slices = table.view(table.timeline()).latest_slices()
    assert len(slices) == 16
    assert {(s.base is not None, bool(s.logs)) for s in slices} >= {(True, True)}
    return table, events, completed


def _expected(events: list[Event], upto: int | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = expected_rows(MODELS, events, upto=upto)
    return {
        (key[0], "even" if key[0] % 2 == 0 else "odd"): {**row, "p": "even" if key[0] % 2 == 0 else "odd"}
        for key, row in rows.items()
    }


def test_a_scan_streams_the_rows_the_model_gives_one_slice_at_a_time(
    many_slices: tuple[Table, list[Event], list[str]],
) -> None:
    table, events, completed = many_slices
    scan = table.scan()
    batches = list(scan)
    assert len(batches) >= 16  # at least one batch per slice: no slice is glued to another
    streamed = pa.Table.from_batches(batches, scan.schema)
    assert as_rows(streamed) == _expected(events)
    assert canonical_rows(streamed) == canonical_rows(table.read())

    # Time travel, columns and filters stream the same rows the whole read returns.
    first = completed[1]
    reads: list[dict[str, Any]] = [
        {"as_of": first},
        {"columns": ["k", "p", "amount", "paid"]},
        {"filter": ["p=even", "amount>100"]},
        {"filter": {"k": [3, 5, 8]}},
        {"mode": "read_optimized"},
    ]
    for options in reads:
        assert canonical_rows(table.scan(**options).read_all()) == canonical_rows(table.read(**options)), options
    assert as_rows(table.scan(as_of=first).read_all()) == _expected(events, upto=2)

    # Changes stream one file group at a time, with the same rows as the whole incremental read.
    changes: list[dict[str, Any]] = [
        {"since": completed[1]},
        {"since": completed[0], "before_images": True},
        {"until": completed[2]},
    ]
    for options in changes:
        streamed_changes = table.scan(**options).read_all()
        assert streamed_changes.num_rows > 0
        assert canonical_rows(streamed_changes) == canonical_rows(table.read(**options)), options

    # A scan is planned once: every pass reads the same files, and each pass yields the same rows.
    assert canonical_rows(scan.read_all()) == canonical_rows(streamed)


def test_sql_and_read_out_stream_the_table_and_equal_the_whole_read(
    many_slices: tuple[Table, list[Event], list[str]], tmp_path: Path
) -> None:
    table, events, completed = many_slices
    whole = table.read()

    def duckdb_over(rows: pa.Table, query: str) -> pa.Table:
        with duckdb.connect() as connection:
            connection.register("t", rows)
            return connection.sql(query).to_arrow_table()

    for query in (
        "SELECT * FROM t",
        "SELECT count(*) AS n, sum(amount) AS amount, sum(paid) AS paid FROM t",
        "SELECT p, count(*) AS n, max(note) AS note FROM t GROUP BY p ORDER BY p",
        "SELECT a.k, b.carrier FROM t a JOIN t b USING (k) WHERE a.amount > 500 ORDER BY a.k",  # two scans of t
        "SELECT k FROM t WHERE amount = (SELECT max(amount) FROM t)",
    ):
        assert canonical_rows(table.sql(query)) == canonical_rows(duckdb_over(whole, query)), query
    at_first = table.sql("SELECT * FROM t", as_of=completed[1])
    assert as_rows(at_first) == _expected(events, upto=2)
    changes = table.sql("SELECT k, _op FROM t ORDER BY k, _op", since=completed[1])
    assert (
        changes.to_pylist()
        == duckdb_over(table.read(since=completed[1]), "SELECT k, _op FROM t ORDER BY k, _op").to_pylist()
    )

    # Table.to_duckdb: a view that streams the table each time a query scans it.
    connection = table.to_duckdb(filter="p=odd")
    odd = connection.sql(f"SELECT * FROM {table.config.table.name}").to_arrow_table()
    assert canonical_rows(odd) == canonical_rows(table.read(filter="p=odd"))
    assert connection.sql(f"SELECT count(*) FROM {table.config.table.name}").fetchall() == [(odd.num_rows,)]
    connection.close()

    # `stitch read --out` and `stitch sql --out` write batch by batch: the same rows as the whole read.
    config = tmp_path / "t.yaml"
    config.write_text(
        json.dumps({**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "path": table.path, "buckets": 8}}),
        encoding="utf-8",
    )
    for suffix in ("parquet", "csv", "json"):
        out = tmp_path / f"rows.{suffix}"
        done = run_stitch("read", "-c", str(config), "--out", str(out), "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["rows"] == whole.num_rows
        if suffix == "parquet":
            written = pq.read_table(out)
        elif suffix == "csv":
            written = pacsv.read_csv(
                out, convert_options=pacsv.ConvertOptions(column_types=whole.schema, strings_can_be_null=True)
            )
        else:
            written = pa.Table.from_pylist([json.loads(line) for line in out.read_text().splitlines()], whole.schema)
        assert canonical_rows(written) == canonical_rows(whole), suffix
    out = tmp_path / "even.parquet"
    done = run_stitch("sql", "-c", str(config), "SELECT * FROM t WHERE p = 'even'", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert canonical_rows(pq.read_table(out)) == canonical_rows(table.read(filter="p=even"))
    # Without --out: a sample, and the count of every row.
    done = run_stitch("read", "-c", str(config), "--limit", "5", "--json")
    report = json.loads(done.stdout)
    assert (report["rows"], report["shown"], len(report["records"])) == (whole.num_rows, 5, 5)


class Slice:
    """A stand-in merged slice whose lifetime the test can watch."""


def test_the_scheduler_keeps_at_most_the_slices_in_flight_and_the_one_handed_on_alive() -> None:
    alive: weakref.WeakSet[Slice] = weakref.WeakSet()
    most = 0
    lock = threading.Lock()

    def merge(item: int) -> Slice:
        nonlocal most
        made = Slice()
        with lock:
            gc.collect()
            alive.add(made)
            most = max(most, len(alive))
        return made

    items = list(range(40))
    order = []
    for item, result in bounded(merge, items, weight=lambda _i: 100, max_bytes=250, max_count=4):
        order.append(item)
        assert isinstance(result, Slice)
        del result
    assert order == items
    # 2 slices fit under 250 bytes in flight, plus the one the consumer holds: never the 40 a pool.map would keep.
    assert 1 <= most <= 3, most

    most = 0
    alive.clear()
    for _item, result in bounded(merge, items, weight=lambda _i: 10_000, max_bytes=250, max_count=4):
        del result  # heavier than the budget: one at a time, however many threads there are
    assert most <= 2, most


PEAK_SCRIPT = """
import json, sys
import pyarrow as pa
import stitchlake, stitchlake.reading.scan
stitchlake.reading.scan.READ_AHEAD_BYTES = 1  # one slice merged ahead of the consumer, as on a table of large slices
table = stitchlake.open(sys.argv[1])
how = sys.argv[2]
if how == "whole":
    rows = table.read().num_rows
elif how == "sql":
    rows = table.sql("SELECT count(*) AS n, sum(amount) AS a, max(note) AS b, min(carrier) AS c FROM t")["n"][0].as_py()
elif how == "duckdb":
    connection = table.to_duckdb()
    rows = connection.sql("SELECT count(*), sum(amount), max(note), min(carrier) FROM wide").fetchall()[0][0]
elif how == "out":  # `stitch read --out`, the command's own code in this process
    import pyarrow.parquet as pq
    from stitchlake.cli.app import run
    out = sys.argv[3]
    assert run(["read", "--table", sys.argv[1], "--out", out, "--json"]) == 0
    rows = pq.read_metadata(out).num_rows
else:
    rows = sum(batch.num_rows for batch in table.scan())
print(json.dumps({"rows": rows, "arrow_peak": pa.default_memory_pool().max_memory()}))
"""


def test_a_streamed_read_peaks_at_a_few_slices_where_the_whole_read_holds_the_table(tmp_path: Path) -> None:
    """Arrow's own allocation peak in a fresh process: the streamed paths (`Table.scan`, `Table.sql`,
    `Table.to_duckdb`, `stitch read --out`) stay near a few of the 64 slices, the whole read holds all of them (it
    is the caller's choice)."""
    table = new_table(tmp_path, buckets=32)
    rng = random.Random(5)
    keys = list(range(1, 40_001))
    for stream in ("orders", "payments", "shipments"):
        model = MODEL[stream]
        rows = []
        for key in keys:
            row: dict[str, Any] = {"k": key}
            for column in model.columns:
                row[column] = rng.randrange(0, 10**9) if column not in ("status", "note", "carrier") else f"v{key}"
            rows.append(row)
        table.write(stream, batch(model, rows))

    def peak(how: str) -> dict[str, int]:
        done = subprocess.run(
            [sys.executable, "-c", PEAK_SCRIPT, table.path, how, str(tmp_path / f"{how}.parquet")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    whole, streamed, sql = peak("whole"), peak("scan"), peak("sql")
    duck, out = peak("duckdb"), peak("out")
    assert whole["rows"] == streamed["rows"] == sql["rows"] == duck["rows"] == out["rows"] == len(keys)
    # 64 slices: the whole read holds all of them, a stream one being merged and one handed on.
    assert streamed["arrow_peak"] * 4 < whole["arrow_peak"], (streamed, whole)
    assert sql["arrow_peak"] * 4 < whole["arrow_peak"], (sql, whole)
    # Table.to_duckdb streams the table into each query; `stitch read --out` writes it batch by batch.
    assert duck["arrow_peak"] * 4 < whole["arrow_peak"], (duck, whole)
    assert out["arrow_peak"] * 4 < whole["arrow_peak"], (out, whole)


def _halving(base_bytes: int, limit: int = 1024 * 1024) -> int:
    """How many times more file groups bring a base file of `base_bytes` under half of `limit`."""
    return -(-2 * base_bytes // limit)


def test_status_warns_about_file_groups_larger_than_compaction_max_file_group_mb(tmp_path: Path) -> None:
    """Point 3: a file group whose latest slice is over the limit is named, with the remedy that fits: compacting
    when logs piled up, more buckets when the base file alone is over it: from each partition's own count (a
    partition rescaled on its own differs from the table's), naming the partitions when not all of them need it."""
    import numpy as np

    from stitchlake.config import parse_config
    from stitchlake.services.inspect.status import status

    document = copy.deepcopy(THREE_STREAMS)
    document["table"].update(buckets=1, path=str(tmp_path / "table"))
    document["compaction"] = {"max_file_group_mb": 1}
    table = Table(parse_config(document, file=str(tmp_path / "t.yaml"), base=tmp_path))
    table.init()
    rows = 200_000
    generator = np.random.default_rng(3)
    orders = pa.table(
        {
            "k": pa.array(np.arange(rows, dtype=np.int64) * 2),
            "p": pa.array(["even"] * rows),
            "op": pa.array(["I"] * rows),
            "amount": pa.array(generator.integers(0, 2**62, rows)),
            "status": pa.array(["s"] * rows),
            "ots": pa.array(generator.integers(0, 2**62, rows)),
        }
    )
    table.write("orders", orders)
    report = status(table)
    [group] = report.large_file_groups
    assert (group.partition, group.file_group, group.base_bytes, group.log_files) == (
        "p=even",
        "00000",
        0,
        1,
    )
    assert group.bytes > 1024 * 1024 and report.totals.largest_file_group_bytes == group.bytes
    [warning] = report.warnings
    assert "compaction.max_file_group_mb (1 MiB)" in warning and "p=even/00000" in warning
    assert "run `stitch compact`" in warning and "rescale" not in warning

    table.compact()  # the base file alone is still over 1 MiB: only more buckets help
    report = status(table)
    [group] = report.large_file_groups
    assert group.base_bytes == group.bytes > 2 * 1024 * 1024 and group.log_files == 0
    [warning] = report.warnings
    assert "Sizing file groups" in warning and "(p=even: 1)" in warning
    # Every partition needs it and has one count: the whole table, to the count that halves the largest base file.
    assert f"(`stitch rescale --buckets {_halving(group.base_bytes)}`;" in warning

    config = tmp_path / "t.yaml"
    config.write_text(json.dumps(document), encoding="utf-8")
    shown = run_stitch("status", "-c", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "large file groups" in shown.stdout and "warning:" in shown.stdout
    assert "max_file_group_mb" in " ".join(shown.stdout.split())

    # A small partition beside it: only p=even needs more buckets, and the command names it.
    odd = orders.slice(0, 10).set_column(0, "k", pa.array(range(1, 20, 2), pa.int64()))
    table.write("orders", odd.set_column(1, "p", pa.array(["odd"] * 10)))
    [warning] = status(table).warnings
    assert f"(`stitch rescale --buckets {_halving(group.base_bytes)} --partition p=even`;" in warning

    # p=even rescaled on its own to 2 buckets, each base file still over the limit: the remedy starts from the
    # partition's 2 (a multiple of it, each old file group split whole), not from the table's count of 1.
    assert table.rescale(2, partitions=["p=even"]).done is not None
    report = status(table)
    assert report.partitions["p=even"].buckets == 2 and report.partitions["p=odd"].buckets == 1
    assert report.timeline.buckets == 1
    largest_base = max(g.base_bytes for g in report.large_file_groups)
    assert len(report.large_file_groups) == 2 and largest_base > 1024 * 1024
    wanted = 2 * _halving(largest_base)
    [warning] = report.warnings
    assert "(p=even: 2)" in warning
    assert f"(`stitch rescale --buckets {wanted} --partition p=even`;" in warning, warning
    assert f"--buckets {_halving(largest_base)}`" not in warning  # what the table-wide count of 1 gives

    document["compaction"] = {"max_file_group_mb": 64}
    roomy = Table(parse_config(document, file=str(config), base=tmp_path))
    report = status(roomy)
    assert report.large_file_groups == [] and report.warnings == []
