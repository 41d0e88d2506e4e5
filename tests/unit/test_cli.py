"""The `stitch` CLI (design.md §7, §8): real config files and tables on disk, run through typer's CliRunner and,
where the process boundary matters (entry point, exit status, imports, stdout purity), as a real subprocess.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import typer
import yaml
from typer.testing import CliRunner, Result

import stitchlake
from stitchlake.api import Table
from stitchlake.cli import printing, tables, values
from stitchlake.cli.app import app, guarded, run_command
from stitchlake.errors import BusyError, ConfigError, ConflictError, InputRejected, NotFoundError, StitchError
from stitchlake.timeline.instant import Action, State
from stitchlake.timeline.metadata import DeltaCommitPlan
from stitchlake.timeline.timeline import draw_time, write_inflight, write_requested
from stitchlake.vocabulary import PublishFormat, Recovery
from tests.support.cli import invoke, python
from tests.support.tables import ORDERS, THREE_STREAMS, batch, new_table_file, write_table_yaml

ROOT = Path(__file__).resolve().parents[2]


def stdout_json(result: Result) -> dict[str, Any]:
    """`--json` prints exactly one JSON object, on one line: json.loads fails on anything before or after it."""
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n") and result.stdout.count("\n") == 1
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def _summary(result: Result) -> dict[str, str]:
    """The key/value summary a command printed for a person: label -> value (labels are two words at most)."""
    assert result.exit_code == 0, result.output
    shown = {}
    for line in result.output.splitlines():
        for label in ("instant", "file groups", "rows", "engine", "files pinned", "archived", "undone", "policy"):
            if line.strip().startswith(label + " "):
                shown[label] = line.strip()[len(label) :].strip()
    return shown


def test_job_summaries_show_the_fields_of_typed_results(written: tuple[Table, list[Any]], config_file: Path) -> None:
    """The human summaries read each job's typed result by attribute (`result.instant`, `done.rows`, ...): a
    renamed or moved field shows up here as a missing line, not as a silently empty summary."""
    table, _ = written
    compacted = _summary(invoke("compact", "-c", str(config_file)))
    done = table.timeline().latest_completed([Action.COMPACTION])
    assert done is not None and compacted["instant"] == done.requested, compacted
    assert compacted["rows"] == "4" and int(compacted["file groups"]) >= 2 and compacted["engine"] == "local", compacted
    pinned = _summary(invoke("savepoint", "create", "--name", "s1", "-c", str(config_file)))
    assert pinned["files pinned"] == compacted["file groups"], (pinned, compacted)  # one base file per group
    later = table.write("orders", batch(ORDERS, [{"k": 5, "amount": 50, "status": "new", "ots": 1}]))
    restored = _summary(invoke("savepoint", "restore", "--name", "s1", "-c", str(config_file)))
    assert restored["instant"] and later.instant in restored["undone"], (restored, later)
    cleaned = _summary(invoke("clean", "-c", str(config_file)))
    assert cleaned["policy"] == table.config.clean.policy, cleaned


# ----------------------------------------------------------------------------------------- app basics


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"stitch {stitchlake.__version__}"


def test_help_lists_commands() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("init", "read", "timeline"):
        assert command in result.stdout
    assert "show" in invoke("timeline", "--help").stdout
    assert invoke().exit_code == 2  # no command: help, and the usage exit code


def test_option_choices_are_the_vocabulary() -> None:
    """The CLI offers the library's own names (`stitchlake.vocabulary`), so its choices cannot drift from them."""
    from stitchlake.vocabulary import ReadMode

    def choices(option: str, *command: str) -> list[str]:
        shown = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
        assert shown.exit_code == 0, shown.output
        match = re.search(rf"{option} <([a-z_|]+)>", shown.output)
        assert match, shown.output
        return match.group(1).split("|")

    assert choices("--action", "timeline", "show") == [a.value for a in Action]
    assert choices("--state", "timeline", "show") == [s.value for s in State] == ["requested", "inflight", "completed"]
    assert choices("--mode", "read") == [m.value for m in ReadMode]


