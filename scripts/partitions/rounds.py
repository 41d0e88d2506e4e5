"""A round: its draws, its table and landing data, its fault, its commands, and the settling after healing."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scripts.partitions.hosts import PartitionsError
from scripts.partitions.run import Op, Run
from scripts.partitions.settings import (
    ACTORS,
    DELAY_S,
    DISARMED,
    DRIVER_HOOK_DIR,
    FAKETIME_LIB,
    FAULTS,
    GO,
    GOING,
    HEARTBEAT,
    HOLD_S,
    KAFKA_ADDR,
    KAFKA_FAULTS,
    KAFKA_PARTITIONS,
    KAFKA_PORT,
    KAFKA_READ_TIMEOUT_S,
    KAFKA_SHARE,
    KAFKA_STREAM,
    LINK_FAULTS,
    LOCK_EXPIRE_S,
    LOCK_WAIT_S,
    NETWORK_FAULTS,
    POINT_ENV,
    POINT_TIMEOUT_S,
    POINTS,
    PRESUMED_DEAD_TIMEOUT_S,
    RESUME_TIMEOUT_S,
    ROWS_PER_FILE,
    S3_ADDR,
    SIGNAL_DIR_ENV,
    SKEW,
    SPARK_POINT_TIMEOUT_S,
    SPARK_POINTS,
    SPARK_SHARE,
    STREAM_AFTER_HEAL_S,
    STREAM_POINTS,
    STREAM_SHARE,
    STREAM_STOP_TIMEOUT_S,
    STREAM_TRIGGER_S,
    STREAMS,
    SUBNET,
    TAKEOVER_HOLD_S,
    WRITERS,
    ZK_ADDR,
    ZK_PORT,
)
from stitchlake.concurrency.processes import stat, still_running

# ============================================================================================== rounds


@dataclasses.dataclass
class Round:
    index: int
    seed: int
    provider: str
    fault: str
    point: str
    dir: Path
    config: Path
    actor: str = "ingest"
    engine: str = "local"
    #: The stream the faulted ingest writes: `a` (landing files) or the Kafka stream.
    stream: str = "a"
    topic: str = ""
    table: str = ""
    landed: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    ops: list[Op] = dataclasses.field(default_factory=list)
    events: list[str] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        return (
            f"round {self.index} (seed {self.seed}): provider {self.provider}, {self.fault} at {self.point} of "
            f"{self.actor}{' -s ' + self.stream if self.actor in ('ingest', 'stream') else ''}"
            f"{' (spark)' if self.engine == 'spark' and self.actor != 'stream' else ''}"
        )


def draw(seed: int, index: int, providers: Sequence[str]) -> tuple[int, str, str, str]:
    """A round's seed, provider, fault and point: the same for the same run seed and round, so a round replays."""
    round_seed = random.Random(f"{seed}:{index}").randrange(1 << 31)
    rng = random.Random(round_seed)
    provider = providers[index % len(providers)]
    return round_seed, provider, rng.choice(FAULTS[provider]), rng.choice(POINTS)


def draw_actor(seed: int, index: int) -> str:
    """The round's faulted command, drawn apart from its fault and point (a seed's faults replay as before)."""
    return random.Random(f"{seed}:{index}:actor").choice(ACTORS)


def draw_stream(seed: int, index: int, actor: str) -> str:
    """The stream a faulted ingest or stream writes: the Kafka stream in KAFKA_SHARE of those rounds, else `a`."""
    kafka = actor in ("ingest", "stream") and random.Random(f"{seed}:{index}:stream").random() < KAFKA_SHARE
    return KAFKA_STREAM if kafka else "a"


def draw_engine(seed: int, index: int, actor: str) -> str:
    """Where the round's ingest or compaction runs: a Spark job in SPARK_SHARE of them, else in the CLI's process."""
    spark = actor in ("ingest", "compact") and random.Random(f"{seed}:{index}:engine").random() < SPARK_SHARE
    return "spark" if spark else "local"


