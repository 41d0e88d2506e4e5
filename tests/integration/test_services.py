"""Table services (issue 5; design.md §4-§6, §8): compaction, clean, rollback, savepoint/restore, archive, erase.

Ground truth never comes from the service code under test:
- table contents come from the brute-force reference model (tests/support/reference.py), fed with the labelled
  batches the timeline says were committed (every write in this file records its batch recipe in its commit
  metadata, so even the batches of a SIGKILLed writer are accounted for exactly);
- what a compaction plan, a clean policy or a savepoint must hold is recomputed here from the completed
  instants' file lists with the design.md §5 slice rule, written out again in this file.

Where an acceptance point is about concurrency or crashes, the actors are real processes: writer processes
(`python -c`), `stitch ... --engine local` processes, SIGKILL (a crash) and SIGSTOP (a process that is slow at
exactly the wrong moment). Waiting is always for a condition (with a generous safety limit), never a timed
assertion.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

import stitchlake
from stitchlake.api import Table
from stitchlake.cli.app import app
from stitchlake.concurrency import heartbeat as heartbeats
from stitchlake.errors import UsageError
from stitchlake.layout.bucket import bucket_of
from stitchlake.layout.fsview import FileSlice
from stitchlake.layout.names import BASE, LOG, file_group_id
from stitchlake.reading.snapshot import read_slice
from stitchlake.table.transaction import Transaction
from stitchlake.timeline import clock
from stitchlake.timeline.instant import Action, Instant
from stitchlake.timeline.metadata import CleanCommit, CleanPlan, CompactionPlan
from tests.support.cli import console, stitch_json
from tests.support.reference import Erase, Event, expected_rows
from tests.support.service_writers import (
    SPEC,
    rows_from,
    write_spec,
)
from tests.support.tables import (
    MODELS,
    THREE_STREAMS,
    as_rows,
    batch,
    instant_at,
    new_table_file,
    partition_of,
    pause_when_inflight,
)

ROOT = Path(__file__).resolve().parents[2]
STITCH = Path(sys.executable).parent / "stitch"
KEY = ("k", "p")
MODEL = {m.name: m for m in MODELS}
STREAMS = ("orders", "payments", "shipments")
FAR_FUTURE = "9" * 17

Files = set[str]
Group = tuple[str, str]


# ================================================================================================ helpers


def document(
    buckets: int = 2, heartbeat: tuple[float, float] = (1, 5), lock_expire: float = 10, **extra: Any
) -> dict[str, Any]:
    """THREE_STREAMS (tests/support/tables.py) with the knobs these tests turn."""
    data: dict[str, Any] = copy.deepcopy(THREE_STREAMS)
    data["table"]["buckets"] = buckets
    data["concurrency"] = {
        "heartbeat": {"interval_s": heartbeat[0], "expire_s": heartbeat[1]},
        "lock": {"wait_s": 60, "expire_s": lock_expire},
    }
    data.update(extra)
    return data


def table_root(table: Table) -> Path:
    return Path(table.path)


def committed_events(table: Table) -> list[Event]:
    """Reference-model events of every completed deltacommit, versioned by its completion time."""
    timeline = table.timeline()
    events = []
    for instant in timeline.completed([Action.DELTACOMMIT]):
        spec = timeline.commit(instant).extra[SPEC]
        model = MODEL[spec["stream"]]
        for pos, row in enumerate(rows_from(spec)):
            values = {c: row.get(c) for c in model.columns}
            key = (row["k"], partition_of(row["k"]))
            events.append(Event(model.name, key, values, row["deleted"], int(instant.completed or 0), pos))
    return events


def truth(
    table: Table, erases: Iterable[Erase] = (), upto: str | None = None, events: list[Event] | None = None
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """What the table must read as (as of `upto`), by the reference model."""
    found = committed_events(table) if events is None else events
    by_key: dict[tuple[Any, ...], list[Event]] = {}
    for event in found:
        by_key.setdefault(event.key, []).append(event)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    cuts = list(erases)
    for mine in by_key.values():  # the model is brute force; feeding it one key at a time keeps it linear
        out.update(expected_rows(MODELS, mine, cuts, KEY, None if upto is None else int(upto)))
    return out


def sort(result: pa.Table) -> pa.Table:
    return result.sort_by([(name, "ascending") for name in KEY])


def data_files(root: Path) -> Files:
    """Every data file on disk, found by listing the folders (what a reader must never see unless named)."""
    out = set()
    # os.walk, not rglob: services create and delete folders under .stitch/ while we list (rglob raises then).
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name != ".stitch"]
        relative = Path(folder).relative_to(root)
        out |= {(relative / name).as_posix() for name in names if name.endswith(".parquet")}
    return out


def named_files(table: Table) -> Files:
    """Data files named by a completed instant and not removed by a completed clean."""
    timeline = table.timeline()
    named: Files = set()
    removed: Files = set()
    for instant in timeline.completed():
        meta = timeline.commit(instant)
        named |= {entry.path for entry in meta.added_files}
        if isinstance(meta, CleanCommit):
            removed |= set(meta.deleted) | set(meta.orphans)
    return named - removed


def files_of_instant(root: Path, instant: str) -> Files:
    return {p for p in data_files(root) if f"_{instant}_" in p.rsplit("/", 1)[-1]}


def all_paths(root: Path, beats: bool = True) -> Files:
    """Every file of the table except lock generations (not part of any instant) and, if not `beats`, the
    heartbeats of live processes (rewritten through temporary files all the time)."""
    skip = {("locks",)} if beats else {("locks",), ("heartbeats",)}
    out = set()
    for relative in walk_files(root):
        if not (relative.parts[0] == ".stitch" and relative.parts[1:2] in skip):
            out.add(relative.as_posix())
    return out


def walk_files(root: Path) -> Iterable[Path]:
    """Every file under `root`, relative to it, listed while services run: os.walk, not rglob, because markers,
    heartbeats and their folders are deleted under a listing (rglob raises then; the product tolerates it too)."""
    for folder, _subfolders, names in os.walk(root):
        relative = Path(folder).relative_to(root)
        yield from (relative / name for name in names)


def wait_for(what: str, condition: Callable[[], Any], limit_s: float = 600, every_s: float = 0.01) -> Any:
    """Poll until `condition()` is truthy; the limit only turns a hang into a clear failure (generous: at load 30
    on two cores a fresh Python process takes a minute to import its way to a first commit)."""
    deadline = time.monotonic() + limit_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(every_s)


def stitch(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real console script, as cron would run it."""
    return console(*args, stdin=stdin)


