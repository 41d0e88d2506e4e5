"""Kafka topics that change under a stream (issue 34): a topic deleted and created again, a `latest` start undone by
a restore or a rollback, and a broker that is down.

Everything runs against the session's real broker (tests/support/kafka_server.py) through the real `stitch` CLI; the
re-created topic is really deleted and created again on the broker, so its new topic id is the broker's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql.streaming.datasource import ReadAllAvailable

import stitchlake
from scripts import kafka_broker as broker
from stitchlake.api import Table
from stitchlake.errors import InputRejected
from stitchlake.paths import TIMELINE_DIR
from stitchlake.spark.streaming import KafkaOffsetsReader
from stitchlake.timeline.instant import Action
from stitchlake.timeline.timeline import decode_metadata, encode_metadata
from tests.support.kafka_topics import as_json, commits, ingest, kafka_demo_table, new_topic
from tests.support.processes import run_stitch


def order(key: int) -> bytes:
    return as_json({"order_id": key, "order_date": "2026-11-20", "amount": 1.0, "order_ts": "2026-11-20T10:00:00Z"})


def records(keys: range, partitions: int) -> list[tuple[int, bytes | None]]:
    return [(k % partitions, order(k)) for k in keys]


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete `topic` and create it again with `partitions` partitions: a new topic (a new id) under the old name.
    Deletion finishes in the background; creating again is retried until the broker has let go of the old one."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=60).values():
        future.result(timeout=120)
    while True:
        try:
            broker.create_topic(bootstrap, topic, partitions)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def topic_id(bootstrap: str, topic: str) -> str:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return str(admin.describe_topics(TopicCollection([topic]))[topic].result().topic_id)


def keys(config: Path) -> set[int]:
    return {int(r["order_id"]) for r in stitchlake.read(str(config)).to_pylist()}


def refused(config: Path, stream: str = "orders") -> str:
    done = run_stitch("ingest", "-c", str(config), "--stream", stream, "--json")
    assert done.returncode == 5, done.stdout + done.stderr
    return str(json.loads(done.stdout)["error"])


def test_a_topic_deleted_and_created_again_is_refused_until_reset_and_then_starts_over(
    kafka_broker: str, tmp_path: Path
) -> None:
    """100 records ingested from 2 partitions; the topic is created again with 1 partition and 150 new records:
    the ingest is refused (exit 5) naming the change and `--reset-offsets`, not read from the old offsets; the reset
    reads the new topic from its start, the vanished partition is dropped, and the new id is recorded."""
    topic = new_topic(kafka_broker, "orders", 2)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    broker.produce(kafka_broker, topic, records(range(100), 2))
    assert ingest(config, "orders")["records"] == 100
    old_id = topic_id(kafka_broker, topic)
    assert {r.topic_id for r in commits(table, "orders")[-1].offsets} == {old_id}, "each range records the topic id"

    recreate_topic(kafka_broker, topic, 1)
    new_id = topic_id(kafka_broker, topic)
    broker.produce(kafka_broker, topic, records(range(1000, 1150), 1))
    error = refused(config)
    assert "deleted and created again" in error and old_id in error and new_id in error, error
    assert "--reset-offsets earliest" in error and "partition(s) 0 (next offset 50), 1 (next offset 50)" in error
    assert len(commits(table, "orders")) == 1, "nothing was ingested"
    # `stitch stream` plans its micro-batches with the same planner: its source refuses too (no JVM needed here).
    reader = KafkaOffsetsReader({"path": table.path, "config": str(config), "stream": "orders"})
    with pytest.raises(InputRejected, match="deleted and created again"):
        reader.latestOffset({"batch": 0, "until": {}}, ReadAllAvailable())

    done = ingest(config, "orders", "--reset-offsets", "earliest")
    assert done["records"] == 150 and done["offsets"] == [f"{topic}/0:0-150"], done
    resets = {r.partition: r for r in commits(table, "orders")[-1].offset_resets}
    assert sorted(resets) == [0, 1] and (resets[0].recorded, resets[0].to) == (50, 0), resets
    assert "not read any more" in resets[1].reason and "created again" in resets[1].reason
    assert keys(config) == set(range(100)) | set(range(1000, 1150))

    broker.produce(kafka_broker, topic, records(range(2000, 2003), 1))
    done = ingest(config, "orders")
    assert done["records"] == 3 and done["offsets"] == [f"{topic}/0:150-153"], "the vanished partition is not asked for"
    assert {r.topic_id for r in commits(table, "orders")[-1].offsets} == {new_id}

    # Created once more, with 2 partitions: `--reset-offsets latest` skips what the new topic holds, on every one.
    recreate_topic(kafka_broker, topic, 2)
    broker.produce(kafka_broker, topic, records(range(3000, 3010), 2))
    assert "deleted and created again" in refused(config)
    done = ingest(config, "orders", "--reset-offsets", "latest")
    assert done["records"] == 0 and sorted(done["offsets"]) == [f"{topic}/0:5-5", f"{topic}/1:5-5"], done
    broker.produce(kafka_broker, topic, records(range(4000, 4004), 2))
    assert reader.latestOffset({"batch": 0, "until": {}}, ReadAllAvailable()) == {"batch": 1, "until": {"0": 7, "1": 7}}
    assert ingest(config, "orders")["records"] == 4
    assert keys(config) == set(range(100)) | set(range(1000, 1150)) | set(range(2000, 2003)) | set(range(4000, 4004))


def strip_topic_ids(table: Table) -> int:
    """Rewrite the table's completed deltacommits as a stitchlake that recorded no topic ids wrote them."""
    timeline = table.timeline()
    stripped = 0
    for instant in timeline.completed([Action.DELTACOMMIT]):
        path = Path(table.path) / TIMELINE_DIR / instant.file_name
        content = decode_metadata(path.read_bytes(), str(path), completed=True)
        content.pop("format_version", None)
        for item in content.get("offsets", []):
            stripped += item.pop("topic_id", None) is not None
        path.write_bytes(encode_metadata(content))
    return stripped


