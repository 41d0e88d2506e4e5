"""Partitions (issue 37): writers, the lock service and the object store on separate hosts, cut apart mid-commit.

    python -m scripts.partitions --rounds 50 [--seed 7] [--providers filesystem,zookeeper,s3]   # make partitions
    python -m scripts.partitions --rounds 3 --seed 1                                            # CI-sized

Hosts are Linux network namespaces (root only; a clear error where they cannot be made): a bridge namespace with
`br0`, and one namespace per host joined to it by a veth pair, each with a private address on 10.77.0.0/24 and its
own hostname (a UTS namespace per command), so nothing leaves the machine and no host mistakes another's processes
for its own. The S3 server (Ceph RGW, scripts/rgw.py, inside the `s3` host and reached at 10.77.0.2:80 through a
DNAT rule) and ZooKeeper (the `zk` host, 10.77.0.3:2181) live for the whole run; every round gets new writer
hosts, a new bucket (or local folder) and a new table.

A round: land a few CSV files per stream, start the round's faulted command on writer host w1 with a fault point
armed (the hook below stops the process there with SIGSTOP): `stitch ingest` in half the rounds, else `stitch
compact` or `stitch clean` of a table the `ctl` host gave data first. A third of the faulted ingests are of stream
`c`, which reads a Kafka topic of the round from a broker on host `kafka` (10.77.0.4:9092); the others of landing
stream `a`. A quarter of the ingests and compactions of landing files (`--engine` forces it) run as Spark jobs
(`--engine spark`, spark-submit local[*] on w1): `stitch` takes an ingest's claim and keeps its heartbeat, the
job's driver runs and publishes, so the points are armed in both (the driver's through
scripts/partitions_site/sitecustomize.py) and a Spark round's point is `begin`, `heartbeat` or `publish`. Inject
the round's fault while it is stopped, resume it, run contenders on w2 (the same stream) and w3 (another stream,
then `stitch compact`), heal after a while, then from the `ctl` host: `stitch clean` once heartbeats expired,
re-run the ingests until nothing is left ("retried" writes), compact, and check.

Faults (iptables in the writer's namespace; this kernel has no netem, so delay is a `tbf` throttle and loss an
iptables `statistic` rule): cut from S3, from ZooKeeper, from both, from the Kafka broker; asymmetric (packets to
S3 larger than 1000 bytes dropped: requests and small writes pass, uploads of data files do not); loss and delay
on the writer's link; a pause (SIGSTOP) past heartbeat expiry and lease while a contender takes over (a zombie); a
clock ahead or behind (libfaketime `FAKETIME`); ZooKeeper, RGW or the Kafka broker killed and restarted while the
writer is stopped at its point. A seed replays its rounds with the same version of this script (the draws depend
on its lists). Points: `begin` (requested instant written, lock held), `mark` (a marker written), `write` (a data
file about to be written), `publish` (about to write the completed instant, lock held), `heartbeat` (about to renew
its beat).

The checker knows the table only through the CLI a client has (`stitch timeline show`, `stitch read`): the
operation history is every command with its exit code and JSON answer. After healing it checks that every
acknowledged write (exit 0 with an instant) is completed in the timeline with its rows, and so is every instant
an acknowledged compaction or clean reported; that completed
deltacommits nobody acknowledged are no more than the writes whose outcome the client could not know (exit 1,
killed); that each landing file's rows are in the table exactly once (per stream, the rows of completed
deltacommits add up to the rows landed, and the snapshot holds exactly the landed keys and values); that no two
completed deltacommits of one stream overlap in time (two holders of one stream's claim); and that the snapshot,
the read-optimized view after compaction, time travel to the last instant and the change feed agree. A violation
prints the history. The exit code is 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scripts import ROOT, child_env, local_daemons, module_argv, rgw

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
DRIVER_HOOK_DIR = Path(__file__).resolve().parent / "partitions_site"
#: Created when a round resumes its writer for the last time: a point reached later does not stop the process.
DISARMED = "disarmed"
#: The share of ingest and compaction rounds whose faulted command is a Spark job (`--engine spark`, local[*]).
SPARK_SHARE = 0.25
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
#: A pause lasts past both too, and a contender runs meanwhile.
PAUSE_S = 6.0
SKEW = {"skew_ahead": "+5m", "skew_behind": "-5m"}
OP_TIMEOUT_S = 120.0
POINT_TIMEOUT_S = 40.0
#: A Spark job starts a JVM and a session before its driver reaches a point.
SPARK_POINT_TIMEOUT_S = 150.0
ROWS_PER_FILE = 20
#: Streams a and b read landing CSV files; stream c reads a Kafka topic of its round (records of ROWS_PER_FILE per
#: produced batch, the batch counted in `Round.landed` as a landing file is).
STREAMS = ("a", "b", "c")
KAFKA_STREAM = "c"
#: The share of ingest rounds whose faulted ingest is of the Kafka stream.
KAFKA_SHARE = 0.35
#: Exit codes that say "nothing was published" (design.md §6, `stitch --help`): the write definitely failed.
DEFINITE_FAILURES = (2, 3, 4, 5)


class PartitionsError(RuntimeError):
    """The harness could not build its hosts or servers (not a finding about the table)."""


def _run(argv: Sequence[str], timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=child_env()
    )
    if check and done.returncode != 0:
        raise PartitionsError(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done


# ============================================================================================== hosts


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    ns: str
    addr: str


#: The commands the harness runs, by the Debian package that has them (a fresh machine lacks iptables and faketime).
TOOLS = {"ip": "iproute2", "iptables": "iptables", "unshare": "util-linux", "tc": "iproute2"}


def ensure_tools() -> None:
    """Install what a fresh machine lacks (as the other test servers are installed), or say what is missing."""
    missing = {package for tool, package in TOOLS.items() if shutil.which(tool) is None}
    if not Path(FAKETIME_LIB).is_file():
        missing.add("faketime")
    if missing and (failed := local_daemons.apt_install(sorted(missing), 600.0)):
        raise PartitionsError(f"the partitions harness needs {', '.join(sorted(missing))} (Debian packages): {failed}")


class Network:
    """A bridge namespace and hosts joined to it; `close()` removes every namespace and kills what runs in them."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or f"sl{os.getpid() % 100000}"
        self.bridge = f"{self.tag}-br"
        self.hosts: dict[str, Host] = {}
        self._made: list[str] = []

    def open(self) -> Network:
        ensure_tools()
        try:
            self._netns(self.bridge)
        except PartitionsError as exc:
            raise PartitionsError(
                f"cannot create network namespaces (root and CAP_NET_ADMIN are needed): {exc}"
            ) from None
        _run(["ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.bridge, "link", "set", "br0", "up"])
        return self

    def _netns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._made.append(ns)
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def add(self, name: str, addr: str) -> Host:
        host = Host(name, f"{self.tag}-{name}", addr)
        # `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts: the host resolves its own name (Java asks)
        etc = Path("/etc/netns") / host.ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{addr} {name}\n", encoding="utf-8")
        self._netns(host.ns)
        peer = f"v{self.tag}{name}"[-15:]
        _run(
            ["ip", "link", "add", "eth0", "netns", host.ns, "type", "veth", "peer", "name", peer, "netns", self.bridge]
        )
        _run(["ip", "-n", self.bridge, "link", "set", peer, "master", "br0", "up"])
        _run(["ip", "-n", host.ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
        _run(["ip", "-n", host.ns, "link", "set", "eth0", "up"])
        self.hosts[name] = host
        return host

    def remove(self, name: str) -> None:
        host = self.hosts.pop(name, None)
        if host is not None:
            self._kill_all(host.ns)
            _run(["ip", "netns", "del", host.ns], check=False)
            shutil.rmtree(Path("/etc/netns") / host.ns, ignore_errors=True)
            with contextlib.suppress(ValueError):
                self._made.remove(host.ns)

    def argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """`argv` run on host `name`: in its network namespace, with a UTS namespace naming it."""
        host = self.hosts[name]
        script = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "sh", "-c", script, host.name, *argv]

    def ns_run(self, name: str, argv: Sequence[str], timeout: float = 30.0, check: bool = True) -> str:
        return _run(["ip", "netns", "exec", self.hosts[name].ns, *argv], timeout=timeout, check=check).stdout

    def reachable(self, name: str, addr: str, port: int, timeout: float = 1.0) -> bool:
        probe = f"exec 3<>/dev/tcp/{addr}/{port}"
        try:
            done = _run(
                ["ip", "netns", "exec", self.hosts[name].ns, "timeout", str(timeout), "bash", "-c", probe],
                timeout=timeout + 5,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    @staticmethod
    def _kill_all(ns: str) -> None:
        done = _run(["ip", "netns", "pids", ns], check=False)
        for pid in done.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        for ns in reversed(self._made):
            self._kill_all(ns)
        for ns in reversed(self._made):
            _run(["ip", "netns", "del", ns], check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self._made.clear()
        self.hosts.clear()


# ============================================================================================ servers


@dataclasses.dataclass
class Servers:
    """RGW in host `s3` and ZooKeeper in host `zk`, with what it takes to kill and restart each."""

    net: Network
    workdir: Path
    rgw: Any = None
    zk_proc: subprocess.Popen[bytes] | None = None
    rgw_proc: subprocess.Popen[bytes] | None = None
    kafka_proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{S3_ADDR}:{S3_PORT}"

    def start(self) -> None:
        self.start_rgw()
        self.start_zk()
        self.start_kafka()

    @property
    def bootstrap(self) -> str:
        return f"{KAFKA_ADDR}:{KAFKA_PORT}"

    def start_kafka(self) -> None:
        """A KRaft broker (scripts/kafka_broker.py's jars and settings) in host `kafka`; started again after a
        kill on the data it had."""
        from scripts import kafka_broker

        workdir = self.workdir / "kafka"
        fresh = not (workdir / "data").exists()
        for folder in ("log", "data"):
            (workdir / folder).mkdir(parents=True, exist_ok=True)
        config = kafka_broker.properties(workdir, KAFKA_PORT, KAFKA_CONTROLLER_PORT, host=KAFKA_ADDR)
        jvm = kafka_broker.jvm_argv(workdir)
        if fresh:
            kafka_broker.format_storage(jvm, config)
        with open(workdir / "log" / "kafka.out", "ab") as log:
            self.kafka_proc = subprocess.Popen(
                ["ip", "netns", "exec", self.net.hosts["kafka"].ns, *jvm, "kafka.Kafka", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self._wait("ctl", KAFKA_ADDR, KAFKA_PORT, "the Kafka broker", timeout=120.0)

    def kill_kafka(self) -> None:
        if self.kafka_proc is not None and self.kafka_proc.poll() is None:
            self.kafka_proc.kill()
            self.kafka_proc.wait(timeout=10)

    def start_rgw(self) -> None:
        rgw.ensure_installed()
        workdir = self.workdir / "rgw"
        workdir.mkdir(parents=True, exist_ok=True)
        argv = module_argv("rgw", "start", "--dir", str(workdir), "--port", str(RGW_PORT))
        out = self.net.ns_run("s3", [*argv, "--watch-pid", str(os.getpid())], timeout=rgw.START_TIMEOUT_S + 30)
        self.rgw = json.loads(out)
        self.net.ns_run("s3", ["sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1"])
        dnat = ["-p", "tcp", "-d", S3_ADDR, "--dport", str(S3_PORT), "-j", "DNAT", "--to-destination"]
        self.net.ns_run("s3", ["iptables", "-t", "nat", "-A", "PREROUTING", *dnat, f"127.0.0.1:{RGW_PORT}"])
        self._wait("ctl", S3_ADDR, S3_PORT, "the S3 server")

    def _wait(self, probe_host: str, addr: str, port: int, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.net.reachable(probe_host, addr, port):
                return
            time.sleep(0.2)
        raise PartitionsError(f"{what} did not answer at {addr}:{port} within {timeout:g}s")

    def kill_rgw(self) -> None:
        """SIGKILL the gateway (the monitor and OSD keep the data) and keep it down until `restart_rgw`."""
        pid = int(self.rgw["pids"]["rgw"]) if self.rgw_proc is None else self.rgw_proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if self.rgw_proc is not None:
            self.rgw_proc.wait(timeout=10)

    def restart_rgw(self) -> None:
        workdir = self.workdir / "rgw"
        base = ["--conf", str(workdir / "ceph.conf"), "--cluster", "ceph"]
        argv = ["ip", "netns", "exec", self.net.hosts["s3"].ns, "radosgw", *base, "-f", "-n", "client.rgw.a"]
        with open(workdir / "log" / "rgw-restarted.log", "ab") as log:
            self.rgw_proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait("ctl", S3_ADDR, S3_PORT, "the restarted S3 server")

    def stop_rgw(self) -> None:
        if self.rgw is not None:
            _run(
                module_argv("rgw", "stop", "--dir", str(self.workdir / "rgw")),
                timeout=60,
                check=False,
            )
        if self.rgw_proc is not None and self.rgw_proc.poll() is None:
            self.rgw_proc.kill()
            self.rgw_proc.wait(timeout=10)

    def start_zk(self) -> None:
        java = shutil.which("java")
        if java is None or not os.path.exists(ZK_JAR):
            failed = local_daemons.apt_install(["zookeeper"], 600.0)
            java = shutil.which("java")
            if java is None or not os.path.exists(ZK_JAR):
                raise PartitionsError(f"no ZooKeeper server: {failed or 'zookeeper or java missing'}")
        workdir = self.workdir / "zk"
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        config = workdir / "zoo.cfg"
        settings = {
            "tickTime": 500,
            "dataDir": workdir / "data",
            "clientPort": ZK_PORT,
            "clientPortAddress": ZK_ADDR,
            "maxClientCnxns": 0,
            "minSessionTimeout": 1000,
            "maxSessionTimeout": 60000,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr",
        }
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        classpath = os.pathsep.join([ZK_JAR, *[jar for jar in SLF4J if os.path.exists(jar)][:1]])
        argv = [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        with open(workdir / "zookeeper.log", "ab") as log:
            self.zk_proc = subprocess.Popen(
                ["ip", "netns", "exec", self.net.hosts["zk"].ns, *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self._wait("ctl", ZK_ADDR, ZK_PORT, "ZooKeeper")

    def kill_zk(self) -> None:
        if self.zk_proc is not None and self.zk_proc.poll() is None:
            self.zk_proc.kill()
            self.zk_proc.wait(timeout=10)

    def close(self) -> None:
        self.kill_kafka()
        self.kill_zk()
        self.stop_rgw()

    def create_bucket(self, name: str) -> None:
        script = (
            "import sys; from scripts import rgw; "
            "rgw.create_bucket(rgw.RgwServer(sys.argv[1], sys.argv[2], sys.argv[3], 'us-east-1', '', {}), sys.argv[4])"
        )
        argv = [
            sys.executable,
            "-c",
            script,
            f"http://127.0.0.1:{RGW_PORT}",
            rgw.DEFAULT_ACCESS_KEY,
            rgw.DEFAULT_SECRET_KEY,
            name,
        ]
        # A gateway restarted by the previous round listens before it serves: give it a minute.
        deadline = time.monotonic() + 60.0
        while True:
            try:
                self.net.ns_run("s3", argv)
                return
            except (PartitionsError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def client_env(self) -> dict[str, str]:
        return rgw.client_env(self.endpoint, rgw.DEFAULT_ACCESS_KEY, rgw.DEFAULT_SECRET_KEY)


# ============================================================================================ the hook


def install_hook(point: str, signal_dir: str) -> None:
    """Stop this process (SIGSTOP) the first time it reaches `point`, after saying so in `signal_dir`.

    It wraps functions of the code under test and calls them unchanged; a wrapped name that moved is an
    AttributeError here, never a point that silently tests nothing.
    """
    import stitchlake.engine as engine
    import stitchlake.table.transaction as txn
    import stitchlake.writing.writer as writer
    from stitchlake.concurrency.heartbeat import Heartbeat

    fired = [False]

    def stop_here() -> None:
        if fired[0] or Path(signal_dir, DISARMED).exists():  # reached after the round let its writer go
            return
        fired[0] = True
        Path(signal_dir, f"{os.getpid()}.at").write_text(point, encoding="utf-8")
        os.kill(os.getpid(), signal.SIGSTOP)

    def wrap(owner: Any, name: str, before: bool, skip: int = 0) -> None:
        original = getattr(owner, name)
        passes = [0]

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            passes[0] += 1
            due = passes[0] > skip
            if before and due:
                stop_here()
            out = original(*args, **kwargs)
            if not before and due:
                stop_here()
            return out

        setattr(owner, name, wrapped)

    if point == "begin":  # the requested instant is written, the lock held
        wrap(txn, "write_requested", before=False)
    elif point == "mark":  # a marker is written, its data file not yet (engines mark through `engine.marker`)
        wrap(txn.Transaction, "mark", before=False)
        wrap(engine, "create_marker", before=False)
    elif point == "write":  # a data file is about to be written
        wrap(writer, "write_table_file", before=True)
    elif point == "publish":  # every file written, the lock held, the completed instant not yet
        wrap(txn, "write_completed", before=True)
    elif point == "heartbeat":  # about to renew the beat (the first one is written when the instant begins)
        wrap(Heartbeat, "_write", before=True, skip=1)
        original = getattr(writer, "write_table_file")  # noqa: B009 - imported there, not exported

        def slow_write(*args: Any, **kwargs: Any) -> Any:
            """A small ingest is done within one beat: hold the data write until the beat renews (or 5 s)."""
            deadline = time.monotonic() + 5.0
            while not fired[0] and time.monotonic() < deadline:
                time.sleep(0.05)
            return original(*args, **kwargs)

        setattr(writer, "write_table_file", slow_write)  # noqa: B010
    else:
        raise SystemExit(f"unknown point {point!r}")


def hooked_main(argv: list[str]) -> None:
    """`partitions.py hooked -- <stitch args>`: the stitch CLI with the point of $STITCH_PARTITIONS_POINT armed."""
    point = os.environ.get(POINT_ENV)
    if point:
        install_hook(point, os.environ[SIGNAL_DIR_ENV])
    from stitchlake.cli.app import main

    sys.argv = ["stitch", *argv]
    main()


def batch_main(argv: list[str]) -> None:
    """`partitions.py batch '<json list of stitch argument lists>'`: run them one after the other in this process.

    The same CLI a client runs, without a new interpreter per command; prints one JSON list of
    {args, exit, out, start, end} (monotonic clock, comparable between processes).
    """
    from stitchlake.cli.app import app

    results = []
    for args in json.loads(argv[0]):
        buffer = io.StringIO()
        start = time.monotonic()
        code = 0
        with contextlib.redirect_stdout(buffer):
            try:
                app(args=args, prog_name="stitch", standalone_mode=True)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        results.append({"args": args, "exit": code, "out": buffer.getvalue(), "start": start, "end": time.monotonic()})
    print(json.dumps(results))


def kafka_main(argv: list[str]) -> None:
    """`partitions.py kafka topic <bootstrap> <topic>` or `... produce <bootstrap> <topic> <json [[partition,
    value], ...]>`: run on the ctl host, the only side of the harness that reaches the broker's address."""
    from scripts import kafka_broker

    what, bootstrap, topic = argv[:3]
    if what == "topic":
        kafka_broker.create_topic(bootstrap, topic, KAFKA_PARTITIONS)
    elif what == "produce":
        records = [(int(partition), value.encode()) for partition, value in json.loads(argv[3])]
        kafka_broker.produce(bootstrap, topic, records)
    else:
        raise SystemExit(f"unknown kafka command {what!r}")


def spark_read_main(argv: list[str]) -> None:
    """`partitions.py spark-read <table>`: the table through Spark local[2] (the stitchlake data source), as one
    JSON object {"ok", "records"} like `stitch read --json`."""
    from pyspark.sql import SparkSession

    from stitchlake.jobs.spark_conf import DEFAULT_CONF, reader_conf
    from stitchlake.spark.session import register

    builder = SparkSession.builder.master("local[2]").appName("partitions")
    settings = {**DEFAULT_CONF, "spark.ui.enabled": "false", "spark.pyspark.python": sys.executable}
    # The reader a stitchlake session gets: the JVM reader (which hands an S3 table to the Python source when the
    # session has no s3a file system, saying so).
    for key, value in {**settings, **reader_conf(settings)}.items():
        builder = builder.config(key, value)
    session = register(builder.getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        frame = session.read.format("stitchlake").load(argv[0])
        records = [row.asDict() for row in frame.select("k", *(f"v{s}" for s in STREAMS)).collect()]
    finally:
        session.stop()
    print(json.dumps({"ok": True, "records": records}))


# ========================================================================================= operations


@dataclasses.dataclass
class Op:
    """One command as its client saw it: what ran where, when, and how it ended."""

    id: int
    round: int
    host: str
    command: str
    stream: str | None
    phase: str
    start: float = 0.0
    end: float = 0.0
    exit: int | None = None
    answer: dict[str, Any] = dataclasses.field(default_factory=dict)
    note: str = ""
    proc: subprocess.Popen[str] | None = dataclasses.field(default=None, repr=False)
    waiter: threading.Thread | None = dataclasses.field(default=None, repr=False)
    output: tuple[str, str] = ("", "")

    @property
    def instant(self) -> str | None:
        value = self.answer.get("instant")
        return str(value) if value else None

    def instants(self) -> list[str]:
        """Every instant the answer says this command completed: an ingest's or a clean's, a compaction's run and
        the pending plans it ran first (`stitch compact --json`: `result` and `resumed`)."""
        if self.command != "compact":
            return [self.instant] if self.instant else []
        runs = [self.answer, *(self.answer.get("resumed") or [])]
        return [
            str(r["result"]["instant"])
            for r in runs
            if isinstance(r.get("result"), dict) and r["result"].get("instant")
        ]

    @property
    def outcome(self) -> str:
        """ok (acknowledged), noop, failed (nothing was published, as the exit code says) or unknown."""
        if self.exit == 0:
            return "ok" if self.instants() or self.command not in ACTORS else "noop"
        if self.exit in DEFINITE_FAILURES:
            return "failed"
        return "unknown"

    def line(self) -> str:
        what = f"{self.command}{' -s ' + self.stream if self.stream else ''}"
        answer = {k: self.answer[k] for k in ("instant", "completed", "rows", "error") if self.answer.get(k)}
        return (
            f"  op {self.id:3d} r{self.round} {self.phase:5s} {self.host:3s} {what:14s} "
            f"[{self.start:8.2f} .. {self.end:8.2f}] exit={self.exit} {self.outcome:7s} {json.dumps(answer)}"
            f"{' ' + self.note if self.note else ''}"
        )


@dataclasses.dataclass
class Stats:
    rounds: int = 0
    faults: Counter[str] = dataclasses.field(default_factory=Counter)
    points: Counter[str] = dataclasses.field(default_factory=Counter)
    missed: Counter[str] = dataclasses.field(default_factory=Counter)
    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    #: The faulted command of each round and how it ended, `actor:outcome`.
    faulted: Counter[str] = dataclasses.field(default_factory=Counter)
    retried: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "faults": dict(sorted(self.faults.items())),
            "points": dict(sorted(self.points.items())),
            "points_not_reached": dict(sorted(self.missed.items())),
            "writes": dict(sorted(self.outcomes.items())),
            "faulted_commands": dict(sorted(self.faulted.items())),
            "retried_writes": self.retried,
            "violations": len(self.violations),
        }


class Run:
    """The hosts, servers and history of one `partitions` run."""

    def __init__(self, workdir: Path, seed: int, log: Callable[[str], None] = print) -> None:
        self.workdir = workdir
        self.seed = seed
        self.log = log
        self.net = Network()
        self.servers = Servers(self.net, workdir)
        self.stats = Stats()
        self.t0 = time.monotonic()
        self._ids = 0

    def __enter__(self) -> Run:
        try:
            self.net.open()
            self.net.add("s3", S3_ADDR)
            self.net.add("zk", ZK_ADDR)
            self.net.add("kafka", KAFKA_ADDR)
            self.net.add("ctl", CTL_ADDR)
            self.servers.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.servers.close()
        finally:
            self.net.close()

    # ------------------------------------------------------------------------------------------ commands

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STITCH_", "FAKETIME", "LD_PRELOAD"))}
        env.update(self.servers.client_env())
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        env["STITCH_LOG_DIR"] = str(self.workdir / "stitch-logs")
        env.update(extra or {})
        return env

    def start(self, round_no: int, host: str, phase: str, args: list[str], extra: dict[str, str] | None = None) -> Op:
        self._ids += 1
        stream = args[args.index("-s") + 1] if "-s" in args else None
        op = Op(self._ids, round_no, host, args[0], stream, phase, start=time.monotonic() - self.t0)
        argv = module_argv("partitions", "hooked", "--", *args, "--json")
        # A session of its own: in the supervisor's process group, a stopped writer would be sent SIGHUP and
        # SIGCONT by the kernel whenever a sibling's exit left that group orphaned (a run started in the background).
        proc = subprocess.Popen(
            self.net.argv(host, argv),
            env=self.env(extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        op.proc = proc

        def wait() -> None:  # the end is when the process ended, not when the supervisor looked
            op.output = proc.communicate()
            op.end = time.monotonic() - self.t0

        op.waiter = threading.Thread(target=wait, daemon=True)
        op.waiter.start()
        return op

    def finish(self, op: Op, timeout: float = OP_TIMEOUT_S) -> Op:
        assert op.proc is not None and op.waiter is not None
        if op.exit is not None:  # finished already
            return op
        op.waiter.join(max(timeout - (time.monotonic() - self.t0 - op.start), 1.0))
        if op.waiter.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(op.proc.pid, signal.SIGCONT)
            op.proc.kill()
            op.waiter.join()
            op.note = f"killed after {timeout:g}s"
        op.exit = op.proc.returncode
        out, err = op.output
        lines = [line for line in out.splitlines() if line.startswith("{")]
        with contextlib.suppress(ValueError):
            op.answer = json.loads(lines[-1]) if lines else {}
        if not op.answer and err.strip():
            op.answer = {"error": err.strip().splitlines()[-1][:300]}
        return op

    def run(self, round_no: int, host: str, phase: str, args: list[str]) -> Op:
        return self.finish(self.start(round_no, host, phase, args))

    def batch(self, round_no: int, host: str, phase: str, commands: list[list[str]]) -> list[Op]:
        """`commands` run one after the other in one process on `host`, each recorded as an operation."""
        argv = module_argv("partitions", "batch", json.dumps([[*c, "--json"] for c in commands]))
        done = subprocess.run(
            self.net.argv(host, argv), env=self.env(), capture_output=True, text=True, timeout=OP_TIMEOUT_S
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
        if done.returncode != 0 or not lines:
            raise PartitionsError(f"batch {commands} on {host} failed ({done.returncode}): {done.stderr[-800:]}")
        ops = []
        for result in json.loads(lines[-1]):
            args = list(result["args"][:-1])
            self._ids += 1
            stream = args[args.index("-s") + 1] if "-s" in args else None
            op = Op(
                self._ids, round_no, host, args[0], stream, phase, result["start"] - self.t0, result["end"] - self.t0
            )
            op.exit = int(result["exit"])
            answers = [line for line in str(result["out"]).splitlines() if line.startswith("{")]
            with contextlib.suppress(ValueError):
                op.answer = json.loads(answers[-1]) if answers else {}
            ops.append(op)
        return ops

    def query(self, config: Path, commands: list[list[str]]) -> list[dict[str, Any]]:
        """Read-only commands on the ctl host whose answers the checker needs (an error if one fails)."""
        ops = self.batch(-1, "ctl", "check", [[*c, "-c", str(config)] for c in commands])
        for op in ops:
            if op.exit != 0 or not op.answer.get("ok"):
                raise PartitionsError(f"stitch {op.command} failed ({op.exit}): {op.answer}")
        return [op.answer for op in ops]

    def kafka(self, *args: str) -> None:
        """A topic made, or records produced and acknowledged, from the ctl host (`kafka_main`); a broker killed by
        the round's fault is waited for."""
        argv = module_argv("partitions", "kafka", args[0], self.servers.bootstrap, *args[1:])
        done = subprocess.run(self.net.argv("ctl", argv), env=self.env(), capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise PartitionsError(f"kafka {args[0]} failed ({done.returncode}): {done.stderr[-1500:]}")

    def spark_read(self, table: str, host: str = "ctl") -> dict[str, Any]:
        """The table read by a Spark local[2] job on `host`."""
        argv = module_argv("partitions", "spark-read", table)
        env = self.env({"PYSPARK_PYTHON": sys.executable})
        done = subprocess.run(self.net.argv(host, argv), env=env, capture_output=True, text=True, timeout=600)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        log = self.workdir / "spark-read.log"
        log.write_text(done.stderr, encoding="utf-8")
        if done.returncode != 0 or not lines:
            causes = [line for line in done.stderr.splitlines() if "Exception" in line or "Error" in line][:8]
            raise PartitionsError(f"the Spark read failed ({done.returncode}; {log}):\n" + "\n".join(causes))
        answer: dict[str, Any] = json.loads(lines[-1])
        return answer


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
            f"{self.actor}{' -s ' + self.stream if self.actor == 'ingest' else ''}"
            f"{' (spark)' if self.engine == 'spark' else ''}"
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
    """The stream a faulted ingest writes: the Kafka stream in KAFKA_SHARE of the ingest rounds, else `a`."""
    kafka = actor == "ingest" and random.Random(f"{seed}:{index}:stream").random() < KAFKA_SHARE
    return KAFKA_STREAM if kafka else "a"


def draw_engine(seed: int, index: int, actor: str) -> str:
    """Where the round's ingest or compaction runs: a Spark job in SPARK_SHARE of them, else in the CLI's process."""
    spark = actor in ("ingest", "compact") and random.Random(f"{seed}:{index}:engine").random() < SPARK_SHARE
    return "spark" if spark else "local"


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
        elif fault == "loss":
            for chain in ("OUTPUT", "INPUT"):
                self._iptables(chain, "-m", "statistic", "--mode", "random", "--probability", "0.3", "-j", "DROP")
        elif fault == "delay":  # no netem in this kernel: a throttle that queues packets for seconds
            tbf = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "64kbit", "burst", "1600"]
            self.run.net.ns_run(self.host, [*tbf, "latency", "10s"])
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
            self.run.net.ns_run(self.host, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)

    def heal(self) -> None:
        while self.healers:
            self.healers.pop()()
        self.round.events.append(f"{time.monotonic() - self.run.t0:8.2f} healed {self.round.fault}")


def stopped_at_point(signal_dir: Path) -> list[int]:
    """The processes that stopped themselves at the round's point: the hooked CLI, or its Spark job's driver."""
    return [int(marker.stem) for marker in signal_dir.glob("*.at")]


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
    """Wake the command and whatever of it stopped at the point (a Spark driver may outlive its launcher)."""
    running = op.proc is not None and op.proc.poll() is None
    for pid in {*([op.proc.pid] if running and op.proc else []), *stopped_at_point(signal_dir)}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def play_round(run: Run, index: int, providers: Sequence[str], engine: str | None = None) -> Round:
    """Build the round's hosts and table, run its commands with its fault, heal, settle; the ops are recorded.
    `engine` forces where the faulted ingest or compaction runs (else drawn: `draw_engine`)."""
    round_seed, provider, fault, point = draw(run.seed, index, providers)
    actor = draw_actor(run.seed, index)
    engine = engine if engine is not None and actor in ("ingest", "compact") else draw_engine(run.seed, index, actor)
    if engine == "spark" and point not in SPARK_POINTS:
        point = random.Random(f"{round_seed}:driver").choice(SPARK_POINTS)
    folder = run.workdir / f"round-{index:03d}"
    folder.mkdir(parents=True)
    round_ = Round(index, round_seed, provider, fault, point, folder, folder / "parts.yaml", actor, engine)
    round_.stream = draw_stream(run.seed, index, actor) if engine == "local" else "a"
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
        if round_.engine == "spark":  # libfaketime: a JVM may hang on a faked monotonic clock
            extra["DONT_FAKE_MONOTONIC"] = "1"
    if not skewed or round_.engine == "spark":  # the contenders of a Spark job wait until its driver is at work
        extra[POINT_ENV] = round_.point
    if round_.engine == "spark":
        extra["PYTHONPATH"] = os.pathsep.join([str(DRIVER_HOOK_DIR), run.env()["PYTHONPATH"]])
    faults = Faults(run, round_, "w1")
    target = run.start(round_.index, "w1", "round", _faulted_command(run, round_, cfg), extra)
    round_.ops.append(target)
    patience = SPARK_POINT_TIMEOUT_S if round_.engine == "spark" else POINT_TIMEOUT_S
    reached = wait_for_point(target, signal_dir, patience) if POINT_ENV in extra else skewed
    run.stats.faults[round_.fault] += 1
    run.stats.points[round_.point if not skewed else "whole_run"] += 1
    if not reached:
        run.stats.missed[round_.point] += 1
        round_.events.append(f"point {round_.point} not reached")
    contenders: list[Op] = []
    try:
        if reached and round_.fault != "pause":
            faults.inject()
            resume(target, signal_dir)
        land(round_, "a")
        land(round_, "b")
        if round_.fault == "pause" and reached:  # a zombie: presumed dead, taken over, then woken
            time.sleep(HEARTBEAT["expire_s"] + 1.0)
        same = ["ingest", *cfg, "-s", round_.stream, "--engine", "local"]  # the faulted ingest's stream
        contenders.append(run.start(round_.index, "w2", "round", same))
        contenders.append(run.start(round_.index, "w3", "round", ["ingest", *cfg, "-s", "b", "--engine", "local"]))
        if round_.fault == "pause" and reached:
            run.finish(contenders[0])
            clean = run.run(round_.index, "w3", "round", ["clean", *cfg])
            round_.ops.append(clean)
            time.sleep(max(0.0, PAUSE_S - HEARTBEAT["expire_s"] - 1.0))
            resume(target, signal_dir)
            round_.events.append(f"{time.monotonic() - run.t0:8.2f} resumed the paused writer")
        elif reached:
            time.sleep(HOLD_S)
    finally:
        faults.heal()
        (signal_dir / DISARMED).touch()  # a point reached from now on (e.g. after a slow start) does not stop
        resume(target, signal_dir)
    produce(run, round_)  # after healing: a killed broker is back
    for op in contenders:
        run.finish(op)
    run.finish(target)
    run.stats.faulted[f"{round_.actor}{'-spark' if round_.engine == 'spark' else ''}:{target.outcome}"] += 1
    round_.ops.extend(contenders)
    round_.ops.append(run.run(round_.index, "w3", "round", ["compact", *cfg]))
    settle(run, round_)


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
    return ["ingest", *cfg, "-s", round_.stream, "--engine", round_.engine]


def settle(run: Run, round_: Round) -> None:
    """After healing: failed writes are rolled back, what is left to ingest is ingested, everything compacted."""
    cfg = ["-c", str(round_.config)]
    ingests = [["ingest", *cfg, "-s", stream, "--engine", "local"] for stream in STREAMS]
    for _attempt in range(3):
        time.sleep(HEARTBEAT["expire_s"] + 1.0)  # a failed writer's beat has expired: clean rolls it back
        ops = run.batch(round_.index, "ctl", "heal", [["clean", *cfg], *ingests, ["compact", *cfg]])
        round_.ops.extend(ops)
        run.stats.retried += sum(1 for op in ops if op.command == "ingest" and op.outcome == "ok")
        if all(op.outcome in ("ok", "noop") for op in ops):
            return


# ============================================================================================= checker


def _rows(answer: dict[str, Any]) -> dict[int, dict[str, str | None]]:
    out: dict[int, dict[str, str | None]] = {}
    for record in answer.get("records", []):
        if record.get("_op") == "D":
            continue
        out[int(record["k"])] = {f"v{s}": record.get(f"v{s}") for s in STREAMS}
    return out


def _diff(name: str, got: dict[int, dict[str, str | None]], want: dict[int, dict[str, str | None]]) -> list[str]:
    if got == want:
        return []
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    wrong = [(k, got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]][:3]
    return [f"{name}: {len(got)} rows, expected {len(want)}; missing keys {missing}, unexpected {extra}, wrong {wrong}"]


def check(run: Run, round_: Round, spark: bool = False) -> list[str]:
    """What a client may rely on after healing, judged from the operation history and the CLI's answers only
    (with `spark`, also from a Spark local[2] read of the table)."""
    violations: list[str] = []
    try:
        answers = run.query(
            round_.config,
            [["timeline", "show", "-n", "0"], ["read", "-n", "0"], ["read", "-n", "0", "--mode", "read_optimized"]],
        )
    except PartitionsError as exc:  # a table that no longer reads is the worst violation of all
        return [f"the table cannot be read after healing: {exc}"]
    timeline = answers[0]["instants"]
    completed = [i for i in timeline if i.get("state") == "completed"]
    deltas = [i for i in completed if i.get("action") == "deltacommit"]
    pending = [i for i in timeline if i.get("state") != "completed"]
    if pending:
        violations.append(f"instants still pending after healing: {[(i['instant'], i['action']) for i in pending]}")
    by_instant = {str(i["instant"]): i for i in deltas}
    ingests = [op for op in round_.ops if op.command == "ingest"]
    acknowledged = [op for op in ingests if op.outcome == "ok"]
    seen: Counter[str] = Counter(str(op.instant) for op in acknowledged)
    for instant, count in seen.items():
        if count > 1:
            violations.append(f"instant {instant} acknowledged to {count} writers")
    for op in acknowledged:
        found = by_instant.get(str(op.instant))
        if found is None:
            violations.append(f"acknowledged write lost: op {op.id} instant {op.instant} is not completed")
        elif found.get("stream") != op.stream or found.get("rows") != op.answer.get("rows"):
            violations.append(f"op {op.id} was told {op.answer.get('rows')} rows of {op.stream}, the timeline {found}")
    for stream in STREAMS:
        unowned = [i for i in deltas if i.get("stream") == stream and str(i["instant"]) not in seen]
        unknown = [op for op in ingests if op.stream == stream and op.outcome == "unknown"]
        if len(unowned) > len(unknown):
            violations.append(
                f"stream {stream}: {len(unowned)} completed deltacommits nobody was told of "
                f"({[i['instant'] for i in unowned]}) but only {len(unknown)} writes ended without an answer: "
                "a write that was told it failed is visible"
            )
        landed = len(round_.landed.get(stream, [])) * ROWS_PER_FILE
        committed = sum(int(i.get("rows") or 0) for i in deltas if i.get("stream") == stream)
        if committed != landed:
            violations.append(f"stream {stream}: completed deltacommits hold {committed} rows, {landed} landed")
        ordered = sorted((i for i in deltas if i.get("stream") == stream), key=lambda i: str(i["instant"]))
        for first, second in itertools.pairwise(ordered):
            if str(second["instant"]) < str(first["completed"]):
                violations.append(
                    f"stream {stream}: deltacommits {first['instant']}..{first['completed']} and "
                    f"{second['instant']}..{second['completed']} overlap: two holders of the stream's claim committed"
                )
    done = {str(i["instant"]) for i in completed}
    for op in round_.ops:
        if op.command in ("compact", "clean") and op.outcome == "ok":
            lost = [instant for instant in op.instants() if instant not in done]
            if lost:
                violations.append(f"acknowledged {op.command} lost: op {op.id} instant(s) {lost} not completed")
    want = expected_rows(round_)
    violations += _diff("snapshot", _rows(answers[1]), want)
    violations += _diff("read_optimized", _rows(answers[2]), want)
    if completed:
        newest = max(str(i["instant"]) for i in completed)
        as_of = run.query(round_.config, [["read", "-n", "0", "--as-of", newest]])[0]
        violations += _diff(f"as of {newest}", _rows(as_of), want)
    violations += _check_feed(run, round_, want, completed)
    if spark:
        violations += _diff("Spark read", _rows(run.spark_read(round_.table)), want)
    return violations


def _feed(run: Run, round_: Round, since: str) -> Op:
    return run.batch(-1, "ctl", "check", [["read", "-n", "0", "--since", since, "-c", str(round_.config)]])[0]


def _check_feed(
    run: Run, round_: Round, want: dict[int, dict[str, str | None]], completed: list[dict[str, Any]]
) -> list[str]:
    """The change feed from the start holds the snapshot's rows. After a clean it may be refused (exit 2, outside
    the retention), naming the first `since` that reads: then the feed from there must read, and every row it
    returns is the snapshot's."""
    feed = _feed(run, round_, "20000101000000000")
    error = str(feed.answer.get("error"))
    if feed.exit == 0:
        return _diff("change feed", _rows(feed.answer), want)
    if not (feed.exit == 2 and "outside the retention" in error and cleaned(completed)):
        return [f"change feed: the read failed ({feed.exit}): {error}"]
    named = re.search(r"Read changes since (\d{17})", error)
    if named is None:
        round_.events.append("the change feed from the start was refused; no later `since` reads")
        return []
    later = _feed(run, round_, named.group(1))
    round_.events.append(f"the change feed from the start was refused (a clean); read since {named.group(1)}")
    if later.exit != 0:
        return [f"change feed since {named.group(1)}, which the refusal named: failed ({later.exit}): {later.answer}"]
    rows = _rows(later.answer)
    return _diff(f"change feed since {named.group(1)}", rows, {k: want.get(k, {}) for k in rows})


def cleaned(completed: list[dict[str, Any]]) -> bool:
    """Whether a clean completed: only then may a read of older history be refused as outside the retention."""
    return any(i.get("action") == "clean" for i in completed)


def history(run: Run, round_: Round) -> str:
    lines = [round_.describe(), *("  " + e for e in round_.events), *(op.line() for op in round_.ops)]
    return "\n".join(lines)


# ================================================================================================ main


def play(
    rounds: int,
    seed: int,
    providers: Sequence[str] = PROVIDERS,
    workdir: Path | None = None,
    only: Sequence[int] = (),
    log: Callable[[str], None] = print,
    engine: str | None = None,
) -> Stats:
    """Run the rounds (or only the listed ones) and check each; the stats hold every violation with its history."""
    base = workdir or Path(tempfile.mkdtemp(prefix="partitions-"))
    base.mkdir(parents=True, exist_ok=True)
    log(f"partitions: seed {seed}, {rounds} rounds, providers {','.join(providers)}, workdir {base}")
    with Run(base, seed, log) as run:
        indices = list(only or range(rounds))
        for index in indices:
            started = time.monotonic()
            round_ = play_round(run, index, providers, engine)
            run.stats.rounds += 1
            for op in round_.ops:
                if op.command == "ingest":
                    run.stats.outcomes[f"{op.phase}:{op.outcome}"] += 1
            found = check(run, round_, spark=index in indices[-len(providers) :])  # Spark reads the last rounds
            (round_.dir / "history.txt").write_text(history(run, round_) + "\n", encoding="utf-8")
            outcome = "ok" if not found else f"{len(found)} VIOLATION(S)"
            log(f"{round_.describe()}: {outcome} ({time.monotonic() - started:.0f}s)")
            summary = {"seed": seed, "done": run.stats.rounds, **run.stats.summary()}
            (base / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
            if found:
                replay = f"python -m scripts.partitions --seed {seed} --round {index} --providers {','.join(providers)}"
                text = "\n".join([*(f"  ! {v}" for v in found), history(run, round_), f"  replay: {replay}"])
                log(text)
                run.stats.violations.append(text)
        return run.stats


def _interrupted(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hooked"]:
        hooked_main(args[2:] if args[1:2] == ["--"] else args[1:])
        return 0
    if args[:1] == ["batch"]:
        batch_main(args[1:])
        return 0
    if args[:1] == ["spark-read"]:
        spark_read_main(args[1:])
        return 0
    if args[:1] == ["kafka"]:
        kafka_main(args[1:])
        return 0
    # SIGTERM (and SIGINT, which a shell ignores in background jobs) unwind: hosts and servers are cleaned up.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: a new one, printed")
    parser.add_argument("--round", type=int, action="append", default=[], help="replay only this round (repeat)")
    parser.add_argument("--providers", default=",".join(PROVIDERS), help="filesystem (local disk), zookeeper, s3")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument(
        "--engine",
        choices=("local", "spark"),
        default=None,
        help="run every faulted ingest or compaction of landing files here (default: a quarter on Spark)",
    )
    options = parser.parse_args(args)
    seed = options.seed if options.seed is not None else random.randrange(1 << 20)
    providers = [p for p in options.providers.split(",") if p]
    unknown = set(providers) - set(PROVIDERS)
    if unknown:
        parser.error(f"unknown providers {sorted(unknown)}")
    stats = play(options.rounds, seed, providers, options.workdir, options.round, engine=options.engine)
    summary = {"seed": seed, **stats.summary()}
    print(json.dumps(summary, indent=1))
    if options.json:
        options.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 1 if stats.violations else 0


if __name__ == "__main__":
    sys.exit(main())
