"""Spark engine, in one real in-process session: source formats, batch order, the data source, bad rows.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest:
tests/integration/test_spark_datasource.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_slices_are_packed_by_size_as_spark_packs_files() -> None:
    from stitchlake.spark.packing import Packing, parse_bytes

    weights = [60, 50, 40, 30, 5]
    assert Packing(max_bytes=100, open_cost=10, min_partitions=1).pack(weights) == [[0], [1, 2], [3, 4]]
    # Four cores: at most 185 / 4 = 46 per partition, so the small read still keeps four tasks busy.
    assert Packing(max_bytes=100, open_cost=10, min_partitions=4).pack(weights) == [[0], [1], [2], [3, 4]]
    assert Packing(max_bytes=1000, open_cost=10, min_partitions=1).pack(weights) == [[0, 1, 2, 3, 4]]
    assert Packing(max_bytes=1, open_cost=1, min_partitions=1).pack(weights) == [[0], [1], [2], [3], [4]]
    assert Packing().pack([]) == []
    assert [parse_bytes(t) for t in ("134217728", "128m", "128MB", "4 MiB", "1b", "2k")] == [
        134217728,
        134217728,
        134217728,
        4194304,
        1,
        2048,
    ]
    packing = Packing.of({"maxpartitionbytes": "64m"}, {"maxpartitionbytes": "1g", "opencostinbytes": "1m"})
    assert (packing.max_bytes, packing.open_cost) == (64 << 20, 1 << 20)


def test_a_null_in_a_pushed_in_list_matches_no_row_and_is_no_refusal(tmp_path: Path) -> None:
    """Spark pushes `p IN ('odd', NULL)` as it is written. The null went on to the table's filter, which refuses a
    null value ("a filter compares values, and null is none"): the query failed. In SQL `p = NULL` holds for no
    row, so the null is dropped: the read is pruned to the partitions of the other values."""
    from pyspark.sql.datasource import EqualTo, In

    from stitchlake.spark.datasource import StitchDataSource
    from stitchlake.spark.read import StitchReader
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path)
    orders = MODELS[0]
    table.write(orders.name, batch(orders, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in range(1, 9)]))
    source = StitchDataSource({"path": table.path})
    reader = source.reader(source.schema())
    assert isinstance(reader, StitchReader)
    on_key = In(("k",), (1, 3, None))
    handed_back = list(reader.pushFilters([In(("p",), ("odd", None)), on_key, EqualTo(("p",), "odd")]))
    assert handed_back == [on_key], "partition filters are applied exactly; Spark checks the keys' rows"
    rows = [row for part in reader.partitions() for chunk in reader.read(part) for row in chunk.to_pylist()]
    assert {row["p"] for row in rows} == {"odd"}
    assert {1, 3} <= {row["k"] for row in rows}


def test_pushed_partition_filters_that_leave_no_value_match_no_row(tmp_path: Path) -> None:
    """Spark pushes `p IN ('odd', 'x') AND p IN ('even', 'y')` as two filters (its optimizer folds equalities, not
    two IN lists). The partition filters are taken (Spark does not check them again) and leave no value, which
    pruned nothing: every row came back instead of none."""
    from pyspark.sql.datasource import In

    from stitchlake.spark.datasource import StitchDataSource
    from stitchlake.spark.read import StitchReader
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path)
    orders = MODELS[0]
    table.write(orders.name, batch(orders, [{"k": k, "amount": k, "status": "a", "ots": 1} for k in range(1, 9)]))
    source = StitchDataSource({"path": table.path})
    for options in ({}, {"since": "20000101000000000"}):
        read = StitchDataSource({"path": table.path, **options})
        reader = read.reader(read.schema())
        assert isinstance(reader, StitchReader)
        assert list(reader.pushFilters([In(("p",), ("odd", "x")), In(("p",), ("even", "y"))])) == []
        rows = [row for part in reader.partitions() for chunk in reader.read(part) for row in chunk.to_pylist()]
        assert rows == [], options
        kept = source.reader(source.schema())
        assert isinstance(kept, StitchReader)
        list(kept.pushFilters([In(("p",), ("odd", "x")), In(("p",), ("odd", "y"))]))
        found = [row for part in kept.partitions() for chunk in kept.read(part) for row in chunk.to_pylist()]
        assert {row["p"] for row in found} == {"odd"}


def test_a_write_task_keeps_its_instant_alive_while_spark_computes_its_rows(tmp_path: Path) -> None:
    """A `df.write` task beat once its rows were all there, and again after its files: while Spark computed them (a
    join, a read of many files) the claim had no beat, looked dead after heartbeat.expire_s, and the next clean took
    it back, so the write failed at its commit after all that work. The task beats all along (naming no process:
    its Python worker may exit while the job lives)."""
    import copy
    import json
    import time

    from stitchlake.concurrency import heartbeat
    from stitchlake.services.writes.ingest import claim
    from stitchlake.spark.write import write_task
    from tests.support.tables import MODELS, THREE_STREAMS, batch, new_table

    document = copy.deepcopy(THREE_STREAMS)
    document["concurrency"]["heartbeat"] = {"interval_s": 0.05, "expire_s": 5}
    table = new_table(tmp_path, document)
    orders = MODELS[0]
    instant = claim(table, "orders", heartbeat=False).time
    seen: list[float] = []

    def rows_spark_is_still_computing() -> Any:
        # The task's first beat, then two more while the rows are not there yet (bounded: no beat is a failure).
        deadline = time.monotonic() + 60
        while len(set(seen)) < 3 and time.monotonic() < deadline:
            record = heartbeat.read_beat(table.storage, instant)
            if record is not None:
                seen.append(float(record["ts"]))
            time.sleep(0.01)
        yield from batch(orders, [{"k": 1, "amount": 1, "status": "a", "ots": 1}]).to_batches()

    written = write_task(table, "orders", instant, rows_spark_is_still_computing())
    assert written.rows == 1 and len(set(seen)) >= 3, seen
    record = heartbeat.read_beat(table.storage, instant)
    assert record is not None and "boot" not in record, json.dumps(record)  # no process named: a worker may go
