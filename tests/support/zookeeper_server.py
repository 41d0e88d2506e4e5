"""pytest plugin: a real, throw-away ZooKeeper server for the `zookeeper`-marked tests.

`zookeeper_hosts` (session scope) yields "127.0.0.1:<port>" of a standalone server started from the Debian
`zookeeper` package (or `$ZOOKEEPER_HOME`, or `$STITCH_ZOOKEEPER_CLASSPATH`). If nothing is installed and we
are root, it tries `apt-get install -y zookeeper` once; only when that fails too are the tests skipped.
`$STITCH_ZOOKEEPER_HOSTS` points the tests at an existing server instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import local_daemons

DEBIAN_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_BINDINGS = ("/usr/share/java/slf4j-simple.jar", "/usr/share/java/slf4j-log4j12.jar")
START_TIMEOUT_S = 30.0
APT_TIMEOUT_S = 600.0


def _classpath() -> str | None:
    """The classpath of an installed ZooKeeper server, or None."""
    explicit = os.environ.get("STITCH_ZOOKEEPER_CLASSPATH")
    if explicit:
        return explicit
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(glob.glob(os.path.join(home, "lib", "*.jar")) + glob.glob(os.path.join(home, "*.jar")))
        if jars:
            return os.pathsep.join(jars)
    if os.path.exists(DEBIAN_JAR):
        # The Debian jar's manifest Class-Path names its dependencies; add an slf4j binding so it logs.
        parts = [DEBIAN_JAR]
        parts += [binding for binding in SLF4J_BINDINGS if os.path.exists(binding)][:1]
        return os.pathsep.join(parts)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the answer ('' if the server does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start_server(java: str, classpath: str, workdir: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """Start one standalone server on a free port and wait until it serves; fail with the log tail."""
    port = _free_port()
    data_dir = workdir / f"data-{port}"
    data_dir.mkdir(parents=True)
    config = workdir / f"zoo-{port}.cfg"
    config.write_text(
        "\n".join(
            [
                "tickTime=500",
                f"dataDir={data_dir}",
                f"clientPort={port}",
                "clientPortAddress=127.0.0.1",
                "maxClientCnxns=0",
                "minSessionTimeout=1000",
                "maxSessionTimeout=60000",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr",
                "",
            ]
        )
    )
    log_path = workdir / f"zookeeper-{port}.log"
    argv = [
        java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        classpath,
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(config),
    ]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:  # however the wait ends but serving (an interrupt too), the server is not left running
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with code {proc.returncode} (port {port}); log:\n{_log_tail(log_path)}"
                )
            if "Mode:" in four_letter_word(port, "srvr"):
                return proc, port, log_path
            time.sleep(0.1)
        raise RuntimeError(
            f"ZooKeeper did not serve on port {port} within {START_TIMEOUT_S:g}s; log:\n{_log_tail(log_path)}"
        )
    except BaseException:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="session")
def zookeeper_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """'127.0.0.1:<port>' of a real ZooKeeper server that lives for the test session."""
    external = os.environ.get("STITCH_ZOOKEEPER_HOSTS")
    if external:
        yield external
        return
    classpath = _classpath()
    java = shutil.which("java")
    if classpath is None or java is None:
        reason = local_daemons.apt_install(["zookeeper"], APT_TIMEOUT_S)
        classpath = _classpath()
        java = shutil.which("java")
        if classpath is None or java is None:
            reason = reason or "zookeeper or java still missing after apt-get install"
            pytest.skip(f"no ZooKeeper server available: {reason}")
    workdir = tmp_path_factory.mktemp("zookeeper")
    errors = []
    for _attempt in range(3):  # a free port can be taken between probing and binding
        try:
            proc, port, _log = _start_server(java, classpath, workdir)
            break
        except RuntimeError as exc:
            errors.append(str(exc))
            if "Address already in use" not in str(exc) and "BindException" not in str(exc):
                break
    else:
        pytest.fail("could not start ZooKeeper:\n" + "\n\n".join(errors), pytrace=False)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)
