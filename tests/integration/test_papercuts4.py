"""Papercuts of issue 34 (points 8 and 9), each through the real `stitch` CLI on a real table of demo data.

1. `--as-of <instant id>` includes the instant it names (an id is a requested time; reads go by completion);
2. `timeline show` prints completion times with their date;
3. `rescale --resume` takes a config already edited to the new count;
4. `savepoint restore` says which savepoints it removed, and why;
5. a restore that undid a rescale says which `buckets` the config must say;
6. progress on a console that is not a terminal is a plain line now and then, never a spinner;
7. the example Airflow DAG takes its streams from the table config.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import yaml

import stitchlake
from stitchlake.services.rewrites import rescale as rescaling
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.clock import to_datetime
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import DeltaCommitPlan
from stitchlake.writing.writer import write
from tests.support.cli import stitch_json
from tests.support.processes import ROOT, run_stitch
from tests.support.spark_fixtures import demo_table


def keys_as_of(config: Path, at: str) -> set[int]:
    """The order ids `stitch read --as-of AT` returns."""
    done = stitch_json("read", "-c", config, "--as-of", at, "--columns", "order_id", "--limit", "0")
    return {record["order_id"] for record in done["records"]}


def set_buckets(config: Path, buckets: int) -> None:
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["table"]["buckets"] = buckets
    config.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


# ------------------------------------------------------------------------------------- 1. --as-of an instant


def test_as_of_an_instant_id_includes_that_instant_whatever_order_instants_complete_in(
    demo_data: Path, tmp_path: Path
) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    first = stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    first_keys = keys_as_of(config, first["completed"])
    assert first_keys and keys_as_of(config, first["instant"]) == first_keys  # its own id: its rows are in
    # Requested first, completed last: a write that began before the next ingest and finished after it.
    late = Transaction.begin(table, Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    second = stitch_json("ingest", "-c", config, "--stream", "shipments", "--engine", "local")
    row = {"order_id": [10**9], "order_date": [to_datetime(late.time).date()], "customer_id": [1], "amount": [1.0]}
    row |= {"currency": ["EUR"], "order_ts": [to_datetime(late.time)]}
    written = write(table, "orders", pa.table(row), txn=late)
    assert written.instant < second["instant"] and written.completed and written.completed > second["completed"]

    every = keys_as_of(config, second["completed"])
    assert first_keys < every and 10**9 not in every
    assert keys_as_of(config, second["instant"]) == every  # the later-requested one, completed first
    assert keys_as_of(config, written.instant) == every | {10**9}  # requested before it, completed after it
    # An id as `until` is its completion too; as `since` it is the moment it names: its own changes are in.
    changes = ["--columns", "order_id", "--limit", "0"]
    until_id = stitch_json("read", "-c", config, "--since", first["instant"], "--until", first["instant"], *changes)
    assert {r["order_id"] for r in until_id["records"]} == first_keys
    iso = to_datetime(first["instant"]).isoformat()
    since_id = stitch_json("read", "-c", config, "--since", first["instant"], *changes)
    assert since_id["records"] == stitch_json("read", "-c", config, "--since", iso, *changes)["records"]
    assert first_keys <= {r["order_id"] for r in since_id["records"]}
    # A time that is no instant's id is the moment it says (the ISO form of an id, too).
    assert keys_as_of(config, iso) == set() and keys_as_of(config, written.completed) == every | {10**9}
    help_text = run_stitch("read", "--help").stdout
    assert "right after" in help_text and "instant completed" in help_text


# ------------------------------------------------------------------------------------------ 2. timeline show


def test_timeline_show_prints_completion_times_with_their_date(demo_data: Path, tmp_path: Path) -> None:
    config, _table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    done = stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    shown = run_stitch("timeline", "show", "-c", config).stdout
    completed = to_datetime(done["completed"]).strftime("%Y-%m-%d %H:%M:%S")
    header = next(line for line in shown.splitlines() if line.startswith("instant"))
    assert header.split() == ["instant", "action", "state", "completed", "duration", "stream", "rows", "files"]
    line = next(line for line in shown.splitlines() if line.startswith(done["instant"]))
    assert re.match(rf"{done['instant']}\s+deltacommit\s+completed\s+{completed}\s+[\d.]+ m?s\s+orders\s", line), line


# --------------------------------------------------------------------------------------- 3. rescale --resume


def test_rescale_resume_takes_a_config_already_at_the_new_count(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    before = table.read().sort_by("order_id")
    planned = rescaling.schedule(table, 8)  # its process died before running it
    set_buckets(config, 8)  # the config edited first, as the help allows
    assert "set `buckets: N` in the config, before (then this command takes it)" in " ".join(
        run_stitch("rescale", "--help").stdout.split()
    )
    resumed = stitch_json("rescale", "-c", config, "--resume", "--engine", "local")
    assert resumed["result"]["instant"] == planned and resumed["result"]["buckets"] == 8
    assert "set `buckets" not in resumed["message"]  # the config says 8 already
    assert stitch_json("status", "-c", config)["timeline"]["buckets"] == 8
    assert stitchlake.open(config).read().sort_by("order_id").equals(before)
    assert stitch_json("rescale", "-c", config, "--resume")["message"] == "no pending rescale to run"


# ------------------------------------------------------------------------------------ 4. savepoints removed


def test_savepoint_restore_names_the_savepoints_it_removes_and_why(demo_data: Path, tmp_path: Path) -> None:
    config, _table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    first = stitch_json("ingest", "-c", config, "--stream", "orders", "--max-files", "1", "--engine", "local")
    stitch_json("savepoint", "create", "-c", config, "--name", "first")
    stitch_json("ingest", "-c", config, "--stream", "payments", "--engine", "local")
    later = stitch_json("savepoint", "create", "-c", config, "--name", "later")
    same = stitch_json("savepoint", "create", "-c", config, "--name", "same", "--instant", first["instant"])
    kept = stitch_json("savepoint", "list", "-c", config)
    assert [s["name"] for s in kept["savepoints"]] == ["first", "later", "same"]

    done = stitch_json("savepoint", "restore", "-c", config, "--name", "first")
    result = done
    at = result["savepoint_of"]
    assert result["removed_savepoints"] == [
        {
            "instant": same["instant"],
            "name": "same",
            "savepoint_of": at,
            "reason": f"it pinned {at} and was taken after {at}: a restore undoes every later instant",
        },
        {
            "instant": later["instant"],
            "name": "later",
            "savepoint_of": later["savepoint_of"],
            "reason": f"it pinned {later['savepoint_of']}, a state this restore undid",
        },
    ]
    assert {later["instant"], same["instant"]} <= set(result["undone"])
    assert "removed 2 savepoint(s) taken after that state: same (it pinned" in done["message"]
    assert [s["name"] for s in stitch_json("savepoint", "list", "-c", config)["savepoints"]] == ["first"]
    assert "savepoints taken since included" in " ".join(run_stitch("savepoint", "restore", "--help").stdout.split())


# ---------------------------------------------------------------------------- 5. a restore across a rescale


def test_a_restore_that_undid_a_rescale_says_which_buckets_the_config_must_say(demo_data: Path, tmp_path: Path) -> None:
    config, table = demo_table(tmp_path, demo_data / "landing", through_cli=True)
    stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    stitch_json("savepoint", "create", "-c", config, "--name", "four")
    rescaled = stitch_json("rescale", "-c", config, "--buckets", "8", "--engine", "local")
    assert (
        f"set `buckets: 8` under `table:` in {config}: commands refuse the count it says now (4)"
        in (rescaled["message"])
    )
    set_buckets(config, 8)
    stitch_json("ingest", "-c", config, "--stream", "payments", "--engine", "local")

    done = run_stitch("savepoint", "restore", "-c", config, "--name", "four")  # what a person reads
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "the restore undid a rescale: the table has 4 buckets per partition again" in said
    assert f"set `buckets: 4` under `table:` in {config}: commands refuse the count it says now (8)" in said
    refused = run_stitch("status", "-c", config)
    assert refused.returncode == 2 and "table has 4, config says 8" in refused.stderr  # so the reminder is needed
    set_buckets(config, 4)
    assert stitch_json("status", "-c", config)["timeline"]["buckets"] == 4
    # Through the API and --json: the count is a field; a restore that changed no count has none.
    stitch_json("savepoint", "create", "-c", config, "--name", "again")
    stitch_json("ingest", "-c", config, "--stream", "shipments", "--engine", "local")
    again = stitch_json("savepoint", "restore", "-c", config, "--name", "again")
    assert again["buckets"] is None and "buckets" not in again["message"]
    assert table.timeline().latest_completed([Action.RESTORE]) is not None


# ---------------------------------------------------------------------------------- 6. progress in a log

#: A CLI job's progress display in a process of its own, fed one message per stdin line until `end`.
PROGRESS = """
import sys
from stitchlake.cli import jobs
jobs.PROGRESS_EVERY_S = {every}
with jobs.progress_display("compact") as progress:
    for line in sys.stdin:
        if line.strip() == "end":
            break
        progress(line.strip())
