"""Partitions (issue 37): writers, ZooKeeper and the S3 server on hosts of their own (network namespaces), cut
apart mid-commit; a checker that knows only what clients were told. The long run is `make partitions`; this is its
CI-sized run plus checks that the hosts are really apart and that the checker can fail.

It needs root (network namespaces, iptables): where they cannot be made the tests fail, saying so, never skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import child_env, partitions

#: The harness starts its own S3 server, ZooKeeper and Kafka broker, and its rounds run Spark jobs.
pytestmark = [pytest.mark.s3, pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.spark]

#: A seed whose first rounds cover every provider and each kind of faulted command (the CI-sized run: one round
#: each): a clean with its clock minutes ahead on local disk, an ingest of the Kafka stream cut from the broker once
#: it holds its claim (ZooKeeper lock), and a compaction on S3 run as a Spark job whose driver is stopped about to
#: publish while its host is cut from S3.
CI_SEED = 6676
CI_ENGINES = ("local", "local", "spark")
#: And one round whose faulted command is a long-running `stitch stream`: this seed's round 21 pauses the stream's
#: driver about to publish a micro-batch, past its lease, while an ingest of the same stream on another host takes
#: over; woken, the zombie must publish nothing.
STREAM_ROUND = 21
#: And one whose writer's link is delayed: this seed's round 11 stops an ingest on S3 once it wrote a marker, then
#: holds each packet of its link DELAY_S each way (scripts/partitions/delayer.py) while contenders ingest.
DELAY_ROUND = 11


def _namespaces() -> set[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def _serve(net: Any, name: str, addr: str, port: int) -> subprocess.Popen[bytes]:
    """A listener on host `name` at addr:port (kill it when done)."""
    server = ["python3", "-m", "http.server", "--bind", addr, str(port)]
    return subprocess.Popen(net.argv(name, server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_hosts_are_namespaces_apart_and_a_cut_drops_their_packets() -> None:
    net = partitions.Network(tag="slt")
    assert not {ns for ns in _namespaces() if ns.startswith(net.tag)}
    net.open()
    try:
        net.add("x", "10.77.0.50")
        net.add("y", "10.77.0.51")
        listener = _serve(net, "y", "10.77.0.51", 8000)
        try:
            assert _eventually(lambda: net.reachable("x", "10.77.0.51", 8000))
            named = subprocess.run(net.argv("x", ["hostname"]), capture_output=True, text=True, check=True)
            assert named.stdout.strip() == "x"  # each host has a name of its own, which it resolves (Java asks)
            assert net.ns_run("x", ["getent", "hosts", "x"]).split()[0] == "10.77.0.50"
            net.ns_run("x", ["iptables", "-A", "OUTPUT", "-d", "10.77.0.51", "-j", "DROP"])
            assert not net.reachable("x", "10.77.0.51", 8000)
            net.ns_run("x", ["iptables", "-F"])
            assert net.reachable("x", "10.77.0.51", 8000)
        finally:
            listener.kill()
            listener.wait()
        assert f"{net.tag}-x" in _namespaces()
    finally:
        net.close()
    # nothing left behind (of its own: a `make partitions` may run beside the suite)
    assert not {ns for ns in _namespaces() if ns.startswith(net.tag)}
    assert not Path("/etc/netns/slt-x").exists()


#: Connects to (addr, port) once and prints how long the handshake took (its SYN out, its SYN-ACK in).
_CONNECT = (
    "import socket, sys, time; t = time.monotonic(); "
    "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60).close(); print(time.monotonic() - t)"
)


def _connect_s(net: Any, name: str, addr: str, port: int) -> float:
    return float(net.ns_run(name, [sys.executable, "-c", _CONNECT, addr, str(port)], timeout=90))


def _queue(net: Any, name: str) -> dict[str, int]:
    """Host `name`'s delayer queue as the kernel counts it: packets given to it (its last packet id) and packets
    dropped (the queue full, or the delayer not reading)."""
    fields = [int(f) for f in net.ns_run(name, ["cat", "/proc/net/netfilter/nfnetlink_queue"]).split()]
    return {"given": fields[7], "dropped": fields[5] + fields[6]}


def test_a_delayed_link_holds_each_packet_both_ways_but_not_the_loopback_and_heals() -> None:
    """No netem in this kernel: the `delay` fault holds each packet of the writer's link in user space (NFQUEUE)
    for its time. A handshake on the delayed link takes a delay out and one back; the host's loopback (a Spark job
    talks to its driver over it) is not queued; healed, nothing stays queued and the link answers."""
    delay = 1.5
    net = partitions.Network(tag="sld").open()
    try:
        net.add("x", "10.77.0.52")
        net.add("y", "10.77.0.53")
        listener = _serve(net, "y", "10.77.0.53", 8000)
        loopback = _serve(net, "x", "127.0.0.1", 8001)
        try:
            assert _eventually(lambda: net.reachable("x", "10.77.0.53", 8000))
            assert _eventually(lambda: net.reachable("x", "127.0.0.1", 8001))
            heal = net.delay("x", delay)
            try:
                rules = net.ns_run("x", ["iptables", "-S"])
                assert "-o eth0 -j NFQUEUE" in rules and "-i eth0 -j NFQUEUE" in rules
                _connect_s(net, "x", "127.0.0.1", 8001)
                assert _queue(net, "x")["given"] == 0, "the loopback's packets are not queued"
                assert _connect_s(net, "x", "10.77.0.53", 8000) >= 2 * delay
                queue = _queue(net, "x")
                assert queue["given"] >= 2  # the SYN and the SYN-ACK went through the queue, at least
                assert queue["dropped"] == 0, "held, not lost"
            finally:
                heal()
            assert "NFQUEUE" not in net.ns_run("x", ["iptables", "-S"])
            assert net.reachable("x", "10.77.0.53", 8000)
            assert net.ns_run("x", ["cat", "/proc/net/netfilter/nfnetlink_queue"]).strip() == ""
        finally:
            for process in (listener, loopback):
                process.kill()
                process.wait()
    finally:
        net.close()


def test_a_writer_stopped_at_its_point_stays_stopped_until_the_round_releases_it(tmp_path: Path) -> None:
    """A zombie round's writer must not run while the round believes it frozen: a stray SIGCONT (anything in its
    process group, another tool) finds it stopping itself again; only `resume` lets it go past its point."""
    from scripts.partitions.rounds import process_state, resume
    from scripts.partitions.run import Op

    code = (
        "import sys; from scripts.partitions.hook import install_hook; install_hook('publish', sys.argv[1]); "
        "import stitchlake.table.transaction as t; t.write_completed(None, None, None, None)"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=root, stderr=subprocess.PIPE, text=True)
    try:
        assert _eventually(lambda: process_state(proc.pid) == "T", timeout=120), "it stops at its point"
        assert json.loads((tmp_path / f"{proc.pid}.at").read_text())["point"] == "publish"
        ran = _switches(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)  # a stray continue
        assert _eventually(lambda: _switches(proc.pid) > ran and process_state(proc.pid) == "T", timeout=60), (
            "woken by a stray SIGCONT, it ran and stopped itself again"
        )
        assert proc.poll() is None
        op = Op(1, 0, "w1", "ingest", None, "round")
        op.proc = proc
        resume(op, tmp_path)
        _, err = proc.communicate(timeout=60)
        assert "write_completed" in err, "released, it went on into the function it stopped before"
        assert (tmp_path / f"{proc.pid}.going").exists(), "and said so, which is what `resume` waits for"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _switches(pid: int) -> int:
    """How often `pid` was switched out: it grows only when the process ran."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    return sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)