def draw_follow(seed: int, index: int, actor: str, engine: str) -> str:
    """A Spark ingest round's faulted command is a long-running `stitch stream` in STREAM_SHARE of them."""
    follow = actor == "ingest" and engine == "spark" and random.Random(f"{seed}:{index}:follow").random() < STREAM_SHARE
    return "stream" if follow else actor


def write_config(round_: Round, table: str, lock: dict[str, Any]) -> None:
    document = {
        "table": {"name": "parts", "path": table, "key": {"k": "long"}, "buckets": 2},
        "streams": {
            stream: {
                "columns": {f"v{stream}": "string"},
                "source": {"format": "csv", "path": str(round_.dir / "landing" / stream)}
                if stream != KAFKA_STREAM
                else {
                    "format": "kafka",
                    "topic": round_.topic,
                    "bootstrap_servers": f"{KAFKA_ADDR}:{KAFKA_PORT}",
                    "read_timeout_s": KAFKA_READ_TIMEOUT_S,
                },
            }
            for stream in STREAMS
        },
        "concurrency": {"heartbeat": HEARTBEAT, "lock": lock},
        "compaction": {"inline": False},
    }
    round_.config.write_text(json.dumps(document, indent=1), encoding="utf-8")  # JSON is YAML


def produce(run: Run, round_: Round) -> None:
    """The Kafka stream's next batch, as `land` lands a file: keys i*1000 + r over the topic's partitions, the value
    naming the stream and batch; acknowledged by the broker before it counts as landed."""
    batches = round_.landed.setdefault(KAFKA_STREAM, [])
    index = len(batches)
    records = [
        [r % KAFKA_PARTITIONS, json.dumps({"k": index * 1000 + r, f"v{KAFKA_STREAM}": f"{KAFKA_STREAM}{index}"})]
        for r in range(ROWS_PER_FILE)
    ]
    run.kafka("produce", round_.topic, json.dumps(records))
    batches.append(index)


def land(round_: Round, stream: str) -> None:
    """The next landing file of `stream`: keys i*1000 + r, the value names the stream and file."""
    files = round_.landed.setdefault(stream, [])
    index = len(files)
    folder = round_.dir / "landing" / stream
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"k,v{stream}"] + [f"{index * 1000 + r},{stream}{index}" for r in range(ROWS_PER_FILE)]
    temp = folder / f".{index:04d}.tmp"
    temp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    temp.rename(folder / f"{index:04d}.csv")  # whole or absent, as landing files arrive
    files.append(index)


def expected_rows(round_: Round) -> dict[int, dict[str, str | None]]:
    rows: dict[int, dict[str, str | None]] = {}
    for stream, files in round_.landed.items():
        for index in files:
            for r in range(ROWS_PER_FILE):
                rows.setdefault(index * 1000 + r, {f"v{s}": None for s in STREAMS})[f"v{stream}"] = f"{stream}{index}"
    return rows