"""


def start_progress(every: float, stderr: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", PROGRESS.format(every=every)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env={**os.environ, **env},
    )


def send(process: subprocess.Popen[bytes], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(f"{line}\n".encode())
    process.stdin.flush()


def read_until(descriptor: int, seen: bytearray, wanted: Callable[[str], bool], *, terminal: bool = False) -> str:
    """Read what the process writes until `wanted(text)`; a `\\r` (a status line redrawn) fails at once unless on
    a terminal, where it is what is wanted."""
    while not wanted(seen.decode(errors="replace")):
        try:
            chunk = os.read(descriptor, 4096)
        except OSError:  # a pseudo-terminal whose other end closed
            chunk = b""
        assert chunk, f"the process ended first: {bytes(seen)!r}"
        seen += chunk
        assert terminal or b"\r" not in seen, f"a status line redrawn in a log: {bytes(seen)[:300]!r}"
    return seen.decode(errors="replace")


def test_progress_is_a_plain_line_now_and_then_unless_on_a_terminal() -> None:
    # FORCE_COLOR (set by CI runners and schedulers) makes rich take any stream for a terminal: not us.
    env = {"FORCE_COLOR": "1", "COLUMNS": "200"}
    ticking = start_progress(0.05, subprocess.PIPE, env)
    assert ticking.stderr is not None
    seen = bytearray()
    send(ticking, "stage 1 of 2")
    read_until(ticking.stderr.fileno(), seen, lambda text: text.count("compact: stage 1 of 2 (") >= 2)
    send(ticking, "stage 2 of 2")  # the tick after it says the latest message
    read_until(ticking.stderr.fileno(), seen, lambda text: "compact: stage 2 of 2 (" in text)
    send(ticking, "end")
    rest = ticking.communicate()[1]
    assert ticking.returncode == 0 and b"\r" not in seen + rest
    assert all(line.endswith(b"s)\x1b[0m") for line in (bytes(seen) + rest).splitlines()), bytes(seen + rest)

    # Messages closer together than the period: the first is said, the others wait for the next tick.
    quiet = start_progress(3600, subprocess.PIPE, {})
    for number in range(5):
        send(quiet, f"stage {number}")
    send(quiet, "end")
    said = quiet.communicate()[1].decode()
    assert quiet.returncode == 0 and said.splitlines() == ["compact: stage 0 (0s)"], said

    # A terminal keeps its status line, redrawn in place.
    leader, follower = pty.openpty()
    on_terminal = start_progress(3600, follower, {"COLUMNS": "200"})
    os.close(follower)
    try:
        send(on_terminal, "stage 1 of 2")
        shown = read_until(leader, bytearray(), lambda text: "\r" in text and "stage 1 of 2" in text, terminal=True)
        assert "compact: stage 1 of 2 (" in shown
        send(on_terminal, "end")
        assert on_terminal.wait() == 0
    finally:
        os.close(leader)