def cli(*args: str | Path) -> Result:
    """The same app in-process (for refusals that need no second process; much faster)."""
    return CliRunner().invoke(app, [str(a) for a in args])


def refused(result: Result | subprocess.CompletedProcess[str], code: int, *phrases: str) -> str:
    """Assert a refusal: the design.md §8 exit code and a message that names why and what would be safe."""
    status = result.exit_code if isinstance(result, Result) else result.returncode
    message = " ".join(result.stderr.split())
    assert status == code, f"expected exit {code}, got {status}: {message}"
    assert message.startswith("error: "), message
    assert "Traceback" not in message and "unexpected" not in message, message
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in {message!r}"
    return message


# ----------------------------------------------------------------------------------------- processes


#: The processes `spawn` started during the running test (`_end_spawned` ends them however the test went).
SPAWNED: list[subprocess.Popen[Any]] = []


@pytest.fixture(autouse=True)
def _end_spawned() -> Iterator[None]:
    """A test that fails while its writers run (or are stopped with SIGSTOP) must not leave them running."""
    yield
    while SPAWNED:
        end_process(SPAWNED.pop())


def spawn(tmp_path: Path, function: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Run `function(**kwargs)` of tests/support/service_writers.py in a fresh Python process (a writer on another
    host, say)."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); import tests.support.service_writers as t; "
        f"t.{function}(**json.loads(sys.argv[1]))"
    )
    with (tmp_path / f"{function}-{time.time_ns()}.log").open("w") as log:  # its stderr, for post-mortems
        process = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    SPAWNED.append(process)
    return process


def end_process(process: subprocess.Popen[Any] | None) -> None:
    """SIGKILL `process` if it still runs (stopped or not): a failed test must leave nothing running."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait(timeout=120)


def stop_writers(stop: Path, writers: list[subprocess.Popen[str]]) -> None:
    stop.touch()
    for writer in writers:
        if writer.poll() is None:
            try:
                writer.wait(timeout=600)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait()


def commits_after(table: Table, after: str) -> dict[str, int]:
    """Deltacommits per stream completed after `after`."""
    timeline = table.timeline()
    counts = dict.fromkeys(STREAMS, 0)
    for instant in timeline.completed([Action.DELTACOMMIT], since=after):
        counts[timeline.commit(instant).extra[SPEC]["stream"]] += 1
    return counts


def every_stream_wrote_after(table: Table, after: str, times: int = 1) -> bool:
    counts = commits_after(table, after)
    return all(counts[s] >= times for s in STREAMS)


# ------------------------------------------------------------------------------------ file bookkeeping


@dataclass(frozen=True)
class Written:
    """A data file as its completed instant announced it."""

    path: str
    group: Group
    kind: str
    requested: str
    completed: str


def written_files(table: Table) -> list[Written]:
    timeline = table.timeline()
    out = []
    for instant in timeline.completed([Action.DELTACOMMIT, Action.COMPACTION, Action.ERASE]):
        for entry in timeline.commit(instant).added_files:
            out.append(Written(entry.path, entry.group, entry.kind, instant.requested, instant.completed or ""))
    return out


def needed_at(files: list[Written], at: str) -> Files:
    """design.md §5, restated: a read as of `at` merges, per file group, the newest base completed by then and
    every log completed by then after that base's requested time."""
    out: Files = set()
    for group in {f.group for f in files}:
        mine = [f for f in files if f.group == group and f.completed <= at]
        bases = [f for f in mine if f.kind == BASE]
        start = max((b.requested for b in bases), default="")
        out |= {b.path for b in bases if b.requested == start}
        out |= {f.path for f in mine if f.kind == LOG and f.completed > start}
    return out


def versions(files: list[Written], group: Group) -> list[Files]:
    """A file group's slices (versions), oldest first: each base with the logs completed before the next one."""
    mine = [f for f in files if f.group == group]
    starts = ["", *sorted(f.requested for f in mine if f.kind == BASE)]
    out = []
    for position, start in enumerate(starts):
        end = starts[position + 1] if position + 1 < len(starts) else FAR_FUTURE
        members = {f.path for f in mine if f.kind == BASE and f.requested == start}
        members |= {f.path for f in mine if f.kind == LOG and start < f.completed < end}
        if members:
            out.append(members)
    return out


def group_of(table: Table, key: int) -> Group:
    bucket = int(bucket_of([pa.array([key], pa.int64())], table.config.table.buckets)[0])
    return (f"p={partition_of(key)}", file_group_id(bucket))


# ================================================================================================ compaction


