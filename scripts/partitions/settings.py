"""The partitions harness's hosts, addresses, shares, timings and fault lists: one place to read them."""

from __future__ import annotations

from pathlib import Path

SUBNET = "10.77.0"
S3_ADDR = f"{SUBNET}.2"
ZK_ADDR = f"{SUBNET}.3"
KAFKA_ADDR = f"{SUBNET}.4"
CTL_ADDR = f"{SUBNET}.10"
WRITERS = ("w1", "w2", "w3")
S3_PORT = 80
RGW_PORT = 7480
ZK_PORT = 2181
KAFKA_PORT = 9092
KAFKA_CONTROLLER_PORT = 9093
KAFKA_PARTITIONS = 2
#: How long a Kafka ingest waits for the broker before it fails (exit 1): past the faults' hold.
KAFKA_READ_TIMEOUT_S = 10
ZK_JAR = "/usr/share/java/zookeeper.jar"
SLF4J = ("/usr/share/java/slf4j-simple.jar", "/usr/share/java/slf4j-log4j12.jar")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
POINT_ENV = "STITCH_PARTITIONS_POINT"
SIGNAL_DIR_ENV = "STITCH_PARTITIONS_DIR"
PROVIDERS = ("filesystem", "zookeeper", "s3")
POINTS = ("begin", "mark", "write", "publish", "heartbeat")
#: The points a Spark job reaches outside its Python workers (which mark and write the data files): `stitch`, the
#: launcher, takes an ingest's claim and keeps its heartbeat (`begin`, `heartbeat`) and schedules a compaction
#: (`begin`); the job's driver runs a compaction (its `heartbeat`) and publishes (`publish`, in the driver always).
SPARK_POINTS = ("begin", "publish", "heartbeat")
#: First on a Spark round's PYTHONPATH: its sitecustomize arms the point in the job's driver.
DRIVER_HOOK_DIR = Path(__file__).resolve().parents[1] / "partitions_site"
#: Created when a round resumes its writer for the last time: a point reached later does not stop the process.
DISARMED = "disarmed"
#: Beside a stopped process's `<pid>.at`: `<pid>.go` is the round letting it go (until then a process woken by
#: anything else stops again), `<pid>.going` the process saying it went on.
GO = ".go"
GOING = ".going"
#: How long `resume` keeps waking a released process until it says it went on (a bound, not a pace).
RESUME_TIMEOUT_S = 60.0
#: The share of ingest and compaction rounds whose faulted command is a Spark job (`--engine spark`, local[*]).
SPARK_SHARE = 0.25
#: Of the Spark ingest rounds, the share whose faulted command is a long-running `stitch stream` instead (a
#: micro-batch every STREAM_TRIGGER_S; its driver runs each batch's ingest, so its points are a Spark job's), asked to
#: stop (SIGTERM: it finishes its batch) STREAM_AFTER_HEAL_S after the round healed.
STREAM_SHARE = 0.5
#: A stream's points: its first micro-batch (the files landed before it started) always begins and publishes; a
#: beat renewal comes only with a slow batch, and a stream, unlike a job, does not end to say it was not reached.
STREAM_POINTS = ("begin", "publish")
STREAM_TRIGGER_S = 1
STREAM_AFTER_HEAL_S = 4.0
STREAM_STOP_TIMEOUT_S = 60
#: The commands that write: one that ends with exit 0 and no instant did nothing (`noop`).
WRITE_COMMANDS = ("ingest", "stream", "compact", "clean")
#: The faulted command on w1: mostly an ingest; a compaction or a clean of a table that has data (their points:
#: the same functions, for a clean only `begin` and `publish`; the others are counted as not reached).
ACTORS = ("ingest", "ingest", "compact", "clean")
NETWORK_FAULTS = ("cut_s3", "cut_zk", "cut_both", "asym_s3", "loss", "delay", "kill_zk", "kill_rgw")
PROCESS_FAULTS = ("pause", "skew_ahead", "skew_behind")
#: The Kafka stream's broker cut off from the writer, or killed and restarted, while the writer is at its point.
KAFKA_FAULTS = ("cut_kafka", "kill_kafka")
#: Which faults mean something for a provider: a table on local disk has no network path to cut but Kafka's.
FAULTS: dict[str, tuple[str, ...]] = {
    "filesystem": (*PROCESS_FAULTS, *KAFKA_FAULTS),
    "zookeeper": (*NETWORK_FAULTS, *PROCESS_FAULTS, *KAFKA_FAULTS),
    "s3": (*(f for f in NETWORK_FAULTS if f not in ("cut_zk", "kill_zk")), *PROCESS_FAULTS, *KAFKA_FAULTS),
}
HEARTBEAT = {"interval_s": 1, "expire_s": 3}
LOCK_EXPIRE_S = 4.0
LOCK_WAIT_S = 15.0
#: How long a network fault lasts: past the lease and the heartbeat's expiry.
HOLD_S = 5.0
#: The `delay` fault: each packet of the writer's link held this long each way (scripts/partitions/delayer.py), so
#: one request and its answer take past the heartbeat's expiry, and still complete within the hold; the NFQUEUE
#: number it holds in the host's namespace.
DELAY_S = 2.0
DELAYER_QUEUE = 0
#: The network faults that leave the servers up: under them the same stream's contender starts once the faulted
#: writer's lease ran out (`stitch status` from the ctl host), and the fault holds at least TAKEOVER_HOLD_S more.
LINK_FAULTS = ("cut_s3", "cut_zk", "cut_both", "asym_s3", "loss", "delay")
TAKEOVER_HOLD_S = 2.0
#: A bound for a paused writer's instant to look dead to the others (its heartbeat expired), not a pace: the round
#: asks `stitch status` until it does.
PRESUMED_DEAD_TIMEOUT_S = 120.0
SKEW = {"skew_ahead": "+5m", "skew_behind": "-5m"}
OP_TIMEOUT_S = 120.0
POINT_TIMEOUT_S = 40.0
#: A Spark job starts a JVM and a session before its driver reaches a point: on a busy machine that takes minutes
#: (a stream's first micro-batch waited 150 s and more beside `make test`). A bound for a job that hangs, not a pace:
#: a job that ends without reaching its point ends the wait at once.
SPARK_POINT_TIMEOUT_S = 600.0
ROWS_PER_FILE = 20
#: Streams a and b read landing CSV files; stream c reads a Kafka topic of its round (records of ROWS_PER_FILE per
#: produced batch, the batch counted in `Round.landed` as a landing file is).
STREAMS = ("a", "b", "c")
KAFKA_STREAM = "c"
#: The share of ingest rounds whose faulted ingest is of the Kafka stream.
KAFKA_SHARE = 0.35
#: Exit codes that say "nothing was published" (design.md §6, `stitch --help`): the write definitely failed.
DEFINITE_FAILURES = (2, 3, 4, 5)