# ---------------------------------------------------------------------------------------------- guard


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (StitchError("failed"), 1),
        (ConfigError("bad config"), 2),
        (NotFoundError("no table"), 2),
        (ConflictError("conflict"), 3),
        (BusyError("busy"), 4),
        (InputRejected("rejected"), 5),
    ],
)
def test_guard_maps_stitch_errors_to_their_exit_codes(
    error: StitchError, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail() -> None:
        raise error

    with pytest.raises(typer.Exit) as exited:
        run_command(fail)
    assert exited.value.exit_code == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"error: {error}"


def test_guard_keyboard_interrupt_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as exited:
        guarded(interrupted)()
    assert exited.value.exit_code == 130


def test_guard_unexpected_error_is_one_line_unless_debugging(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise ValueError("first line\nsecond line")

    monkeypatch.delenv("STITCH_DEBUG", raising=False)
    with pytest.raises(typer.Exit) as exited:
        run_command(broken)
    assert exited.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "error: unexpected ValueError: first line"
    assert "Traceback" not in err and "second line" not in err

    monkeypatch.setenv("STITCH_DEBUG", "1")
    with pytest.raises(typer.Exit):
        run_command(broken)
    assert "Traceback" in capsys.readouterr().err


def test_guard_returns_the_value_and_lets_typer_exits_through() -> None:
    assert run_command(lambda: 42) == 42

    def done() -> None:
        raise typer.Exit(0)

    with pytest.raises(typer.Exit) as exited:
        run_command(done)
    assert exited.value.exit_code == 0


@pytest.mark.parametrize(
    ("body", "code", "stderr"),
    [
        ("return 4", 4, ""),
        ("return None", 0, ""),
        ("raise SystemExit(3)", 3, ""),
        ("raise SystemExit('no table here')", 1, "no table here"),
        ("raise KeyboardInterrupt", 130, ""),
        ("from stitchlake.errors import Terminated; raise Terminated('SIGTERM')", 143, ""),
        ("raise RuntimeError('boom')", 1, "RuntimeError: boom"),
    ],
)
def test_a_process_ends_with_its_mains_code_however_main_ends(body: str, code: int, stderr: str) -> None:
    """`end_process_after` (the end of `stitch` and of the harnesses): the exit code is main's, an exception's
    traceback is printed, and the atexit handlers and the flush of a normal exit still run; but the interpreter is
    not torn down (`os._exit`), which a thread still running shows: the teardown would wait for it (the timeout only
    ends that wait, far beyond a busy machine's start-up of the process)."""
    program = (
        "import atexit, sys, threading, time\n"
        "from stitchlake.cli.app import end_process_after\n"
        "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\n"
        "print('unflushed', end='')\n"
        f"def main():\n    {body}\n"
        "end_process_after(main)\n"
    )
    done = python("-c", program, cwd=ROOT, timeout=120)
    assert done.returncode == code, done.stderr
    assert done.stdout == "unflushed"
    assert stderr in done.stderr and done.stderr.rstrip().endswith("atexit ran"), done.stderr


def test_table_must_be_named_exactly_once(config_file: Path, table: Table) -> None:
    neither = invoke("read")
    both = invoke("read", "-c", str(config_file), "--table", table.path)
    config_as_table = invoke("timeline", "show", "--table", str(config_file))
    for result in (neither, both, config_as_table):
        assert result.exit_code == 2
        assert result.stderr.startswith("error: ")
    assert "-c/--config" in neither.stderr and "--table" in neither.stderr
    assert "use -c" in config_as_table.stderr


def test_a_table_named_by_its_folder_is_only_read(written: tuple[Table, list[Any]], tmp_path: Path) -> None:
    """The folder gives none of the config's runtime settings: with defaults in their place a command could lock
    where the table's writers do not (ZooKeeper), keep less history than the config asks, or judge a live writer
    with a shorter heartbeat expiry. So `--table`, `stitchlake.open(folder)` and a Spark write without a config
    read, and every change is refused (exit 2) before anything is done; the config does the same change."""
    from stitchlake.errors import UsageError
    from stitchlake.spark.write import StitchWriter

    table, _ = written
    instants = table.timeline().instants
    for command in (
        ["compact"],
        ["clean", "--dry-run"],
        ["rollback", "--failed"],
        ["archive"],
        ["savepoint", "create", "--name", "x"],
        ["compact", "--run"],  # with nothing pending: refused all the same
        ["rescale", "--resume"],
    ):
        refused = invoke(*command, "--table", table.path, "--json")
        assert refused.exit_code == 2, (command, refused.output)
        assert "opened from its folder" in json.loads(refused.stdout)["error"], command
    folder = stitchlake.open(table.path)
    with pytest.raises(UsageError, match="opened from its folder"):
        folder.write("orders", batch(ORDERS, [{"k": 9, "amount": 1, "status": "x", "ots": 2}]))
    for options in ({}, {"instant": "20261201000000000"}):  # a write the caller began too: refused on the driver
        with pytest.raises(UsageError, match="opened from its folder"):
            StitchWriter({"path": table.path, "stream": "orders", **options})
    assert table.timeline().instants == instants, "nothing was claimed or written"
    assert folder.read().num_rows == 4 and invoke("read", "--table", table.path).exit_code == 0
    done = invoke("compact", "-c", str(tmp_path / "table.yaml"), "--json")
    assert done.exit_code == 0, done.output


def test_a_spark_job_that_changes_the_table_needs_its_config_file(written: tuple[Table, list[Any]]) -> None:
    """A spark-submit driver opens the table from the config file; a config built in memory has none, so such a
    job is refused before anything is claimed (`auto` runs it in this process instead); a read may name the path."""
    from stitchlake.errors import UsageError
    from stitchlake.jobs.launch import choose_engine, target_args
    from stitchlake.jobs.requests import CompactRequest, SparkReadRequest
    from stitchlake.vocabulary import EngineChoice

    table, _ = written
    in_memory = Table(table.config.model_copy(update={"source_file": None}))
    assert target_args(table, CompactRequest())[0] == "--config"
    with pytest.raises(UsageError, match="has none on disk"):
        target_args(in_memory, CompactRequest())
    assert target_args(in_memory, SparkReadRequest()) == ["--table", table.path]
    assert choose_engine(in_memory, CompactRequest(), EngineChoice.auto, 10**12) is EngineChoice.local
    assert choose_engine(table, CompactRequest(), EngineChoice.auto, 10**12) is EngineChoice.spark
    instants = table.timeline().instants
    with pytest.raises(UsageError, match="has none on disk"):
        in_memory.compact(engine="spark")
    assert table.timeline().instants == instants


def test_stream_refuses_the_other_sources_trigger_option_before_any_jvm(tmp_path: Path) -> None:
    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": "landing/orders"}
    config = write_table_yaml(tmp_path, document)
    stitchlake.open(config).init()
    refused = invoke("stream", "-c", str(config), "--stream", "orders", "--records-per-trigger", "5", "--json")
    assert refused.exit_code == 2, refused.output
    assert "reads landing files: use --files-per-trigger" in json.loads(refused.stdout)["error"]
    assert "spark-submit" not in refused.output and "Spark log" not in refused.output
    # A pace for a query that stops when it has caught up would be ignored: refused, like the option above.
    paced = invoke("stream", "-c", str(config), "--stream", "orders", "--available-now", "--trigger-interval", "5")
    assert paced.exit_code == 2 and "give one or the other" in paced.output, paced.output
    beyond = invoke("stream", "-c", str(config), "--stream", "orders", "--files-per-trigger", "100001")
    assert beyond.exit_code == 2 and "less than or equal to 100000" in beyond.output, beyond.output


def test_an_ingest_says_which_compaction_it_ran_inline(tmp_path: Path) -> None:
    """A cron log shows the inline compaction (`compaction.inline`) as the summary's own line, not only in --json."""
    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["orders"]["source"] = {"format": "parquet", "path": "landing/orders"}
    document["compaction"] = {"inline": True, "after_delta_commits": 1}
    config = write_table_yaml(tmp_path, document)
    table = stitchlake.open(config)
    table.init()
    (tmp_path / "landing" / "orders").mkdir(parents=True)
    rows = [{"k": k, "amount": k, "status": "new", "ots": 1} for k in (1, 2, 3)]
    pq.write_table(batch(ORDERS, rows), tmp_path / "landing" / "orders" / "0001.parquet")
    shown = invoke("ingest", "-c", str(config), "--stream", "orders", "--engine", "local")
    assert shown.exit_code == 0, shown.output
    compactions = table.timeline().completed([Action.COMPACTION])
    assert len(compactions) == 1
    assert re.search(rf"inline compaction\W+{compactions[0].requested}: \d+ file group\(s\), 3 rows", shown.stdout), (
        shown.stdout
    )


def test_commands_refuse_a_table_that_was_never_created(config_file: Path) -> None:
    result = invoke("timeline", "show", "-c", str(config_file))
    assert result.exit_code == 2
    assert "stitch init" in result.stderr


# ----------------------------------------------------------------------------------------------- init


def test_init_creates_then_is_a_no_op(config_file: Path, tmp_path: Path) -> None:
    created = invoke("init", "-c", str(config_file))
    assert created.exit_code == 0, created.output
    assert created.stdout.strip() == f"created table wide at {tmp_path / 'table'}"
    table_json = tmp_path / "table" / ".stitch" / "table.json"
    before = table_json.read_bytes()

    again = invoke("init", "-c", str(config_file))
    assert again.exit_code == 0
    assert again.stdout.strip() == "table wide already exists and matches the config (nothing to do)"
    assert table_json.read_bytes() == before
    assert stdout_json(invoke("init", "-c", str(config_file), "--json")) == {
        "ok": True,
        "table": "wide",
        "path": str(tmp_path / "table"),
        "created": False,
        "message": "table wide already exists and matches the config (nothing to do)",
    }


def test_init_json_when_creating(config_file: Path, tmp_path: Path) -> None:
    assert stdout_json(invoke("init", "--config", str(config_file), "--json"))["created"] is True


def _contradict(document: dict[str, Any], change: str) -> None:
    if change in ("buckets", "all"):
        document["table"]["buckets"] = 3
    if change in ("key type", "all"):
        document["table"]["key"] = {"k": "string"}
    if change in ("stream column", "all"):
        document["streams"]["orders"]["columns"]["amount"] = "double"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("buckets", ["table.buckets: table has 2, config says 3"]),
        ("key type", ["table.key: table has {k: long}, config says {k: string}"]),
        ("stream column", ["streams.orders.columns"]),
        ("all", ["table.buckets", "table.key", "streams.orders.columns"]),
    ],
)
def test_init_with_a_contradicting_config_exits_2_listing_the_differences(
    table: Table, tmp_path: Path, change: str, expected: list[str]
) -> None:
    document = copy.deepcopy(THREE_STREAMS)
    _contradict(document, change)
    other = write_table_yaml(tmp_path, document, "other.yaml")
    table_json = tmp_path / "table" / ".stitch" / "table.json"
    before = table_json.read_bytes()

    result = invoke("init", "-c", str(other))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    for difference in expected:
        assert difference in result.stderr
    assert table_json.read_bytes() == before