def check_compactions(table: Table) -> int:
    """Every completed compaction's plan lists exactly the logs completed before its time (since the group's
    previous base), and each base file holds exactly the reference merge of those commits — nothing newer."""
    timeline = table.timeline()
    files = written_files(table)
    events = committed_events(table)
    compactions = timeline.completed([Action.COMPACTION])
    checked = 0
    for compaction in compactions:
        at = compaction.requested
        plan = timeline.plan(compaction)
        assert isinstance(plan, CompactionPlan)
        earlier = [f for f in files if f.kind == BASE and f.requested < at]
        expected_plan: dict[Group, tuple[str | None, Files]] = {}
        for group in {f.group for f in files}:
            previous = max((b for b in earlier if b.group == group), key=lambda b: b.requested, default=None)
            start = previous.requested if previous else ""
            logs = {f.path for f in files if f.group == group and f.kind == LOG and start < f.completed < at}
            if logs:
                expected_plan[group] = (previous.path if previous else None, logs)
        planned = {
            op.group: (
                op.base.path if op.base else None,
                {log.path for log in op.logs},
            )
            for op in plan.operations
        }
        assert planned == expected_plan, f"compaction {at} planned other logs than those completed before it"
        reference = truth(table, upto=at, events=events)
        meta = timeline.commit(compaction)
        assert {e.group for e in meta.added_files} == set(planned)
        for entry in meta.added_files:
            group = entry.group
            base = entry.at(at, compaction.completed or "")
            held = as_rows(read_slice(table, FileSlice(group[0], group[1], at, base, ())))
            wanted = {key: row for key, row in reference.items() if group_of(table, key[0]) == group}
            assert held == wanted, f"base file {entry.path} does not hold exactly the merge of its plan"
            checked += 1
    return checked


def test_compaction_while_three_writers_ingest_and_a_killed_run_is_completed(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, document(buckets=8, heartbeat=(0.5, 3)))
    root = table_root(table)
    stop = tmp_path / "stop"
    writers = [
        spawn(tmp_path, "writer_main", config=str(config), stop=str(stop), pause_s=0.25, spec=spec)
        for spec in ({"stream": s, "seed": n, "lo": 0, "hi": 400, "size": 80} for n, s in enumerate(STREAMS))
    ]
    compact: list[str | Path] = ["compact", "-c", config, "--engine", "local"]
    try:
        wait_for("two commits of every writer", lambda: every_stream_wrote_after(table, "0", 2))

        # 1. plain `stitch compact` (schedule + run) while the writers keep going
        first = stitch_json(*compact)["result"]
        wait_for("writes after the first compaction", lambda: every_stream_wrote_after(table, first["completed"]))

        # 2. schedule; the writers' next commits complete after the plan's time; then run it
        second = stitch_json(*compact, "--schedule")["scheduled"]
        wait_for("writes after the second plan", lambda: every_stream_wrote_after(table, second))
        assert stitch_json(*compact, "--run", "--instant", second)["result"]["instant"] == second

        # 3. schedule, start the run, SIGKILL it once it has written part of its base files
        third = stitch_json(*compact, "--schedule")["scheduled"]
        killed = subprocess.Popen(
            [str(STITCH), *map(str, compact), "--run", "--instant", third], stderr=subprocess.DEVNULL
        )
        SPAWNED.append(killed)  # ended by `_end_spawned` if the wait below fails
        partial = wait_for("a base file of the third compaction", lambda: files_of_instant(root, third), every_s=0.001)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert not instant_at(table, third).is_completed, "the compaction finished before it could be killed"
        assert len(table.timeline().plan(table.timeline().get(third)).operations) > len(partial)  # type: ignore[arg-type,attr-defined]
        wait_for("the killed compaction's heartbeat to expire", lambda: heartbeats.is_expired(table.storage, third, 3))
        resumed = stitch_json(*compact, "--run")["result"]
        assert resumed["instant"] == third
        assert not partial & data_files(root), "the killed attempt's partial files must be cleared, not reused"
        wait_for("writes after the resumed compaction", lambda: every_stream_wrote_after(table, resumed["completed"]))
    finally:
        stop_writers(stop, writers)
    assert [w.returncode for w in writers] == [0, 0, 0]

    assert as_rows(table.read()) == truth(table)
    assert check_compactions(table) >= 3 * 8
    timeline = table.timeline()
    assert not timeline.pending()
    assert data_files(root) == named_files(table), "a data file on disk is not named by a completed instant"
    # The writers kept writing past every plan's time; check_compactions proved none of it leaked into a base.
    for instant in timeline.completed([Action.COMPACTION]):
        later = timeline.completed([Action.DELTACOMMIT], since=instant.requested)
        assert {timeline.commit(i).extra[SPEC]["stream"] for i in later} == set(STREAMS)


# ================================================================================================ clean


def clean_history(table: Table, monkeypatch: pytest.MonkeyPatch) -> dict[str, Instant]:
    """Writes and compactions spread over five hours (the writers' clock is set back for the old part, so
    keep_latest_hours has something to keep and something to drop), with file groups of different ages."""
    real = clock.now_millis

    def hours_ago(hours: float) -> None:
        monkeypatch.setattr(clock, "now_millis", lambda: real() - int(hours * 3_600_000))

    every = {"lo": 0, "hi": 40, "all": True}
    by_group: dict[Group, list[int]] = {}
    for key in range(40):
        by_group.setdefault(group_of(table, key), []).append(key)
    some = [k for g in sorted(by_group)[:2] for k in by_group[g]]  # two of the four file groups
    marks: dict[str, Instant] = {}

    def compact(name: str) -> None:
        done = table.compact().done
        assert done is not None
        marks[name] = instant_at(table, done.instant)

    hours_ago(5)
    write_spec(table, {"stream": "orders", "seed": 1, **every})
    write_spec(table, {"stream": "payments", "seed": 2, **every})
    compact("c1")
    hours_ago(4)
    write_spec(table, {"stream": "shipments", "seed": 3, "keys": some})
    compact("c2")  # only the two groups that got logs
    hours_ago(3)
    write_spec(table, {"stream": "orders", "seed": 4, "lo": 0, "hi": 40, "size": 30})
    write_spec(table, {"stream": "payments", "seed": 5, "lo": 0, "hi": 40, "size": 30})
    compact("c3")
    monkeypatch.setattr(clock, "now_millis", real)
    write_spec(table, {"stream": "shipments", "seed": 6, **every})
    compact("c4")
    write_spec(table, {"stream": "orders", "seed": 7, "keys": some})
    write_spec(table, {"stream": "payments", "seed": 8, "lo": 0, "hi": 40, "size": 10})
    return marks