def test_where_namespaces_cannot_be_made_the_harness_fails_and_says_why() -> None:
    """Not root (here: the same harness run as nobody): a clear error, never a skip."""
    code = (
        "import sys\nfrom scripts import partitions\n"
        "try:\n    partitions.Network(tag='sln').open()\n"
        "except partitions.PartitionsError as exc:\n    print(exc); sys.exit(3)\n"
    )
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=child_env())
    assert done.returncode == 3, done.stderr
    assert "cannot create network namespaces (root and CAP_NET_ADMIN are needed)" in done.stdout


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with partitions.Run(tmp_path_factory.mktemp("partitions"), CI_SEED) as started:
        yield started


@pytest.fixture(scope="module")
def rounds(run: Any) -> list[Any]:
    """The CI-sized run: one round per provider (local-disk lock, ZooKeeper, S3 conditional puts), a delayed link's,
    then a stream's."""
    return [
        *(
            partitions.play_round(run, index, partitions.PROVIDERS, CI_ENGINES[index])
            for index in range(len(partitions.PROVIDERS))
        ),
        partitions.play_round(run, DELAY_ROUND, partitions.PROVIDERS),
        partitions.play_round(run, STREAM_ROUND, partitions.PROVIDERS, follow=True),
    ]


def test_a_ci_sized_run_over_every_provider_finds_no_violation(run: Any, rounds: list[Any]) -> None:
    for round_ in rounds:
        found = partitions.check(run, round_)
        assert not found, "\n".join([*found, partitions.history(run, round_)])
        assert any(op.outcome == "ok" for op in round_.ops if op.command == "ingest"), partitions.history(run, round_)
    assert [r.provider for r in rounds[:3]] == list(partitions.PROVIDERS)
    assert {r.actor for r in rounds} == {"ingest", "compact", "clean", "stream"}, "each kind of command is faulted"
    kafka = rounds[1]
    assert (kafka.actor, kafka.stream, kafka.fault) == ("ingest", partitions.KAFKA_STREAM, "cut_kafka")
    assert len(kafka.landed[partitions.KAFKA_STREAM]) == 2  # two batches produced, each ingested exactly once
    spark = rounds[2]
    assert (spark.actor, spark.engine, spark.point) == ("compact", "spark", "publish")
    assert not [e for e in spark.events if "not reached" in e], "the Spark job's driver must stop at its point"
    launcher = next(op for op in spark.ops if op.host == "w1" and op.phase == "round")
    stopped = partitions.stopped_at_point(spark.dir / "signals")
    assert stopped and launcher.proc.pid not in stopped, "publish stops the job's driver, not the stitch launcher"
    assert sum(n for kind, n in run.stats.faulted.items() if kind.startswith("compact-spark:")) == 1
    assert sum(run.stats.faults.values()) == len(rounds)


