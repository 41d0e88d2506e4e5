"""The table issue 38's tests look at: several streams (one fed from a Kafka topic), a compaction, a savepoint, a
rescale, and records left in the topic, every step through the real `stitch` CLI."""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from scripts import kafka_broker as broker
from tests.support.cli import stitch_json
from tests.support.spark_fixtures import write_config

#: Partitions of the orders topic.
PARTITIONS = 2
#: Records produced into the topic after the last ingest: the lag the metadata must show.
LEFT_IN_TOPIC = 7


@dataclass(frozen=True)
class OperatorTable:
    config: Path
    topic: str
    #: Per partition, records produced in all (the topic's end offset) and records the table ingested.
    produced: dict[int, int]
    ingested: dict[int, int]


def _records(landing: Path, start: int, stop: int | None) -> list[tuple[int, bytes | None]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(landing.glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return [
        (zlib.crc32(str(row["order_id"]).encode()) % PARTITIONS, json.dumps(row, default=str).encode())
        for row in rows[start:stop]
    ]


def _count(records: list[tuple[int, bytes | None]], into: dict[int, int]) -> None:
    for partition, _value in records:
        into[partition] = into.get(partition, 0) + 1


def build(folder: Path, demo_data: Path, bootstrap: str) -> OperatorTable:
    landing = demo_data / "landing"
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    broker.create_topic(bootstrap, topic, PARTITIONS)
    config = write_config(folder, landing)
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["streams"]["orders"]["source"] = {
        "format": "kafka",
        "topic": topic,
        "bootstrap_servers": bootstrap,
        "read_timeout_s": 120,
    }
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    c = str(config)
    stitch_json("init", "-c", c)
    produced: dict[int, int] = {}
    first = _records(landing / "orders", 0, 600)
    broker.produce(bootstrap, topic, first)
    _count(first, produced)
    stitch_json("ingest", "-c", c, "--stream", "orders", "--engine", "local")
    stitch_json("ingest", "-c", c, "--stream", "payments", "--engine", "local", "--max-files", "1")
    stitch_json("ingest", "-c", c, "--stream", "shipments", "--engine", "local", "--max-files", "1")
    stitch_json("compact", "-c", c, "--engine", "local")
    stitch_json("ingest", "-c", c, "--stream", "payments", "--engine", "local")
    stitch_json("savepoint", "create", "-c", c, "--name", "before-rescale")
    stitch_json("rescale", "-c", c, "--buckets", "8", "--engine", "local")
    document["table"]["buckets"] = 8
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    second = _records(landing / "orders", 600, None)
    broker.produce(bootstrap, topic, second)
    _count(second, produced)
    stitch_json("ingest", "-c", c, "--stream", "orders", "--engine", "local")
    stitch_json("ingest", "-c", c, "--stream", "shipments", "--engine", "local")
    ingested = dict(produced)
    left = _records(landing / "orders", 0, LEFT_IN_TOPIC)
    broker.produce(bootstrap, topic, left)
    _count(left, produced)
    return OperatorTable(config, topic, produced, ingested)


def timeline_names(table_path: Path) -> list[str]:
    """The table's metadata files: a read-only command changes none."""
    root = table_path / ".stitch"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "heartbeat" not in str(p))
