"""Commands that change the table: ingest, compact, clean, rollback, savepoint, delete (erase), archive, status.

Mutating jobs run on Spark by default (`spark-submit` of `stitchlake/jobs/<job>.py`) and in-process with
`--engine local`. Either way the command prints one summary (or one JSON object with `--json`) and exits
with the DESIGN §8 code, so cron and Airflow can act on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli import output
from cli.app import ConfigOption, JsonOption, TableOption, open_target
from stitchlake.errors import UsageError

if TYPE_CHECKING:
    from stitchlake.table import Table


class Engine(StrEnum):
    spark = "spark"
    local = "local"


EngineOption = Annotated[
    Engine, typer.Option("--engine", help="spark: run as a spark-submit job; local: in this process.")
]


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest_command)
    app.command("compact")(compact_command)
    app.command("clean")(clean_command)
    app.command("rollback")(rollback_command)
    app.command("delete")(delete_command)
    app.command("archive")(archive_command)
    app.command("status")(status_command)
    savepoints = typer.Typer(
        help="Pin, list, unpin and restore savepoints.", no_args_is_help=True, rich_markup_mode=None
    )
    savepoints.command("create")(savepoint_create_command)
    savepoints.command("list")(savepoint_list_command)
    savepoints.command("delete")(savepoint_delete_command)
    savepoints.command("restore")(savepoint_restore_command)
    app.add_typer(savepoints, name="savepoint")


# ------------------------------------------------------------------------------------------------ helpers


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


def _target_args(table: Table) -> list[str]:
    if table.config.source_file and Path(table.config.source_file).is_file():
        return ["--config", str(Path(table.config.source_file).resolve())]
    return ["--table", table.path]


def run_engine(
    table: Table, engine: Engine, job: str, job_args: list[str], local: Callable[[], Any], as_json: bool
) -> dict[str, Any]:
    """Run a job on the chosen engine, showing progress on stderr, and return its result as plain data."""
    started = time.time()
    if engine is Engine.local:
        result = _plain(local())
        return {**(result or {}), "engine": "local", "seconds": round(time.time() - started, 2)}
    from stitchlake.spark.launcher import run_job

    console = output.stderr_console()
    with console.status(f"{job}: starting Spark", spinner="dots") as status:

        def progress(message: str) -> None:
            status.update(output.redact(f"{job}: {message} ({time.time() - started:.0f}s)"))
            if not console.is_terminal and not as_json:
                output.hint(f"{job}: {message}")

        result = run_job(table, job, [*_target_args(table), *job_args], progress)
    result.pop("ok", None)
    # `seconds` is the wall time the user waited; `job_seconds` the job's own part, after JVM start-up.
    inside = {"job_seconds": round(float(result["seconds"]), 2)} if "seconds" in result else {}
    return {**result, **inside, "engine": "spark", "seconds": round(time.time() - started, 2)}


def _finish(result: dict[str, Any], as_json: bool, title: str, fields: list[tuple[str, str]]) -> None:
    if as_json:
        output.emit_json(result)
        return
    if result.get("message"):
        output.info(str(result["message"]))
    pairs = [(label, result.get(key)) for label, key in fields if result.get(key) not in (None, [], {})]
    if pairs:
        output.key_values(pairs, title)


# ------------------------------------------------------------------------------------------------ ingest


def ingest_command(
    stream: Annotated[str, typer.Option("--stream", "-s", help="The stream to ingest.")],
    config: ConfigOption = None,
    table: TableOption = None,
    source: Annotated[
        list[str] | None, typer.Option("--source", help="Landing file or folder instead of the configured one.")
    ] = None,
    max_files: Annotated[int | None, typer.Option("--max-files", min=1, help="Ingest at most N files.")] = None,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Ingest a stream's new landing files exactly once (exit 4 if another live writer has the stream)."""
    handle = open_target(config, table)
    handle.config.stream(stream)
    sources = [str(Path(s).resolve()) for s in source or []]

    def local() -> Any:
        from stitchlake.ingest import ingest_local

        return ingest_local(handle, stream, sources or None, max_files)

    args = ["--stream", stream, *[a for s in sources for a in ("--source", s)]]
    if max_files:
        args += ["--max-files", str(max_files)]
    early = None
    if engine is Engine.spark:
        from stitchlake.ingest import preflight

        early = preflight(handle, stream, sources or None, max_files)
    result = _plain(early) if early else run_engine(handle, engine, "ingest", args, local, as_json)
    if not result.get("instant") and not as_json:
        # Nothing was pending: one clear line, not a summary of zeros that reads like an ingest happened.
        output.info(str(result.get("message") or f"nothing to ingest for stream {stream}"))
        return
    _finish(
        result,
        as_json,
        f"ingest {stream}",
        [
            ("instant", "instant"),
            ("completed", "completed"),
            ("source files", "source_files"),
            ("rows", "rows"),
            ("bad rows", "bad_rows"),
            ("quarantine", "quarantine"),
            ("log files", "files"),
            ("bytes", "bytes"),
            ("seconds", "seconds"),
            ("Spark log", "log"),
        ],
    )