def test_a_writer_whose_link_is_delayed_waits_a_delay_each_way_and_the_table_stays_exact(
    run: Any, rounds: list[Any]
) -> None:
    """The delay round (the checker found nothing, above): the ingest stopped at its marker went on with each packet
    of its link held DELAY_S each way, so no answer from S3 reached it sooner than two delays after the fault."""
    from scripts.partitions.settings import DELAY_S, HOLD_S

    round_ = rounds[3]
    assert (round_.provider, round_.fault, round_.point, round_.actor) == ("s3", "delay", "mark", "ingest")
    assert not [e for e in round_.events if "not reached" in e], partitions.history(run, round_)
    injected = next(float(e.split()[0]) for e in round_.events if " inject delay on w1" in e)
    faulted = next(op for op in round_.ops if op.host == "w1" and op.phase == "round")
    assert 2 * DELAY_S < HOLD_S  # a request and its answer fit in the hold: a delay, not a blackout
    assert faulted.end >= injected + 2 * DELAY_S, partitions.history(run, round_)


def test_a_stream_paused_past_its_lease_while_another_host_took_over_publishes_nothing(
    run: Any, rounds: list[Any]
) -> None:
    """The stream round: `stitch stream` on w1, its driver stopped about to publish a micro-batch, paused past its
    heartbeat and lease while w2's `stitch ingest` of the same stream and w3's clean ran; woken, the zombie is
    refused (a definite failure, nothing published) and every landed file is in the table once (the checker)."""
    round_ = rounds[-1]
    assert (round_.actor, round_.engine, round_.fault, round_.point) == ("stream", "spark", "pause", "publish")
    assert not [e for e in round_.events if "not reached" in e], partitions.history(run, round_)
    # The takeover is forced, not hoped for: the contenders started once `stitch status` judged the stopped
    # driver's instant expired, and the driver was still stopped (state T) then.
    dead = [e for e in round_.events if "presumed dead" in e]
    assert dead and "still alive" not in dead[0], partitions.history(run, round_)
    assert re.search(r"\('\d+', (\d+), 'expired'\)[^;]*; stopped processes \{\1: 'T'\}", dead[0]), partitions.history(
        run, round_
    )
    stream = next(op for op in round_.ops if op.host == "w1" and op.phase == "round")
    assert stream.command == "stream" and stream.outcome == "failed", partitions.history(run, round_)
    assert "nothing may be published" in stream.answer["error"] or "nothing was published" in stream.answer["error"]
    taken = next(op for op in round_.ops if op.host == "w2" and op.command == "ingest")
    assert taken.outcome == "ok", partitions.history(run, round_)


