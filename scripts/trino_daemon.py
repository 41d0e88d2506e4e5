"""A throw-away Trino server on 127.0.0.1 for the tests: one coordinator that is also its worker, from Maven.

Trino ships only as `io.trino:trino-server:<version>:tar.gz` on Maven Central (476 is the newest this machine's
mirror serves) and runs on Java 24+: Temurin 25 here (`$STITCH_TRINO_JAVA_HOME` picks another JDK). `install`
unpacks it once into `.venv/trino-server-<version>/`, keeping the two plugins the tests use (Iceberg, Delta Lake)
and adding the SQLite JDBC driver to the Iceberg plugin, so that Trino's JDBC catalog reads the SQLite catalog
`stitch publish` keeps. The server runs with dynamic catalog management (catalogs are made with `CREATE CATALOG`
while it runs, each test pointing its own at its own tables) and settings for a small, busy machine: a 1 GiB heap,
the serial collector, two worker threads. Config, data and logs live in one private directory. Stdlib and the
project's script helpers only.

    python -m scripts.trino_daemon install                    # prints the installed folder
    python -m scripts.trino_daemon start --dir /tmp/trino [--port 8080] [--watch-pid PID]   # prints JSON
    python -m scripts.trino_daemon status --dir /tmp/trino
    python -m scripts.trino_daemon stop --dir /tmp/trino
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import shutil
import sys
import time
from pathlib import Path

from scripts import ROOT, run_captured
from scripts.local_daemons import Daemons, State, free_port, get_json
from scripts.maven_jars import fetch
from scripts.spark_envs import SQLITE_JDBC

VERSION = "476"
COORDINATE = f"io.trino:trino-server:{VERSION}:tar.gz"
#: The plugins kept (the tarball has ~60): the tests read Iceberg and Delta Lake tables.
PLUGINS = ("iceberg", "delta-lake")
JAVA_HOME = "/usr/lib/jvm/temurin-25-jdk-amd64"
MIN_JAVA = 24  # Trino 476's floor
HEAP = "1G"
START_TIMEOUT_S = 300.0
UNPACK_TIMEOUT_S = 600.0
#: Small on purpose: the tests' tables have a few rows, and the machine has 2 cores shared with other work.
SERVER_PROPERTIES = {
    "coordinator": "true",
    "node-scheduler.include-coordinator": "true",
    "node.environment": "test",
    # Loopback only: bind there, and tell the scheduler to reach this node there (not at the host's address).
    "node.bind-ip": "127.0.0.1",
    "node.internal-address": "127.0.0.1",
    "catalog.management": "dynamic",
    "catalog.store": "memory",
    "query.max-memory": "256MB",
    "query.max-memory-per-node": "256MB",
    "memory.heap-headroom-per-node": "128MB",
    "task.concurrency": "1",
    "task.max-worker-threads": "2",
    "http-server.threads.max": "50",
}
JVM_OPTIONS = (
    f"-Xmx{HEAP}",
    "-XX:+UseSerialGC",
    "-XX:ReservedCodeCacheSize=128M",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djdk.attach.allowAttachSelf=true",
    "-XX:+EnableDynamicAgentLoading",
    "--enable-native-access=ALL-UNNAMED",
    "-Dfile.encoding=UTF-8",
)


@dataclasses.dataclass(frozen=True)
class TrinoServer(State):
    """How to reach a running server, and which processes to stop."""

    uri: str  # http://127.0.0.1:PORT
    port: int
    version: str


class TrinoError(RuntimeError):
    """Trino could not be installed or started; the message carries the log tail."""


def home() -> Path:
    return ROOT / ".venv" / f"trino-server-{VERSION}"


def java() -> str:
    """The `java` of a JDK Trino runs on: `$STITCH_TRINO_JAVA_HOME`, else Temurin 25."""
    chosen = Path(os.environ.get("STITCH_TRINO_JAVA_HOME", JAVA_HOME)) / "bin" / "java"
    if not chosen.exists():
        raise TrinoError(
            f"Trino {VERSION} needs Java {MIN_JAVA}+; {chosen} does not exist (install a JDK 25, e.g. Temurin, or "
            "set STITCH_TRINO_JAVA_HOME)"
        )
    return str(chosen)


def install() -> Path:
    """Unpack the pinned server once (one installer at a time), keeping only `PLUGINS`; a failure raises."""
    target = home()
    done = target / ".installed"
    sqlite_jar = fetch([SQLITE_JDBC])[0]
    wanted = "\n".join([COORDINATE, *PLUGINS, sqlite_jar.name])
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done.read_text() if done.exists() else "") == wanted:
            return target
        tarball = fetch([COORDINATE])[0]
        scratch = target.parent / f"{target.name}.unpacking"
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        scratch.mkdir()
        try:
            # GNU tar, not tarfile: the archive hard-links jars across plugins, and tar restores them in one pass.
            done_tar = run_captured(
                ["tar", "-xzf", str(tarball), "-C", str(scratch), "--strip-components=1"], UNPACK_TIMEOUT_S
            )
            if done_tar.returncode != 0:
                raise TrinoError(f"unpacking {tarball} failed: {done_tar.stderr[-2000:]}")
            shutil.rmtree(scratch / "bin")  # launchers: the JVM is started directly
            for plugin in (scratch / "plugin").iterdir():
                if plugin.name not in PLUGINS:
                    shutil.rmtree(plugin)
            shutil.copy2(sqlite_jar, scratch / "plugin" / "iceberg" / sqlite_jar.name)
            os.replace(scratch, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            tarball.unlink(missing_ok=True)  # Maven's own cache keeps it; the unpacked server is what runs
        done.write_text(wanted)
    return target


def info(uri: str, timeout: float = 2.0) -> dict[str, object] | None:
    """The server's /v1/info, or None while it does not answer."""
    return get_json(f"{uri}/v1/info", timeout)


