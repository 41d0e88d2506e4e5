"""A throw-away Spark standalone cluster (one master, one worker) on 127.0.0.1, from the pip pyspark package.

Why: `local[N]` runs everything in one JVM; a standalone cluster exercises what production does (separate
executor JVMs and Python workers, closures pickled across processes, several applications at once).
pip pyspark ships `sbin/spark-daemon.sh` but no start-master.sh/start-worker.sh, so the Master and Worker
classes are started through spark-daemon.sh with SPARK_NO_DAEMONIZE (it then runs the JVM as its child instead
of nohup + `sleep 2`, and we own the process group). Logs, pids, conf and the worker's dir live in one private
directory. Stdlib only.

    python scripts/spark_standalone.py start --dir /tmp/spark [--cores 2] [--memory 4g] [--watch-pid PID]
    python scripts/spark_standalone.py status --dir /tmp/spark
    python scripts/spark_standalone.py stop --dir /tmp/spark
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

STATE_FILE = "state.json"
START_TIMEOUT_S = 90.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclasses.dataclass(frozen=True)
class SparkCluster:
    """How to reach a running cluster, and which processes to stop."""

    master_url: str  # spark://127.0.0.1:PORT
    web_url: str  # the master's UI; /json describes workers and applications
    cores: int
    memory: str
    dir: str
    pids: dict[str, int]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _log_tails(workdir: Path) -> str:
    return "\n".join(f"--- {p} ---\n{log_tail(p)}" for p in sorted((workdir / "log").glob("*"))) or "(no logs)"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie counts as gone
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def _pid_is_ours(pid: int, workdir: Path) -> bool:
    """True if `pid` still runs with our directory in its command line or environment (not a reused pid)."""
    needle = str(workdir).encode()
    for part in ("cmdline", "environ"):
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{pid}/{part}").read_bytes():
                return True
    return False


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def master_json(web_url: str, timeout: float = 2.0) -> dict[str, object] | None:
    """The master's /json status (workers, active and completed apps), or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{web_url}/json", timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _alive_workers(web_url: str) -> int:
    state = master_json(web_url)
    if not state:
        return 0
    workers = state.get("workers") or []
    return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")  # type: ignore[union-attr]