def policy_keeps(table: Table, policy: str, retain: int, now_ms: int) -> Files:
    """The files a policy must keep, from the policy's definition (not from the clean code)."""
    files = written_files(table)
    data = table.timeline().completed([Action.DELTACOMMIT, Action.COMPACTION, Action.ERASE])
    if policy == "keep_latest_file_versions":
        keep: Files = set()
        for group in {f.group for f in files}:
            for version in versions(files, group)[-retain:]:
                keep |= version
        return keep
    if policy == "keep_latest_commits":
        times = [i.completed or "" for i in data[-retain:]]
    else:
        cut = clock.from_millis(now_ms - retain * 3_600_000)
        times = [cut] + [i.completed or "" for i in data if (i.completed or "") > cut]
    return set().union(*(needed_at(files, t) for t in times))


@pytest.mark.parametrize(
    ("policy", "retain"), [("keep_latest_commits", 3), ("keep_latest_file_versions", 2), ("keep_latest_hours", 2)]
)
def test_clean_keeps_exactly_what_each_policy_says_and_savepointed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, retain: int
) -> None:
    from stitchlake.services.upkeep.savepoint import create

    table, config = new_table_file(tmp_path, document())
    root = table_root(table)
    marks = clean_history(table, monkeypatch)
    create(table, marks["c1"].requested, name="early")
    files = written_files(table)
    on_disk = data_files(root)
    assert on_disk == {f.path for f in files}
    pinned = needed_at(files, marks["c1"].completed or "")
    expected = on_disk - policy_keeps(table, policy, retain, clock.now_millis()) - pinned
    assert expected, "the history must give the policy something to delete, or this test proves nothing"
    assert pinned - policy_keeps(table, policy, retain, clock.now_millis()), "the savepoint must pin extra files"
    before = sort(table.read())
    early = sort(table.read(as_of="early"))

    args: list[str | Path] = [
        "clean",
        "-c",
        config,
        "--engine",
        "local",
        "--policy",
        policy,
        "--retain",
        str(retain),
        "--list-files",
    ]
    dry = stitch_json(*args, "--dry-run")
    assert set(dry["deleted"]) == expected and data_files(root) == on_disk, "--dry-run lists and deletes nothing"
    assert dry["deleted_files"] == 0 and dry["would_delete_files"] == len(expected) + len(dry["orphans"])
    done = stitch_json(*args)
    assert set(done["deleted"]) == expected
    assert done["deleted_files"] == len(expected) and "would_delete_files" not in done
    assert data_files(root) == on_disk - expected
    assert pinned <= data_files(root), "a savepointed file was deleted"

    assert sort(table.read()).equals(before)
    assert sort(table.read(as_of="early")).equals(early)
    assert as_rows(early) == truth(table, upto=marks["c1"].completed)
    outcomes = []
    for instant in table.timeline().completed([Action.DELTACOMMIT, Action.COMPACTION]):
        at = instant.completed or ""
        outcomes.append(needed_at(files, at) <= data_files(root))
        if outcomes[-1]:
            assert as_rows(table.read(as_of=at)) == truth(table, upto=at)
        else:  # a time outside the retention is refused, not answered with less data
            message = refused(cli("read", "-c", config, "--as-of", at), 2, "outside the retention", "savepoint")
            assert "clean.retain" in message
    assert True in outcomes and False in outcomes


def test_clean_after_killed_writers_leaves_no_orphan_and_no_inflight_instant(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, document(buckets=8, heartbeat=(0.5, 2), lock_expire=3))
    root = table_root(table)
    writers = {
        s: spawn(
            tmp_path,
            "writer_main",
            config=str(config),
            spec={"stream": s, "seed": n, "lo": 0, "hi": 2000, "size": 1500},
        )
        for n, s in enumerate(STREAMS)
    }

    def writing(stream: str) -> str | None:
        """The stream's deltacommit that has created some of its files (marked and on disk), if any."""
        timeline = table.timeline()
        for instant in timeline.pending([Action.DELTACOMMIT]):
            if timeline.stream_of(instant) == stream and files_of_instant(root, instant.requested):
                return instant.requested
        return None

    wait_for("two commits of every writer", lambda: every_stream_wrote_after(table, "0", 2))
    for stream, writer in writers.items():
        wait_for(f"{stream} mid-write", partial(writing, stream), every_s=0.001)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    crashed = {i.requested for i in table.timeline().pending()}
    assert crashed, "no writer was caught mid-ingest"
    # A stray data file no instant and no marker names (say, from a crash before markers were written).
    some_log = sorted(p for p in data_files(root) if p.endswith(".log.parquet"))[0]
    stray = some_log.rsplit("/", 1)[0] + "/00000_20200101000000000_0123456789.log.parquet"
    shutil.copyfile(root / some_log, root / stray)
    unnamed = data_files(root) - named_files(table)
    assert stray in unnamed and len(unnamed) > 1, "the killed writers should have left files behind"

    for instant in crashed:
        wait_for("expired heartbeats", partial(heartbeats.is_expired, table.storage, instant, 2))
    status = stitch_json("status", "-c", config)
    assert {w["instant"]: w["alive"] for w in status["writers"]} == dict.fromkeys(crashed, False)

    # A dry run names what it would roll back as such, and rolls back nothing.
    dry = stitch_json("clean", "-c", config, "--engine", "local", "--dry-run")
    assert set(dry["would_roll_back"]) == crashed and "rolled_back" not in dry
    assert {i.requested for i in table.timeline().pending()} == crashed
    done = stitch_json("clean", "-c", config, "--engine", "local", "--list-files")
    assert set(done["rolled_back"]) == crashed and "would_roll_back" not in done
    assert stray in done["orphans"]
    timeline = table.timeline()
    assert not timeline.pending(), "an inflight instant was left behind"
    assert data_files(root) == named_files(table), "an orphan data file remains"
    assert not list((root / ".stitch" / "markers").glob("*"))
    assert not set(heartbeats.list_beats(table.storage)) & crashed
    assert as_rows(table.read()) == truth(table)


