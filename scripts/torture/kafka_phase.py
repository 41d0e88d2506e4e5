"""The Kafka phase: a Kafka-fed stream on a table of its own, its claiming ingest SIGKILLed mid-way."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scripts import ROOT
from scripts.torture.tablefiles import TIMELINE_DIR

# ============================================================================================ the Kafka phase


@dataclass
class KafkaPhase:
    """What the Kafka-fed stream's rounds did, for the summary."""

    rounds: int = 0
    #: Rounds added after the last one because none of the rounds had killed an ingest inside its instant.
    extra_rounds: int = 0
    produced: int = 0
    #: Ingests SIGKILLed inside their instant (requested, or writing files), never completed.
    kills: int = 0
    commits: int = 0
    violations: list[str] = field(default_factory=list)


def kafka_phase(work: Path, rounds: int, seed: int, out: Callable[[str], None]) -> KafkaPhase:
    """A stream fed from a real Kafka topic (a broker this run starts, scripts/kafka_broker.py) on a table of its
    own: each round produces records (late and duplicate events, three partitions, a fourth added halfway), starts
    two overlapping `stitch ingest` runs and SIGKILLs the one that claimed the stream at a point chosen by its
    progress (its instant just requested, or its files being written); a round is added until a kill happened.
    At the end the runs go on until nothing is left. Checked (`kafka_check`): the completed commits' offset ranges
    tile every partition from 0 to its end (no gap, no overlap), their rows add up to what was produced, the table
    equals a merge of the produced records, and nothing is left pending. The produced records are kept in
    `kafka/produced.jsonl` for the checker's own tests."""
    from scripts import kafka_broker

    rng = random.Random(seed)
    phase = KafkaPhase()
    folder = work / "kafka"
    folder.mkdir(exist_ok=True)
    broker = kafka_broker.start(folder / "broker", watch_pid=os.getpid())
    try:
        bootstrap = broker.bootstrap
        topic = f"torture-{seed}"
        kafka_broker.create_topic(bootstrap, topic, 3)
        config = _kafka_table(folder, bootstrap, topic)
        produced: list[dict[str, Any]] = []
        partitions = 3
        number = 0
        while number < rounds or (phase.kills == 0 and phase.extra_rounds < 5):
            if number == rounds // 2:
                partitions = 4
                kafka_broker.add_partitions(bootstrap, topic, partitions)
            batch = _kafka_events(rng, number, 120)
            kafka_broker.produce(bootstrap, topic, [(e["id"] % partitions, json.dumps(e).encode()) for e in batch])
            produced += [{**e, "partition": e["id"] % partitions} for e in batch]
            phase.kills += _kafka_round(config, folder / "table", rng)
            if number < rounds:
                phase.rounds += 1
            else:
                phase.extra_rounds += 1
            number += 1
        with open(folder / "produced.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(event) + "\n" for event in produced)
        deadline = time.monotonic() + 300
        while not _kafka_ingest_done(config):
            if time.monotonic() > deadline:
                phase.violations.append("kafka: the ingest did not catch up within 300s after the rounds")
                break
            time.sleep(0.5)
        rolled = _stitch(["rollback", "-c", str(config), "--failed"])
        if rolled.returncode != 0:
            phase.violations.append(
                f"kafka: stitch rollback --failed exited {rolled.returncode}: {rolled.stderr[-300:]}"
            )
        phase.produced = len(produced)
        phase.commits = kafka_check(config, produced, phase.violations)
    finally:
        kafka_broker.stop(folder / "broker")
    out(
        f"kafka: {phase.rounds} rounds (+{phase.extra_rounds} until a kill), {phase.produced} records, {phase.kills} "
        f"ingests killed inside their instant, {phase.commits} "
        f"commits, violations {len(phase.violations)}"
    )
    return phase


def _kafka_table(folder: Path, bootstrap: str, topic: str) -> Path:
    document = {
        "table": {"name": "kafka_torture", "path": str(folder / "table"), "key": {"id": "long"}, "buckets": 2},
        "streams": {
            "events": {
                "columns": {"v": "long", "seq": "long"},
                "ordering": "seq",
                "source": {"format": "kafka", "topic": topic, "bootstrap_servers": bootstrap},
            }
        },
        "bad_rows": "fail",
        "concurrency": {"heartbeat": {"interval_s": 0.5, "expire_s": 3}},
    }
    config = folder / "kafka.yaml"
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    done = _stitch(["init", "-c", str(config)])
    if done.returncode != 0:
        raise RuntimeError(f"stitch init of the Kafka table failed: {done.stderr}")
    return config


def _kafka_events(rng: random.Random, number: int, count: int) -> list[dict[str, Any]]:
    """Events over 50 keys: `seq` orders them (late ones carry a smaller seq); some are sent twice."""
    events = []
    for index in range(count):
        key = rng.randrange(50)
        seq = number * 1000 + index - (rng.randrange(500) if rng.random() < 0.2 else 0)
        events.append({"id": key, "v": number * 1000 + index, "seq": seq * 1000 + index})
        if rng.random() < 0.1:
            events.append(dict(events[-1]))
    return events


def _stitch(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "stitchlake", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def _kafka_round(config: Path, table: Path, rng: random.Random) -> int:
    """Two overlapping ingests (cron overlap: one exits 4); the one that claims the stream is SIGKILLed by its
    progress, not by the clock: as soon as its instant is requested, or once it marks its first data file. Returns
    1 if it was killed inside its instant (which then never completed), else 0 (it finished first)."""
    argv = [
        sys.executable,
        "-m",
        "stitchlake",
        "ingest",
        "-c",
        str(config),
        "--stream",
        "events",
        "--max-records",
        "90",
    ]
    timeline, markers = table / TIMELINE_DIR, table / ".stitch" / "markers"
    before, marked = set(_names(timeline)), set(_names(markers))
    point = rng.choice(["requested", "writing"])
    jobs = [
        subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(2)
    ]
    by_pid = {job.pid: job for job in jobs}
    victim: subprocess.Popen[bytes] | None = None
    requested = ""
    deadline = time.monotonic() + 300
    while victim is None and any(job.poll() is None for job in jobs) and time.monotonic() < deadline:
        if point == "requested":
            started = [n.split(".")[0] for n in set(_names(timeline)) - before if n.endswith(".deltacommit.requested")]
        else:
            started = [n for n in set(_names(markers)) - marked]
        for name in started:
            pid = _writer_pid(timeline, name)
            if pid is not None and pid in by_pid:
                victim, requested = by_pid[pid], name
                break
        time.sleep(0.002)
    killed = 0
    if victim is not None and victim.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=60)
        killed = 0 if any(n.startswith(f"{requested}_") for n in _names(timeline)) else 1
    for job in jobs:
        try:
            job.wait(timeout=300)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    # The next cron run, retried while the killed one still looks alive (exit 4): it goes on from the table's
    # offsets with the killed instant still pending.
    deadline = time.monotonic() + 120
    while _stitch(argv[3:]).returncode in (3, 4) and time.monotonic() < deadline:
        time.sleep(0.5)
    return killed


def _names(folder: Path) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if not n.startswith(".")]
    except FileNotFoundError:
        return []


