"""Papercuts a user hit (issue 24, point 7), each through the real `stitch` CLI on a real table of demo data.

1. a closed stdout (`stitch status | head -1`) does not turn a command's success into failure;
2. commands that only run in this process do not offer `--engine spark`;
3. `stitch status` shows the last compaction (and clean) once they are archived;
4. incremental reads can select (and filter) `_op`; other reads say why they cannot;
5. a time-travel read that needs files a purge deleted names the erase, not clean;
6. bad-row counts read as counts, not as the value that did not parse;
7. a SIGKILLed restore is finished, and said to be, by `rollback --failed` (reads warn meanwhile);
8. `rollback` says it undoes only the latest commit, and `--stream S` undoes one stream's latest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from stitchlake.cli.app import app
from stitchlake.jobs.specs import REQUESTS
from stitchlake.timeline.instant import Action
from tests.support.cli import stitch_json
from tests.support.processes import ROOT, run_stitch, stitch
from tests.support.spark_fixtures import demo_table

CHANGE_COLUMNS = ["_op", "_commit_time", "_streams"]


def refused(code: int, *args: str | Path) -> str:
    """Run `stitch ARGS`, which must exit `code`; its stderr."""
    done = run_stitch(*args)
    assert done.returncode == code, (
        f"stitch {' '.join(map(str, args))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done.stderr


# ------------------------------------------------------------------------------------------- 1. broken pipe


def with_closed_stdout(*args: str | Path, close_stderr: bool = False) -> subprocess.CompletedProcess[str]:
    """`stitch ARGS` writing into a pipe whose reader has gone before it writes a byte (what `| head -1` does
    to the rest of the output, deterministically)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    err_read, err_write = os.pipe() if close_stderr else (None, None)
    if err_read is not None:
        os.close(err_read)
    try:
        return subprocess.run(
            stitch(*args),
            cwd=ROOT,
            stdout=write_end,
            stderr=err_write if err_write is not None else subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write_end)
        if err_write is not None:
            os.close(err_write)