def test_restore_gives_the_rows_read_as_of_the_savepoint_and_waits_for_live_writers(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, document(heartbeat=(0.5, 30)))
    root = table_root(table)
    wide = {"lo": 0, "hi": 60, "size": 50}
    for number, stream in enumerate(STREAMS):
        write_spec(table, {"stream": stream, "seed": number, **wide})
    table.compact()
    write_spec(table, {"stream": "orders", "seed": 10, **wide})
    assert stitch_json("savepoint", "create", "-c", config, "--name", "before", "--engine", "local")["name"] == "before"
    pinned_at = table.timeline().latest_completed([Action.SAVEPOINT])
    # history the restore must take back: writes, a compaction, an erase, another savepoint, a pending plan
    write_spec(table, {"stream": "payments", "seed": 11, **wide})
    table.compact()
    table.erase(pa.table({"k": pa.array([1, 2, 3, 4], pa.int64())}))
    write_spec(table, {"stream": "shipments", "seed": 12, **wide})
    stitch_json("savepoint", "create", "-c", config, "--name", "later", "--engine", "local")
    write_spec(table, {"stream": "orders", "seed": 13, **wide})
    assert stitch_json("compact", "-c", config, "--schedule", "--engine", "local")["scheduled"]

    before = sort(table.read(as_of="before"))
    assert pinned_at is not None
    at = table.timeline().commit(pinned_at).savepoint_of  # type: ignore[attr-defined]
    assert as_rows(before) == truth(table, upto=at)
    assert not sort(table.read()).equals(before), "the restore must have something to take back"

    writer = spawn(tmp_path, "paused_writer_main", config=str(config), spec={"stream": "payments", "seed": 14, **wide})
    assert writer.stdout is not None and writer.stdin is not None
    live = json.loads(writer.stdout.readline())
    assert set(live["files"]) <= data_files(root)
    untouched = all_paths(root, beats=False)
    restore: list[str | Path] = ["savepoint", "restore", "--name", "before", "-c", config, "--engine", "local"]
    refused(stitch(*restore), 4, f"live writers are running (deltacommit {live['instant']}", "--force")
    assert all_paths(root, beats=False) == untouched, "a refused restore changed the table"

    done = stitch_json(*restore, "--force")
    assert live["instant"] in done["undone"]
    writer.stdin.write("go\n")
    writer.stdin.flush()
    assert writer.wait(timeout=600) == 1, "the writer rolled back by the forced restore must not publish"
    assert "rolled back" in json.loads(writer.stdout.readline())["error"]

    after = sort(table.read())
    assert after.equals(before), "restore must give byte-for-byte the rows read as of the savepoint"
    assert sort(table.read(as_of="before")).equals(before)
    timeline = table.timeline()
    assert not timeline.pending()
    assert [s["name"] for s in stitch_json("savepoint", "list", "-c", config)["savepoints"]] == ["before"]
    assert data_files(root) == named_files(table), "restore left files of undone instants behind"
    erases = {i.requested for i in timeline.completed([Action.ERASE])}
    assert {p.name for p in (root / ".stitch" / "erase").iterdir()} == erases, "an undone erase left its folder"


def test_a_crashed_restore_blocks_rewrites_until_it_is_finished(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, document(heartbeat=(0.5, 2)))
    target: list[str | Path] = ["-c", config]
    wide = {"lo": 0, "hi": 40, "size": 30}
    for number, stream in enumerate(STREAMS):
        write_spec(table, {"stream": stream, "seed": number, **wide})
    assert cli("savepoint", "create", *target, "--name", "sp", "--engine", "local").exit_code == 0
    before = sort(table.read(as_of="sp"))
    write_spec(table, {"stream": "orders", "seed": 5, **wide})
    table.compact()
    write_spec(table, {"stream": "payments", "seed": 6, **wide})

    crash = spawn(tmp_path, "crashed_restore_main", config=str(config), savepoint="sp")
    assert crash.wait(timeout=600) == -signal.SIGKILL
    [pending] = table.timeline().pending([Action.RESTORE])
    # Planning on a half-taken-back history would merge files about to vanish or bring undone rows back.
    why = f"restore {pending.requested} is undoing commits"
    refused(cli("compact", *target, "--engine", "local"), 4, why, "stitch rollback --failed")
    refused(cli("delete", *target, "--keys", keys_file(tmp_path, "keys.parquet", [1])), 4, why)
    refused(cli("savepoint", "create", *target, "--engine", "local"), 4, why)

    wait_for(
        "the dead restore's heartbeat to expire", lambda: heartbeats.is_expired(table.storage, pending.requested, 2)
    )
    assert stitch("rollback", *target, "--failed", "--engine", "local").returncode == 0
    assert instant_at(table, pending.requested).is_completed, "the crashed restore must be finished, not undone"
    assert sort(table.read()).equals(before)
    assert stitch_json("compact", *target, "--engine", "local")["result"] is not None
    assert sort(table.read()).equals(before)
    assert data_files(table_root(table)) == named_files(table)


def test_inline_compaction_runs_after_every_kind_of_ingest(tmp_path: Path) -> None:
    """`compaction.inline` compacts once `after_delta_commits` deltacommits piled up, whether the ingest is
    `Table.ingest` or `stitch ingest` (a `stitch stream` batch runs the same ingest); `Table.write` never does."""
    landing = tmp_path / "landing" / "orders"
    landing.mkdir(parents=True)
    data = document(buckets=1, compaction={"inline": True, "after_delta_commits": 2})
    data["streams"]["orders"]["source"] = {"format": "parquet", "path": "landing/orders"}
    table, config = new_table_file(tmp_path, data)

    def land(number: int) -> None:
        rows = rows_from({"stream": "orders", "seed": 72, "number": number, "lo": 0, "hi": 12, "size": 4})
        pq.write_table(batch(MODEL["orders"], rows), landing / f"orders-{number:04d}.parquet")

    def compactions() -> int:
        return len(table.timeline().completed([Action.COMPACTION]))

    write_spec(table, {"stream": "payments", "seed": 73, "lo": 0, "hi": 12, "size": 5})
    write_spec(table, {"stream": "payments", "seed": 74, "lo": 0, "hi": 12, "size": 5})
    assert compactions() == 0, "a write is not an ingest: it never compacts, even when one is due"
    land(0)
    inline = table.ingest("orders").result.compaction
    assert inline is not None and inline.instant and compactions() == 1  # 3 deltacommits: due
    land(1)
    assert stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")["compaction"] is None
    land(2)
    done = stitch_json("ingest", "-c", config, "--stream", "orders", "--engine", "local")
    assert done["compaction"]["file_groups"] >= 1 and compactions() == 2
    assert not any(s.logs for s in table.view().latest_slices(None)), "the compaction merged every log"
    assert sort(table.read(mode="read_optimized")).equals(sort(table.read()))