class Faults:
    """Inject and heal one round's fault on writer host `host`."""

    def __init__(self, run: Run, round_: Round, host: str) -> None:
        self.run, self.round, self.host = run, round_, host
        self.healers: list[Callable[[], None]] = []

    def _iptables(self, *rule: str) -> None:
        self.run.net.ns_run(self.host, ["iptables", "-A", *rule])

    def inject(self) -> None:
        fault = self.round.fault
        self.round.events.append(f"{time.monotonic() - self.run.t0:8.2f} inject {fault} on {self.host}")
        cuts = {"cut_s3": [S3_ADDR], "cut_zk": [ZK_ADDR], "cut_both": [S3_ADDR, ZK_ADDR], "cut_kafka": [KAFKA_ADDR]}
        targets = cuts.get(fault, [])
        for addr in targets:
            self._iptables("OUTPUT", "-d", addr, "-j", "DROP")
            self._iptables("INPUT", "-s", addr, "-j", "DROP")
        if fault == "asym_s3":  # small requests pass, packets of uploads do not
            self._iptables("OUTPUT", "-d", S3_ADDR, "-m", "length", "--length", "1000:65535", "-j", "DROP")
        elif fault == "loss":  # the link's packets, not the host's loopback (a Spark job's driver talks over it)
            for chain, link in (("OUTPUT", "-o"), ("INPUT", "-i")):
                lose = ["-m", "statistic", "--mode", "random", "--probability", "0.3", "-j", "DROP"]
                self._iptables(chain, link, "eth0", *lose)
        elif fault == "delay":
            self.healers.append(self.run.net.delay(self.host, DELAY_S))
        elif fault == "kill_zk":
            self.run.servers.kill_zk()
            self.healers.append(self.run.servers.start_zk)
        elif fault == "kill_rgw":
            self.run.servers.kill_rgw()
            self.healers.append(self.run.servers.restart_rgw)
        elif fault == "kill_kafka":
            self.run.servers.kill_kafka()
            self.healers.append(self.run.servers.start_kafka)
        if fault in (*NETWORK_FAULTS, *KAFKA_FAULTS) and not fault.startswith("kill_"):
            self.healers.append(self._flush)

    def _flush(self) -> None:
        if self.host in self.run.net.hosts:
            self.run.net.ns_run(self.host, ["iptables", "-F"])

    def heal(self) -> None:
        while self.healers:
            self.healers.pop()()
        self.round.events.append(f"{time.monotonic() - self.run.t0:8.2f} healed {self.round.fault}")


def stopped_at_point(signal_dir: Path) -> list[int]:
    """The processes that stopped themselves at the round's point: the hooked CLI, or its Spark job's driver."""
    return [int(marker.stem) for marker in signal_dir.glob("*.at")]


def who_stopped(signal_dir: Path) -> list[str]:
    """Who stopped at the point, as the hook wrote it (pid, point, command line, the instant it was publishing)."""
    return [f"pid {marker.stem} {marker.read_text(encoding='utf-8')}" for marker in sorted(signal_dir.glob("*.at"))]