# ----------------------------------------------------------------------------------------------- compact


def _pending_compactions(table: Table) -> bool:
    from stitchlake.services.compaction import pending_plans

    table.require()
    return bool(pending_plans(table))


def compact_command(
    instant: Annotated[str | None, typer.Argument(help="With --run: the plan to run (default: oldest).")] = None,
    config: ConfigOption = None,
    table: TableOption = None,
    schedule_only: Annotated[bool, typer.Option("--schedule", help="Only write a compaction plan.")] = False,
    run_only: Annotated[bool, typer.Option("--run", help="Only run a pending plan (resumes a crashed one).")] = False,
    strategy: Annotated[
        str | None, typer.Option("--strategy", help="all | log_files | log_bytes (default: compaction.strategy).")
    ] = None,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Merge file slices into new base files: schedule a plan and run it (writers keep writing)."""
    if schedule_only and run_only:
        raise UsageError("--schedule and --run together is plain `stitch compact`; give one or neither")
    if instant and not run_only:
        raise UsageError("an instant argument only goes with --run")
    handle = open_target(config, table)

    def local() -> dict[str, Any]:
        from stitchlake.services import compaction

        planned = instant
        if not run_only:
            planned = compaction.schedule(handle, strategy)
            if planned is None or schedule_only:
                return {"scheduled": planned, "result": None}
        return {"scheduled": planned if not run_only else None, "result": asdict(compaction.run(handle, planned))}

    args = (["--schedule"] if schedule_only else []) + (["--run"] if run_only else [])
    args += (["--instant", instant] if instant else []) + (["--strategy", strategy] if strategy else [])
    if run_only and instant is None and not _pending_compactions(handle):
        result: dict[str, Any] = {"scheduled": None, "result": None}  # nothing to do is exit 0, without a JVM
    else:
        result = run_engine(handle, engine, "compact", args, local, as_json)
    done = result.get("result") or {}
    if done:
        result["message"] = (
            f"compaction {done['instant']} completed: {done['file_groups']} file group(s), {done['rows']} rows"
        )
    elif result.get("scheduled"):
        result["message"] = f"scheduled compaction {result['scheduled']} (run it with `stitch compact --run`)"
    else:
        result["message"] = "nothing to compact"
    _finish(
        {**result, **{f"result_{k}": v for k, v in done.items() if k != "files"}},
        as_json,
        "compaction",
        [
            ("instant", "result_instant"),
            ("completed", "result_completed"),
            ("file groups", "result_file_groups"),
            ("rows", "result_rows"),
            ("bytes", "result_bytes"),
            ("seconds", "seconds"),
            ("Spark log", "log"),
        ],
    )


# ------------------------------------------------------------------------------------------------- clean


def clean_command(
    config: ConfigOption = None,
    table: TableOption = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="keep_latest_commits | keep_latest_file_versions | keep_latest_hours."),
    ] = None,
    retain: Annotated[int | None, typer.Option("--retain", min=1, help="Commits, versions or hours to keep.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would go; delete nothing.")] = False,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Roll back failed writes and delete file slices outside the retention (never savepointed files)."""
    handle = open_target(config, table)

    def local() -> Any:
        from stitchlake.services.clean import clean

        return clean(handle, policy, retain, dry_run)

    args = (["--policy", policy] if policy else []) + (["--retain", str(retain)] if retain else [])
    args += ["--dry-run"] if dry_run else []
    result = run_engine(handle, engine, "clean", args, local, as_json)
    if dry_run and not as_json:
        for path in result.get("deleted", []) + result.get("orphans", []):
            output.info(f"would delete {path}")
    result["deleted_files"] = len(result.get("deleted", []))
    _finish(
        result,
        as_json,
        "clean",
        [
            ("instant", "instant"),
            ("policy", "policy"),
            ("deleted files", "deleted_files"),
            ("orphans", "orphans"),
            ("rolled back", "rolled_back"),
            ("reset compactions", "reset_compactions"),
            ("seconds", "seconds"),
        ],
    )


# ---------------------------------------------------------------------------------------------- rollback


def rollback_command(
    config: ConfigOption = None,
    table: TableOption = None,
    instant: Annotated[str | None, typer.Option("--instant", help="The instant to roll back.")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Roll back every write whose heartbeat expired.")] = False,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Undo a pending instant of a dead writer, the latest deltacommit, or (--failed) every failed write."""
    if (instant is None) == (not failed):
        raise UsageError("give either --instant T or --failed")
    handle = open_target(config, table)

    def local() -> Any:
        from stitchlake.services.rollback import rollback, rollback_failed

        return rollback_failed(handle) if failed else rollback(handle, instant or "")

    args = ["--failed"] if failed else ["--instant", instant or ""]
    result = run_engine(handle, engine, "rollback", args, local, as_json)
    _finish(
        result,
        as_json,
        "rollback",
        [
            ("instant", "instant"),
            ("rolled back", "rolled_back"),
            ("reset compactions", "reset_compactions"),
            ("deleted files", "deleted_files"),
        ],
    )


# --------------------------------------------------------------------------------------------- savepoint


def savepoint_create_command(
    config: ConfigOption = None,
    table: TableOption = None,
    name: Annotated[str | None, typer.Option("--name", help="A name to read and restore it by.")] = None,
    instant: Annotated[str | None, typer.Option("--instant", help="Completed instant (default: latest).")] = None,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Pin the table's state as of a completed instant against cleaning."""
    handle = open_target(config, table)

    def local() -> Any:
        from stitchlake.services.savepoint import create

        return create(handle, instant, name)

    args = ["create", *(["--name", name] if name else []), *(["--instant", instant] if instant else [])]
    result = run_engine(handle, engine, "savepoint", args, local, as_json)
    result["message"] = (
        f"savepoint {result.get('name') or result['instant']} pins the state as of {result['savepoint_of']}"
    )
    _finish(
        result,
        as_json,
        "savepoint",
        [("instant", "instant"), ("name", "name"), ("as of", "savepoint_of"), ("files pinned", "files")],
    )


def savepoint_list_command(config: ConfigOption = None, table: TableOption = None, as_json: JsonOption = False) -> None:
    """List savepoints (metadata only, no Spark)."""
    from stitchlake.services.savepoint import list_savepoints

    handle = open_target(config, table)
    found = [s.to_json() for s in list_savepoints(handle)]
    if as_json:
        output.emit_json({"savepoints": found})
        return
    if not found:
        output.info("no savepoints")
        return
    grid = output.compact_table("savepoints")
    for column in ("instant", "name", "as of", "of instant", "files"):
        grid.add_column(column)
    for item in found:
        grid.add_row(
            item["instant"],
            item["name"] or "-",
            output.human_time(item["savepoint_of"]),
            item["of_instant"],
            str(item["files"]),
        )
    output.print_table(grid)


def savepoint_delete_command(
    savepoint: Annotated[str, typer.Argument(help="Savepoint name or instant.")],
    config: ConfigOption = None,
    table: TableOption = None,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Unpin a savepoint (its files become cleanable)."""
    handle = open_target(config, table)

    def local() -> Any:
        from stitchlake.services.savepoint import delete

        return delete(handle, savepoint)

    result = run_engine(handle, engine, "savepoint", ["delete", "--savepoint", savepoint], local, as_json)
    result["message"] = f"deleted savepoint {savepoint}"
    _finish(result, as_json, "savepoint", [])


def savepoint_restore_command(
    savepoint: Annotated[str, typer.Argument(help="Savepoint name or instant.")],
    config: ConfigOption = None,
    table: TableOption = None,
    force: Annotated[bool, typer.Option("--force", help="Also roll back live writers.")] = False,
    engine: EngineOption = Engine.spark,
    as_json: JsonOption = False,
) -> None:
    """Bring the table back to a savepoint (refused while writers are alive, unless --force)."""
    handle = open_target(config, table)

    def local() -> Any:
        from stitchlake.services.savepoint import restore

        return restore(handle, savepoint, force)

    args = ["restore", "--savepoint", savepoint, *(["--force"] if force else [])]
    result = run_engine(handle, engine, "savepoint", args, local, as_json)
    _finish(
        result,
        as_json,
        "restore",
        [("instant", "instant"), ("as of", "savepoint_of"), ("undone", "undone"), ("deleted files", "deleted_files")],
    )


# ------------------------------------------------------------------------------------------------- erase


def delete_command(
    keys: Annotated[Path, typer.Option("--keys", help="Parquet, CSV or JSON-lines file with the key columns.")],
    config: ConfigOption = None,
    table: TableOption = None,
    purge: Annotated[
        bool,
        typer.Option("--purge", help="Also delete savepoints and older file slices that still hold the keys (GDPR)."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Erase keys (GDPR-style): every group committed before the erase goes; exit 3 on a conflicting rewrite."""
    from stitchlake.services.erase import erase

    handle = open_target(config, table)
    result = _plain(erase(handle, _read_keys(keys), purge=purge))
    result["message"] = f"erased {result['erased_keys']} of {result['requested_keys']} key(s)"
    if purge:
        result["message"] += (
            f"; purged {result['purged_files']} older file(s) and {len(result['purged_savepoints'])} savepoint(s)"
        )
    _finish(
        result,
        as_json,
        "erase",
        [
            ("instant", "instant"),
            ("completed", "completed"),
            ("file groups", "file_groups"),
            ("purged savepoints", "purged_savepoints"),
        ],
    )


def _read_keys(path: Path) -> Any:
    from stitchlake.errors import InputRejected

    if not path.is_file():
        raise UsageError(f"--keys {path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".parq"):
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if suffix == ".csv":
            import pyarrow.csv as pacsv

            return pacsv.read_csv(path)
        if suffix in (".json", ".jsonl", ".ndjson"):
            import pyarrow.json as pajson

            return pajson.read_json(path)
    except Exception as exc:
        raise InputRejected(f"{path}: cannot read keys ({exc})") from None
    raise UsageError(f"--keys {path}: use a .parquet, .csv or .json(l) file")


# ----------------------------------------------------------------------------------------- archive/status


def archive_command(
    config: ConfigOption = None,
    table: TableOption = None,
    keep: Annotated[int | None, typer.Option("--keep", min=1, help="Instants to keep active.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Move old completed instants to the archive with a file-system-view checkpoint."""
    from stitchlake.services.archive import archive

    handle = open_target(config, table)
    result = _plain(archive(handle, keep))
    _finish(result, as_json, "archive", [("archived", "archived"), ("horizon", "horizon"), ("active", "kept")])


def status_command(config: ConfigOption = None, table: TableOption = None, as_json: JsonOption = False) -> None:
    """Partitions, slices, pending compactions, writers and streams, from metadata only (no Spark)."""
    from stitchlake.services.status import status

    handle = open_target(config, table)
    report = status(handle)
    if as_json:
        output.emit_json(report)
        return
    output.print_status(report)
