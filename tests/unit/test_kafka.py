"""Streams fed from Kafka topics (issue 29): exactly-once ingest by offsets recorded in the table's commits.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_kafka.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scripts import kafka_broker as broker


def test_a_drawn_cluster_id_is_never_read_as_an_option() -> None:
    """One id in 64 would start with `-`, which kafka-storage reads as an option (a broker that never starts)."""
    drawn = [broker.cluster_id() for _ in range(2000)]
    assert not [d for d in drawn if d.startswith("-")]
    assert all(len(d) == 22 for d in drawn) and len(set(drawn)) == len(drawn)


def test_the_topic_check_before_a_commit_asks_again_after_a_blip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that the topic is still the one planned runs once, after the whole ingest was written: a broker
    that fails to answer once must not throw that work away; one that never answers fails it; another id refuses
    it (exit 5). What the broker answers is given here (tests/integration/test_kafka_topics.py asks a real one)."""
    from stitchlake.config.sources import SourceSpec
    from stitchlake.errors import InputRejected, StitchError
    from stitchlake.io import kafka
    from stitchlake.timeline.metadata import OffsetRange

    source = SourceSpec.model_validate({"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:1"})
    answers: list[Any] = []

    def describe(_admin: Any, _source: Any, _timeout: Any = None) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(kafka, "_describe", describe)
    monkeypatch.setattr("stitchlake.io.kafka.time.sleep", lambda _seconds: None)
    read = [OffsetRange("t", 0, 0, 5, "ID")]
    answers[:] = [StitchError("blip"), ("ID", [0])]
    kafka.same_topic(source, read)
    assert answers == [], "asked again after the blip"
    answers[:] = [StitchError("down")] * kafka.SAME_TOPIC_ATTEMPTS
    with pytest.raises(StitchError, match="down"):
        kafka.same_topic(source, read)
    answers[:] = [("OTHER", [0])]
    with pytest.raises(InputRejected, match="topic id ID when planned, OTHER"):
        kafka.same_topic(source, read)


def test_a_kafka_micro_batch_planned_again_keeps_its_records_per_trigger_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `stitch stream` micro-batch of a topic names where each partition's range ends, and plans where it starts
    from the table's offsets when it runs. A rollback of the batch before it (or a restore) rewinds those offsets
    in between: the batch then read from the rewound offset to its end, past `records_per_trigger` (twice the cap
    here). It keeps the cap. The broker is stood in for by what it holds (tests/integration/test_kafka.py has
    the real one)."""
    import copy
    import json

    from stitchlake.engine import LocalEngine
    from stitchlake.io import kafka
    from stitchlake.spark.streaming import ingest_kafka_batch
    from stitchlake.timeline.metadata import StreamBatch
    from tests.support.tables import THREE_STREAMS, new_table

    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["orders"]["source"] = {"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:1"}
    table = new_table(tmp_path, document)
    held = 30  # partition 0 holds offsets 0..29, a topic without ids (a broker before 2.8)

    def value(offset: int) -> bytes:
        return json.dumps({"k": offset, "p": "even", "amount": offset, "status": "new", "ots": 1}).encode()

    monkeypatch.setattr(kafka, "topic_state", lambda _source: kafka.TopicState(None, {0: (0, held)}))
    monkeypatch.setattr(
        kafka, "read_range", lambda _source, chunk: [(o, value(o)) for o in range(chunk.start, chunk.end)]
    )

    def run(batch_id: int, end: int) -> Any:
        return ingest_kafka_batch(table, LocalEngine(), "orders", [{"0": end}], 10, lambda: StreamBatch("q", batch_id))

    first = run(1, 10)
    assert first is not None and first.records == 10
    # The query planned batch 2 up to offset 20; before it ran, batch 1 was rolled back (its offsets with it).
    table.rollback(first.instant)
    second = run(2, 20)
    assert second is not None and second.offsets == ["t/0:0-10"], second.offsets
    assert second.records == 10 and table.read().num_rows == 10


def test_nested_kafka_values_are_typed_record_by_record_and_a_misfit_is_one_bad_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic's JSON values were decoded into columns with no type: an object for a map column became a struct
    that no cast turns into a map, and one misshapen nested value turned its whole column into text. Either way the
    ingest was refused whole on every run, under `bad_rows: quarantine` too, and the partition never moved on. Each
    nested column is now built as its table type, and a record whose value does not fit is one bad row."""
    import json

    from stitchlake.engine import LocalEngine
    from stitchlake.io import kafka
    from stitchlake.services.writes.ingest import ingest
    from tests.support.tables import CONCURRENCY, new_table

    document = {
        "table": {"name": "nested", "path": "table", "key": {"k": "long"}, "buckets": 1},
        "streams": {
            "s": {
                "columns": {
                    "m": "map<string,long>",
                    "pt": "struct<x:long,y:string>",
                    "tags": "array<string>",
                    "when": "struct<at:timestamp,amt:decimal(10,2),d:date,n:array<int>>",
                },
                "source": {"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:1"},
            }
        },
        "bad_rows": "quarantine",
        "concurrency": CONCURRENCY,
    }
    table = new_table(tmp_path, document)
    when = {"at": "2024-01-01T00:00:00Z", "amt": 1.5, "d": "2024-01-02", "n": [1, 2]}  # JSON's own encodings
    values = [
        {"k": 1, "m": {"a": 1}, "pt": {"x": 1, "y": "one"}, "tags": ["t1"], "when": when},
        {"k": 2, "m": {"b": 2, "c": 3}, "pt": {"x": 2}, "tags": [], "when": None},
        {"k": 3, "m": {"a": 4}, "pt": {"x": "oops"}, "tags": ["t3"]},  # x is no long: this record is bad
        {"k": 4, "m": None, "pt": None, "tags": "not a list"},  # tags is no array: bad too
        {"k": 5, "when": {**when, "n": [1.5]}},  # 1.5 is no int: bad, never taken as 1
        {"k": 6, "m": {"a": 2.5}},  # nor is it a long in a map
    ]
    records = [(offset, json.dumps(value).encode()) for offset, value in enumerate(values)]
    monkeypatch.setattr(kafka, "topic_state", lambda _source: kafka.TopicState(None, {0: (0, len(records))}))
    monkeypatch.setattr(kafka, "read_range", lambda _source, chunk: records[chunk.start : chunk.end])

    done = ingest(table, LocalEngine(), "s")
    assert (done.rows, done.bad_rows) == (2, 4)
    rows = sorted(table.read().to_pylist(), key=lambda r: r["k"])
    assert [(r["k"], r["m"], r["pt"], r["tags"]) for r in rows] == [
        (1, [("a", 1)], {"x": 1, "y": "one"}, ["t1"]),
        (2, [("b", 2), ("c", 3)], {"x": 2, "y": None}, []),
    ]
    got = rows[0]["when"]
    assert (str(got["at"]), str(got["amt"]), str(got["d"]), got["n"]) == (
        "2024-01-01 00:00:00+00:00",
        "1.50",
        "2024-01-02",
        [1, 2],
    )
    assert rows[1]["when"] is None
    assert ingest(table, LocalEngine(), "s").records == 0, "the partition moved past the bad records"


