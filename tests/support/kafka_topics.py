"""The Kafka tests' topics and tables: a demo table whose streams read topics of the session's broker, a fresh
topic, a stream's commits, and `stitch ingest --json` of a stream."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from scripts import kafka_broker as broker
from stitchlake.api import Table
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommit
from tests.support.processes import run_stitch
from tests.support.spark_fixtures import demo_config
from tests.support.tables import new_table_file


def as_json(row: dict[str, Any]) -> bytes:
    """A record's value as the producers send it: the row as JSON."""
    return json.dumps(row, default=str).encode()


def kafka_demo_table(
    folder: Path, landing: Path, bootstrap: str, topics: dict[str, str], **changes: Any
) -> tuple[Path, Table]:
    """The demo table with each stream of `topics` reading its topic (the others keep their landing files)."""
    document = demo_config(folder, landing, **changes)
    for stream, topic in topics.items():
        document["streams"][stream]["source"] = {
            "format": "kafka",
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "read_timeout_s": 120,
        }
    document["concurrency"]["heartbeat"] = {"interval_s": 0.5, "expire_s": 2}
    table, config = new_table_file(folder, document)
    return config, table


def new_topic(bootstrap: str, stream: str, partitions: int) -> str:
    """A topic of its own for `stream` (the broker is the session's, its topics outlive a test)."""
    topic = f"{stream}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(bootstrap, topic, partitions)
    return topic


def commits(table: Table, stream: str) -> list[DeltaCommit]:
    """The completed deltacommits of `stream`, oldest first."""
    timeline = table.timeline()
    found = [timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT])]
    return [c for c in found if isinstance(c, DeltaCommit) and c.stream == stream]


def ingest(config: Path, stream: str, *more: str) -> dict[str, Any]:
    """`stitch ingest` of `stream`, which must succeed with no client warning: its JSON answer."""
    done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--json", *more)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CONFWARN" not in done.stderr, "a client was given a setting it does not take: " + done.stderr
    return dict(json.loads(done.stdout))
