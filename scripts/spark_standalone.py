"""A throw-away Spark standalone cluster (one master, one worker) on 127.0.0.1, from the pip pyspark package.

Why: `local[N]` runs everything in one JVM; a standalone cluster exercises what production does (separate
executor JVMs and Python workers, closures pickled across processes, several applications at once).
pip pyspark ships `sbin/spark-daemon.sh` but no start-master.sh/start-worker.sh, so the Master and Worker
classes are started through spark-daemon.sh with SPARK_NO_DAEMONIZE (it then runs the JVM as its child instead
of nohup + `sleep 2`, and we own the process group). Logs, pids, conf and the worker's dir live in one private
directory. Stdlib only, plus stitchlake's stdlib-only `concurrency.processes`.

    python -m scripts.spark_standalone start --dir /tmp/spark [--cores 2] [--memory 4g] [--watch-pid PID]
    python -m scripts.spark_standalone status --dir /tmp/spark
    python -m scripts.spark_standalone stop --dir /tmp/spark
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from scripts.local_daemons import Daemons, State, free_port, get_json
from stitchlake.concurrency.processes import running_in_group

START_TIMEOUT_S = 90.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclasses.dataclass(frozen=True)
class SparkCluster(State):
    """How to reach a running cluster, and which processes to stop."""

    master_url: str  # spark://127.0.0.1:PORT
    web_url: str  # the master's UI; /json describes workers and applications
    cores: int
    memory: str


class SparkClusterError(RuntimeError):
    """The cluster could not be started; the message carries the log tails."""


def spark_home() -> Path:
    """The pip pyspark folder (it has bin/ and sbin/), or $SPARK_HOME."""
    explicit = os.environ.get("SPARK_HOME")
    if explicit and (Path(explicit) / "sbin" / "spark-daemon.sh").exists():
        return Path(explicit)
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkClusterError("pyspark is not installed in this Python and $SPARK_HOME is not set")
    home = Path(spec.origin).parent
    if not (home / "sbin" / "spark-daemon.sh").exists():
        raise SparkClusterError(f"{home}/sbin/spark-daemon.sh is missing")
    return home


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def master_json(web_url: str, timeout: float = 2.0) -> dict[str, object] | None:
    """The master's /json status (workers, active and completed apps), or None if it does not answer."""
    return get_json(f"{web_url}/json", timeout)


def _alive_workers(web_url: str) -> int:
    state = master_json(web_url)
    if not state:
        return 0
    workers = state.get("workers")
    if not isinstance(workers, list):
        return 0
    return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")


class Cluster(Daemons[SparkCluster]):
    """Every daemon must run, and at least one worker have registered; a stop waits for each daemon's whole
    process group (spark-daemon.sh and its JVM, and applications' executors under the worker)."""

    module, state, error = "spark_standalone", SparkCluster, SparkClusterError
    order = {"watchdog": 0, "worker": 1, "master": 2}

    def ready(self, state: SparkCluster) -> bool:
        return _alive_workers(state.web_url) >= 1

    def running(self, pid: int) -> bool:
        return running_in_group(pid)


CLUSTER = Cluster()
status, stop = CLUSTER.status, CLUSTER.stop


def _env(workdir: Path, home: Path, default_cores: int | None) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_WORKER_CORES", "SPARK_WORKER_MEMORY", "MASTER"):
        env.pop(key, None)
    env.update(
        {
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(workdir / "conf"),  # empty: no stray spark-env.sh / spark-defaults.conf
            "SPARK_LOG_DIR": str(workdir / "log"),
            "SPARK_PID_DIR": str(workdir / "run"),
            "SPARK_WORKER_DIR": str(workdir / "work"),
            "SPARK_LOCAL_DIRS": str(workdir / "tmp"),
            "SPARK_IDENT_STRING": "stitchlake",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_NO_DAEMONIZE": "1",
            # Executors start Python workers with the worker's environment unless the app says otherwise.
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            # C1 only: the daemons start ~30% faster and their throughput does not matter in tests.
            "SPARK_DAEMON_JAVA_OPTS": f"-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dstitchlake.cluster.dir={workdir}",
            # No REST submission server: it would take the fixed port 6066 and clash with a second cluster.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"
            + (f" -Dspark.deploy.defaultCores={default_cores}" if default_cores else ""),
        }
    )
    return env


def start(
    workdir: Path | str,
    cores: int = 2,
    memory: str = "4g",
    master_port: int | None = None,
    watch_pid: int | None = None,
    timeout: float = START_TIMEOUT_S,
    default_cores: int | None = None,
) -> SparkCluster:
    """Start a master and one worker (`cores`, `memory`) under `workdir`, or return the one running there.

    `cores` is what the worker advertises, not what the machine has: each executor takes at least one, so
    three concurrent applications need at least three (e.g. 6 on a 2-core box, with spark.cores.max=2 per app).
    `default_cores` (spark.deploy.defaultCores) caps applications that do not set spark.cores.max; without
    it the first such application takes every core and the others wait. Returns once the worker has
    registered. With `watch_pid`, a watchdog process stops the cluster when that process is gone.
    """
    workdir = Path(workdir).resolve()
    running = status(workdir)
    if running is not None:
        return running
    home = spark_home()
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkClusterError("java is not on PATH (Spark needs Java 17+)")
    CLUSTER.fresh(workdir, ("log", "run", "work", "tmp", "conf"))
    deadline = time.monotonic() + timeout
    port = master_port or free_port()
    web_port = free_port()
    cluster = SparkCluster(
        master_url=f"spark://127.0.0.1:{port}",
        web_url=f"http://127.0.0.1:{web_port}",
        cores=cores,
        memory=memory,
        dir=str(workdir),
        pids={},
    )
    env = _env(workdir, home, default_cores)
    daemon = ["bash", str(home / "sbin" / "spark-daemon.sh"), "start"]
    pids: dict[str, int] = {}
    with CLUSTER.starting(workdir, pids):
        master = [*daemon, MASTER_CLASS, "1", "--host", "127.0.0.1", "--port", str(port)]
        CLUSTER.spawn(workdir, cluster, pids, "master", [*master, "--webui-port", str(web_port)], env)
        # The worker retries registration only every 5-15 s, so start it once the master answers.
        CLUSTER.wait("the master", lambda: _listening(port), workdir, pids, deadline)
        worker = [*daemon, WORKER_CLASS, "1", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        worker += ["--cores", str(cores), "--memory", memory, "--work-dir", str(workdir / "work")]
        CLUSTER.spawn(workdir, cluster, pids, "worker", [*worker, cluster.master_url], env)
        CLUSTER.wait("the worker to register", lambda: CLUSTER.ready(cluster), workdir, pids, deadline)
    return CLUSTER.started(workdir, cluster, pids, watch_pid, env)


def _start_command(args: argparse.Namespace) -> SparkCluster:
    return start(args.dir, args.cores, args.memory, args.port, args.watch_pid, args.timeout, args.default_cores)


def _start_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="4g")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--default-cores", type=int, default=None, help="spark.deploy.defaultCores of the master")
    parser.add_argument("--timeout", type=float, default=START_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    return CLUSTER.command_line(__doc__ or "", argv, _start_options, _start_command)


if __name__ == "__main__":
    sys.exit(main())
