"""Tables that change (issue 11): `stitch alter`, reads across schema versions, nested columns, any ordering type.

The property test drives random writes, compactions and compatible alters through the real table, and compares
every read — now, and as of every step — with the brute-force reference model (tests/support/reference.py) applied to
the same events under the schema in force at that time: events written before a column existed carry its default.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support.cli import console
from tests.support.schema_changes import (
    BASE,
    add_extra,
    add_stream_c,
    arrow_rows,
    drop_w,
    histories,
    run_history,
)
from tests.support.snapshots import LOCKS, snapshot
from tests.support.tables import new_table_file, write_table_yaml

STITCH = Path(sys.executable).parent / "stitch"


@pytest.mark.parametrize("log_format", ["parquet", "avro"])
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(plan=histories())
def test_reads_across_alters_equal_the_reference_under_each_version(
    tmp_path_factory: pytest.TempPathFactory, log_format: str, plan: list[tuple[str, Any]]
) -> None:
    run_history(tmp_path_factory.mktemp("history"), plan, log_format)


# --------------------------------------------------------------------------------------------- the CLI


def stitch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return console(*args, cwd=cwd, timeout=600)


@pytest.fixture
def created(tmp_path: Path) -> Path:
    table, _ = new_table_file(tmp_path, BASE, through_cli=True)
    table.write("a", arrow_rows(BASE, "a", [{"k": 1, "op": "I", "v": 1, "s": "p", "ts": "a"}]))
    return tmp_path


REFUSED = [
    (
        "key",
        lambda d: d["table"].update(key={"k": "string"}),
        "table.key: table has {k: long}, config says {k: string}",
    ),
    ("buckets", lambda d: d["table"].update(buckets=4), "table.buckets: table has 2, config says 4"),
    ("partitioning", lambda d: d["table"].update(partition_by={"p": "string"}), "table.partition_by"),
    ("name", lambda d: d["table"].update(name="other"), "table.name"),
    ("narrowing", lambda d: d["streams"]["b"]["columns"].update(w="int"), "streams.b.columns.w.type"),
    ("incompatible", lambda d: d["streams"]["a"]["columns"].update(s="long"), "table has string, config says long"),
    ("ordering", lambda d: d["streams"]["a"].update(ordering="s"), "streams.a.ordering"),
    ("nulls", lambda d: d["streams"]["a"].update(nulls="ignore"), "streams.a.nulls"),
    (
        "move a column",
        lambda d: (d["streams"]["b"]["columns"].pop("w"), d["streams"]["a"]["columns"].update(w="long")),
        "column 'w' belonged to stream b",
    ),
]


@pytest.mark.parametrize(("name", "edit", "phrase"), REFUSED, ids=[r[0] for r in REFUSED])
def test_every_incompatible_change_is_refused_naming_it(created: Path, name: str, edit: Any, phrase: str) -> None:
    document = copy.deepcopy(BASE)
    edit(document)
    config = write_table_yaml(created, document)
    before = snapshot(created / "table", (LOCKS,))
    done = stitch("alter", "-c", str(config), "--json", cwd=created)
    assert done.returncode == 2, done.stderr
    assert phrase in done.stderr and "refused" in done.stderr
    failure = json.loads(done.stdout)
    assert failure["ok"] is False and failure["exit_code"] == 2
    assert snapshot(created / "table", (LOCKS,)) == before


def test_reusing_a_dropped_name_is_refused(created: Path) -> None:
    document = copy.deepcopy(BASE)
    drop_w(document)
    assert stitch("alter", "-c", str(write_table_yaml(created, document)), cwd=created).returncode == 0
    document["streams"]["b"]["columns"]["w"] = "long"
    done = stitch("alter", "-c", str(write_table_yaml(created, document)), cwd=created)
    assert done.returncode == 2 and "was dropped from this stream in an earlier schema version" in done.stderr


def test_dry_run_changes_nothing_and_the_config_must_follow_the_table(created: Path) -> None:
    old = copy.deepcopy(BASE)
    new = copy.deepcopy(BASE)
    add_extra(new)
    add_stream_c(new)
    before = snapshot(created / "table", (LOCKS,))
    config = write_table_yaml(created, new)
    dry = stitch("alter", "-c", str(config), "--dry-run", "--json", cwd=created)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and plan["schema_version"] == 1 and len(plan["changes"]) == 2
    assert snapshot(created / "table", (LOCKS,)) == before, "--dry-run wrote something"
    # A config ahead of the table: every command says to run `stitch alter` first.
    ahead = stitch("read", "-c", str(config), cwd=created)
    assert ahead.returncode == 2 and "is ahead of the table" in ahead.stderr and "stitch alter" in ahead.stderr
    assert stitch("alter", "-c", str(config), cwd=created).returncode == 0
    assert stitch("read", "-c", str(config), cwd=created).returncode == 0
    # An old deployment still running the previous config is refused, naming the newer version.
    behind = stitch("read", "-c", str(write_table_yaml(created, old)), cwd=created)
    assert behind.returncode == 2
    assert "describes schema version 0" in behind.stderr and "at version 1 now" in behind.stderr
    again = stitch("alter", "-c", str(write_table_yaml(created, new)), cwd=created)
    assert again.returncode == 0 and "nothing to alter" in again.stdout