def test_a_closed_stdout_after_the_work_keeps_the_commands_own_exit_code(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    ingest = with_closed_stdout("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    assert (ingest.returncode, ingest.stderr) == (0, "")  # no traceback, no "error:", nothing more printed
    committed = table.timeline().completed([Action.DELTACOMMIT])
    assert len(committed) == 1 and table.read().num_rows > 0  # the ingest stands: success was the truth
    for args in (
        ("status", "-c", config),
        ("timeline", "show", "-c", config),
        ("read", "-c", config, "--limit", "0"),
        ("read", "-c", config, "--limit", "0", "--json"),
        ("ingest", "-c", config, "--stream", "orders", "--json"),  # nothing to ingest: exit 0
    ):
        done = with_closed_stdout(*args)
        assert (done.returncode, done.stderr) == (0, ""), args
    # A failure keeps its own code (and still says why on stderr), with or without --json on the closed stdout.
    for extra in ((), ("--json",)):
        done = with_closed_stdout("ingest", "-c", config, "--stream", "nope", *extra)
        assert done.returncode == 2 and "error: unknown stream" in done.stderr and "Traceback" not in done.stderr
    # Both streams closed: nothing can be said, the exit code still tells.
    assert with_closed_stdout("ingest", "-c", config, "--stream", "nope", close_stderr=True).returncode == 2
    assert with_closed_stdout("status", "-c", config, close_stderr=True).returncode == 0
    # And the shell pipeline the user ran, with pipefail: exit 0 whichever side finishes first.
    line = " ".join([*map(str, stitch("read", "-c", config, "--limit", "0")), "| head -1"])
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {line}"], cwd=ROOT, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "") and "order_id" in done.stdout


# ----------------------------------------------------------------------------------------- 2. --engine help


def engine_choices() -> dict[str, list[str]]:
    """Every command whose help offers `--engine`, with the choices the help lists (`--engine <auto|local>`)."""
    runner = CliRunner()
    found: dict[str, list[str]] = {}

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        shown = runner.invoke(app, [*path, "--help"])
        assert shown.exit_code == 0, path
        match = re.search(r"--engine <([a-z|]+)>", shown.output)
        if match:
            found[" ".join(path)] = match.group(1).split("|")

    walk(typer.main.get_command(app), [])
    assert len(found) > 5  # the walk found the commands
    return found


@pytest.mark.spark
def test_commands_offer_only_the_engines_they_accept(demo_data: Path, tmp_path: Path) -> None:
    spark_capable = {name for name, cls in REQUESTS.items() if not cls.metadata_only}
    job_of = {"delete": "erase", "savepoint create": "savepoint", "savepoint delete": "savepoint"}
    job_of |= {"savepoint restore": "savepoint"}
    choices = engine_choices()
    assert set(choices) == {
        *("ingest", "compact", "clean", "delete", "rescale", "rollback", "archive"),
        *("savepoint create", "savepoint delete", "savepoint restore", "read"),
    }
    assert choices.pop("read") == ["local", "spark"]  # a read is never sized: in this process unless Spark is asked
    for command, offered in choices.items():
        job = job_of.get(command, command)
        assert job in REQUESTS, command
        expected = ["auto", "local", "spark"] if job in spark_capable else ["auto", "local"]
        assert offered == expected, command
    # What is offered is accepted, and what is not offered is a usage error naming the choices.
    config, _table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    for engine in ("auto", "local"):
        stitch_json("archive", "-c", config, "--engine", engine)
        stitch_json("rollback", "-c", config, "--failed", "--engine", engine)
    for command in ("archive", "rollback --failed", "savepoint create"):
        err = refused(2, *command.split(), "-c", config, "--engine", "spark")
        assert "Invalid value for '--engine'" in err and "'auto', 'local'" in err
    help_text = run_stitch("clean", "--help").stdout
    assert "auto and local: in this process; spark:" in help_text
    # Options a command cannot do without say so in its help (they used to look optional).
    for command in ("savepoint delete", "savepoint restore"):
        assert "Savepoint name or instant.  [required]" in run_stitch(*command.split(), "--help").stdout
        assert "Missing option '--name'" in refused(2, *command.split(), "-c", config)


# ---------------------------------------------------------------------------------- 3. status and archive


def test_status_shows_the_last_compaction_and_clean_once_they_are_archived(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    compacted = stitch_json("compact", "-c", config, "--engine", "local")["result"]
    stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    stitch_json("compact", "-c", config, "--engine", "local")
    cleaned = stitch_json("clean", "-c", config, "--policy", "keep_latest_file_versions", "--retain", "1")
    assert cleaned["instant"], cleaned
    for stream in ("payments", "shipments"):
        stitch_json("ingest", "-c", config, "--stream", stream, "--engine", "local")
    before = stitch_json("status", "-c", config)["timeline"]
    last = table.timeline().latest_completed([Action.COMPACTION])
    assert last is not None and last.requested != compacted["instant"]
    assert before["deltacommits_since_compaction"] == 2
    archived = stitch_json("archive", "-c", config, "--keep", "2")
    assert archived["archived"] == 5, archived  # both compactions and the clean among them
    after = stitch_json("status", "-c", config)["timeline"]
    assert after["archived_until"] == archived["horizon"]
    for name in ("last_compaction", "last_clean", "deltacommits_since_compaction"):
        assert after[name] == before[name] and after[name] is not None, name
    assert after["last_compaction"] == last.completed
    shown = run_stitch("status", "-c", config).stdout
    assert "last compaction" in shown and "last compaction                -" not in shown


# ----------------------------------------------------------------------------------- 4. _op in --columns


def test_an_incremental_read_selects_and_filters_op(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    first = stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    since = first["completed"]
    every = table.read(since=since)
    ops = set(every.column("_op").to_pylist())
    assert every.column_names[-3:] == CHANGE_COLUMNS and {"I", "U"} <= ops

    picked = stitch_json("read", "-c", config, "--since", since, "--columns", "order_id,_op", "--limit", "0")
    assert picked["columns"] == ["order_id", "_op"] and picked["rows"] == every.num_rows
    assert {r["_op"] for r in picked["records"]} == ops
    inserted = stitch_json("read", "-c", config, "--since", since, "--columns", "_op,order_id", "--where", "_op=I")
    assert inserted["columns"] == ["_op", "order_id"]
    assert inserted["rows"] == every.column("_op").to_pylist().count("I") > 0
    assert {r["_op"] for r in inserted["records"]} == {"I"}
    api = table.read(since=since, columns=["order_id", "_streams"], filter={"_op": "U"})
    assert api.column_names == ["order_id", "_streams"] and set(api.column("_streams").to_pylist()) == {"orders"}

    for args in (("--columns", "order_id,_op"), ("--where", "_op=I"), ("--as-of", since, "--columns", "_op")):
        err = refused(2, "read", "-c", config, *args)
        assert "only incremental reads have the change columns _op, _commit_time, _streams" in err
        assert "--since" in err and "unknown column" not in err


# ------------------------------------------------------------------------------------------------ 5. purge


def test_a_read_before_a_purge_names_the_erase_that_purged_its_files(demo_data: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    stitch_json("compact", "-c", config, "--engine", "local")
    before = stitch_json("ingest", "-c", config, "--stream", "payments", "--engine", "local")["completed"]
    key = table.read(columns=["order_id"]).slice(0, 1)
    keys = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"order_id": key.column("order_id")}), keys)
    erased = stitch_json("delete", "-c", config, "--keys", str(keys), "--purge", "--engine", "local")
    assert erased["erased_keys"] == 1 and erased["purged_files"] > 0
    err = refused(2, "read", "-c", config, "--as-of", before)
    assert f"which erase {erased['instant']} purged at" in err and "stitch delete --purge" in err
    assert f"--as-of {erased['completed']}" in err and "clean removed" not in err
    assert stitch_json("read", "-c", config, "--as-of", erased["completed"], "--limit", "0")["rows"] > 0


# -------------------------------------------------------------------------------------------- 6. bad rows


def test_bad_row_counts_and_values_cannot_be_mistaken_for_each_other(demo_data: Path, tmp_path: Path) -> None:
    config, _table = demo_table(tmp_path, demo_data / "landing", through_cli=True, bad_rows="fail")
    landing = tmp_path / "bad.json"
    row = {"order_id": 7, "order_date": "2026-11-20", "pay_status": "paid", "pay_ts": "2026-11-20T00:00:00Z"}
    landing.write_text(json.dumps({**row, "paid_amount": "1,5"}) + "\n", encoding="utf-8")
    done = run_stitch("ingest", "-c", config, "--stream", "payments", "--source", str(landing), "--json")
    assert done.returncode == 5, done.stderr
    message = json.loads(done.stdout)["error"]
    assert "1 bad row (wrong JSON type in paid_amount: 1 row)" in message  # a JSON string, not a number (34.6)
    assert f"{landing} line 1 (wrong JSON type '\"1,5\"' in paid_amount)" in message
    assert message in done.stderr


# ---------------------------------------------------------------------------------- 7. a killed restore

#: A real `stitch` process (the CLI's own main) with the torture test's fault hook armed: SIGKILL right after
#: the restore undid its first target, its plan recorded and the rest not undone.
KILLED = """
import sys
from scripts import torture
assert torture.install_fault("mid_restore:0", lambda event: None, 0.0)
from stitchlake.cli.app import main
sys.argv = ["stitch", *{args!r}]
main()
"""


def test_rollback_failed_finishes_a_killed_restore_and_says_so(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    stitch_json("savepoint", "create", "-c", config, "--name", "before")
    pinned = stitch_json("read", "-c", config, "--as-of", "before", "--limit", "0")["records"]
    for stream in ("orders", "payments", "shipments"):
        stitch_json("ingest", "-c", config, "--stream", stream, "--engine", "local")
    stitch_json("compact", "-c", config, "--engine", "local")

    args = ["savepoint", "restore", "-c", str(config), "--name", "before"]
    script = KILLED.format(args=args)
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr  # SIGKILL, midway
    pending = table.timeline().pending([Action.RESTORE])
    assert len(pending) == 1
    restore = pending[0].requested

    # Meanwhile a read neither finishes it nor hides it: it warns, and the timeline is left as it is.
    done = run_stitch("read", "-c", config, "--limit", "0", "--json")
    assert done.returncode == 0 and f"restore {restore} is undoing commits and has not finished" in done.stderr
    assert "stitch rollback --failed" in done.stderr
    assert [i.requested for i in table.timeline().pending()] == [restore]
    assert stitch_json("status", "-c", config)["writers"][0]["alive"] is False
    # A dry run of clean names it as what it would finish, and finishes nothing.
    dry = stitch_json("clean", "-c", config, "--dry-run", "--engine", "local")
    assert dry["would_finish"] == [f"restore {restore}"] and "finished" not in dry
    assert [i.requested for i in table.timeline().pending()] == [restore]

    finished = stitch_json("rollback", "-c", config, "--failed")
    assert finished["finished"] == [f"restore {restore}"]
    assert (
        finished["message"] == f"finished crashed restore {restore} from the recorded plan; nothing else to roll back"
    )
    restored = table.timeline().get(restore)
    assert restored is not None and restored.is_completed
    assert stitch_json("read", "-c", config, "--limit", "0")["records"] == pinned
    again = stitch_json("rollback", "-c", config, "--failed")
    assert again["finished"] == [] and again["message"] == "nothing to roll back"
    human = run_stitch("read", "-c", config, "--limit", "1")
    assert human.returncode == 0 and "undoing" not in human.stderr


# ---------------------------------------------------------------------------------- 8. rollback --stream


def test_rollback_stream_undoes_one_streams_latest_commit_and_keeps_the_others(demo_data: Path, tmp_path: Path) -> None:
    from scripts.demo_data import compare

    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    orders = stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    payments = stitch_json("ingest", "-c", config, "--stream", "payments", "--engine", "local")
    # the same payments, and never any orders
    _alone_config, alone = demo_table(tmp_path / "alone", demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", _alone_config, "--stream", "payments", "--engine", "local")

    help_text = run_stitch("rollback", "--help").stdout
    assert "only while it is the latest" in help_text and "--stream S the latest of one stream" in help_text
    err = refused(2, "rollback", "-c", config, "--instant", orders["instant"])
    assert f"is not the latest one ({payments['instant']})" in err
    assert "`stitch rollback --stream orders` undoes it and keeps the other streams' newer commits" in err

    undone = stitch_json("rollback", "-c", config, "--stream", "orders")
    assert undone["rolled_back"] == [orders["instant"]]
    assert table.timeline().get(orders["instant"]) is None
    assert table.timeline().get(payments["instant"]) is not None
    # The table is exactly what payments alone make: orders' groups are gone, payments' untouched ...
    assert table.read().sort_by("order_id").equals(alone.read().sort_by("order_id"))
    err = refused(2, "read", "-c", config, "--since", orders["completed"])  # the change feed cannot cover it
    assert "rollback" in err
    # ... and its landing files are pending again: ingested anew, the table is whole.
    assert stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")["source_files"] == 3
    stitch_json("ingest", "-c", config, "--stream", "shipments", "--engine", "local")
    assert compare(table.read(), demo_data / "truth.parquet") == []

    # Refused once a rewrite absorbed it or a savepoint pins it; a stream with no commit has nothing to undo.
    stitch_json("compact", "-c", config, "--schedule")
    err = refused(2, "rollback", "-c", config, "--stream", "orders")
    assert "was absorbed by compaction" in err and "Restore a savepoint" in err
    stitch_json("compact", "-c", config, "--run", "--engine", "local")
    err = refused(2, "rollback", "-c", config, "--stream", "shipments")
    assert "was absorbed by compaction" in err and "(completed)" in err
    for args, expected in (
        (("--stream", "nope"), "unknown stream"),
        (("--stream", "orders", "--failed"), "give exactly one of --instant T, --stream S or --failed"),
    ):
        assert expected in refused(2, "rollback", "-c", config, *args)


def test_rollback_stream_is_refused_while_a_savepoint_pins_the_commit(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stream = "payments"
    stitch_json("ingest", "-c", config, "--stream", stream, "--engine", "local")
    stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    stitch_json("savepoint", "create", "-c", config, "--name", "pin")
    err = refused(2, "rollback", "-c", config, "--stream", stream)
    assert "is pinned by savepoint" in err and "delete the savepoint first" in err
    stitch_json("savepoint", "delete", "-c", config, "--name", "pin")
    assert stitch_json("rollback", "-c", config, "--stream", stream)["rolled_back"]
    err = refused(2, "rollback", "-c", config, "--stream", stream)
    assert f"stream {stream} has no completed deltacommit on the active timeline" in err
    assert table.timeline().latest_completed([Action.DELTACOMMIT]) is not None  # orders' commit stays