@pytest.mark.parametrize("value_format", ["json", "avro"])
def test_a_kafka_decimal_column_keeps_every_digit_or_is_a_bad_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value_format: str
) -> None:
    """JSON numbers were read as floats and then rounded into a decimal column (1.234 in decimal(10,2) became 1.23,
    silently), and Avro's exact decimals were made floats on the way. Both are exact now: a digit past the scale is
    a bad row, as in a JSON lines file, and Avro's decimals keep every digit. A JSON number past any double (1e400)
    was stored as infinity in a double column: a bad row now, at the top level and nested."""
    import decimal
    import io
    import json

    import fastavro

    from stitchlake.engine import LocalEngine
    from stitchlake.io import kafka
    from stitchlake.services.writes.ingest import ingest
    from tests.support.tables import CONCURRENCY, new_table

    money = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}
    fields = [{"name": "k", "type": "long"}, {"name": "amt", "type": money}]
    fields += [{"name": "rate", "type": "double"}, {"name": "rates", "type": {"type": "array", "items": "double"}}]
    schema = {"type": "record", "name": "e", "fields": fields}
    source: dict[str, Any] = {"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:1"}
    if value_format == "avro":
        source |= {"value_format": "avro", "avro_schema": json.dumps(schema)}
    document = {
        "table": {"name": "money", "path": "table", "key": {"k": "long"}, "buckets": 1},
        "streams": {
            "s": {"columns": {"amt": "decimal(20,2)", "rate": "double", "rates": "array<double>"}, "source": source}
        },
        "bad_rows": "quarantine",
        "concurrency": CONCURRENCY,
    }
    table = new_table(tmp_path, document)
    amounts = [decimal.Decimal("12345678901234567.89"), decimal.Decimal("1.20"), decimal.Decimal("1.234")]

    def encode(key: int, amount: decimal.Decimal) -> bytes:
        if value_format == "json":
            rate = "1e400" if key == 3 else "0.5"
            rates = "[0.5, 1e400]" if key == 4 else "[0.5]"
            return f'{{"k": {key}, "amt": {amount}, "rate": {rate}, "rates": {rates}}}'.encode()
        out = io.BytesIO()
        cents = amount.quantize(decimal.Decimal("0.01"))
        row = {"k": key, "amt": cents, "rate": 0.5, "rates": [0.5]}
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), row)
        return out.getvalue()

    if value_format == "json":
        amounts += [decimal.Decimal("1.20")] * 2  # 1e400 at the top level, then nested
    records = [(offset, encode(offset, amount)) for offset, amount in enumerate(amounts)]
    monkeypatch.setattr(kafka, "topic_state", lambda _source: kafka.TopicState(None, {0: (0, len(records))}))
    monkeypatch.setattr(kafka, "read_range", lambda _source, chunk: records[chunk.start : chunk.end])
    done = ingest(table, LocalEngine(), "s")
    got = {r["k"]: str(r["amt"]) for r in table.read().to_pylist()}
    if value_format == "json":
        assert (done.rows, done.bad_rows) == (2, 3) and got == {0: "12345678901234567.89", 1: "1.20"}
    else:  # Avro's schema holds two digits: 1.234 was written as 1.23
        assert done.rows == 3 and got == {0: "12345678901234567.89", 1: "1.20", 2: "1.23"}


