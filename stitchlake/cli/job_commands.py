"""Commands that change the table: ingest, stream, compact, clean, delete (erase), publish, status (and, from
`stitchlake.cli.history_commands`, rollback, savepoint and archive, registered here in the order `--help` lists).

Each builds one job request and runs it (`stitchlake.jobs.launch`, through `stitchlake.cli.jobs`) in this process or
on Spark; each returns one report that `stitchlake.cli.output` prints for a person or as one JSON object, and exits
with the design.md §8 code, so cron and Airflow can act on it. Jobs with heavy work take `--engine`; metadata-only
ones (rollback, savepoints, archive, status) always run in this process and never start a JVM.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stitchlake.cli import history_commands, output, tables
from stitchlake.cli.jobs import launch_job, progress_display, with_retries
from stitchlake.cli.options import (
    CleanEngineOption,
    ConfigOption,
    EngineOption,
    JsonOption,
    RetriesOption,
    TableOption,
    add_commands,
    add_group,
    open_target,
)
from stitchlake.cli.output import Report
from stitchlake.config.choices import CleanPolicy, StartingOffsets
from stitchlake.errors import UsageError
from stitchlake.jobs import launch
from stitchlake.jobs.requests import CleanRequest, EraseRequest, IngestRequest, StreamRequest
from stitchlake.vocabulary import CompactionStrategy, EngineChoice, PublishFormat

if TYPE_CHECKING:
    from stitchlake.jobs.results import PlannedRuns
    from stitchlake.services.rewrites.compaction import CompactionResult


def register(app: typer.Typer) -> None:
    add_commands(
        app,
        {
            "ingest": ingest_command,
            "stream": stream_command,
            "compact": compact_command,
            "clean": clean_command,
            "delete": delete_command,
            "rollback": history_commands.rollback_command,
            "archive": history_commands.archive_command,
            "publish": publish_command,
            "status": status_command,
        },
    )
    add_group(
        app,
        "savepoint",
        "Pin, list, unpin and restore savepoints (metadata only).",
        {
            "create": history_commands.savepoint_create_command,
            "list": history_commands.savepoint_list_command,
            "delete": history_commands.savepoint_delete_command,
            "restore": history_commands.savepoint_restore_command,
        },
    )


# ------------------------------------------------------------------------------------------------ ingest


def ingest_command(
    stream: Annotated[str, typer.Option("--stream", "-s", help="The stream to ingest.")],
    config: ConfigOption = None,
    table: TableOption = None,
    source: Annotated[
        list[str] | None, typer.Option("--source", help="Landing file or folder instead of the configured one.")
    ] = None,
    max_files: Annotated[int | None, typer.Option("--max-files", min=1, help="Ingest at most N files.")] = None,
    reingest_changed: Annotated[
        bool,
        typer.Option(
            "--reingest-changed",
            help="Ingest landing files that changed since they were ingested, again, whole, as new events.",
        ),
    ] = False,
    max_records: Annotated[
        int | None,
        typer.Option("--max-records", min=1, help="Kafka: ingest at most N records (shared over the partitions)."),
    ] = None,
    reset_offsets: Annotated[
        StartingOffsets | None,
        typer.Option(
            "--reset-offsets",
            help="Kafka: where partitions whose recorded offset the topic no longer holds go on from, and where a "
            "topic deleted and created again starts over: its first offsets or its end (recorded in the commit).",
        ),
    ] = None,
    engine: EngineOption = EngineChoice.auto,
    retries: RetriesOption = 0,
    as_json: JsonOption = False,
) -> Report:
    """Ingest a stream's new landing files (or new Kafka records) exactly once (exit 4 if another live writer has
    the stream)."""
    kafka = (max_records, reset_offsets.value if reset_offsets else None)
    return with_retries(
        retries, lambda: _ingest(stream, config, table, source, max_files, reingest_changed, engine, kafka)
    )


def _ingest(
    stream: str,
    config: Path | None,
    table: str | None,
    source: list[str] | None,
    max_files: int | None,
    reingest_changed: bool,
    engine: EngineChoice,
    kafka: tuple[int | None, str | None] = (None, None),
) -> Report:
    handle = open_target(config, table, changes=True)
    spec = handle.config.stream(stream)
    request = IngestRequest(
        stream,
        tuple(_location(s) for s in source or []),
        max_files,
        reingest_changed,
        max_records=kafka[0],
        reset_offsets=kafka[1],
    )
    result = launch_job(handle, request, engine)
    done = result.result
    if not done.instant:
        return Report(result.to_json(), message=done.message or f"nothing to ingest for stream {stream}")
    fields = _INGEST_FIELDS
    if spec.source is not None and spec.source.is_kafka:
        kafka_fields = [*_INGEST_FIELDS[:2], ("records", "result.records"), ("offsets", "result.offsets")]
        kafka_fields.append(("offset resets", "result.offset_resets"))
        files = ("result.source_files", "result.quarantined_files")
        fields = kafka_fields + [f for f in _INGEST_FIELDS[2:] if f[1] not in files]
    return output.job_report(result, done.message, f"ingest {stream}", fields)


#: What the summary of an ingest shows (landing files or Kafka records).
_INGEST_FIELDS: list[output.Field] = [
    ("instant", "result.instant"),
    ("completed", "result.completed"),
    ("source files", "result.source_files"),
    ("rows", "result.rows"),
    ("bad rows", "result.bad_rows"),
    ("quarantined files", "result.quarantined_files"),
    ("quarantine", "result.quarantine"),
    ("log files", "result.files"),
    ("bytes", "result.bytes"),
    ("inline compaction", lambda run: _inline_compaction(run.result.compaction)),
    ("engine", "engine"),
    ("seconds", "seconds"),
    ("Spark log", "log"),
]


def _inline_compaction(done: CompactionResult | None) -> str | None:
    """The compaction an ingest ran after it (`compaction.inline`), in one line; None when none ran."""
    if done is None:
        return None
    return f"{done.instant}: {done.file_groups} file group(s), {done.rows:,} rows"


def stream_command(
    stream: Annotated[
        str, typer.Option("--stream", "-s", help="The stream to follow: its landing folder or its Kafka topic.")
    ],
    config: ConfigOption = None,
    table: TableOption = None,
    files_per_trigger: Annotated[
        int | None,
        typer.Option(
            "--files-per-trigger", min=1, max=100_000, help="Landing files per micro-batch (default: the YAML's)."
        ),
    ] = None,
    trigger_interval: Annotated[
        float | None,
        typer.Option(
            "--trigger-interval", min=0.1, max=86_400, help="Seconds between micro-batches (default: the YAML's)."
        ),
    ] = None,
    records_per_trigger: Annotated[
        int | None,
        typer.Option(
            "--records-per-trigger",
            min=1,
            max=100_000_000,
            help="Kafka: records per micro-batch (default: the YAML's).",
        ),
    ] = None,
    available_now: Annotated[
        bool, typer.Option("--available-now", help="Ingest what is pending now, in micro-batches, then stop.")
    ] = False,
    checkpoint: Annotated[
        str | None, typer.Option("--checkpoint", help="The query's checkpoint folder (default: beside the table).")
    ] = None,
    stop_timeout: Annotated[
        float,
        typer.Option("--stop-timeout", min=0, help="On SIGTERM/Ctrl-C, seconds to let the running batch finish."),
    ] = 120.0,
    as_json: JsonOption = False,
) -> Report:
    """Follow a stream's landing folder or Kafka topic with one long-running Structured Streaming job (always on
    Spark).

    Each micro-batch is an ingest of the files or records that arrived, exactly once; SIGTERM or Ctrl-C stops it
    after the running batch (exit 0).
    """
    handle = open_target(config, table, changes=True)
    request = StreamRequest(
        stream,
        files_per_trigger=files_per_trigger,
        trigger_interval_s=trigger_interval,
        records_per_trigger=records_per_trigger,
        available_now=available_now,
        checkpoint=_location(checkpoint) if checkpoint else None,
    )
    with progress_display("stream", every_message=True) as progress:
        result = launch.launch(handle, request, EngineChoice.spark, graceful_stop_s=stop_timeout, progress=progress)
    fields = [
        ("micro-batches", "result.batches"),
        ("source files", "result.source_files"),
        ("records", "result.records"),
        ("rows", "result.rows"),
        ("bad rows", "result.bad_rows"),
        ("query", "result.query_id"),
        ("checkpoint", "result.checkpoint"),
        ("seconds", "seconds"),
        ("Spark log", "log"),
    ]
    return output.job_report(result, result.result.message, f"stream {stream}", fields)


def _location(source: str) -> str:
    """A --source as the job sees it: local paths made absolute, URIs as they are."""
    from stitchlake.config.fields import given_location

    return given_location(source)


# ----------------------------------------------------------------------------------------------- compact


def compact_command(
    config: ConfigOption = None,
    table: TableOption = None,
    schedule_only: Annotated[bool, typer.Option("--schedule", help="Only write a compaction plan.")] = False,
    run_only: Annotated[bool, typer.Option("--run", help="Only run a pending plan (resumes a crashed one).")] = False,
    instant: Annotated[
        str | None, typer.Option("--instant", help="With --run: the plan to run (default: the oldest).")
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option("--strategy", help=f"{' | '.join(CompactionStrategy)} (default: compaction.strategy)."),
    ] = None,
    engine: EngineOption = EngineChoice.auto,
    retries: RetriesOption = 0,
    as_json: JsonOption = False,
) -> Report:
    """Merge file slices into new base files: schedule a plan and run it (writers keep writing)."""
    return with_retries(retries, lambda: _compact(config, table, schedule_only, run_only, instant, strategy, engine))


def _compact(
    config: Path | None,
    table: str | None,
    schedule_only: bool,
    run_only: bool,
    instant: str | None,
    strategy: str | None,
    engine: EngineChoice,
) -> Report:
    handle = open_target(config, table, changes=True)
    with progress_display("compact") as progress:
        result = launch.compact(
            handle,
            schedule_only=schedule_only,
            run_only=run_only,
            instant=instant,
            strategy=strategy,
            engine=engine,
            progress=progress,
        )
    data = result.to_json()
    if result.last_resumed:
        return _compaction_report(result, pending=True)
    if result.published is not None:
        return Report(data, message=output.with_published("nothing to compact", result.published))
    if schedule_only:
        planned = result.scheduled
        message = (
            f"scheduled compaction {planned} (run it with `stitch compact --run`)" if planned else "nothing to compact"
        )
        return Report(data, message=message)
    if result.last is None:
        return Report(data, message="nothing to compact")
    return _compaction_report(result)


def _compaction_report(runs: PlannedRuns[CompactionResult], pending: bool = False) -> Report:
    """The last compaction run, after the pending plans run before it; `pending`, whether the last one was a
    pending plan too."""
    done = runs.done
    what = "pending compaction" if pending else "compaction"
    message = (
        output.with_published(
            f"{what} {done.instant} completed: {done.file_groups} file group(s), {done.rows} rows", done.published
        )
        if done
        else "nothing to compact"
    )
    return output.rewrite_report("compaction", runs, message, [], "compaction plan(s)")


# ------------------------------------------------------------------------------------------------- clean


#: A dry run's JSON names what recovery would do as such: a monitor reading `rolled_back` sees only what was done.
DRY_RUN_NAMES = {"rolled_back": "would_roll_back", "reset_compactions": "would_reset", "finished": "would_finish"}


def clean_command(
    config: ConfigOption = None,
    table: TableOption = None,
    policy: Annotated[
        CleanPolicy | None, typer.Option("--policy", help="What to keep (default: the config's clean.policy).")
    ] = None,
    retain: Annotated[int | None, typer.Option("--retain", min=1, help="Commits, versions or hours to keep.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would go; delete nothing.")] = False,
    list_files: Annotated[bool, typer.Option("--list-files", help="Name every deleted path (in --json too).")] = False,
    engine: CleanEngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Roll back failed writes and delete file slices outside the retention (never savepointed files)."""
    handle = open_target(config, table, changes=True)
    ran = launch_job(handle, CleanRequest(policy, retain, dry_run), engine)
    done = ran.result
    paths = [*done.deleted, *done.orphans]
    result = ran.to_json()
    # A dry run deletes nothing: its count is what would go (a monitor summing `deleted_files` sees only deletes).
    result["deleted_files"] = 0 if dry_run else len(done.deleted)
    if dry_run:  # as its message: the slices' files and the orphans; and what recovery would do, named as such
        result["would_delete_files"] = len(done.deleted) + len(done.orphans)
        for did, would in DRY_RUN_NAMES.items():
            result[would] = result.pop(did)
    result["orphan_files"] = len(done.orphans)
    if not list_files:
        result.pop("deleted", None)
        result.pop("orphans", None)

    return Report(
        result,
        message=done.message,
        title="clean",
        fields=[
            ("instant", "result.instant"),
            ("policy", "result.policy"),
            # a dry run's count is its message's and its JSON's: the slices' files and the orphans
            ("would delete" if dry_run else "deleted files", lambda run: len(paths if dry_run else run.result.deleted)),
            ("orphans", lambda run: len(run.result.orphans)),
            ("would finish" if dry_run else "finished", "result.finished"),
            ("would roll back" if dry_run else "rolled back", "result.rolled_back"),
            ("would reset compactions" if dry_run else "reset compactions", "result.reset_compactions"),
            ("seconds", "seconds"),
        ],
        source=ran,
        lines=[f"would delete {path}" for path in paths] if dry_run else [f"deleted {p}" for p in paths if list_files],
    )