def test_offsets_recorded_without_a_topic_id_keep_working_and_a_vanished_partition_is_refused(
    kafka_broker: str, tmp_path: Path
) -> None:
    """Commits from before topic ids were recorded: ingests go on from them (no refusal: nothing to compare), and
    a recorded partition the topic no longer has is refused (exit 5) until `--reset-offsets` drops it."""
    topic = new_topic(kafka_broker, "orders", 2)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    broker.produce(kafka_broker, topic, records(range(20), 2))
    assert ingest(config, "orders")["records"] == 20
    assert strip_topic_ids(table) == 2
    broker.produce(kafka_broker, topic, records(range(20, 24), 2))
    assert ingest(config, "orders")["records"] == 4, "offsets without an id are followed as they are"

    # Created again with 1 partition and more records than were read: partition 1's 12 records were ingested, and
    # the partition is gone. Without ids the change of topic cannot be seen, but a vanished partition can.
    assert strip_topic_ids(table) == 2
    recreate_topic(kafka_broker, topic, 1)
    broker.produce(kafka_broker, topic, records(range(100, 130), 1))
    error = refused(config)
    assert "partition 1: next offset 12, but the topic no longer has this partition" in error, error
    assert "--reset-offsets" in error
    done = ingest(config, "orders", "--reset-offsets", "earliest")
    assert [(r.partition, r.to) for r in commits(table, "orders")[-1].offset_resets] == [(1, 0)], done
    assert ingest(config, "orders")["message"].startswith("nothing to ingest"), "partition 1 is dropped for good"


@pytest.mark.parametrize("undo", ["restore", "rollback"])
def test_a_latest_start_survives_when_the_commits_after_it_are_undone(
    kafka_broker: str, tmp_path: Path, undo: str
) -> None:
    """`starting_offsets: latest`: the first ingest records the topic's end (10) as a position; 40 records are
    ingested; the commits are undone (a restore to a savepoint taken before them, or both rolled back); 5 more
    arrive. The next ingest reads the 45 records from the position, not from the topic's end."""
    topic = new_topic(kafka_broker, "orders", 1)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    document = yaml.safe_load(config.read_text())
    document["streams"]["orders"]["source"]["starting_offsets"] = "latest"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    broker.produce(kafka_broker, topic, records(range(10), 1))
    if undo == "restore":  # a savepoint needs a commit: one payment, from a landing file
        (tmp_path / "landing" / "payments").mkdir(parents=True)
        payment = {"order_id": 0, "order_date": "2026-11-20", "pay_status": "paid", "pay_ts": "2026-11-20T09:00:00Z"}
        (tmp_path / "landing" / "payments" / "p1.json").write_text(json.dumps(payment) + "\n")
        assert ingest(config, "payments")["rows"] == 1
        done = run_stitch("savepoint", "create", "-c", str(config), "--name", "before")
        assert done.returncode == 0, done.stdout + done.stderr
    first = ingest(config, "orders")
    assert first["records"] == 0 and first["offsets"] == [f"{topic}/0:10-10"], first
    broker.produce(kafka_broker, topic, records(range(10, 50), 1))
    assert ingest(config, "orders")["offsets"] == [f"{topic}/0:10-50"]
    if undo == "restore":
        done = run_stitch("savepoint", "restore", "-c", str(config), "--name", "before")
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        for _ in range(2):
            done = run_stitch("rollback", "-c", str(config), "--stream", "orders")
            assert done.returncode == 0, done.stdout + done.stderr
    assert not commits(table, "orders") and keys(config) <= {0}
    broker.produce(kafka_broker, topic, records(range(50, 55), 1))
    again = ingest(config, "orders")
    assert again["records"] == 45 and again["offsets"] == [f"{topic}/0:10-55"], again
    assert keys(config) - {0} == set(range(10, 55))
    assert ingest(config, "orders")["message"].startswith("nothing to ingest")