def test_init_with_a_missing_config_exits_2(tmp_path: Path) -> None:
    result = invoke("init", "-c", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "nope.yaml: config file not found" in result.stderr


def test_init_with_bad_yaml_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("table:\n  name: wide\n  key: {k: long\n")
    result = invoke("init", "-c", str(broken))
    assert result.exit_code == 2
    assert str(broken) in result.stderr and "not valid YAML at line" in result.stderr
    assert not (tmp_path / "table").exists()


@pytest.mark.parametrize(
    ("edit", "yaml_path"),
    [
        (lambda d: d["table"].update(buckets=0), "table.buckets"),
        (lambda d: d["streams"]["orders"].update(nulls="sometimes"), "streams.orders.nulls"),
        (lambda d: d["table"].update(partiton_by={"p": "string"}), "table.partiton_by"),
    ],
)
def test_init_with_an_invalid_config_exits_2_naming_the_yaml_path(tmp_path: Path, edit: Any, yaml_path: str) -> None:
    document = copy.deepcopy(THREE_STREAMS)
    edit(document)
    result = invoke("init", "-c", str(write_table_yaml(tmp_path, document)))
    assert result.exit_code == 2
    assert yaml_path in result.stderr
    assert not (tmp_path / "table").exists()


def test_init_never_prints_a_path_taken_from_a_secret_environment_variable(tmp_path: Path) -> None:
    secret = tmp_path / "secret-bucket-7f3a"
    document = copy.deepcopy(THREE_STREAMS)
    document["table"]["path"] = "${STITCH_TEST_TABLE_PATH}"
    document["secrets"] = ["STITCH_TEST_TABLE_PATH"]  # not secret by its name: declared so
    config = write_table_yaml(tmp_path, document)
    env = {"STITCH_TEST_TABLE_PATH": str(secret)}
    for args in (["init", "-c", str(config)], ["init", "-c", str(config), "--json"]):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.output
        assert "secret-bucket-7f3a" not in result.output
        assert printing.SECRET in result.stdout
    assert (secret / ".stitch" / "table.json").is_file()
    shown = invoke("timeline", "show", "-c", str(config), "--json", env=env)
    assert "secret-bucket-7f3a" not in shown.output


# ------------------------------------------------------------------------------------------- timeline


def test_timeline_show_on_an_empty_table(table: Table, config_file: Path) -> None:
    result = invoke("timeline", "show", "-c", str(config_file))
    assert result.exit_code == 0
    assert result.stdout.strip() == "no instants on the timeline of wide"
    document = stdout_json(invoke("timeline", "show", "--table", table.path, "--json"))
    assert document["instants"] == [] and document["matched"] == 0


def test_timeline_show_after_writes(written: tuple[Table, list[Any]], config_file: Path) -> None:
    _, results = written
    result = invoke("timeline", "show", "-c", str(config_file))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line[:17].isdigit()]
    assert [line.split()[0] for line in rows] == [r.instant for r in reversed(results)]  # newest first
    for line, written_result in zip(rows, reversed(results), strict=True):
        fields = line.split()
        assert fields[1:3] == ["deltacommit", "completed"]
        assert written_result.stream in fields
        assert fields[-2:] == [str(written_result.rows), str(len(written_result.files))]
    assert "3 instants" in result.stdout

    document = stdout_json(invoke("timeline", "show", "-c", str(config_file), "--json"))
    assert [i["instant"] for i in document["instants"]] == [r.instant for r in reversed(results)]
    first = document["instants"][-1]
    assert first == {
        "instant": results[0].instant,
        "action": "deltacommit",
        "state": "completed",
        "requested_at": values.iso_time(results[0].instant),
        "completed": results[0].completed,
        "completed_at": values.iso_time(results[0].completed),
        "duration_s": first["duration_s"],
        "stream": "orders",
        "rows": 4,
        "files": len(results[0].files),
    }
    assert first["duration_s"] > 0


