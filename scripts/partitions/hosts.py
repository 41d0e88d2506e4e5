"""Hosts as Linux network namespaces joined to a bridge (root only; a clear error where they cannot be made)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from scripts import ROOT, child_env, local_daemons, module_argv
from scripts.partitions.settings import DELAYER_QUEUE, FAKETIME_LIB


class PartitionsError(RuntimeError):
    """The harness could not build its hosts or servers (not a finding about the table)."""


def run_command(argv: Sequence[str], timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
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
TOOLS = {"ip": "iproute2", "iptables": "iptables", "unshare": "util-linux"}


def ensure_tools() -> None:
    """Install what a fresh machine lacks (as the other test servers are installed), or say what is missing."""
    missing = {package for tool, package in TOOLS.items() if shutil.which(tool) is None}
    if not Path(FAKETIME_LIB).is_file():
        missing.add("faketime")
    if importlib.util.find_spec("netfilterqueue") is None:  # the delayer's binding, built against Debian's library
        missing.add("libnetfilter-queue-dev")
        if shutil.which("cc") is None:
            missing.add("build-essential")  # gcc alone comes without libc's headers (a Recommends, not installed)
        if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
            missing.add("python3-dev")  # Debian's Python's headers (a pyenv or uv Python carries its own)
    if missing and (failed := local_daemons.apt_install(sorted(missing), 600.0)):
        raise PartitionsError(f"the partitions harness needs {', '.join(sorted(missing))} (Debian packages): {failed}")
    if importlib.util.find_spec("netfilterqueue") is None:
        wanted = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        done = run_command([*pip, *wanted["optional-dependencies"]["partitions"]], timeout=600.0, check=False)
        if done.returncode != 0:
            why = (done.stderr or done.stdout)[-2000:]
            raise PartitionsError(f"cannot install the delayer's NetfilterQueue: {why}")
        importlib.invalidate_caches()


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
        run_command(["ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge"])
        run_command(["ip", "-n", self.bridge, "link", "set", "br0", "up"])
        return self

    def _netns(self, ns: str) -> None:
        run_command(["ip", "netns", "add", ns])
        self._made.append(ns)
        run_command(["ip", "-n", ns, "link", "set", "lo", "up"])

    def add(self, name: str, addr: str) -> Host:
        host = Host(name, f"{self.tag}-{name}", addr)
        # `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts: the host resolves its own name (Java asks)
        etc = Path("/etc/netns") / host.ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{addr} {name}\n", encoding="utf-8")
        self._netns(host.ns)
        peer = f"v{self.tag}{name}"[-15:]
        run_command(
            ["ip", "link", "add", "eth0", "netns", host.ns, "type", "veth", "peer", "name", peer, "netns", self.bridge]
        )
        run_command(["ip", "-n", self.bridge, "link", "set", peer, "master", "br0", "up"])
        run_command(["ip", "-n", host.ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
        run_command(["ip", "-n", host.ns, "link", "set", "eth0", "up"])
        self.hosts[name] = host
        return host

    def remove(self, name: str) -> None:
        host = self.hosts.pop(name, None)
        if host is not None:
            self._kill_all(host.ns)
            run_command(["ip", "netns", "del", host.ns], check=False)
            shutil.rmtree(Path("/etc/netns") / host.ns, ignore_errors=True)
            with contextlib.suppress(ValueError):
                self._made.remove(host.ns)

    def argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """`argv` run on host `name`: in its network namespace, with a UTS namespace naming it."""
        host = self.hosts[name]
        script = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "sh", "-c", script, host.name, *argv]

    def ns_run(self, name: str, argv: Sequence[str], timeout: float = 30.0, check: bool = True) -> str:
        return run_command(["ip", "netns", "exec", self.hosts[name].ns, *argv], timeout=timeout, check=check).stdout

    def delay(self, name: str, seconds: float) -> Callable[[], None]:
        """Hold every packet of host `name`'s link (`eth0`, both ways; not its loopback) for `seconds`, as netem's
        `delay` would (scripts/partitions/delayer.py); returns what heals it: the rules removed, then the packets
        still held let through at their time."""
        host = self.hosts[name]
        argv = ["ip", "netns", "exec", host.ns, *module_argv("partitions.delayer", str(DELAYER_QUEUE), str(seconds))]
        delayer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
        assert delayer.stdout is not None
        if delayer.stdout.readline().strip() != "bound":  # a line, or nothing once it ended: it says why on stderr
            delayer.kill()
            raise PartitionsError(f"the delayer on {name} did not bind its queue: {delayer.communicate()[1][-2000:]}")
        queue = ["-j", "NFQUEUE", "--queue-num", str(DELAYER_QUEUE)]
        rules = [["OUTPUT", "-o", "eth0", *queue], ["INPUT", "-i", "eth0", *queue]]

        def heal() -> None:
            """The rules out, then the delayer asked to let through what it holds; one that died meanwhile (its
            packets then dropped, a cut rather than a delay) or will not end is the harness's failure."""
            if name in self.hosts:
                for rule in rules:
                    self.ns_run(name, ["iptables", "-D", *rule], check=False)
            died = delayer.poll()
            delayer.terminate()
            try:
                _, err = delayer.communicate(timeout=seconds + 30.0)
            except subprocess.TimeoutExpired:
                delayer.kill()
                _, err = delayer.communicate()
            if died is not None or delayer.returncode != 0:
                raise PartitionsError(f"the delayer on {name} ended with {delayer.returncode}: {err[-2000:]}")

        try:
            for rule in rules:
                self.ns_run(name, ["iptables", "-A", *rule])
        except PartitionsError:
            with contextlib.suppress(PartitionsError):
                heal()
            raise
        return heal

    def reachable(self, name: str, addr: str, port: int, timeout: float = 1.0) -> bool:
        probe = f"exec 3<>/dev/tcp/{addr}/{port}"
        try:
            done = run_command(
                ["ip", "netns", "exec", self.hosts[name].ns, "timeout", str(timeout), "bash", "-c", probe],
                timeout=timeout + 5,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    @staticmethod
    def _kill_all(ns: str) -> None:
        done = run_command(["ip", "netns", "pids", ns], check=False)
        for pid in done.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        for ns in reversed(self._made):
            self._kill_all(ns)
        for ns in reversed(self._made):
            run_command(["ip", "netns", "del", ns], check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self._made.clear()
        self.hosts.clear()
