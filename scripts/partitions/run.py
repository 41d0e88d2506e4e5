"""Commands as their clients saw them (`Op`), the run's counts (`Stats`) and the run itself (`Run`: hosts,
servers, and commands started on a host)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts import ROOT, module_argv
from scripts.partitions.hosts import Network, PartitionsError
from scripts.partitions.servers import Servers
from scripts.partitions.settings import (
    CTL_ADDR,
    DEFINITE_FAILURES,
    KAFKA_ADDR,
    OP_TIMEOUT_S,
    S3_ADDR,
    WRITE_COMMANDS,
    ZK_ADDR,
)

# ========================================================================================= operations

#: A `stitch stream` progress line for a micro-batch that committed (stitchlake/spark/streaming.py says it so).
STREAM_COMMIT = re.compile(r"micro-batch \d+ committed instant (\d+): .*?(\d+) rows")


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

    def writes(self) -> list[tuple[str, int]]:
        """The deltacommits this command was told it made, with their rows: an acknowledged ingest's instant; each
        micro-batch a stream said it committed, as it went (its progress lines) and in its answer at the end."""
        if self.command == "ingest":
            return [(self.instant, int(self.answer.get("rows") or 0))] if self.exit == 0 and self.instant else []
        if self.command != "stream":
            return []
        told = {str(c["instant"]): int(c["rows"]) for c in self.answer.get("commits") or []} if self.exit == 0 else {}
        for said in STREAM_COMMIT.finditer(self.output[1]):
            told.setdefault(said.group(1), int(said.group(2)))
        return sorted(told.items())

    def instants(self) -> list[str]:
        """Every instant the answer says this command completed: an ingest's or a clean's, a stream's micro-batches,
        a compaction's run and the pending plans it ran first (`stitch compact --json`: `result` and `resumed`)."""
        if self.command == "stream":
            return [instant for instant, _rows in self.writes()]
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
            return "ok" if self.instants() or self.command not in WRITE_COMMANDS else "noop"
        if self.exit in DEFINITE_FAILURES:
            return "failed"
        return "unknown"

    def line(self) -> str:
        what = f"{self.command}{' -s ' + self.stream if self.stream else ''}"
        answer = {k: self.answer[k] for k in ("instant", "completed", "rows", "error") if self.answer.get(k)}
        if self.command == "stream":
            answer["commits"] = self.writes()
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