def _ready(uri: str) -> bool:
    found = info(uri)
    return found is not None and found.get("starting") is False


class Trino(Daemons[TrinoServer]):
    module, state, error = "trino_daemon", TrinoServer, TrinoError
    order = {"watchdog": 0, "trino": 1}
    essential = "trino"
    grace_s = 20.0
    log_lines = 60

    def ready(self, state: TrinoServer) -> bool:
        return _ready(state.uri)


TRINO = Trino()
status, stop = TRINO.status, TRINO.stop


def start(
    workdir: Path | str, port: int | None = None, watch_pid: int | None = None, timeout: float = START_TIMEOUT_S
) -> TrinoServer:
    """Start a server under `workdir` (or return the one running there) and wait until it has started; with
    `watch_pid`, a watchdog stops it once that process is gone."""
    workdir = Path(workdir).resolve()
    running = status(workdir)
    if running is not None:
        return running
    server_home = install()
    executable = java()
    TRINO.fresh(workdir, ("log", "etc", "var"))
    port = port or free_port()
    uri = f"http://127.0.0.1:{port}"
    properties = {
        **SERVER_PROPERTIES,
        "node.id": f"stitchlake-{port}",
        "http-server.http.port": str(port),
        "discovery.uri": uri,
    }
    config = workdir / "etc" / "config.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    (workdir / "etc" / "log.properties").write_text("io.trino=WARN\nio.airlift=WARN\n")
    argv = [
        executable,
        *JVM_OPTIONS,
        f"-Dconfig={config}",
        f"-Dlog.levels-file={workdir / 'etc' / 'log.properties'}",
        f"-Dplugin.dir={server_home / 'plugin'}",
        f"-Dstitchlake.trino.dir={workdir}",  # so a stop recognises the process as ours
        "-cp",
        f"{server_home / 'lib'}/*",
        "io.trino.server.TrinoServer",
    ]
    server = TrinoServer(uri=uri, port=port, version=VERSION, dir=str(workdir), pids={})
    pids: dict[str, int] = {}
    with TRINO.starting(workdir, pids):
        TRINO.spawn(workdir, server, pids, "trino", argv)
        TRINO.wait("Trino to start", lambda: _ready(uri), workdir, pids, time.monotonic() + timeout)
    return TRINO.started(workdir, server, pids, watch_pid)


def _start_command(args: argparse.Namespace) -> TrinoServer:
    return start(args.dir, args.port, args.watch_pid, args.timeout)


def _start_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=START_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["install"]:
        try:
            print(install())
        except TrinoError as exc:
            print(f"python -m scripts.trino_daemon install: {exc}", file=sys.stderr)
            return 1
        return 0
    return TRINO.command_line(__doc__ or "", args, _start_options, _start_command)


if __name__ == "__main__":
    sys.exit(main())