# ------------------------------------------------------------------------------------------------- erase


def delete_command(
    keys: Annotated[str, typer.Option("--keys", help="Parquet, CSV or JSON-lines file (path or URI) of the keys.")],
    config: ConfigOption = None,
    table: TableOption = None,
    purge: Annotated[
        bool,
        typer.Option("--purge", help="Also delete savepoints and older file slices that still hold the keys (GDPR)."),
    ] = False,
    engine: EngineOption = EngineChoice.auto,
    retries: RetriesOption = 0,
    as_json: JsonOption = False,
) -> Report:
    """Erase keys (GDPR-style): every group committed before the erase goes; exit 3 on a conflicting rewrite."""
    return with_retries(retries, lambda: _delete(keys, config, table, purge, engine))


def _delete(keys: str, config: Path | None, table: str | None, purge: bool, engine: EngineChoice) -> Report:
    handle = open_target(config, table, changes=True)
    ran = launch_job(handle, EraseRequest(_location(keys), purge), engine)
    done = ran.result
    message = f"erased {done.erased_keys} of {done.requested_keys} key(s)"
    if purge:
        message += (
            f"; purged {done.purged_files} older file(s), {len(done.purged_savepoints)} savepoint(s), "
            f"{len(done.purged_quarantine)} quarantine file(s) and {len(done.purged_logs)} Spark job log(s)"
        )
    if done.left_behind:
        message += (
            f"; published tables the config no longer points at may still hold the keys (publish.location or "
            f"iceberg_namespace changed since; no publish reaches them): {', '.join(done.left_behind)} — delete them"
        )
    fields = [
        ("instant", "result.instant"),
        ("completed", "result.completed"),
        ("file groups", "result.file_groups"),
        ("purged savepoints", "result.purged_savepoints"),
        ("engine", "engine"),
    ]
    return output.job_report(ran, output.with_published(message, done.published), "erase", fields)