def wait_for_point(op: Op, signal_dir: Path, timeout: float = POINT_TIMEOUT_S) -> bool:
    """True once the hooked process (or its Spark driver) stopped at its point; False if the command ended first
    (the point was not reached)."""
    assert op.proc is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stopped_at_point(signal_dir):
            return True
        if op.proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def resume(op: Op, signal_dir: Path) -> None:
    """Let go and wake the command and whatever of it stopped at the point (a Spark driver may outlive its
    launcher). A process that checked for its release just before it was given stops itself once more, so each is
    woken until it says it went on (or has ended). One that reaches the point later stops until the next call."""
    stopped = stopped_at_point(signal_dir)
    for pid in stopped:
        (signal_dir / f"{pid}{GO}").touch()
    if op.proc is not None and op.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(op.proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + RESUME_TIMEOUT_S
    waiting = set(stopped)
    while waiting and time.monotonic() < deadline:
        for pid in waiting:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
        waiting = {pid for pid in still_running(waiting) if not (signal_dir / f"{pid}{GOING}").exists()}


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (`T`: stopped); None once it is gone."""
    fields = stat(pid)
    return fields[0] if fields else None


def wait_presumed_dead(run: Run, round_: Round, signal_dir: Path) -> None:
    """Wait until no pending instant written by a stopped process looks alive to the others (`stitch status`
    judges its heartbeat as `clean` and a contender do), so that the takeover that follows really is one: waiting
    on that, not on a clock, holds on a busy machine. An instant kept alive by a process that was not stopped (a
    Spark job's launcher beats for its claim) is not waited for: its contender must find it busy."""
    stopped = set(stopped_at_point(signal_dir))
    deadline = time.monotonic() + PRESUMED_DEAD_TIMEOUT_S
    while True:
        answer = run.query(round_.config, [["status"]])[0]
        writers = [*answer["writers"], *answer["pending_compactions"]]
        alive = [w["instant"] for w in writers if w["alive"] and w["pid"] in stopped]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    states = {pid: process_state(pid) for pid in sorted(stopped)}
    pending = [(w["instant"], w["pid"], "alive" if w["alive"] else "expired") for w in writers]
    said = f"still alive after {PRESUMED_DEAD_TIMEOUT_S:g}s: {alive}; " if alive else ""
    round_.events.append(
        f"{time.monotonic() - run.t0:8.2f} presumed dead: {said}pending {pending}; stopped processes {states}"
    )


def wait_lease_lost(run: Run, round_: Round, until: float) -> None:
    """While the link fault holds (until `until`), wait until no pending instant of host w1 looks alive to the
    others (`stitch status` from the ctl host, as a contender judges it), so that the same stream's contender
    starts where the faulted writer's lease ran out while it could not renew it (a takeover it must survive), not
    while its last beat is fresh; a writer that keeps its lease is contended at the hold's end."""
    seen: list[tuple[str, str]] = []
    while time.monotonic() < until:
        try:
            answer = run.query(round_.config, [["status"]])[0]
        except PartitionsError:
            time.sleep(0.5)
            continue
        writers = [*answer["writers"], *answer["pending_compactions"]]
        seen = [(w["instant"], "alive" if w["alive"] else "expired") for w in writers if w.get("host") == "w1"]
        if not any(state == "alive" for _, state in seen):
            break
        time.sleep(0.5)
    when = "before the hold's end" if time.monotonic() < until else "at the hold's end"
    round_.events.append(f"{time.monotonic() - run.t0:8.2f} w1's lease {when}: its pending {seen}")


def play_round(
    run: Run, index: int, providers: Sequence[str], engine: str | None = None, follow: bool = False
) -> Round:
    """Build the round's hosts and table, run its commands with its fault, heal, settle; the ops are recorded.
    `engine` forces where the faulted ingest or compaction runs (else drawn: `draw_engine`); `follow` makes the
    faulted command a `stitch stream` (else drawn for a Spark ingest: `draw_follow`)."""
    round_seed, provider, fault, point = draw(run.seed, index, providers)
    actor = "ingest" if follow else draw_actor(run.seed, index)
    engine = engine if engine is not None and actor in ("ingest", "compact") else draw_engine(run.seed, index, actor)
    actor = "stream" if follow else draw_follow(run.seed, index, actor, engine)
    engine = "spark" if actor == "stream" else engine  # a stream is always a Spark job
    if engine == "spark" and point not in SPARK_POINTS:
        point = random.Random(f"{round_seed}:driver").choice(SPARK_POINTS)
    if actor == "stream" and point not in STREAM_POINTS:
        point = random.Random(f"{round_seed}:stream").choice(STREAM_POINTS)
    stream = draw_stream(run.seed, index, actor) if engine == "local" or actor == "stream" else "a"
    if fault in SKEW and (engine == "spark" or stream == KAFKA_STREAM):
        # libfaketime breaks the timed waits of CPython and of the JVM: Event.wait never returns (a Kafka client's,
        # a JVM's), and with DONT_FAKE_MONOTONIC time.sleep fails with EINVAL. Those commands are not skewed.
        fault = random.Random(f"{round_seed}:unskewed").choice([f for f in FAULTS[provider] if f not in SKEW])
    folder = run.workdir / f"round-{index:03d}"
    folder.mkdir(parents=True)
    round_ = Round(index, round_seed, provider, fault, point, folder, folder / "parts.yaml", actor, engine)
    round_.stream = stream
    round_.topic = f"r{index}-{uuid.uuid4().hex[:8]}"
    run.kafka("topic", round_.topic)
    if provider == "filesystem":
        table, lock = str(folder / "table"), {"provider": "filesystem"}
    else:
        bucket = f"r{index}-{uuid.uuid4().hex[:8]}"
        run.servers.create_bucket(bucket)
        table = f"s3://{bucket}/parts"
        lock = {"provider": "zookeeper", "hosts": f"{ZK_ADDR}:{ZK_PORT}", "zk_path": f"/r{index}"}
        if provider == "s3":
            lock = {"provider": "filesystem"}
    round_.table = table
    write_config(round_, table, {**lock, "wait_s": LOCK_WAIT_S, "expire_s": LOCK_EXPIRE_S})
    for offset, name in enumerate(WRITERS):
        run.net.add(name, f"{SUBNET}.{11 + offset}")
    try:
        _play(run, round_)
    finally:
        for name in WRITERS:
            run.net.remove(name)
    return round_


def _play(run: Run, round_: Round) -> None:
    cfg = ["-c", str(round_.config)]
    init = run.run(round_.index, "ctl", "setup", ["init", *cfg])
    if init.exit != 0:
        raise PartitionsError(f"stitch init failed: {init.line()}")
    for stream in ("a", "a", "b"):
        land(round_, stream)
    produce(run, round_)
    signal_dir = round_.dir / "signals"
    signal_dir.mkdir()
    extra: dict[str, str] = {SIGNAL_DIR_ENV: str(signal_dir)}
    skewed = round_.fault in SKEW
    if skewed:
        extra.update({"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": SKEW[round_.fault], "FAKETIME_DONT_RESET": "1"})
    else:
        extra[POINT_ENV] = round_.point
    if round_.engine == "spark":
        extra["PYTHONPATH"] = os.pathsep.join([str(DRIVER_HOOK_DIR), run.env()["PYTHONPATH"]])
    faults = Faults(run, round_, "w1")
    target = run.start(round_.index, "w1", "round", _faulted_command(run, round_, cfg), extra)
    round_.ops.append(target)
    patience = SPARK_POINT_TIMEOUT_S if round_.engine == "spark" else POINT_TIMEOUT_S
    reached = skewed or wait_for_point(target, signal_dir, patience)
    run.stats.faults[round_.fault] += 1
    run.stats.points[round_.point if not skewed else "whole_run"] += 1
    if not reached:
        run.stats.missed[round_.point] += 1
        round_.events.append(f"point {round_.point} not reached")
    elif not skewed:
        round_.events.extend(
            f"{time.monotonic() - run.t0:8.2f} reached the point: {who}" for who in who_stopped(signal_dir)
        )
    contenders: list[Op] = []
    try:
        if reached and round_.fault != "pause":
            faults.inject()
            resume(target, signal_dir)
        land(round_, "a")
        land(round_, "b")
        held_until = time.monotonic() + HOLD_S
        same = ["ingest", *cfg, "-s", round_.stream, "--engine", "local"]  # the faulted ingest's stream
        other = ["ingest", *cfg, "-s", "b", "--engine", "local"]
        if round_.fault in LINK_FAULTS and reached:  # its lease may run out while it cannot renew it
            late = run.start(round_.index, "w3", "round", other)
            wait_lease_lost(run, round_, held_until)
            contenders += [run.start(round_.index, "w2", "round", same), late]
            held_until = max(held_until, time.monotonic() + TAKEOVER_HOLD_S)
        else:
            if round_.fault == "pause" and reached:  # a zombie: presumed dead, taken over, then woken
                wait_presumed_dead(run, round_, signal_dir)
            contenders += [run.start(round_.index, "w2", "round", same), run.start(round_.index, "w3", "round", other)]
        if round_.fault == "pause" and reached:
            run.finish(contenders[0])
            clean = run.run(round_.index, "w3", "round", ["clean", *cfg])
            round_.ops.append(clean)
            resume(target, signal_dir)
            round_.events.append(f"{time.monotonic() - run.t0:8.2f} resumed the paused writer")
        elif reached:
            time.sleep(max(0.0, held_until - time.monotonic()))
    finally:
        faults.heal()
        (signal_dir / DISARMED).touch()  # a point reached from now on (e.g. after a slow start) does not stop
        resume(target, signal_dir)
    produce(run, round_)  # after healing: a killed broker is back
    for op in contenders:
        run.finish(op)
    if round_.actor == "stream":
        stop_stream(run, round_, target)
    run.finish(target)
    spark = round_.engine == "spark" and round_.actor != "stream"  # a stream is always one
    run.stats.faulted[f"{round_.actor}{'-spark' if spark else ''}:{target.outcome}"] += 1
    round_.ops.extend(contenders)
    round_.ops.append(run.run(round_.index, "w3", "round", ["compact", *cfg]))
    settle(run, round_)


def stop_stream(run: Run, round_: Round, target: Op) -> None:
    """Let the healed stream follow what landed meanwhile, then ask it to stop as an operator does (SIGTERM: the
    running micro-batch finishes); it is waited for as long as its stop may take."""
    assert target.proc is not None
    time.sleep(STREAM_AFTER_HEAL_S)
    if target.proc.poll() is None:
        round_.events.append(f"{time.monotonic() - run.t0:8.2f} asked the stream to stop (SIGTERM)")
        with contextlib.suppress(ProcessLookupError):
            target.proc.send_signal(signal.SIGTERM)
    run.finish(target, time.monotonic() - run.t0 - target.start + STREAM_STOP_TIMEOUT_S + 30)


def _faulted_command(run: Run, round_: Round, cfg: list[str]) -> list[str]:
    """The round's faulted command; a compaction or a clean first gets a table with data (from the ctl host):
    logs of both streams to compact, or a compacted slice that a later compaction replaced, to clean."""
    ingest = [["ingest", *cfg, "-s", stream, "--engine", "local"] for stream in STREAMS]
    if round_.actor == "compact":
        round_.ops.extend(run.batch(round_.index, "ctl", "setup", ingest))
        return ["compact", *cfg, "--engine", round_.engine]
    if round_.actor == "clean":
        round_.ops.extend(run.batch(round_.index, "ctl", "setup", [*ingest, ["compact", *cfg]]))
        land(round_, "a")
        round_.ops.extend(run.batch(round_.index, "ctl", "setup", [ingest[0], ["compact", *cfg]]))
        return ["clean", *cfg, "--retain", "1"]
    if round_.actor == "stream":
        timing = ["--trigger-interval", str(STREAM_TRIGGER_S), "--stop-timeout", str(STREAM_STOP_TIMEOUT_S)]
        return ["stream", *cfg, "-s", round_.stream, *timing]
    return ["ingest", *cfg, "-s", round_.stream, "--engine", round_.engine]


def settle(run: Run, round_: Round) -> None:
    """After healing: failed writes are rolled back, what is left to ingest is ingested, everything compacted."""
    cfg = ["-c", str(round_.config)]
    ingests = [["ingest", *cfg, "-s", stream, "--engine", "local"] for stream in STREAMS]
    # A clean round's table loses its old history even when the faulted clean lost its race (it may refuse, exit
    # 4, when a writer it chose to roll back turns out alive): the feed checks after a clean are forced, not hoped for.
    clean = ["clean", *cfg, *(["--retain", "1"] if round_.actor == "clean" else [])]
    for _attempt in range(3):
        time.sleep(HEARTBEAT["expire_s"] + 1.0)  # a failed writer's beat has expired: clean rolls it back
        ops = run.batch(round_.index, "ctl", "heal", [clean, *ingests, ["compact", *cfg]])
        round_.ops.extend(ops)
        run.stats.retried += sum(1 for op in ops if op.command == "ingest" and op.outcome == "ok")
        if all(op.outcome in ("ok", "noop") for op in ops):
            return