@pytest.mark.parametrize("start", ["earliest", "latest"])
def test_an_archive_keeps_where_a_dropped_stream_stopped_for_a_restore_that_brings_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """An archive's checkpoint kept the offsets and landing files of the config's streams only. A stream dropped by
    an alter lost them once its commits left the active timeline; a restore to a savepoint from before the drop
    brought the stream back reading its topic again from the start (`earliest`: every record twice) or from its end
    (`latest`: the records meanwhile skipped), and every landing file again. It goes on where it stopped."""
    import copy
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from stitchlake.api import open as open_table
    from stitchlake.io import kafka
    from stitchlake.services.upkeep.alter import alter
    from tests.support.tables import THREE_STREAMS, landing_stream, new_table_file, write_table_yaml

    doc = copy.deepcopy(THREE_STREAMS)
    source = {"format": "kafka", "topic": "t", "bootstrap_servers": "127.0.0.1:1", "starting_offsets": start}
    doc["streams"]["orders"]["source"] = source
    doc["streams"]["shipments"] = landing_stream("shipments", "parquet", {"carrier": "string", "ship_no": "long"})
    landing = tmp_path / "landing" / "shipments"
    landing.mkdir(parents=True)
    pq.write_table(
        pa.table({"k": [1, 2], "p": ["a", "b"], "carrier": ["x", "y"], "ship_no": [1, 2]}), landing / "1.parquet"
    )
    held = {"end": 30}

    def value(offset: int) -> bytes:
        return json.dumps({"k": offset, "p": "even", "amount": offset, "status": "new", "ots": 1}).encode()

    monkeypatch.setattr(kafka, "topic_state", lambda _source: kafka.TopicState("ID", {0: (0, held["end"])}))
    monkeypatch.setattr(kafka, "read_range", lambda _source, c: [(o, value(o)) for o in range(c.start, c.end)])
    monkeypatch.setattr(kafka, "same_topic", lambda *_a, **_k: None)
    payment = pa.Table.from_pylist([{"k": 1, "p": "a", "paid": 1, "note": "n", "pts": 1}])
    table, config = new_table_file(tmp_path, doc)
    assert table.ingest("shipments").result.rows == 2
    assert table.ingest("orders").result.offsets == ["t/0:0-30" if start == "earliest" else "t/0:30-30"]
    held["end"] = 40
    assert table.ingest("orders").result.offsets == ["t/0:30-40"]
    table.write("payments", payment)
    table.write("payments", payment)  # the data commit the savepoint pins: no archive goes past it
    table.savepoint(name="before-the-drop")
    dropped = copy.deepcopy(doc)
    del dropped["streams"]["orders"], dropped["streams"]["shipments"]
    alter(open_table(write_table_yaml(tmp_path, dropped)))
    narrowed = open_table(config)
    narrowed.write("payments", payment)
    assert narrowed.archive(keep=5).result.archived == 3, "the streams' commits left the active timeline"
    assert narrowed.archive(keep=0).result.archived == 1, "a second checkpoint, which has them from the first"
    narrowed.restore("before-the-drop")
    table = open_table(write_table_yaml(tmp_path, doc))
    held["end"] = 50
    assert table.ingest("shipments").result.rows == 0, "its landing file was taken before the drop"
    assert table.ingest("orders").result.offsets == ["t/0:40-50"], "on from where the stream stopped"