@pytest.fixture
def busy_timeline(written: tuple[Table, list[Any]]) -> tuple[Table, list[Any], str, str]:
    """The three writes, a compaction, then a pending (inflight) orders write and a requested payments write."""
    table, results = written
    compaction = table.compact().done
    storage = table.storage
    inflight = write_inflight(
        storage, write_requested(storage, draw_time(storage), "deltacommit", DeltaCommitPlan(stream="orders"))
    )
    requested = write_requested(storage, draw_time(storage), "deltacommit", DeltaCommitPlan(stream="payments"))
    return table, [*results, compaction], inflight.requested, requested.requested


def shown_instants(*args: str) -> list[dict[str, Any]]:
    return stdout_json(invoke("timeline", "show", *args, "--json"))["instants"]


def test_timeline_show_filters(busy_timeline: tuple[Table, list[Any], str, str], config_file: Path) -> None:
    table, results, inflight, requested = busy_timeline
    orders, payments, shipments, compaction = results
    target = ["-c", str(config_file)]

    everything = shown_instants(*target)
    assert [i["instant"] for i in everything] == [
        requested,
        inflight,
        compaction.instant,
        shipments.instant,
        payments.instant,
        orders.instant,
    ]
    assert everything[0]["state"] == "requested" and everything[0]["stream"] == "payments"
    assert everything[0]["completed"] is None and everything[0]["rows"] is None

    assert [i["instant"] for i in shown_instants(*target, "--action", "compaction")] == [compaction.instant]
    assert shown_instants(*target, "--action", "compaction")[0]["rows"] == compaction.rows
    assert [i["instant"] for i in shown_instants(*target, "--state", "inflight")] == [inflight]
    assert [i["instant"] for i in shown_instants(*target, "--state", "requested")] == [requested]
    assert len(shown_instants(*target, "--state", "completed")) == 4
    assert [i["instant"] for i in shown_instants(*target, "--stream", "orders")] == [inflight, orders.instant]
    assert [
        i["instant"] for i in shown_instants("--table", table.path, "--stream", "payments", "--state", "completed")
    ] == [payments.instant]
    assert [i["instant"] for i in shown_instants(*target, "--limit", "2")] == [requested, inflight]
    assert len(shown_instants(*target, "--limit", "0")) == 6

    limited = invoke("timeline", "show", *target, "--limit", "2")
    assert "newest 2 of 6 instants" in limited.stdout
    filtered = invoke("timeline", "show", *target, "--action", "rollback")
    assert filtered.exit_code == 0 and "no instants match the filters" in filtered.stdout


def test_timeline_show_rejects_bad_filters(table: Table, config_file: Path) -> None:
    for args in (["--action", "merge"], ["--state", "done"], ["--limit", "-1"], ["--stream", "refunds"]):
        result = invoke("timeline", "show", "-c", str(config_file), *args)
        assert result.exit_code == 2, (args, result.output)
    assert "orders, payments, shipments" in invoke("timeline", "show", "-c", str(config_file), "--stream", "x").stderr


