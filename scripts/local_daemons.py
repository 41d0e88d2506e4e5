"""What the throw-away servers of the tests have in common (kafka_broker, rgw, spark_standalone, trino_daemon).

Each runs a few daemons under one private directory: spawned in sessions of their own (so a stop can signal a
whole process group), recorded in a state file, waited for with their logs shown on failure, stopped by pid only
while the pid still looks like ours (pids get reused), and optionally watched: a small watchdog stops them once
the process that started them is gone, so a killed test run leaves no orphans. `Daemons` is that skeleton once;
each server's subclass says only what differs (its state, its probe, its stop order). Stdlib only, plus
stitchlake's stdlib-only `concurrency.processes` (the one place that reads /proc for a process's state).
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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from scripts import child_env, module_argv, run_captured
from stitchlake.concurrency import processes

STATE_FILE = "state.json"


def apt_install(packages: Iterable[str], timeout_s: float = 900.0) -> str:
    """Install Debian packages a test server needs (root only), running `apt-get update` once if the first try
    fails (a fresh machine's package lists may be stale or empty). Returns why it failed, or '' when it worked."""
    apt = shutil.which("apt-get")
    names = list(packages)
    if apt is None or os.geteuid() != 0:
        return f"cannot apt-get install {' '.join(names)} (no apt-get or not root)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [apt, "install", "-y", "-q", "--no-install-recommends", *names]
    detail = ""
    for commands in ([install], [[apt, "update", "-q"], install]):
        try:
            for argv in commands:
                done = run_captured(argv, timeout_s, env)
                if done.returncode != 0:
                    detail = (done.stderr or done.stdout).strip()[-800:]
                    break
            else:
                return ""
        except (OSError, subprocess.TimeoutExpired) as exc:
            detail = repr(exc)
    return f"apt-get install {' '.join(names)} failed: {detail}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, timeout: float = 2.0) -> dict[str, object] | None:
    """A server's JSON status page as a dict, or None while it does not answer (not up yet, or gone): what a
    readiness probe polls (Trino's /v1/info, the Spark master's /json)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie counts as gone."""
    return processes.exists(pid) and not processes.exited(pid)


def pid_is_ours(pid: int, workdir: Path) -> bool:
    """True if `pid` still runs with our directory in its command line or environment (not a reused pid)."""
    needle = str(workdir).encode()
    for part in ("cmdline", "environ"):
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{pid}/{part}").read_bytes():
                return True
    return False


def spawn(argv: list[str], workdir: Path, name: str, env: dict[str, str] | None = None) -> int:
    """Start one daemon in the foreground of its own session (so a stop can kill the group); returns its pid."""
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


def spawn_watchdog(module: str, workdir: Path, watch_pid: int, env: dict[str, str] | None = None) -> int:
    """`python -m scripts.<module> watch --dir workdir --pid watch_pid`: stops the daemons once `watch_pid` is
    gone."""
    argv = module_argv(module, "watch", "--dir", str(workdir), "--pid", str(watch_pid))
    return spawn(argv, workdir, "watchdog", child_env(env))


def wait_for(
    what: str,
    check: Callable[[], bool],
    pids: dict[str, int],
    deadline: float,
    logs: Callable[[], str],
    error: type[Exception],
) -> None:
    """Poll `check` until it holds; a daemon that dies meanwhile, or the deadline, raises `error` with the logs."""
    while time.monotonic() < deadline:
        dead = [name for name, pid in pids.items() if not pid_alive(pid)]
        if dead:
            raise error(f"{', '.join(dead)} exited while waiting for {what}; logs:\n{logs()}")
        if check():
            return
        time.sleep(0.2)
    raise error(f"timed out waiting for {what}; logs:\n{logs()}")


def reap(pids: Iterable[int]) -> None:
    """Collect our own exited children so they do not linger as zombies."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def kill_in_order(
    workdir: Path,
    pids: dict[str, int],
    rank: Callable[[str], Any],
    running: Callable[[int], bool] = pid_alive,
    grace_s: float = 10.0,
) -> None:
    """Stop daemons one by one in `rank` order: SIGTERM the process group (and the pid), wait up to `grace_s`
    while `running(pid)`, then SIGKILL. Only pids that still look like ours are signalled."""
    me = os.getpid()
    for name in sorted(pids, key=lambda n: (rank(n), n)):
        pid = pids[name]
        if pid == me or not (pid_alive(pid) and pid_is_ours(pid, workdir)):
            continue
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)  # each daemon leads its own session and process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
            end = time.monotonic() + wait_s
            while running(pid) and time.monotonic() < end:
                reap([pid])
                time.sleep(0.05)
            if not running(pid):
                break


def read_state(workdir: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((Path(workdir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def write_state(workdir: Path, state: Any) -> None:
    """The state file (a dataclass as JSON), replaced atomically: a reader never sees half of it."""
    tmp = workdir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(state), indent=2))
    os.replace(tmp, workdir / STATE_FILE)


def watch(watch_pid: int, stop: Callable[[], None], interval_s: float = 1.0) -> None:
    """Run `stop` once `watch_pid` has exited (what the watchdog does)."""
    while pid_alive(watch_pid):
        time.sleep(interval_s)
    stop()


@dataclasses.dataclass(frozen=True)
class Commands:
    """One server script's verbs, for `command_line`."""

    prog: str
    doc: str
    add_start_options: Callable[[argparse.ArgumentParser], None]
    start: Callable[[argparse.Namespace], Any]
    stop: Callable[[Path], None]
    status: Callable[[Path], Any]
    error: type[Exception]


def command_line(commands: Commands, argv: list[str] | None) -> int:
    """`start --dir D [...]` (prints the state as JSON), `status --dir D`, `stop --dir D`, and the hidden
    `watch --dir D --pid P` the watchdog runs. Exit 1 with the error on failure."""
    parser = argparse.ArgumentParser(description=commands.doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start (or reuse) it; prints JSON")
    start.add_argument("--dir", required=True, type=Path)
    commands.add_start_options(start)
    start.add_argument("--watch-pid", type=int, default=None, help="stop the daemons when this pid exits")
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("--dir", required=True, type=Path)
    watcher = sub.add_parser("watch", help=argparse.SUPPRESS)
    watcher.add_argument("--dir", required=True, type=Path)
    watcher.add_argument("--pid", required=True, type=int)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            args.dir.mkdir(parents=True, exist_ok=True)
            began = time.monotonic()
            state = commands.start(args)
            print(json.dumps({**dataclasses.asdict(state), "start_s": round(time.monotonic() - began, 2)}, indent=2))
        elif args.command == "stop":
            commands.stop(args.dir)
        elif args.command == "status":
            running = commands.status(args.dir)
            print(json.dumps(dataclasses.asdict(running), indent=2) if running else "{}")
            return 0 if running else 1
        else:
            directory = args.dir.resolve()
            watch(args.pid, lambda: commands.stop(directory))
    except commands.error as exc:
        print(f"{commands.prog} {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class State:
    """What each server's state dataclass holds besides how to reach it (its own fields): its folder and the pids
    to stop, given by name (they come after its own fields)."""

    dir: str
    pids: dict[str, int]


S = TypeVar("S", bound=State)


class Daemons(Generic[S]):
    """One throw-away server: its state file, `status`, the bookkeeping of a start, `stop` in order and the command
    line. A subclass names its state class, error and module and says whether the server answers (`ready`)."""

    module: str  # run as `python -m scripts.<module>`: the watchdog and the command line
    state: type[S]
    error: type[Exception]
    #: Stop rank by daemon name, lowest first; a name not listed goes last.
    order: ClassVar[dict[str, int]] = {"watchdog": 0}
    #: The daemon `status` requires running (None: every recorded one).
    essential: ClassVar[str | None] = None
    grace_s: ClassVar[float] = 10.0
    log_lines: ClassVar[int] = 30

    def ready(self, state: S) -> bool:
        """The server answers requests."""
        raise NotImplementedError

    def rank(self, name: str) -> int:
        return self.order.get(name, len(self.order))

    def running(self, pid: int) -> bool:
        """Whether a signalled daemon is still there (a subclass may wait for its whole process group)."""
        return pid_alive(pid)

    def read_state(self, workdir: Path) -> S | None:
        found = read_state(workdir)
        try:
            return self.state(**found) if found else None
        except TypeError:
            return None

    def status(self, workdir: Path | str) -> S | None:
        """The running server of `workdir`, or None if it is not (fully) running or does not answer."""
        workdir = Path(workdir).resolve()
        state = self.read_state(workdir)
        if state is None or not state.pids or (self.essential is not None and self.essential not in state.pids):
            return None
        pids = [state.pids[self.essential]] if self.essential is not None else list(state.pids.values())
        if not all(pid_alive(pid) and pid_is_ours(pid, workdir) for pid in pids):
            return None
        return state if self.ready(state) else None

    def logs(self, workdir: Path) -> str:
        tails = (f"--- {p} ---\n{log_tail(p, self.log_lines)}" for p in sorted((workdir / "log").glob("*")))
        return "\n".join(tails) or "(no logs)"

    def wait(self, what: str, check: Callable[[], bool], workdir: Path, pids: dict[str, int], deadline: float) -> None:
        wait_for(what, check, pids, deadline, lambda: self.logs(workdir), self.error)

    def fresh(self, workdir: Path, folders: Iterable[str]) -> None:
        """Stop what a stale or half-started run left in `workdir`, and empty `folders` there."""
        self.stop(workdir)
        for sub in folders:
            shutil.rmtree(workdir / sub, ignore_errors=True)
            (workdir / sub).mkdir(parents=True)

    def spawn(
        self,
        workdir: Path,
        state: S,
        pids: dict[str, int],
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
    ) -> None:
        """Start daemon `name` and record it at once, so a stop finds it even if the start fails later."""
        pids[name] = spawn(argv, workdir, name, env)
        write_state(workdir, dataclasses.replace(state, pids=dict(pids)))

    @contextlib.contextmanager
    def starting(self, workdir: Path, pids: dict[str, int]) -> Iterator[None]:
        """A start that fails (or is interrupted) stops what it had spawned."""
        try:
            yield
        except BaseException:
            self.kill(workdir, pids)
            raise

    def started(
        self, workdir: Path, state: S, pids: dict[str, int], watch_pid: int | None, env: dict[str, str] | None = None
    ) -> S:
        """The final state, with a watchdog that stops the daemons once `watch_pid` is gone."""
        if watch_pid is not None:
            pids = {**pids, "watchdog": spawn_watchdog(self.module, workdir, watch_pid, env)}
        state = dataclasses.replace(state, pids=dict(pids))
        write_state(workdir, state)
        return state

    def kill(self, workdir: Path, pids: dict[str, int], grace_s: float | None = None) -> None:
        grace = self.grace_s if grace_s is None else grace_s
        kill_in_order(workdir, pids, self.rank, running=self.running, grace_s=grace)

    def stop(self, workdir: Path | str) -> None:
        """Stop the daemons of `workdir` in order (SIGTERM, SIGKILL after the grace time); the data stays."""
        workdir = Path(workdir).resolve()
        state = self.read_state(workdir)
        if state is None:
            return
        self.kill(workdir, dict(state.pids))
        write_state(workdir, dataclasses.replace(state, pids={}))

    def command_line(
        self,
        doc: str,
        argv: list[str] | None,
        add_start_options: Callable[[argparse.ArgumentParser], None],
        start: Callable[[argparse.Namespace], Any],
    ) -> int:
        prog = f"python -m scripts.{self.module}"
        return command_line(Commands(prog, doc, add_start_options, start, self.stop, self.status, self.error), argv)
