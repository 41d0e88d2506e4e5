"""`--json` on failure (issue 12): every command prints exactly one JSON object on stdout, whatever failed.

The commands are found by walking the CLI itself, so a command added later is covered without editing this file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import COMMANDS

STITCH = [sys.executable, "-m", "stitchlake"]


def json_failure(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"stdout must hold exactly one JSON object, got: {done.stdout!r}"
    failure = json.loads(lines[0])
    assert failure["ok"] is False and failure["exit_code"] == done.returncode != 0, failure
    assert failure["error"] and failure.get("error_type"), failure
    return failure


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_a_missing_config_is_one_json_failure(command: tuple[str, ...], tmp_path: Path) -> None:
    """Whatever else the command needs, a config that does not exist fails it: as usage (required options
    missing, options that go together) or as config (exit 2) — in every case one JSON object on stdout."""
    missing = tmp_path / "missing.yaml"
    done = subprocess.run(
        [*STITCH, *command, "--json", "-c", str(missing)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    failure = json_failure(done)
    assert done.returncode == 2, done.stderr
    assert f"error: {failure['error']}" in done.stderr.splitlines(), "stderr says the same, on one line"


def test_input_rejected_busy_and_bad_yaml_failures_carry_where(tmp_path: Path) -> None:
    """Exit 5 names the file and column as fields; exit 2 for a bad YAML value names its YAML path."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from tests.support.tables import THREE_STREAMS

    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(pa.table({"k": [1], "p": ["a"], "amount": [1], "status": ["x"]}), landing / "part-1.parquet")
    document = {**THREE_STREAMS, "table": {**THREE_STREAMS["table"], "path": str(tmp_path / "table")}}
    document["streams"] = {**document["streams"], "orders": {**document["streams"]["orders"]}}
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": str(landing)}
    config = tmp_path / "t.yaml"
    config.write_text(yaml.safe_dump(document))
    assert subprocess.run([*STITCH, "init", "-c", str(config)], capture_output=True, check=False).returncode == 0
    rejected = subprocess.run(
        [*STITCH, "ingest", "-c", str(config), "--stream", "orders", "--json", "--engine", "local"],
        capture_output=True,
        text=True,
        check=False,
    )
    failure = json_failure(rejected)
    assert rejected.returncode == 5 and failure["error_type"] == "InputRejected"
    assert failure["file"].endswith("part-1.parquet") and "ots" in failure["error"]

    document["table"]["buckets"] = "many"
    config.write_text(yaml.safe_dump(document))
    bad = subprocess.run([*STITCH, "status", "-c", str(config), "--json"], capture_output=True, text=True, check=False)
    failure = json_failure(bad)
    assert bad.returncode == 2 and failure["yaml_path"] == "table.buckets"
