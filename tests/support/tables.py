"""Test tables: real configs on real disk, and conversions between Arrow and the reference model."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from stitchlake.api import Table
from stitchlake.api import open as open_table
from stitchlake.config import TableConfig, parse_config
from stitchlake.errors import LockTimeout
from stitchlake.timeline.instant import Action, Instant
from tests.support.processes import run_stitch
from tests.support.reference import StreamModel


def stream_doc(
    columns: dict[str, Any],
    ordering: str | list[str] | None = None,
    nulls: str | None = None,
    deletes: bool = True,
) -> dict[str, Any]:
    """One stream's config section as the tests write them: its columns, ordering, nulls mode and the delete marker
    the tests use (rows whose `op` is "D" delete their key's group)."""
    section: dict[str, Any] = {"columns": columns}
    if ordering is not None:
        section["ordering"] = ordering
    if nulls is not None:
        section["nulls"] = nulls
    if deletes:
        section["deletes"] = {"column": "op", "values": ["D"]}
    return section


def table_doc(name: str, streams: dict[str, dict[str, Any]], buckets: int = 1, **sections: Any) -> dict[str, Any]:
    """A table document keyed by `k` alone, unpartitioned, with these streams (`stream_doc` sections) and any other
    top-level `sections` (concurrency, bad_rows, ...)."""
    table = {"name": name, "path": "table", "key": {"k": "long"}, "buckets": buckets}
    return {"table": table, "streams": streams, **sections}


def landing_stream(
    name: str, file_format: str, columns: dict[str, Any], ordering: str | None = None, nulls: str | None = None
) -> dict[str, Any]:
    """Stream `name`'s config section when landing files of `file_format` in `landing/<name>` feed it (no delete
    marker: the tests' landing files hold upserts only)."""
    section = stream_doc(columns, ordering, nulls, deletes=False)
    section["source"] = {"format": file_format, "path": f"landing/{name}"}
    return section


#: The table lock of the tests: the default lease. A shorter one (10 s) was lost by a live writer on a busy machine
#: between taking the lock and publishing (LockLost, a test failed). Only a process killed while it holds the lock
#: (held just to draw a time and publish) makes the next writer wait for the lease.
TEST_LOCK: dict[str, Any] = {"wait_s": 60, "expire_s": 30}
#: Heartbeats that expire in seconds, so tests of dead writers wait seconds.
CONCURRENCY: dict[str, Any] = {"heartbeat": {"interval_s": 1, "expire_s": 5}, "lock": TEST_LOCK}

THREE_STREAMS: dict[str, Any] = {
    "table": {"name": "wide", "path": "table", "key": {"k": "long"}, "partition_by": {"p": "string"}, "buckets": 2},
    "streams": {
        "orders": stream_doc({"amount": "long", "status": "string", "ots": "long"}, "ots"),
        "payments": stream_doc({"paid": "long", "note": "string", "pts": "long"}, "pts", "ignore"),
        "shipments": stream_doc({"carrier": {"type": "string", "default": "none"}, "ship_no": "long"}),
    },
    "concurrency": CONCURRENCY,
}

#: THREE_STREAMS with heartbeats that expire in 0.4 s: a test makes a writer look dead by stopping its beat, and
#: waits for the expiry (`until_expired`), never for a wall-clock time.
SHORT_BEATS: dict[str, Any] = copy.deepcopy(THREE_STREAMS)
SHORT_BEATS["concurrency"] = {"heartbeat": {"interval_s": 0.1, "expire_s": 0.4}, "lock": TEST_LOCK}

MODELS = [
    StreamModel("orders", ("amount", "status", "ots"), ("ots",)),
    StreamModel("payments", ("paid", "note", "pts"), ("pts",), "ignore"),
    StreamModel("shipments", ("carrier", "ship_no"), (), "overwrite", {"carrier": "none"}),
]
ORDERS, PAYMENTS, SHIPMENTS = MODELS
#: Every column of a THREE_STREAMS read: the key, the partition, each stream's columns.
ALL_COLUMNS = ["k", "p", "amount", "status", "ots", "paid", "note", "pts", "carrier", "ship_no"]


def orders_rows(keys: range | list[int], ots: int = 1) -> list[dict[str, Any]]:
    """Rows of stream orders for `keys` (amount 10 times the key), to `batch` for a write."""
    return [{"k": k, "amount": k * 10, "status": "a", "ots": ots} for k in keys]


def config(root: Path, document: dict[str, Any] | None = None, **table: Any) -> TableConfig:
    data = copy.deepcopy(document or THREE_STREAMS)
    data["table"].update(table)
    return parse_config(data, file="test.yaml", base=root)


def write_table_yaml(folder: Path, document: dict[str, Any] | None = None, name: str = "table.yaml") -> Path:
    """`document` (THREE_STREAMS when not given) as the config file `folder/name`: what the CLI, a job or another
    process is pointed at. The one writer of test configs (spark_fixtures.write_config starts from configs/demo.yaml
    and ends here)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(document or THREE_STREAMS, sort_keys=False), encoding="utf-8")
    return path


def new_table(root: Path, document: dict[str, Any] | None = None, **table: Any) -> Table:
    """A created table of `document` (THREE_STREAMS when not given; `table` changes its `table` section, e.g.
    `buckets=1`), relative paths under `root`: the one maker of in-process test tables. A test changing another
    section passes the document so, e.g. `{**THREE_STREAMS, "bad_rows": "quarantine"}`."""
    created = Table(config(root, document, **table))
    created.init()
    return created


@contextlib.contextmanager
def created_in_format(version: int) -> Iterator[None]:
    """Tables created in the block record table format `version` in their `table.json`, as a stitchlake of that
    format created them (1: column versions written wherever a value is, `config/stored.py`)."""
    from stitchlake.config import stored_schema

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("stitchlake.table.handle.stored_schema", lambda config: stored_schema(config, version))
        yield


def new_table_file(
    folder: Path, document: dict[str, Any] | None = None, name: str = "table.yaml", *, through_cli: bool = False
) -> tuple[Table, Path]:
    """`new_table` made from a config file, as the CLI makes it: `document` written as `folder/name`
    (`write_table_yaml`), the table opened from it and created. For the tests in which a command, a job or another
    process opens the same config, which comes back with the table. `through_cli` creates it with `stitch init` in
    a process, as an operator does, for the tests of the CLI whose table must be the one its own init made."""
    path = write_table_yaml(folder, document, name)
    if through_cli:
        done = run_stitch("init", "-c", str(path))
        assert done.returncode == 0, done.stderr
        return open_table(path), path
    created = open_table(path)
    created.init()
    return created, path


#: Stream `a` (v int, s string) and stream `gone`, before `evolved_table`'s alter.
EVOLVING: dict[str, Any] = {
    "table": {"name": "evolving", "path": "table", "key": {"k": "long"}, "buckets": 1},
    "streams": {"a": {"columns": {"v": "int", "s": "string"}}, "gone": {"columns": {"g": "long"}}},
}


#: Orders from a landing folder and payments written by the API, bad rows quarantined, heartbeats and locks that
#: expire in seconds: the hardening tests' table.
QUARANTINING: dict[str, Any] = {
    "table": {"name": "wide", "path": "table", "key": {"k": "long"}, "buckets": 2},
    "streams": {
        "orders": landing_stream("orders", "parquet", {"amount": "long", "ots": "long"}, "ots"),
        "payments": stream_doc({"paid": "double", "pts": "double"}, "pts", deletes=False),
    },
    "bad_rows": "quarantine",
    "concurrency": {"heartbeat": {"interval_s": 1, "expire_s": 3}, "lock": {"wait_s": 20, "expire_s": 2}},
}


def evolved_table(folder: Path, before: Callable[[Table], object]) -> Table:
    """A table whose files are of an older schema version: `before` writes to `EVOLVING`, then an alter widens `v` to
    long, adds a date `when` (default 2026-11-21) and drops stream `gone`. The table as of after the alter."""
    from stitchlake.services.upkeep.alter import alter

    table, config = new_table_file(folder, EVOLVING, "t.yaml")
    before(table)
    changed = copy.deepcopy(EVOLVING)
    changed["streams"]["a"]["columns"] = {"v": "long", "s": "string", "when": {"type": "date", "default": "2026-11-21"}}
    del changed["streams"]["gone"]
    config.write_text(yaml.safe_dump(changed, sort_keys=False))
    alter(open_table(config))
    return open_table(config)


def partition_of(key: int) -> str:
    return "even" if key % 2 == 0 else "odd"


def batch(stream: StreamModel, rows: list[dict[str, Any]]) -> pa.Table:
    """An input batch for `stream`: k, p, the stream's columns and the op column."""
    types = {"k": pa.int64(), "p": pa.string(), "op": pa.string()}
    data: dict[str, list[Any]] = {"k": [], "p": [], "op": []}
    for column in stream.columns:
        data[column] = []
    for row in rows:
        data["k"].append(row["k"])
        data["p"].append(partition_of(row["k"]))
        data["op"].append("D" if row.get("deleted") else "I")
        for column in stream.columns:
            data[column].append(row.get(column))
    fields = {
        name: types.get(name, pa.string() if name in ("status", "note", "carrier") else pa.int64()) for name in data
    }
    return pa.table({name: pa.array(values, fields[name]) for name, values in data.items()})


def as_rows(table: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Key (k, p) -> row dict of a read result."""
    out = {}
    for row in table.to_pylist():
        row.pop("_op", None)
        out[(row["k"], row["p"])] = row
    return out


#: An instant's requested time, for the tests of what is kept per instant (heartbeats) without a timeline.
INSTANT = "20260101120000000"


def instant_at(table: Any, requested: str) -> Instant:
    """The instant of `table` requested at `requested`, which the test knows exists."""
    found: Instant | None = table.timeline().get(requested)
    assert found is not None, f"no instant {requested} on the timeline"
    return found


# ------------------------------------------------------------------------------- pausing a process mid-instant


def until_expired(table: Table, instant: str) -> None:
    """Wait until `instant`'s heartbeat has expired by the table's own setting: the beat file's age decides, so the
    wait ends whatever the machine's load."""
    from stitchlake.concurrency.heartbeat import is_expired

    while not is_expired(table.storage, instant, table.config.concurrency.heartbeat.expire_s):
        time.sleep(0.05)


def lock_held_elsewhere(table: Table) -> bool:
    """Whether someone holds the table lock right now: a handle of its own cannot take it at once."""
    lock = table.lock()
    try:
        lock.acquire(wait_s=0)
    except LockTimeout:
        return True
    lock.release()
    return False


def lock_holder_pid(table: Table) -> int | None:
    """The pid holding the table lock right now, if any (read from the lock files, as an operator would; a
    generation released and tidied while we look means nobody holds that one)."""
    folder = Path(table.path) / ".stitch" / "locks"
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    generations = [n for n in names if not n.endswith(".released")]
    if not generations or f"{generations[-1]}.released" in names:
        return None
    try:
        record = json.loads((folder / generations[-1]).read_text())
    except FileNotFoundError:
        return None
    return None if record["expires_at"] <= time.time() else int(record["pid"])


def pause_when_inflight(table: Table, process: subprocess.Popen[Any], action: str, limit_s: float = 600) -> Instant:
    """SIGSTOP `process` once its `action` instant is inflight (past the lock, doing its work): the moment a race
    needs it held, made certain instead of hoped for. Stopped while it held the table lock (a busy machine can
    stretch that moment), it is let go and stopped again a moment later. The limit only turns a hang into a
    failure."""
    deadline = time.monotonic() + limit_s
    while True:
        pending = table.timeline().pending([action])
        if pending and pending[0].state.label == "inflight":
            instant = pending[0]
            break
        assert process.poll() is None, f"the {action} ended (exit {process.returncode}) before it was inflight"
        assert time.monotonic() < deadline, f"gave up waiting for an inflight {action}"
        time.sleep(0.001)
    for _attempt in range(1000):
        os.kill(process.pid, signal.SIGSTOP)
        assert process.poll() is None, f"the {action} finished before it could be paused"
        current = table.timeline().get(instant.requested)
        assert current is not None and not current.is_completed, f"the {action} published before it could be paused"
        if lock_holder_pid(table) != process.pid:
            return instant
        os.kill(process.pid, signal.SIGCONT)
        time.sleep(0.001)
    raise AssertionError(f"the {action} held the table lock at every pause; the race is not the one meant")


def claimed(table: Table) -> str | None:
    pending = table.timeline().pending([Action.DELTACOMMIT])
    return pending[0].requested if pending else None