def test_an_inline_compaction_that_fails_says_the_ingest_stands(tmp_path: Path) -> None:
    """The compaction after an ingest fails (its configured Iceberg publish cannot reach the catalog): exit 1, not
    the compaction's own code, and the message says the ingest committed; its rows are in the table."""
    landing = tmp_path / "landing" / "orders"
    landing.mkdir(parents=True)
    unreachable = {"type": "rest", "uri": "http://127.0.0.1:9"}
    data = document(
        buckets=1,
        compaction={"inline": True, "after_delta_commits": 1},
        publish={"formats": ["iceberg"], "iceberg_catalog": unreachable},
    )
    data["streams"]["orders"]["source"] = {"format": "parquet", "path": "landing/orders"}
    table, config = new_table_file(tmp_path, data)
    rows = rows_from({"stream": "orders", "seed": 75, "lo": 0, "hi": 12, "size": 4})
    pq.write_table(batch(MODEL["orders"], rows), landing / "orders-0000.parquet")
    done = stitch("ingest", "-c", config, "--stream", "orders", "--engine", "local", "--json")
    assert done.returncode == 1, done.stdout
    error = json.loads(done.stdout)["error"]
    [ingested] = table.timeline().completed([Action.DELTACOMMIT])
    assert error.startswith(f"ingest {ingested.requested} committed (ingested 1 file(s), {len(rows)} rows"), error
    assert "the inline compaction after it failed" in error and "publishing failed" in error, error
    assert len(table.timeline().completed([Action.COMPACTION])) == 1, "the compaction itself stands"


def test_archiving_all_but_20_of_500_instants_changes_no_answer(tmp_path: Path) -> None:
    from stitchlake.services.undo.rollback import rollback

    landing = tmp_path / "landing" / "orders"
    landing.mkdir(parents=True)
    data = document(buckets=1, archive={"keep_instants": 20})
    data["streams"]["orders"]["source"] = {"format": "parquet", "path": "landing/orders"}
    table, config = new_table_file(tmp_path, data)

    def land(number: int) -> int:
        rows = rows_from({"stream": "orders", "seed": 70, "number": number, "lo": 0, "hi": 12, "size": 3})
        pq.write_table(batch(MODEL["orders"], rows), landing / f"orders-{number:04d}.parquet")
        return len(rows)

    for number in range(30):
        land(number)
        assert table.ingest("orders", max_files=1).result.source_files == 1
    number = 0
    while len(table.timeline().completed()) < 500:
        number += 1
        stream = ("payments", "shipments")[number % 2]
        result = write_spec(table, {"stream": stream, "seed": 71, "number": number, "lo": 0, "hi": 12, "size": 1})
        if number in (100, 250, 400):
            table.compact()
        if number == 300:
            table.clean(retain=5)
        if number == 350:
            rollback(table, result.instant)
    timeline = table.timeline()
    done = timeline.completed()
    assert len(done) == 500 and not timeline.pending()
    assert {i.action for i in done} >= {"deltacommit", "compaction", "clean", "rollback"}

    horizon = done[-21].completed or ""
    times = [horizon, *(i.completed or "" for i in (done[-20], done[-10], done[-1]))]
    shown: list[str | Path] = ["timeline", "show", "-c", config, "--limit", "0"]
    ingest: list[str | Path] = ["ingest", "-c", config, "--stream", "orders", "--engine", "local"]

    def answers() -> list[pa.Table]:
        return [sort(table.read()), *(sort(table.read(as_of=t)) for t in times), table.read(since=times[2])]

    before = answers()
    history = stitch_json(*shown)["instants"]
    assert stitch_json(*ingest)["source_files"] == 0

    archived = stitch_json("archive", "-c", config)
    assert (archived["archived"], archived["kept"], archived["horizon"]) == (480, 20, horizon)
    assert len(table.timeline()) == 20

    after = answers()
    for was, now in zip(before, after, strict=True):
        assert now.equals(was)
    listed = stitch_json(*shown, "--archived")["instants"] + stitch_json(*shown)["instants"]
    assert sorted(listed, key=lambda r: r["instant"]) == sorted(history, key=lambda r: r["instant"])
    assert stitch_json(*ingest)["source_files"] == 0, "archived consumption must still count (exactly once)"
    rows = land(30)
    again = stitch_json(*ingest)
    assert (again["source_files"], again["rows"]) == (1, rows)
    assert stitch_json(*ingest)["source_files"] == 0
    refused(
        cli("read", "-c", config, "--as-of", str(done[-22].completed)),
        2,
        "older than the archived timeline",
        "pick a later time or a savepoint",
    )


def keys_file(folder: Path, name: str, keys: Iterable[int]) -> Path:
    path = folder / name
    pq.write_table(pa.table({"k": pa.array(sorted(keys), pa.int64())}), path)
    return path


def instant_of(name: str) -> str:
    """The instant a marker folder or heartbeat file is named after; a heartbeat caught mid-write is its temporary
    file (`.<instant>.<token>.tmp`, renamed over `<instant>` a moment later)."""
    if name.startswith(".") and name.endswith(".tmp"):
        return name[1:].split(".", 1)[0]
    return name


