"""The servers of a partitions run, each on a host of its own: RGW (S3), ZooKeeper and a Kafka broker."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts import local_daemons, module_argv, rgw
from scripts.partitions.hosts import Network, PartitionsError, run_command
from scripts.partitions.settings import (
    KAFKA_ADDR,
    KAFKA_CONTROLLER_PORT,
    KAFKA_PORT,
    RGW_PORT,
    S3_ADDR,
    S3_PORT,
    SLF4J,
    ZK_ADDR,
    ZK_JAR,
    ZK_PORT,
)

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
        _kill(self.kafka_proc)

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
            run_command(
                module_argv("rgw", "stop", "--dir", str(self.workdir / "rgw")),
                timeout=60,
                check=False,
            )
        _kill(self.rgw_proc)

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
        _kill(self.zk_proc)

    def close(self) -> None:
        self.kill_kafka()
        self.kill_zk()
        self.stop_rgw()

    def create_bucket(self, name: str) -> None:
        script = (
            "import sys; from scripts import rgw; "
            "server = rgw.RgwServer(sys.argv[1], sys.argv[2], sys.argv[3], 'us-east-1', dir='', pids={}); "
            "rgw.create_bucket(server, sys.argv[4])"
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


def _kill(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a server the run started (a fault, or the end of the run), and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