# ----------------------------------------------------------------------------------------------- publish


def publish_command(
    config: ConfigOption = None,
    table: TableOption = None,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format", "-f", help=f"{' or '.join(PublishFormat)}; repeat for several (default: publish.formats)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> Report:
    """Publish the compacted state as a new version of a Delta Lake and/or Iceberg table (in this process)."""
    from stitchlake.jobs.results import plain
    from stitchlake.services.publish import parse_format, publish_each

    handle = open_target(config, table, changes=True)
    # Every format named is checked before any is published: a typo publishes nothing.
    chosen = list(dict.fromkeys([parse_format(f) for f in formats] if formats else handle.config.publish.formats))
    if not chosen:
        named = " or ".join(f"--format {fmt}" for fmt in PublishFormat)
        raise UsageError(f"give {named} (or list publish.formats in the config)")
    results = publish_each(handle, chosen)  # one format failing does not stop the others
    return Report({"published": plain(results)}, lines=output.published_lines(results))


def status_command(config: ConfigOption = None, table: TableOption = None, as_json: JsonOption = False) -> Report:
    """Partitions, slices, pending compactions, writers and streams, from metadata only (no Spark)."""
    from stitchlake.services.inspect.status import status

    handle = open_target(config, table)
    report = status(handle)
    return Report(report.to_json(), human=lambda: tables.print_status(report))
