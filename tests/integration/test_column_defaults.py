"""A column `stitch alter` adds with a default (issue 24): the same input reads the same whenever it arrived.

The rule, after Iceberg's `initial-default` / `write-default` split:

- rows written before a column existed read the default it was added with (fixed: a later change of the default
  does not reach back);
- an input without the column that arrives after it was added (producers cannot switch at the moment of the alter)
  is accepted, and its events carry the column's current default (null without one);
- a stream that never wrote a key reads the current default, as for every column.

So an old-shaped event reads the same whether it was ingested before the alter or after it.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stitchlake
from scripts import kafka_broker as broker
from tests.support.processes import run_stitch
from tests.support.spark_fixtures import SPARK_CONF
from tests.support.tables import landing_stream, write_table_yaml

DOCUMENT: dict[str, Any] = {
    "table": {"name": "rides", "path": "table", "key": {"ride_id": "long"}, "buckets": 2},
    "streams": {
        "trips": landing_stream("trips", "parquet", {"fare": "double", "trip_ts": "long"}, "trip_ts"),
        "ratings": landing_stream("ratings", "json", {"stars": "int", "rating_ts": "long"}, "rating_ts", "ignore"),
    },
}


def stitch_ok(*args: str) -> dict[str, Any]:
    done = run_stitch(*args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def land_trips(root: Path, name: str, keys: list[int], with_tip: float | None = None) -> None:
    folder = root / "landing" / "trips"
    folder.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"ride_id": keys, "fare": [10.0 + k for k in keys], "trip_ts": [1] * len(keys)}
    if with_tip is not None:
        data["tip"] = [with_tip] * len(keys)
    pq.write_table(pa.table(data), folder / name)


def land_ratings(root: Path, name: str, rows: list[dict[str, Any]]) -> None:
    folder = root / "landing" / "ratings"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def altered(document: dict[str, Any], tip_default: float | None, city_default: str | None) -> dict[str, Any]:
    """`trips` gains `tip` and `ratings` gains `city`, each with the given default (None: no default)."""
    out = copy.deepcopy(document)
    out["streams"]["trips"]["columns"]["tip"] = {"type": "double", **({"default": tip_default} if tip_default else {})}
    city: dict[str, Any] = {"type": "string", **({"default": city_default} if city_default else {})}
    out["streams"]["ratings"]["columns"]["city"] = city
    return out


def rows(config: Path) -> dict[int, dict[str, Any]]:
    return {r["ride_id"]: r for r in stitchlake.open(str(config)).read().to_pylist()}


def build(root: Path, alter_first: bool) -> Path:
    """Land old-shaped files (no `tip`, no `city`) and alter the table, in either order."""
    config = write_table_yaml(root, DOCUMENT)
    stitch_ok("init", "-c", str(config))
    land_trips(root, "t-1.parquet", [1, 2])
    land_ratings(
        root, "r-1.json", [{"ride_id": 1, "stars": 5, "rating_ts": 1}, {"ride_id": 3, "stars": 4, "rating_ts": 1}]
    )

    def ingest(at: Path) -> None:
        for stream in ("trips", "ratings"):
            stitch_ok("ingest", "-c", str(at), "--stream", stream, "--engine", "local")

    if alter_first:
        config = write_table_yaml(root, altered(DOCUMENT, 1.5, "Lyon"))
        stitch_ok("alter", "-c", str(config))
        ingest(config)  # old-shaped files after the alter: accepted, carrying the defaults
    else:
        ingest(config)
        config = write_table_yaml(root, altered(DOCUMENT, 1.5, "Lyon"))
        stitch_ok("alter", "-c", str(config))
    return config


def test_the_same_old_shaped_input_reads_the_same_before_or_after_the_alter(tmp_path: Path) -> None:
    before = build(tmp_path / "ingested-before", alter_first=False)
    after = build(tmp_path / "ingested-after", alter_first=True)
    assert rows(before) == rows(after)
    got = rows(before)
    assert got[1]["tip"] == 1.5 and got[2]["tip"] == 1.5, "written before tip existed: its default"
    assert got[1]["city"] == "Lyon" and got[3]["city"] == "Lyon"
    assert got[3]["tip"] == 1.5, "trips never wrote ride 3: the current default"
    assert got[2]["city"] == "Lyon" and got[2]["stars"] is None, "ratings never wrote ride 2: the current default"
    for config in (before, after):  # compaction keeps what reads showed
        stitch_ok("compact", "-c", str(config), "--engine", "local")
        assert rows(config) == got


def test_under_nulls_ignore_an_absent_added_field_is_the_default_and_a_null_leaves_it_alone(tmp_path: Path) -> None:
    """`ratings` is `nulls: ignore`: a value written after the alter, then a newer old-shaped event, reads the
    default whether that event arrived before the alter (its row reads the initial default) or after it (it
    carries the write default); a newer event that writes null leaves the column alone."""
    newer_old_shaped = {"ride_id": 1, "stars": 4, "rating_ts": 2}

    def build_order(root: Path, old_first: bool) -> Path:
        config = write_table_yaml(root, DOCUMENT)
        stitch_ok("init", "-c", str(config))
        if old_first:  # the old-shaped event is ingested before the alter
            land_ratings(root, "old.json", [newer_old_shaped])
            stitch_ok("ingest", "-c", str(config), "--stream", "ratings", "--engine", "local")
        config = write_table_yaml(root, altered(DOCUMENT, None, "Lyon"))
        stitch_ok("alter", "-c", str(config))
        paris = {"ride_id": 1, "stars": 5, "rating_ts": 1, "city": "Paris"}
        # After the alter: in the same file as a record that has the field.
        land_ratings(root, "paris.json", [paris] if old_first else [paris, newer_old_shaped])
        stitch_ok("ingest", "-c", str(config), "--stream", "ratings", "--engine", "local")
        return config

    before = build_order(tmp_path / "before", old_first=True)
    after = build_order(tmp_path / "after", old_first=False)
    assert rows(before)[1]["city"] == rows(after)[1]["city"] == "Lyon"
    assert rows(before)[1]["stars"] == rows(after)[1]["stars"] == 4
    for config in (before, after):
        land_ratings(config.parent, "null.json", [{"ride_id": 1, "rating_ts": 3, "city": None, "stars": None}])
        stitch_ok("ingest", "-c", str(config), "--stream", "ratings", "--engine", "local")
        assert rows(config)[1]["city"] == "Lyon" and rows(config)[1]["stars"] == 4, "null: left alone"


def test_a_changed_default_reaches_forward_never_back(tmp_path: Path) -> None:
    for alter_first in (False, True):
        root = tmp_path / f"alter-first-{alter_first}"
        config = build(root, alter_first)
        config = write_table_yaml(root, altered(DOCUMENT, 2.5, "Paris"))
        stitch_ok("alter", "-c", str(config))
        land_trips(root, "t-2.parquet", [4])  # still old-shaped, after the default changed
        land_trips(root, "t-3.parquet", [5], with_tip=9.0)  # a producer that switched
        stitch_ok("ingest", "-c", str(config), "--stream", "trips", "--engine", "local")
        got = rows(config)
        assert got[1]["tip"] == 1.5, "ingested before the change: the default then, whichever way it arrived"
        assert got[4]["tip"] == 2.5, "old-shaped, ingested after the change: the current default"
        assert got[5]["tip"] == 9.0
        assert got[3]["tip"] == 2.5, "never written by trips: the current default"
        assert got[1]["city"] == "Lyon" and got[2]["city"] == "Paris"


def test_without_a_default_missing_reads_null_and_original_columns_stay_required(tmp_path: Path) -> None:
    config = write_table_yaml(tmp_path, DOCUMENT)
    stitch_ok("init", "-c", str(config))
    land_trips(tmp_path, "t-1.parquet", [1])
    stitch_ok("ingest", "-c", str(config), "--stream", "trips", "--engine", "local")
    config = write_table_yaml(tmp_path, altered(DOCUMENT, None, None))
    stitch_ok("alter", "-c", str(config))
    land_trips(tmp_path, "t-2.parquet", [2])
    stitch_ok("ingest", "-c", str(config), "--stream", "trips", "--engine", "local")
    assert rows(config)[1]["tip"] is None and rows(config)[2]["tip"] is None
    # A column the stream had from the start is still required: its absence is a producer's bug.
    folder = tmp_path / "landing" / "trips"
    pq.write_table(pa.table({"ride_id": [3], "trip_ts": [1]}), folder / "t-3.parquet")
    done = run_stitch("ingest", "-c", str(config), "--stream", "trips", "--engine", "local")
    assert done.returncode == 5 and "missing column fare" in done.stderr, done.stderr


def test_table_write_accepts_inputs_without_an_added_column(tmp_path: Path) -> None:
    config = write_table_yaml(tmp_path, DOCUMENT)
    stitch_ok("init", "-c", str(config))
    config = write_table_yaml(tmp_path, altered(DOCUMENT, 1.5, None))
    stitch_ok("alter", "-c", str(config))
    table = stitchlake.open(str(config))
    table.write("trips", pa.table({"ride_id": [7], "fare": [1.0], "trip_ts": [1]}))
    assert rows(config)[7]["tip"] == 1.5


#: Ratings after `city` was added with the default Lyon: a bad row first (quarantined: the rows after it must keep
#: their own defaults), old-shaped, new-shaped, an explicit null, and a line without an original field, in one input.
MIXED: list[dict[str, Any]] = [
    {"ride_id": 9, "stars": 1, "rating_ts": "soon", "city": "Bad"},
    {"ride_id": 2, "stars": 4, "rating_ts": 1},
    {"ride_id": 4, "stars": 3, "rating_ts": 1, "city": "Paris"},
    {"ride_id": 5, "stars": 2, "rating_ts": 1, "city": None},
    {"ride_id": 6, "rating_ts": 1, "city": "Nice"},
]


def mixed_after_alter(root: Path, engine: str) -> dict[int, dict[str, Any]]:
    """`ratings` (nulls overwrite) gains `city` with a default, then old-shaped and new-shaped lines arrive in the
    same JSON file, beside a file of old-shaped lines only."""
    document = copy.deepcopy(DOCUMENT)
    document["streams"]["ratings"].pop("nulls")
    document["bad_rows"] = "quarantine"
    document["spark"] = {"master": "local[1]", "conf": dict(SPARK_CONF)}
    config = write_table_yaml(root, document)
    stitch_ok("init", "-c", str(config))
    config = write_table_yaml(root, altered(document, None, "Lyon"))
    stitch_ok("alter", "-c", str(config))
    land_ratings(root, "a.json", [{"ride_id": 1, "stars": 5, "rating_ts": 1}])
    land_ratings(root, "b.json", MIXED)
    done = run_stitch("ingest", "-c", str(config), "--stream", "ratings", "--engine", engine, "--json", timeout=900)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine"] == engine
    return rows(config)


def assert_defaults_per_record(got: dict[int, dict[str, Any]]) -> None:
    assert got[1]["city"] == "Lyon", "an old-shaped line alone in its file: the default"
    assert got[2]["city"] == "Lyon", "an old-shaped line beside new-shaped ones: the default, record by record"
    assert got[4]["city"] == "Paris"
    assert got[5]["city"] is None, "a line that says null keeps null"
    assert got[6]["city"] == "Nice" and got[6]["stars"] is None, "a missing original field still reads null"
    assert 9 not in got, "the bad row was quarantined"


def test_an_added_column_defaults_record_by_record_in_a_mixed_json_file(tmp_path: Path) -> None:
    assert_defaults_per_record(mixed_after_alter(tmp_path, "local"))


@pytest.mark.spark
def test_an_added_column_defaults_record_by_record_in_a_mixed_json_file_on_spark(tmp_path: Path) -> None:
    assert_defaults_per_record(mixed_after_alter(tmp_path, "spark"))


def test_an_added_column_defaults_record_by_record_in_a_kafka_range(kafka_broker: str, tmp_path: Path) -> None:
    """JSON values of one offset range build their columns from the union of their fields, as JSON lines do."""
    topic = f"ratings-{uuid.uuid4().hex[:8]}"
    broker.create_topic(kafka_broker, topic, 1)
    document = copy.deepcopy(DOCUMENT)
    document["streams"]["ratings"].pop("nulls")
    document["bad_rows"] = "quarantine"
    document["streams"]["ratings"]["source"] = {
        "format": "kafka",
        "topic": topic,
        "bootstrap_servers": kafka_broker,
        "read_timeout_s": 120,
    }
    config = write_table_yaml(tmp_path, document)
    stitch_ok("init", "-c", str(config))
    config = write_table_yaml(tmp_path, altered(document, None, "Lyon"))
    stitch_ok("alter", "-c", str(config))
    broker.produce(kafka_broker, topic, [(0, json.dumps({"ride_id": 1, "stars": 5, "rating_ts": 1}).encode())])
    assert stitch_ok("ingest", "-c", str(config), "--stream", "ratings")["rows"] == 1
    broker.produce(kafka_broker, topic, [(0, json.dumps(r).encode()) for r in MIXED])
    assert stitch_ok("ingest", "-c", str(config), "--stream", "ratings")["rows"] == len(MIXED) - 1
    assert_defaults_per_record(rows(config))


def test_a_json_file_with_a_byte_order_mark_still_defaults_record_by_record(tmp_path: Path) -> None:
    """pyarrow reads a file that starts with a UTF-8 byte-order mark; the per-record scan must read it too."""
    document = copy.deepcopy(DOCUMENT)
    document["streams"]["ratings"].pop("nulls")
    config = write_table_yaml(tmp_path, document)
    stitch_ok("init", "-c", str(config))
    config = write_table_yaml(tmp_path, altered(document, None, "Lyon"))
    stitch_ok("alter", "-c", str(config))
    folder = tmp_path / "landing" / "ratings"
    folder.mkdir(parents=True)
    lines = [{"ride_id": 1, "stars": 5, "rating_ts": 1}, {"ride_id": 2, "stars": 4, "rating_ts": 1, "city": "Paris"}]
    (folder / "bom.json").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in lines).encode())
    stitch_ok("ingest", "-c", str(config), "--stream", "ratings", "--engine", "local")
    got = rows(config)
    assert got[1]["city"] == "Lyon" and got[2]["city"] == "Paris", got