def test_the_checker_sees_a_lost_write_a_visible_failed_write_and_a_missing_landing_file(
    run: Any, rounds: list[Any]
) -> None:
    round_ = rounds[2]
    ok = next(op for op in round_.ops if op.outcome == "ok" and op.command == "ingest")
    lost = dataclasses.replace(ok, id=999, answer={**ok.answer, "instant": "20990101000000000"}, proc=None)
    told_failed = dataclasses.replace(ok, id=998, exit=3, proc=None)
    compaction = {"result": {"instant": "20990101000000001"}, "resumed": [{"result": {"instant": "20990101000000002"}}]}
    lost_compaction = dataclasses.replace(ok, id=997, command="compact", stream=None, answer=compaction, proc=None)
    # A stream refused in a later micro-batch (exit 3) that had said on its way that an earlier one committed.
    said = f"micro-batch 7 committed instant 20990101000000003: ingested 1 file(s), 20 rows into stream {ok.stream}\n"
    lost_batch = dataclasses.replace(ok, id=996, command="stream", exit=3, answer={}, output=("", said), proc=None)
    landed = {stream: list(files) for stream, files in round_.landed.items()}
    landed[ok.stream].append(len(landed[ok.stream]))  # a landing file the table never got
    tampered = dataclasses.replace(
        round_,
        ops=[*[op for op in round_.ops if op is not ok], lost, told_failed, lost_compaction, lost_batch],
        landed=landed,
    )
    found = "\n".join(partitions.check(run, tampered))
    assert "acknowledged write lost: op 999" in found
    assert "acknowledged write lost: op 996 instant 20990101000000003" in found
    assert "acknowledged compact lost: op 997 instant(s) ['20990101000000001', '20990101000000002']" in found
    assert "a write that was told it failed is visible" in found
    assert f"stream {ok.stream}: completed deltacommits hold" in found
    assert "snapshot:" in found and "change feed:" in found and "read_optimized:" in found


def test_after_a_clean_the_feed_is_read_from_the_time_its_refusal_names(run: Any, rounds: list[Any]) -> None:
    """The clean round's table: its change feed from the start reaches into history the clean removed, so it is
    refused naming a later `since`; the checker reads from there and holds those rows to the snapshot's."""
    round_ = rounds[0]
    assert round_.actor == "clean"
    timeline = run.query(round_.config, [["timeline", "show", "-n", "0"]])[0]["instants"]
    completed = [i for i in timeline if i.get("state") == "completed"]
    want = partitions.expected_rows(round_)
    assert partitions.check_feed(run, round_, want, completed) == []
    assert any("read since" in event for event in round_.events), partitions.history(run, round_)
    wrong = {k: {**row, "va": "not what was landed"} for k, row in want.items()}
    assert "change feed since" in "\n".join(partitions.check_feed(run, round_, wrong, completed))


@pytest.mark.spark
def test_a_spark_local_job_on_a_host_reads_what_the_cli_reads(run: Any, rounds: list[Any]) -> None:
    """Spark local[2] on the ctl host reads the S3 round's table (through the S3 server's 10.77.0.2 address)."""
    round_ = rounds[2]
    assert round_.table.startswith("s3://")
    assert partitions.check(run, round_, spark=True) == []