def writer_traces_only(changed: Files, deltacommits: set[str]) -> Files:
    """The paths in `changed` that a concurrent deltacommit writer does NOT explain (its timeline files, its
    log files, its markers and heartbeats) — what some other actor left behind."""
    out = set()
    for path in changed:
        parts = path.split("/")
        if parts[0] == ".stitch" and parts[1] == "timeline" and ".deltacommit" in parts[-1]:
            continue
        if parts[0] != ".stitch" and path.endswith(".log.parquet"):
            continue
        if parts[0] == ".stitch" and parts[1] in ("markers", "heartbeats") and instant_of(parts[2]) in deltacommits:
            continue
        out.add(path)
    return out


def deltacommit_times(paths: Files) -> set[str]:
    return {p.split("/")[-1][:17] for p in paths if p.startswith(".stitch/timeline/") and "deltacommit" in p}


def test_erase_of_1000_keys_while_a_writer_ingests_and_racing_erases_exit_3_without_trace(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, document(buckets=4, heartbeat=(0.5, 60)))
    root = table_root(table)
    for number, stream in enumerate(STREAMS):
        for half in (0, 1):
            spec = {"stream": stream, "seed": number, "number": half, "lo": half * 1650, "hi": (half + 1) * 1650}
            write_spec(table, {**spec, "all": True, "deletes": 0})
    erased = set(range(0, 3000, 3))
    assert len(erased) == 1000
    stop = tmp_path / "stop"
    spec = {"stream": "payments", "seed": 9, "number": 0, "lo": 0, "hi": 3300, "size": 100, "avoid3": True}
    writer = spawn(tmp_path, "writer_main", config=str(config), stop=str(stop), pause_s=0.05, spec=spec)
    erase: list[str | Path] = ["delete", "-c", config, "--json", "--keys"]
    winner: subprocess.Popen[str] | None = None
    try:
        wait_for("the writer's first commits", lambda: commits_after(table, "0")["payments"] >= 4)
        winner = subprocess.Popen(
            [str(STITCH), *map(str, erase), keys_file(tmp_path, "erase.parquet", erased)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        paused = pause_when_inflight(table, winner, Action.ERASE)
        try:
            before = all_paths(root)
            racer = stitch(*erase, keys_file(tmp_path, "racer.parquet", sorted(erased)[:10]))
            after = all_paths(root)
        finally:
            os.kill(winner.pid, signal.SIGCONT)
        refused(
            racer, 3, f"conflicts with erase {paused.requested}", "same file groups", "nothing was changed", "retry"
        )
        # The writer's instants are read from a listing taken last: a directory walk may list heartbeats after
        # the timeline, so a heartbeat can be seen before its instant's requested file (which stays for good).
        writers = deltacommit_times(before | after | all_paths(root))
        assert not writer_traces_only(before ^ after, writers), "the racer left a trace"
        out, err = winner.communicate(timeout=600)
        assert winner.returncode == 0, err
        result = json.loads(out)
        assert (result["requested_keys"], result["erased_keys"]) == (1000, 1000)
        wait_for(
            "writes on top of the erase",
            lambda: commits_after(table, result["completed"])["payments"] >= 2,
        )
    finally:
        end_process(winner)
        stop_writers(stop, [writer])
    assert writer.returncode == 0

    cut = Erase(frozenset((k, partition_of(k)) for k in erased), int(result["completed"]))
    rows = as_rows(table.read())
    assert not {k for k, _ in rows} & erased, "an erased key is still readable"
    assert rows == truth(table, [cut]), "keys not erased must be intact (and the writer's rows all there)"

    # An erase that a write of one of its keys overtakes while it runs: exit 3, nothing of it left.
    late_keys = set(range(3000, 3030, 3))
    pristine = all_paths(root)
    slow = subprocess.Popen(
        [str(STITCH), *map(str, erase), keys_file(tmp_path, "late.parquet", late_keys)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        loser = pause_when_inflight(table, slow, Action.ERASE)
        try:
            late = write_spec(table, {"stream": "orders", "seed": 99, "keys": [3003], "deletes": 0})
        finally:
            os.kill(slow.pid, signal.SIGCONT)
        _, slow_err = slow.communicate(timeout=600)
    finally:
        end_process(slow)
    message = refused(
        subprocess.CompletedProcess(slow.args, slow.returncode, "", slow_err),
        3,
        f"deltacommit {late.instant} wrote an erased key while the erase ran",
        "nothing was changed",
        "retry the erase",
    )
    assert loser.requested in message
    trace = {p.as_posix() for p in walk_files(root) if loser.requested in p.name}
    assert not trace, f"the conflicting erase left {sorted(trace)}"
    assert not writer_traces_only(all_paths(root) ^ pristine, {late.instant})
    assert as_rows(table.read()) == truth(table, [cut])
    # ... and retried, it erases them all, the late write included (it was committed before the erase).
    retried = stitch_json(*erase, tmp_path / "late.parquet")
    second = Erase(frozenset((k, partition_of(k)) for k in late_keys), int(retried["completed"]))
    assert as_rows(table.read()) == truth(table, [cut, second])
    assert data_files(root) == named_files(table)


def test_every_refusal_exits_with_its_design_code_and_says_why_and_what_is_safe(tmp_path: Path) -> None:
    table, config = new_table_file(tmp_path, document(buckets=8, heartbeat=(0.5, 60)))
    root = table_root(table)
    target: list[str | Path] = ["-c", config]
    small = {"lo": 0, "hi": 40, "size": 20}
    d1 = write_spec(table, {"stream": "orders", "seed": 1, **small})
    write_spec(table, {"stream": "payments", "seed": 2, **small})
    c1 = table.compact().done
    assert c1 is not None
    d3 = write_spec(table, {"stream": "shipments", "seed": 3, **small})
    nowhere = "20000101000000000"

    # rollback: unknown, not the latest, a completed compaction
    refused(
        cli("rollback", *target, "--instant", nowhere, "--engine", "local"),
        2,
        "not on the active timeline",
        "stitch timeline show",
    )
    refused(
        cli("rollback", *target, "--instant", d1.instant, "--engine", "local"),
        2,
        f"deltacommit {d1.instant} is not the latest one ({d3.instant})",
        "would silently drop newer data",
        "Roll back the newer ones first, or restore a savepoint",
    )
    refused(
        cli("rollback", *target, "--instant", c1.instant, "--engine", "local"),
        2,
        f"compaction {c1.instant} is completed",
        "only pending instants and the latest deltacommit",
        "restore a savepoint taken before it",
    )
    # pinned by a savepoint; a savepoint name taken twice
    assert cli("savepoint", "create", *target, "--name", "pin", "--engine", "local").exit_code == 0
    refused(
        cli("rollback", *target, "--instant", d3.instant, "--engine", "local"),
        2,
        "is pinned by savepoint",
        "delete the savepoint first",
    )
    refused(
        cli("savepoint", "create", *target, "--name", "pin", "--engine", "local"),
        2,
        "already exists",
        "delete it first or pick another name",
    )
    refused(
        cli("savepoint", "restore", "--name", "nope", *target, "--engine", "local"),
        2,
        "no savepoint 'nope'",
        "savepoints: pin",
    )
    assert cli("savepoint", "delete", "--name", "pin", *target, "--engine", "local").exit_code == 0

    # a pending compaction plan absorbs d3: rolling d3 back, or erasing in its file groups, is refused
    c2 = stitch_json("compact", *target, "--schedule", "--engine", "local")["scheduled"]
    refused(
        cli("rollback", *target, "--instant", d3.instant, "--engine", "local"),
        2,
        f"was absorbed by compaction {c2} (requested)",
        "Restore a savepoint taken before it instead",
    )
    key = rows_from({"stream": "shipments", "seed": 3, **small})[0]["k"]
    refused(
        cli("delete", *target, "--keys", keys_file(tmp_path, "keys.parquet", [key])),
        3,
        f"conflicts with compaction {c2}, still pending on the same file groups",
        "nothing was changed",
        "retry after it completes",
    )
    refused(
        cli("compact", *target, "--run", "--instant", nowhere, "--engine", "local"),
        2,
        "is not a compaction",
        f"pending plans: {c2}",
        "without an instant runs the oldest pending plan",
    )
    refused(
        cli("compact", *target, "--run", "--instant", c1.instant, "--engine", "local"),
        2,
        "already completed",
        "nothing to run",
    )
    refused(cli("compact", *target, "--strategy", "biggest", "--engine", "local"), 2, "is not one of")
    assert cli("compact", *target, "--run", "--instant", c2, "--engine", "local").exit_code == 0
    refused(
        cli("rollback", *target, "--instant", d3.instant, "--engine", "local"),
        2,
        f"was absorbed by compaction {c2} (completed)",
    )
    # the latest deltacommit no rewrite absorbed can be rolled back (the refusals are not blanket ones)
    d4 = write_spec(table, {"stream": "orders", "seed": 4, **small})
    assert cli("rollback", *target, "--instant", d4.instant, "--engine", "local").exit_code == 0
    assert as_rows(table.read()) == truth(table)

    # a live writer's pending instant is not rolled back, neither by name nor by --failed
    writer = spawn(tmp_path, "paused_writer_main", config=str(config), spec={"stream": "payments", "seed": 5, **small})
    assert writer.stdout is not None and writer.stdin is not None
    live = json.loads(writer.stdout.readline())["instant"]
    refused(
        cli("rollback", *target, "--instant", live, "--engine", "local"),
        4,
        "is being run by a live process",
        "stop that process first, or wait",
    )
    assert stitch_json("rollback", *target, "--failed", "--engine", "local")["rolled_back"] == []
    writer.stdin.write("go\n")
    writer.stdin.flush()
    assert writer.wait(timeout=600) == 0 and instant_at(table, live).is_completed

    # a crashed clean can only be finished, not undone
    crashed = Transaction.begin(table, Action.CLEAN, CleanPlan(policy="keep_latest_commits"))
    assert crashed.heartbeat is not None
    crashed.heartbeat.stop(delete=True)  # its process died: no heartbeat any more
    refused(
        cli("rollback", *target, "--instant", crashed.time, "--engine", "local"),
        2,
        f"{crashed.time} is a crashed clean",
        "cannot be undone, only finished",
        "stitch rollback --failed",
    )
    # a clean with a bad policy is refused before it touches anything (not after finishing failed work)
    untouched = all_paths(root)
    bad_policy = cli("clean", *target, "--policy", "oldest", "--engine", "local")  # a choice the CLI parses
    assert bad_policy.exit_code == 2 and "Invalid value for '--policy'" in bad_policy.stderr, bad_policy.stderr
    assert "'keep_latest_commits', 'keep_latest_file_versions', 'keep_latest_hours'" in bad_policy.stderr
    assert all_paths(root) == untouched
    with pytest.raises(UsageError, match="clean policy 'oldest' is not one of: keep_latest_commits, "):
        stitchlake.open(config).clean(policy="oldest")  # the library refuses it before anything is touched too
    assert all_paths(root) == untouched
    assert cli("rollback", *target, "--failed", "--engine", "local").exit_code == 0
    assert instant_at(table, crashed.time).is_completed

    # a compaction run whose process was killed a moment ago: its heartbeat is fresh, but its process is gone
    # from this host, so it is known dead at once and the next run resumes it (no waiting for the expiry)
    write_spec(table, {"stream": "orders", "seed": 6, **small})
    c3 = stitch_json("compact", *target, "--schedule", "--engine", "local")["scheduled"]
    crash = spawn(tmp_path, "crashed_compaction_main", config=str(config), instant=c3)
    assert crash.wait(timeout=600) == -signal.SIGKILL
    assert instant_at(table, c3).state.label == "inflight"
    resumed = stitch_json("compact", *target, "--run", "--engine", "local")
    assert resumed["result"]["instant"] == c3 and instant_at(table, c3).is_completed
