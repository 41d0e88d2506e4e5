"""A throw-away single-node Kafka (KRaft: one process is broker and controller) on 127.0.0.1, from Maven Central.

The tests and the torture run feed streams from real topics. Kafka ships as jars on Maven Central, so the broker
is `org.apache.kafka:kafka_2.13` with its runtime dependencies (`maven_jars.fetch_tree`), run with the machine's
Java 17 as `kafka.Kafka` after `kafka.tools.StorageTool format`. Sized for a busy 2-core box: a small heap, one
network and two I/O threads, replication factor 1 everywhere. Logs, data and the state file live in one private
directory. Stdlib only (plus the sibling `maven_jars`).

    python -m scripts.kafka_broker start --dir /tmp/kafka [--watch-pid PID]
    python -m scripts.kafka_broker status --dir /tmp/kafka
    python -m scripts.kafka_broker stop --dir /tmp/kafka
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts import maven_jars, run_captured
from scripts.local_daemons import Daemons, State, free_port

#: The broker, pinned. Kafka 4 runs in KRaft mode only (no ZooKeeper).
KAFKA = "org.apache.kafka:kafka_2.13:4.3.1"
START_TIMEOUT_S = 120.0
FORMAT_TIMEOUT_S = 120.0
HEAP = "-Xmx384m"


@dataclasses.dataclass(frozen=True)
class KafkaBroker(State):
    """How to reach a running broker, and which processes to stop."""

    bootstrap: str  # 127.0.0.1:PORT
    controller_port: int


class KafkaBrokerError(RuntimeError):
    """The broker could not be started; the message carries the log tail."""


def jars() -> list[Path]:
    """The broker's jars (fetched once into .venv/maven)."""
    try:
        return maven_jars.fetch_tree(KAFKA)
    except RuntimeError as exc:
        raise KafkaBrokerError(f"could not fetch {KAFKA} from Maven Central: {exc}") from exc


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaBrokerError("java is not on PATH (Kafka needs Java 17+)")
    return java


def _serves(port: int) -> bool:
    """The broker answers a Kafka ApiVersions request (a listening socket alone may still be the controller)."""
    request = (
        (18).to_bytes(2, "big")  # ApiVersions
        + (0).to_bytes(2, "big")  # version 0
        + (1).to_bytes(4, "big")  # correlation id
        + (-1).to_bytes(2, "big", signed=True)  # no client id
    )
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(len(request).to_bytes(4, "big") + request)
            size = int.from_bytes(sock.recv(4), "big")
            return size > 6
    except OSError:
        return False


def properties(workdir: Path, port: int, controller_port: int, host: str = "127.0.0.1") -> Path:
    """The broker's server.properties in `workdir`, listening on `host` (a loopback or a test host's address)."""
    path = workdir / "server.properties"
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(workdir / "data"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "1",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.enable": "false",
        "log.retention.check.interval.ms": "5000",
        "delete.topic.enable": "true",
    }
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


class Broker(Daemons[KafkaBroker]):
    module, state, error = "kafka_broker", KafkaBroker, KafkaBrokerError
    essential = "kafka"
    grace_s = 20.0  # a controlled shutdown on SIGTERM

    def ready(self, state: KafkaBroker) -> bool:
        return _serves(int(state.bootstrap.rsplit(":", 1)[1]))


BROKER = Broker()
status, stop = BROKER.status, BROKER.stop


def start(workdir: Path | str, watch_pid: int | None = None, timeout: float = START_TIMEOUT_S) -> KafkaBroker:
    """Start a broker under `workdir` (or return the one running there); returns once it answers requests.

    With `watch_pid`, a watchdog process stops the broker when that process is gone.
    """
    workdir = Path(workdir).resolve()
    running = status(workdir)
    if running is not None:
        return running
    BROKER.fresh(workdir, ("log", "data"))
    port, controller_port = free_port(), free_port()
    config = properties(workdir, port, controller_port)
    jvm = jvm_argv(workdir)
    format_storage(jvm, config)
    broker = KafkaBroker(bootstrap=f"127.0.0.1:{port}", controller_port=controller_port, dir=str(workdir), pids={})
    pids: dict[str, int] = {}
    with BROKER.starting(workdir, pids):
        BROKER.spawn(workdir, broker, pids, "kafka", [*jvm, "kafka.Kafka", str(config)])
        BROKER.wait("the broker", lambda: _serves(port), workdir, pids, time.monotonic() + timeout)
    return BROKER.started(workdir, broker, pids, watch_pid)


def jvm_argv(workdir: Path) -> list[str]:
    """java and its options for a broker (or its storage tool) whose files are in `workdir`."""
    jvm = [_java(), HEAP, "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1"]
    classpath = os.pathsep.join(str(p) for p in jars())
    return [*jvm, f"-Dstitchlake.kafka.dir={workdir}", f"-Dkafka.logs.dir={workdir / 'log'}", "-cp", classpath]


def format_storage(jvm: list[str], config: Path) -> None:
    """Format the KRaft storage a new broker's `config` names (once, before its first start)."""
    formatted = run_captured(
        [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(config)], FORMAT_TIMEOUT_S
    )
    if formatted.returncode != 0:
        raise KafkaBrokerError(f"formatting the KRaft storage failed:\n{formatted.stdout}{formatted.stderr}")


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting with `-` (which the
    storage tool would read as an option), as Kafka's own `random-uuid` draws them."""
    import base64

    while True:
        drawn = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not drawn.startswith("-"):
            return drawn


# ------------------------------------------------------------------ what tests and the torture run do to topics
# (these use the confluent-kafka client, a dependency of stitchlake; the rest of this script is stdlib only)


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic with `partitions` partitions, replication factor 1; returns once its leaders are known."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(bootstrap)
    for future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=60).values():
        future.result(timeout=120)
    _wait_partitions(admin, topic, partitions)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    """Grow `topic` to `total` partitions."""
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    admin = _admin(bootstrap)
    for future in admin.create_partitions([NewPartitions(topic, total)], operation_timeout=60).values():
        future.result(timeout=120)
    _wait_partitions(admin, topic, total)


def _wait_partitions(admin: Any, topic: str, partitions: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        ready = found is not None and found.error is None and len(found.partitions) == partitions
        if ready and all(p.leader >= 0 for p in found.partitions.values()):
            return
        time.sleep(0.2)
    raise KafkaBrokerError(f"topic {topic} did not get {partitions} partitions with leaders within {timeout:g}s")


def produce(bootstrap: str, topic: str, records: Sequence[tuple[int, bytes | None]]) -> None:
    """(partition, value) records, in order, acknowledged by the broker before returning."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for partition, value in records:
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.5)
    left = producer.flush(120)
    if left or failures:
        raise KafkaBrokerError(f"producing to {topic}: {left} record(s) unsent, failures: {failures[:3]}")


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """Move the partition's start to `offset`, as retention would (the records before it are gone)."""
    from confluent_kafka import TopicPartition

    admin = _admin(bootstrap)
    for future in admin.delete_records([TopicPartition(topic, partition, offset)], operation_timeout=60).values():
        future.result(timeout=120)


def _start_command(args: argparse.Namespace) -> KafkaBroker:
    return start(args.dir, args.watch_pid, args.timeout)


def _start_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=START_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    return BROKER.command_line(__doc__ or "", argv, _start_options, _start_command)


if __name__ == "__main__":
    sys.exit(main())