def _writer_pid(timeline: Path, requested: str) -> int | None:
    """The pid of the process that requested an instant (its plan's writer), or None if unreadable yet."""
    try:
        plan = json.loads((timeline / f"{requested}.deltacommit.requested").read_text(encoding="utf-8"))
        return int(plan["writer"]["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _kafka_ingest_done(config: Path) -> bool:
    done = _stitch(["ingest", "-c", str(config), "--stream", "events", "--json"])
    if done.returncode in (3, 4):  # a killed run's heartbeat is still fresh, or a conflict: try again
        return False
    if done.returncode != 0:
        raise RuntimeError(f"stitch ingest of the Kafka stream exited {done.returncode}: {done.stdout}{done.stderr}")
    return bool(json.loads(done.stdout)["message"].startswith("nothing to ingest"))


def kafka_check(config: Path, produced: list[dict[str, Any]], violations: list[str]) -> int:
    """The checker of the Kafka phase (reads the completed commit files and the table; see `kafka_phase`)."""
    import stitchlake
    from stitchlake.api import open as open_table
    from stitchlake.timeline.instant import Action
    from stitchlake.timeline.metadata import DeltaCommit

    table = open_table(str(config))
    timeline = table.timeline()
    if timeline.pending():
        violations.append(
            f"kafka: pending instants after the final rollback: {[i.requested for i in timeline.pending()]}"
        )
    commits = [timeline.commit(i) for i in timeline.completed([Action.DELTACOMMIT])]
    ranges: dict[int, list[tuple[int, int]]] = {}
    rows = 0
    for commit in commits:
        if isinstance(commit, DeltaCommit):
            rows += commit.rows
            for item in commit.offsets:
                ranges.setdefault(item.partition, []).append((item.start, item.end))
    ends = Counter(e["partition"] for e in produced)
    for partition in sorted(set(ends) | set(ranges)):
        at = 0
        for start, end in sorted(ranges.get(partition, [])):
            if start != at:
                violations.append(f"kafka: partition {partition}: offsets recorded from {start}, expected {at}")
            at = end
        if at != ends.get(partition, 0):
            violations.append(f"kafka: partition {partition}: recorded up to {at}, produced {ends.get(partition, 0)}")
    if rows != len(produced):
        violations.append(f"kafka: {rows} rows committed for {len(produced)} records produced (lost or repeated)")
    want: dict[int, tuple[int, int]] = {}
    for event in produced:
        if event["id"] not in want or event["seq"] > want[event["id"]][1]:
            want[event["id"]] = (event["v"], event["seq"])
    got = {r["id"]: (r["v"], r["seq"]) for r in stitchlake.read(str(config)).to_pylist()}
    if got != want:
        wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        violations.append(f"kafka: the table differs from the produced records' merge for keys {wrong[:5]}")
    return len(commits)