def kafka_only_config(tmp_path: Path, bootstrap: str, topic: str, **source: Any) -> Path:
    config, _table = kafka_demo_table(tmp_path, tmp_path / "landing", bootstrap, {"orders": topic}, bad_rows="fail")
    document = yaml.safe_load(config.read_text())
    document["streams"]["orders"]["source"].update(source)
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    return config


def test_a_down_broker_is_one_clear_error_not_a_flood_of_client_lines(tmp_path: Path) -> None:
    """No broker at 127.0.0.1:1: the client's retries (librdkafka logs each one) reach stderr once per problem,
    then stitch's own error; exit 1."""
    config = kafka_only_config(tmp_path, "127.0.0.1:1", "orders", read_timeout_s=3)
    done = run_stitch("ingest", "-c", str(config), "--stream", "orders")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert "is the broker reachable" in done.stderr, done.stderr
    assert len(lines) <= 4, f"{len(lines)} lines on stderr:\n" + "\n".join(lines[:20])
    assert not any(line.startswith("%") for line in lines), "librdkafka printed to stderr itself"


def test_a_normal_run_prints_no_client_log_lines(kafka_broker: str, tmp_path: Path) -> None:
    topic = new_topic(kafka_broker, "orders", 2)
    config = kafka_only_config(tmp_path, kafka_broker, topic)
    broker.produce(kafka_broker, topic, records(range(10), 2))
    done = run_stitch("ingest", "-c", str(config), "--stream", "orders")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("%")], done.stderr


@pytest.mark.parametrize("then", ["created again", "deleted", "deleted before its read"])
def test_a_topic_deleted_while_an_ingest_reads_it_is_refused_not_ingested_at_the_old_offsets(
    kafka_broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """The plan names offsets of the topic it saw; if the topic is deleted (and created again) while the ingest
    reads, the same offsets hold other records or none: the ingest is refused (exit 5) naming the planned id and
    commits nothing, instead of publishing what it read as the planned records. The next run then says what to
    do (a recreated topic: `--reset-offsets`). A range whose read finds the topic gone fails the same way, not
    as a broker error (exit 1)."""
    from confluent_kafka.admin import AdminClient

    from stitchlake.engine import LocalEngine
    from stitchlake.io import kafka
    from stitchlake.services.writes.ingest import ingest as ingest_service

    topic = new_topic(kafka_broker, "orders", 1)
    config, table = kafka_demo_table(tmp_path, tmp_path / "landing", kafka_broker, {"orders": topic}, bad_rows="fail")
    broker.produce(kafka_broker, topic, records(range(5), 1))
    assert ingest(config, "orders")["records"] == 5
    broker.produce(kafka_broker, topic, records(range(5, 10), 1))
    planned = topic_id(kafka_broker, topic)
    original = kafka.read_range

    def drop_the_topic() -> None:
        admin = AdminClient({"bootstrap.servers": kafka_broker})
        for future in admin.delete_topics([topic], operation_timeout=60).values():
            future.result(timeout=120)

    def read_then_drop_the_topic(*args: Any) -> Any:
        if then == "deleted before its read":
            drop_the_topic()
            return original(*args)
        records_read = original(*args)
        if then == "created again":
            recreate_topic(kafka_broker, topic, 1)
            broker.produce(kafka_broker, topic, records(range(100, 110), 1))
        else:
            drop_the_topic()
        return records_read

    monkeypatch.setattr(kafka, "read_range", read_then_drop_the_topic)
    with pytest.raises(InputRejected) as caught:
        ingest_service(table, LocalEngine(), "orders")
    monkeypatch.undo()
    message = str(caught.value)
    assert caught.value.exit_code == 5 and "while the ingest read it" in message and planned in message, message
    assert len(commits(table, "orders")) == 1 and keys(config) == set(range(5)), "nothing was ingested"
    assert not table.timeline().pending(), "the refused ingest was undone"
    if then == "created again":
        assert "deleted and created again" in refused(config)