@pytest.fixture(scope="module")
def long_timeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A table with 10,000 completed deltacommits where only the newest 39 have readable metadata.

    Newest first they alternate orders, payments, orders, ...; every older instant holds garbage, so any read
    of its metadata fails the command: a passing command proves it was not read. Returns the config and the
    requested times, newest first.
    """
    from stitchlake.timeline.clock import from_millis
    from stitchlake.timeline.timeline import encode_metadata

    folder = tmp_path_factory.mktemp("long")
    _, config = new_table_file(folder)
    timeline = folder / "table" / ".stitch" / "timeline"
    garbage = folder / "garbage.json"
    garbage.write_text("garbage{")
    count, readable, streams = 10_000, 39, ["orders", "payments"]
    times = []
    for n in range(count):
        millis = 1_700_000_000_000 + 10 * n
        requested, completed = from_millis(millis), from_millis(millis + 5)
        path = timeline / f"{requested}_{completed}.deltacommit"
        age = count - 1 - n
        if age < readable:
            path.write_bytes(encode_metadata({"stream": streams[age % 2], "rows": 1, "added": []}))
        else:
            os.link(garbage, path)  # far faster than writing 10,000 files
        times.append(requested)
    return config, times[::-1]


def test_timeline_show_reads_metadata_only_of_the_shown_instants(long_timeline: tuple[Path, list[str]]) -> None:
    config, newest = long_timeline
    document = stdout_json(invoke("timeline", "show", "-c", str(config), "--json"))
    assert [i["instant"] for i in document["instants"]] == newest[:20]
    assert document["matched"] == 10_000 and document["more"] is True
    assert "newest 20 of 10,000 instants" in invoke("timeline", "show", "-c", str(config)).stdout
    assert len(shown_instants("-c", str(config), "--limit", "39")) == 39
    # The guard is real: one instant further is garbage, and reading it fails loudly.
    deeper = invoke("timeline", "show", "-c", str(config), "--limit", "40")
    assert deeper.exit_code == 1 and "does not start with a checksum header" in deeper.stderr


def test_timeline_show_by_stream_reads_only_until_the_limit_is_found(long_timeline: tuple[Path, list[str]]) -> None:
    config, newest = long_timeline
    # The 20th orders instant is the 39th newest; the search must stop there, before the garbage.
    document = stdout_json(invoke("timeline", "show", "-c", str(config), "--stream", "orders", "--json"))
    assert [i["instant"] for i in document["instants"]] == newest[0:39:2]
    assert document["matched"] is None and document["more"] is True
    assert "older ones were not searched" in invoke("timeline", "show", "-c", str(config), "--stream", "orders").stdout
    deeper = invoke("timeline", "show", "-c", str(config), "--stream", "orders", "--limit", "21")
    assert deeper.exit_code == 1


def test_timeline_show_archived(
    written: tuple[Table, list[Any]], config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stitchlake.services.upkeep import archive

    table, results = written
    target = ["timeline", "show", "-c", str(config_file), "--archived"]
    nothing = invoke(*target)
    assert nothing.exit_code == 0 and nothing.stdout.strip() == "no archived instants on the timeline of wide"

    archive.archive(table, keep=1)
    listed = stdout_json(invoke(*target, "--json"))
    assert listed["archived"] is True
    assert [(i["instant"], i["completed"], i["stream"], i["rows"]) for i in listed["instants"]] == [
        (r.instant, r.completed, r.stream, r.rows) for r in reversed(results[:2])
    ]
    assert [i["instant"] for i in shown_instants(*target[2:], "--stream", "orders")] == [results[0].instant]
    assert [i["instant"] for i in shown_instants("-c", str(config_file))] == [results[2].instant]
    assert "archived timeline of wide" in invoke(*target).stdout


# ----------------------------------------------------------------------------------------------- read


def records(*args: str) -> list[dict[str, Any]]:
    return stdout_json(invoke("read", *args, "--json"))["records"]


def by_key(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {row["k"]: row for row in rows}


def test_read_prints_a_sample(written: tuple[Table, list[Any]], config_file: Path) -> None:
    table, _ = written
    result = invoke("read", "-c", str(config_file))
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert header == [c.name for c in table.config.all_columns()]
    assert "4 of 4 rows" in result.stdout
    assert "dhl" in result.stdout and "card" in result.stdout

    limited = invoke("read", "--table", table.path, "--limit", "1")
    assert "1 of 4 rows" in limited.stdout

    document = stdout_json(invoke("read", "-c", str(config_file), "--json", "--limit", "3"))
    assert (document["rows"], document["shown"], len(document["records"])) == (4, 3, 3)
    assert by_key(records("-c", str(config_file), "--limit", "0")) == by_key(table.read().to_pylist())


def test_read_columns(written: tuple[Table, list[Any]], config_file: Path) -> None:
    document = stdout_json(invoke("read", "-c", str(config_file), "--columns", "k, paid", "--json"))
    assert document["columns"] == ["k", "paid"]
    assert sorted(map(tuple, (r.values() for r in document["records"]))) == [(1, 10), (2, 20), (3, None), (4, None)]
    printed = invoke("read", "-c", str(config_file), "--columns", "k,paid")
    assert printed.stdout.splitlines()[0].split() == ["k", "paid"]


def test_read_where_on_partition_and_key(written: tuple[Table, list[Any]], config_file: Path) -> None:
    target = ("-c", str(config_file))
    assert sorted(by_key(records(*target, "--where", "p=even"))) == [2, 4]
    assert sorted(by_key(records(*target, "--where", "k=3"))) == [3]
    assert by_key(records(*target, "--where", "k=3"))[3]["carrier"] == "dhl"
    assert sorted(by_key(records(*target, "--where", "k=1,k=4"))) == [1, 4]
    assert records(*target, "--where", "p=odd,k=4") == []


def test_read_as_of_and_since(written: tuple[Table, list[Any]], config_file: Path) -> None:
    table, results = written
    target = ("-c", str(config_file))
    first = by_key(records(*target, "--as-of", results[0].completed))
    assert first == by_key(table.read(as_of=results[0].completed).to_pylist())
    assert sorted(first) == [1, 2, 3, 4]
    assert all(row["paid"] is None and row["carrier"] == "none" for row in first.values())
    assert by_key(records(*target))[1]["paid"] == 10

    changes = by_key(records(*target, "--since", results[1].completed))
    assert changes == by_key(table.read(since=results[1].completed).to_pylist())
    assert sorted(changes) == [3] and changes[3]["_op"] == "U"

    # A range the wrong way round, or a time no calendar has, is refused rather than read as empty or as now.
    reversed_range = invoke("read", *target, "--since", results[2].completed, "--until", results[0].completed)
    assert reversed_range.exit_code == 2 and "is after until" in reversed_range.stderr, reversed_range.output
    month_13 = invoke("read", *target, "--as-of", "20261301000000000")
    assert month_13.exit_code == 2 and "not a real time" in month_13.stderr, month_13.output
    assert by_key(records(*target, "--since", "2099-01-01")) == {}  # a later since alone: nothing new yet


def test_read_out_files_hold_the_whole_result(
    written: tuple[Table, list[Any]], config_file: Path, tmp_path: Path
) -> None:
    table, _ = written
    expected = table.read()
    for name in ("out.parquet", "out.csv", "out.json"):
        path = tmp_path / name
        result = invoke("read", "-c", str(config_file), "--out", str(path), "--limit", "1")
        assert result.exit_code == 0, result.output
        assert "rows" in result.stdout and str(path) in result.stdout
        if name.endswith(".parquet"):
            back = pq.read_table(path)
        elif name.endswith(".csv"):
            options = pacsv.ConvertOptions(column_types=expected.schema, strings_can_be_null=True)
            back = pacsv.read_csv(path, convert_options=options)
        else:
            back = pa.Table.from_pylist(
                [json.loads(line) for line in path.read_text().splitlines()], schema=expected.schema
            )
        assert back.equals(expected), name
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    document = stdout_json(invoke("read", "-c", str(config_file), "--out", str(tmp_path / "again.json"), "--json"))
    assert document["rows"] == 4 and document["format"] == "json" and document["bytes"] > 0


def test_read_out_json_writes_typed_values(tmp_path: Path) -> None:
    document = {
        "table": {"name": "typed", "path": "typed", "key": {"id": "long"}},
        "streams": {"s": {"columns": {"ts": "timestamp", "amount": "decimal(10,2)", "blob": "binary", "x": "double"}}},
    }
    typed, _ = new_table_file(tmp_path, document)
    import datetime as dt
    from decimal import Decimal

    stamp = dt.datetime(2026, 11, 21, 8, 30, tzinfo=dt.UTC)
    typed.write(
        "s",
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "ts": pa.array([stamp], pa.timestamp("us", tz="UTC")),
                "amount": pa.array([Decimal("12.30")], pa.decimal128(10, 2)),
                "blob": pa.array([b"\x00\xff"], pa.binary()),
                "x": pa.array([float("nan")], pa.float64()),
            }
        ),
    )
    out = tmp_path / "typed.json"
    assert invoke("read", "--table", typed.path, "--out", str(out)).exit_code == 0
    assert json.loads(out.read_text()) == {
        "id": 1,
        "ts": "2026-11-21T08:30:00+00:00",
        "amount": "12.30",
        "blob": "AP8=",
        "x": "NaN",  # told from null (issue 34.5)
    }
    printed = invoke("read", "--table", typed.path)
    assert printed.exit_code == 0 and "0x00ff" in printed.stdout and "2026-11-21T08:30:00+00:00" in printed.stdout


def test_read_refusals_exit_2(written: tuple[Table, list[Any]], config_file: Path, tmp_path: Path) -> None:
    target = ("read", "-c", str(config_file))
    for args in (
        ["--out", str(tmp_path / "out.txt")],
        ["--out", str(tmp_path / "no-such-folder" / "out.csv")],
        ["--columns", "k,nope"],
        ["--columns", ","],
        ["--where", "nope=1"],
        ["--where", "k"],
        ["--as-of", "yesterday-ish"],
        ["--as-of", "20260101000000000", "--since", "20250101000000000"],
        ["--mode", "fast"],
    ):
        result = invoke(*target, *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stdout == ""
    assert "unknown column nope" in invoke(*target, "--columns", "k,nope").stderr
    assert not (tmp_path / "out.txt").exists()
    for where in ("k>abc", "k<=abc", "k!=abc", "k=abc"):  # the condition as written, its operator too
        refused = invoke(*target, "--where", where)
        assert refused.exit_code == 2 and f"filter: {where.replace('abc', repr('abc'))} is not a valid long" in (
            refused.stderr
        ), refused.stderr


def test_read_read_optimized_mode(written: tuple[Table, list[Any]], config_file: Path) -> None:
    table, _ = written
    assert records("-c", str(config_file), "--mode", "read_optimized") == []
    table.compact()
    optimized = by_key(records("-c", str(config_file), "--mode", "read_optimized"))
    assert optimized == by_key(table.read().to_pylist())


# --------------------------------------------------------------------------------------------- output


def test_human_values() -> None:
    assert [values.human_duration(s) for s in (0.0456, 1.234, 12.34, 185, 7380, 273600)] == [
        "46 ms",
        "1.23 s",
        "12.3 s",
        "3 m 05 s",
        "2 h 03 m",
        "3 d 04 h",
    ]
    sizes = (512, 1536, 5 * 1024**3, 3 * 1024**4)
    assert [values.human_size(n) for n in sizes] == ["512 B", "1.5 KiB", "5.0 GiB", "3.0 TiB"]
    assert values.iso_time("20261122221609807") == "2026-11-22T22:16:09.807Z"
    assert values.human_time("20261122221609807") == "2026-11-22 22:16:09"


def test_print_status_renders_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    from stitchlake.services.inspect.status import (
        LastCommit,
        PartitionHealth,
        PendingInstant,
        StatusReport,
        TimelineHealth,
        Totals,
    )
    from stitchlake.services.published_state import PublishedFormat

    report = StatusReport(
        table="wide",
        path="/data/wide",
        format_version=2,
        partitions={
            "p=odd": PartitionHealth(
                buckets=2, file_groups=2, base_files=1, log_files=3, max_logs_per_slice=2, bytes=2048, rows=10
            )
        },
        totals=Totals(
            partitions=1,
            file_groups=2,
            live_files=4,
            base_files=1,
            log_files=3,
            bytes=4096,
            latest_slice_bytes=2048,
            largest_file_group_bytes=1024,
        ),
        large_file_groups=[],
        pending_compactions=[],
        writers=[
            PendingInstant(
                instant="20261122221609807",
                action=Action.DELTACOMMIT,
                state=State.INFLIGHT,
                stream="orders",
                alive=False,
                recovery=Recovery.ROLL_BACK,
                heartbeat_age_s=75.0,
                pending_s=80.0,
                host="etl-1",
                pid=4242,
            ),
            # A rescale planned and never run is waiting for `--resume`, not a failed write.
            PendingInstant(
                instant="20261122221700000",
                action=Action.RESCALE,
                state=State.REQUESTED,
                stream=None,
                alive=False,
                recovery=Recovery.RERUN,
                heartbeat_age_s=None,
                pending_s=20.0,
                host="etl-2",
                pid=4343,
            ),
        ],
        streams={"orders": LastCommit("20261122221609807", "20261122221610000", 7, 2), "payments": None},
        published=[
            PublishedFormat(
                PublishFormat.DELTA, True, "/data/wide/.stitch/published/delta", "20261122221500000", 7, True
            ),
            PublishedFormat(
                PublishFormat.ICEBERG, False, "/data/wide/.stitch/published/iceberg", "20261122221400000", 9, False
            ),
        ],
        warnings=[],
        timeline=TimelineHealth(
            active_instants=12,
            archived_until=None,
            buckets=2,
            last_rescale=None,
            last_compaction=None,
            last_clean=None,
            deltacommits_since_compaction=3,
        ),
    )
    tables.print_status(report)
    out = capsys.readouterr().out
    assert out.startswith("table wide at /data/wide (format 2)")
    for expected in (
        "4.0 KiB",
        "p=odd",
        "2.0 KiB",
        "never written",
        "no (failed write)",
        "1 m 15 s",
        "etl-1",
        "2026-11-22 22:16:10",
        "pending writers",
        "published formats",
        "behind the table",
        "iceberg (not in publish.formats)",
    ):
        assert expected in out
    assert "pending compactions" not in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("2026112222")}
    assert "no (failed write)" in rows["20261122221609807"]
    assert "no (not running)" in rows["20261122221700000"] and "failed" not in rows["20261122221700000"]


def test_compact_run_with_no_pending_plan_is_nothing_to_do(written: tuple[Table, list[Any]], config_file: Path) -> None:
    """A cron `stitch compact --run` with nothing scheduled exits 0 (design.md §8), and starts no Spark job."""
    table, _ = written
    before = [i.file_name for i in table.timeline().instants]
    result = invoke("compact", "-c", str(config_file), "--run", "--json")
    assert result.exit_code == 0, result.output
    assert stdout_json(result)["message"] == "nothing to compact"
    assert [i.file_name for i in table.timeline().instants] == before
    assert not Path(table.path, ".stitch", "logs").exists()


def test_compact_refuses_options_that_would_do_nothing(written: tuple[Table, list[Any]], config_file: Path) -> None:
    """A plan keeps the strategy it was scheduled with: `--run --strategy X` would silently ignore X."""
    table, _ = written
    before = [i.file_name for i in table.timeline().instants]
    for args, why in (
        (["--run", "--strategy", "all"], "--strategy chooses what a new plan compacts"),
        (["--instant", "20261122080000000"], "--instant only goes with --run"),
        (["--schedule", "--run"], "give one or neither"),
    ):
        result = invoke("compact", "-c", str(config_file), *args, "--json")
        assert result.exit_code == 2, (args, result.output)
        assert why in json.loads(result.stdout)["error"], args
    assert [i.file_name for i in table.timeline().instants] == before


# ------------------------------------------------------------------------------------- one CLI grammar


def test_repeated_where_conditions_all_hold_and_compare(written: tuple[Table, list[Any]], config_file: Path) -> None:
    target = ("-c", str(config_file))
    assert sorted(by_key(records(*target, "--where", "k>=2", "--where", "p=even"))) == [2, 4]
    assert sorted(by_key(records(*target, "--where", "k<4", "--where", "k!=2"))) == [1, 3]
    assert sorted(by_key(records(*target, "--where", "k>1,k<=3"))) == [2, 3]
    assert sorted(by_key(records(*target, "--where", "paid>10"))) == [2]
    assert records(*target, "--where", "k>2", "--where", "k<3") == []


def test_validate_checks_a_config_without_touching_a_table(tmp_path: Path) -> None:
    config = write_table_yaml(tmp_path)
    done = invoke("validate", "-c", str(config), "--json")
    assert done.exit_code == 0, done.output
    assert stdout_json(done)["ok"] is True
    assert not (tmp_path / "table").exists(), "validate created something"
    broken = yaml.safe_load(config.read_text())
    broken["table"]["buckets"] = 0
    bad = write_table_yaml(tmp_path, broken, name="bad.yaml")
    refused = invoke("validate", "-c", str(bad), "--json")
    assert refused.exit_code == 2 and json.loads(refused.stdout)["yaml_path"] == "table.buckets"


def test_validate_refuses_what_init_refuses_and_a_row_count_past_any_table_is_a_usage_error(tmp_path: Path) -> None:
    """`stitch validate` passed configs `stitch init` refused (names differing only in case), so a CI gate let them
    through; `read -n 99999999999999999999` overflowed into exit 1 instead of a usage error."""
    document = copy.deepcopy(THREE_STREAMS)
    document["streams"]["orders"]["columns"]["Amount"] = "long"
    clashing = write_table_yaml(tmp_path, document)
    for command in ("validate", "init"):
        refused = invoke(command, "-c", str(clashing), "--json")
        assert refused.exit_code == 2, (command, refused.output)
        assert json.loads(refused.stdout)["yaml_path"] == "streams.orders.columns.Amount", command
    from stitchlake.table import handle

    with pytest.MonkeyPatch.context() as patched:  # a table made before the check keeps its names
        patched.setattr(handle, "refuse_name_clashes", lambda _config: None)
        _made, made_before = new_table_file(tmp_path / "made-before", document)
    assert invoke("validate", "-c", str(made_before)).exit_code == 0
    config = write_table_yaml(tmp_path / "fine")
    assert invoke("init", "-c", str(config)).exit_code == 0
    too_many = invoke("read", "-c", str(config), "-n", "99999999999999999999", "--json")
    assert too_many.exit_code == 2, too_many.output


def test_a_clean_with_nothing_to_do_leaves_the_timeline_alone(
    written: tuple[Table, list[Any]], config_file: Path
) -> None:
    table, _ = written
    before = sorted(p.name for p in (Path(table.path) / ".stitch" / "timeline").iterdir())
    done = invoke("clean", "-c", str(config_file), "--engine", "local", "--json")
    assert done.exit_code == 0, done.output
    assert stdout_json(done)["instant"] is None
    assert sorted(p.name for p in (Path(table.path) / ".stitch" / "timeline").iterdir()) == before


def test_every_table_command_names_its_table_and_options_the_same_way() -> None:
    """-c/--config and --table everywhere a table is named; --engine on every job with heavy work; --name for
    savepoints; --json everywhere."""
    import typer.main

    group = typer.main.get_command(app)

    def leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
        if hasattr(command, "commands"):
            return [leaf for name, sub in command.commands.items() for leaf in leaves(sub, (*path, name))]
        return [(path, command)]

    for path, command in leaves(group):
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "--json" in options, path
        if path[0] != "validate":
            assert {"-c", "--config"} <= options, path
        if path[0] not in ("validate", "init", "alter"):  # these need the YAML itself
            assert "--table" in options, path
        if path[0] in ("ingest", "compact", "clean", "delete"):
            assert "--engine" in options, path
        if path[0] == "savepoint" and path[1] != "list":
            assert "--name" in options, path


def test_kafka_options_on_a_stream_of_files_are_refused_naming_the_flags(table: Table, config_file: Path) -> None:
    """One check for the CLI and the library: its message names the flags and the Python parameters."""
    refused = invoke("ingest", "-c", str(config_file), "-s", "orders", "--max-records", "5", "--json")
    assert refused.exit_code == 2, refused.output
    failure = json.loads(refused.stdout)
    assert "--max-records" in failure["error"] and "max_records" in failure["error"], failure
    assert "stream orders reads files" in failure["error"]
    assert not table.timeline().instants, "refused before anything was claimed"


def test_clean_names_each_path_with_list_files_without_json(
    written: tuple[Table, list[Any]], config_file: Path
) -> None:
    """`--list-files` is not a --json-only option: a terminal or a cron log gets one line per deleted file."""
    table, _ = written
    table.compact()
    table.write("orders", batch(ORDERS, [{"k": 1, "amount": 5, "status": "x", "ots": 2}]))
    table.compact()
    args = ("clean", "-c", str(config_file), "--engine", "local", "--policy", "keep_latest_commits", "--retain", "1")
    doomed = json.loads(invoke(*args, "--dry-run", "--list-files", "--json").stdout)
    assert doomed["would_delete_files"] > 0 and "rolled_back" not in doomed and doomed["would_roll_back"] == []
    done = invoke(*args, "--list-files")
    assert done.exit_code == 0, done.output
    named = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("deleted ")]
    deleted = [name for name in named if " " not in name]  # not the summary's `deleted 8 file(s) ...`
    assert sorted(deleted) == sorted(doomed["deleted"] + doomed["orphans"])
    assert not any(Path(table.path, path).exists() for path in deleted)


def test_an_erase_keys_file_the_table_rejects_is_named_with_its_column(
    written: tuple[Table, list[Any]], config_file: Path, tmp_path: Path
) -> None:
    """Exit 5 names the file and the column, as `--json` fields too; nothing is erased."""
    table, _ = written
    keys = tmp_path / "keys.csv"
    keys.write_text("k\nseven\n")
    instants = table.timeline().instants
    done = invoke("delete", "-c", str(config_file), "--keys", str(keys), "--engine", "local", "--json")
    assert done.exit_code == 5, done.output
    failure = json.loads(done.stdout)
    assert (failure["file"], failure["column"], failure["error_type"]) == (str(keys), "k", "InputRejected")
    assert failure["error"].startswith(f"{keys}: keys to erase: column k has null or unparsable values")
    assert table.timeline().instants == instants


def test_a_dry_run_of_clean_gives_one_count_in_its_message_its_table_and_its_json(
    written: tuple[Table, list[Any]], config_file: Path
) -> None:
    """The message and the JSON counted the orphans in what would go, the summary table did not: one dry run
    said both "would delete 1 file(s)" and `would delete 0`."""
    table, _ = written
    log = sorted(Path(table.path).rglob("*.log.parquet"))[0]
    shutil.copyfile(log, log.with_name("00000_20200101000000000_0123456789.log.parquet"))
    human = invoke("clean", "-c", str(config_file), "--dry-run", "--engine", "local")
    assert human.exit_code == 0, human.output
    said = re.search(r"would delete (\d+) file", human.stdout)
    shown = re.search(r"^\W*would delete\W+(\d+)\W*$", human.stdout, re.MULTILINE)  # the table's row
    assert said and shown, human.stdout
    counted = stdout_json(invoke("clean", "-c", str(config_file), "--dry-run", "--engine", "local", "--json"))
    assert int(said.group(1)) == int(shown.group(1)) == counted["would_delete_files"] >= 1, human.stdout
