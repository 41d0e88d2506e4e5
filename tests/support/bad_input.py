"""pytest plugin for the bad-input tests of both tiers: a workspace (config, landing folders, a table with one
ingested orders file) copied fresh for each test, the catalogue's `Case` and how a refusal is checked."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.cli import console
from tests.support.snapshots import LOCKS, snapshot
from tests.support.tables import landing_stream, new_table_file

CONFIG: dict[str, Any] = {
    "table": {"name": "wide", "path": "table", "key": {"k": "long"}, "partition_by": {"p": "string"}, "buckets": 2},
    "streams": {
        "orders": landing_stream("orders", "parquet", {"amount": "long", "status": "string", "ots": "long"}, "ots"),
        "payments": landing_stream("payments", "csv", {"paid": "double"}, nulls="ignore"),
        "shipments": {
            "columns": {"carrier": "string"},  # no ordering: the last commit wins (commit-time ordering)
            "source": {"format": "json", "path": "landing/shipments"},
        },
        "readings": {  # a floating-point ordering (NaN) and a timestamp (nanoseconds)
            "columns": {"value": "double", "rts": "double", "at": "timestamp"},
            "ordering": "rts",
            "source": {"format": "parquet", "path": "landing/readings"},
        },
        "clicks": {"columns": {"page": "string"}, "source": {"format": "avro", "path": "landing/clicks"}},
    },
    "concurrency": {"heartbeat": {"interval_s": 1, "expire_s": 5}, "lock": {"wait_s": 10, "expire_s": 10}},
}


def stitch(
    *args: str, cwd: Path, env: dict[str, str | None] | None = None, runner: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """The real console script (`tests.support.cli.console`); `runner` is e.g. `UNPRIVILEGED`."""
    return console(*args, cwd=cwd, env=env, runner=runner, timeout=600)


def write_parquet(path: Path, columns: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def orders(keys: list[Any], **overrides: Any) -> dict[str, Any]:
    """Columns of a valid orders landing file for `keys`, with some columns replaced."""
    columns: dict[str, Any] = {
        "k": pa.array(keys, pa.int64()),
        "p": ["even" if (k or 0) % 2 == 0 else "odd" for k in keys],
        "amount": [10] * len(keys),
        "status": ["new"] * len(keys),
        "ots": [1] * len(keys),
    }
    columns.update(overrides)
    return columns


def build_template(root: Path) -> Path:
    """A workspace: config, landing folders, and a table holding one ingested orders file."""
    for stream in CONFIG["streams"]:
        (root / "landing" / stream).mkdir(parents=True)
    write_parquet(root / "landing/orders/0001.parquet", orders([1, 2, 3, 4]))
    table, _ = new_table_file(root, CONFIG)
    table.ingest("orders")
    return root


def copy_workspace(template: Path, tmp_path: Path) -> Path:
    """A private copy of the template workspace (relative config paths keep it self-contained)."""
    target = tmp_path / "ws"
    shutil.copytree(template, target, symlinks=True)
    return target


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_template(tmp_path_factory.mktemp("template"))


@pytest.fixture
def workspace(template: Path, tmp_path: Path) -> Path:
    return copy_workspace(template, tmp_path)


def config_variant(name: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """Setup: the good config with one change, written to `name` next to it."""

    def setup(ws: Path) -> None:
        document = yaml.safe_load((ws / "table.yaml").read_text())
        edit(document)
        (ws / name).write_text(yaml.safe_dump(document, sort_keys=False))

    return setup


def landing(relative: str, content: bytes | Callable[[Path], Any]) -> Callable[[Path], None]:
    """Setup: put a landing file at `relative` (raw bytes, or written by a function of its path)."""

    def setup(ws: Path) -> None:
        path = ws / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            content(path)

    return setup


@dataclass(frozen=True)
class Case:
    """One bad input: how to make it, the command that meets it, and what must come out."""

    id: str
    setup: Callable[[Path], None]
    args: tuple[str, ...]
    code: int
    message: tuple[str, ...]  # fragments of stderr; `{ws}` stands for the workspace folder
    takes_lock: bool = False  # rejected inside an ingest transaction: lease files may rotate, nothing else
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset
    hidden: tuple[str, ...] = ()  # what must appear nowhere (secret values)
    fields: dict[str, str] = field(default_factory=dict)  # with --json: fields the failure object must have


INGEST_ORDERS = ("ingest", "-c", "table.yaml", "-s", "orders", "--engine", "local")


def with_config(args: tuple[str, ...], name: str) -> tuple[str, ...]:
    return tuple(name if a == "table.yaml" else a for a in args)


def refused_file(
    id: str,
    relative: str,
    content: bytes | Callable[[Path], Any],
    message: tuple[str, ...],
    *,
    hidden: tuple[str, ...] = (),
    fields: dict[str, str] | None = None,
) -> Case:
    """A landing file at `relative` (`landing/STREAM/...`, made as `landing` makes it) that `stitch ingest -s STREAM`
    refuses: exit 5, and only lease files may rotate, since the refusal comes inside the ingest's transaction (bad
    rows are found while reading). The same for every such case, so said once; with `fields` (which the failure
    object must have) the ingest runs with `--json`."""
    stream = relative.split("/")[1]
    json_flag = ("--json",) if fields else ()
    args = ("ingest", "-c", "table.yaml", "-s", stream, "--engine", "local", *json_flag)
    return Case(id, landing(relative, content), args, 5, message, takes_lock=True, hidden=hidden, fields=fields or {})


def check_refused(case: Case, workspace: Path) -> subprocess.CompletedProcess[str]:
    """Run one case: its exit code, its message (what, where, what to do), and nothing changed on disk."""
    case.setup(workspace)
    ignore = (LOCKS,) if case.takes_lock else ()
    before = snapshot(workspace, ignore)
    done = stitch(*case.args, cwd=workspace, env=case.env)
    assert done.returncode == case.code, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    for fragment in case.message:
        assert fragment.replace("{ws}", str(workspace)) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr
    for secret in case.hidden:
        assert secret not in done.stdout + done.stderr
    if "--json" in case.args:  # a scheduler reads stdout: exactly one JSON object saying it failed, and why
        assert done.stdout.count("\n") == 1, done.stdout
        failure = json.loads(done.stdout)
        assert failure["ok"] is False and failure["exit_code"] == case.code
        assert failure["error"] in done.stderr
        for name, value in case.fields.items():
            assert failure.get(name) == value.replace("{ws}", str(workspace)), failure
    else:
        assert done.stdout == ""  # nothing that a cron mail could mistake for a result
    assert snapshot(workspace, ignore) == before
    return done