def read_state(workdir: Path) -> SparkCluster | None:
    try:
        return SparkCluster(**json.loads((Path(workdir) / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write_state(workdir: Path, cluster: SparkCluster) -> None:
    tmp = workdir / f"{STATE_FILE}.tmp"
    tmp.write_text(cluster.to_json())
    os.replace(tmp, workdir / STATE_FILE)


def status(workdir: Path | str) -> SparkCluster | None:
    """The running cluster of `workdir` with at least one alive worker, or None."""
    workdir = Path(workdir).resolve()
    state = read_state(workdir)
    if state is None or not state.pids:
        return None
    if not all(_pid_alive(pid) and _pid_is_ours(pid, workdir) for pid in state.pids.values()):
        return None
    return state if _alive_workers(state.web_url) >= 1 else None


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


def _spawn(argv: list[str], env: dict[str, str], workdir: Path, name: str) -> int:
    out = open(workdir / "log" / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()
    return proc.pid


def _wait(what: str, check: Callable[[], bool], workdir: Path, pids: dict[str, int], deadline: float) -> None:
    while time.monotonic() < deadline:
        dead = [name for name, pid in pids.items() if not _pid_alive(pid)]
        if dead:
            raise SparkClusterError(f"{', '.join(dead)} exited while waiting for {what}; logs:\n{_log_tails(workdir)}")
        if check():
            return
        time.sleep(0.2)
    raise SparkClusterError(f"timed out waiting for {what}; logs:\n{_log_tails(workdir)}")


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
    stop(workdir)
    for sub in ("log", "run", "work", "tmp", "conf"):
        shutil.rmtree(workdir / sub, ignore_errors=True)
        (workdir / sub).mkdir(parents=True)
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
    try:
        master = [*daemon, MASTER_CLASS, "1", "--host", "127.0.0.1", "--port", str(port)]
        pids["master"] = _spawn([*master, "--webui-port", str(web_port)], env, workdir, "master")
        _write_state(workdir, dataclasses.replace(cluster, pids=dict(pids)))
        # The worker retries registration only every 5-15 s, so start it once the master answers.
        _wait("the master", lambda: _listening(port), workdir, pids, deadline)
        worker = [*daemon, WORKER_CLASS, "1", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        worker += ["--cores", str(cores), "--memory", memory, "--work-dir", str(workdir / "work")]
        pids["worker"] = _spawn([*worker, cluster.master_url], env, workdir, "worker")
        _write_state(workdir, dataclasses.replace(cluster, pids=dict(pids)))
        _wait("the worker to register", lambda: _alive_workers(cluster.web_url) >= 1, workdir, pids, deadline)
    except BaseException:
        _kill(workdir, pids)
        raise
    cluster = dataclasses.replace(cluster, pids=dict(pids))
    if watch_pid is not None:
        argv = [sys.executable, os.path.abspath(__file__), "watch", "--dir", str(workdir), "--pid", str(watch_pid)]
        cluster = dataclasses.replace(cluster, pids={**pids, "watchdog": _spawn(argv, env, workdir, "watchdog")})
    _write_state(workdir, cluster)
    return cluster


def _kill(workdir: Path, pids: dict[str, int], grace_s: float = 10.0) -> None:
    """Worker first, master last: SIGTERM the process group (spark-daemon.sh and its JVM), wait, SIGKILL."""
    order = {"watchdog": 0, "worker": 1, "master": 2}
    me = os.getpid()
    for name in sorted(pids, key=lambda n: order.get(n, 3)):
        pid = pids[name]
        if pid == me or not (_pid_alive(pid) and _pid_is_ours(pid, workdir)):
            continue
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
            end = time.monotonic() + wait_s
            while time.monotonic() < end and _group_alive(pid):
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.05)
            if not _group_alive(pid):
                break


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process of the group `pgid` exists (the JVM may outlive its bash parent)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def stop(workdir: Path | str) -> None:
    """Stop the cluster of `workdir` (and applications' executors, which are in the worker's process group)."""
    workdir = Path(workdir).resolve()
    state = read_state(workdir)
    if state is None:
        return
    _kill(workdir, dict(state.pids))
    _write_state(workdir, dataclasses.replace(state, pids={}))


def watch(workdir: Path, watch_pid: int, interval_s: float = 1.0) -> None:
    """Stop the cluster of `workdir` once `watch_pid` has exited."""
    while _pid_alive(watch_pid):
        time.sleep(interval_s)
    stop(workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start (or reuse) a cluster; prints JSON")
    p_start.add_argument("--dir", required=True, type=Path)
    p_start.add_argument("--cores", type=int, default=2)
    p_start.add_argument("--memory", default="4g")
    p_start.add_argument("--port", type=int, default=None)
    p_start.add_argument("--default-cores", type=int, default=None, help="spark.deploy.defaultCores of the master")
    p_start.add_argument("--watch-pid", type=int, default=None, help="stop the cluster when this pid exits")
    p_start.add_argument("--timeout", type=float, default=START_TIMEOUT_S)
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--dir", required=True, type=Path)
    p_watch = sub.add_parser("watch", help=argparse.SUPPRESS)
    p_watch.add_argument("--dir", required=True, type=Path)
    p_watch.add_argument("--pid", required=True, type=int)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            args.dir.mkdir(parents=True, exist_ok=True)
            began = time.monotonic()
            cluster = start(
                args.dir, args.cores, args.memory, args.port, args.watch_pid, args.timeout, args.default_cores
            )
            print(json.dumps({**dataclasses.asdict(cluster), "start_s": round(time.monotonic() - began, 2)}, indent=2))
        elif args.command == "stop":
            stop(args.dir)
        elif args.command == "status":
            running = status(args.dir)
            print(running.to_json() if running else "{}")
            return 0 if running else 1
        else:
            watch(args.dir.resolve(), args.pid)
    except SparkClusterError as exc:
        print(f"spark_standalone.py {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
