"""Table commands of `stitch`: `init`, `validate`, `alter`, `timeline show`, `read`, `sql` and `report` (design.md §7,
§8).

They run in-process and never start a JVM, except `read --engine spark` (a spark-submit job). pyarrow is imported
inside `read` only, so `--help`, `init` and `timeline show` stay fast. Rendering lives in `stitchlake.cli.output`
and the modules it uses; these functions gather data into a report.
"""

from __future__ import annotations

import os
import re
import shlex
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from stitchlake.cli import json_output, output, printing, tables, values
from stitchlake.cli.options import (
    AsOfOption,
    BeforeImagesOption,
    ConfigOption,
    JsonOption,
    LimitOption,
    ModeOption,
    OutOption,
    SinceOption,
    TableOption,
    UntilOption,
    WhereOption,
    add_commands,
    add_group,
    open_target,
)
from stitchlake.cli.output import Report
from stitchlake.errors import StitchError, UsageError
from stitchlake.vocabulary import Action, EngineChoice, ReadMode, State

if TYPE_CHECKING:
    import pyarrow as pa

    from stitchlake.jobs.requests import SparkReadRequest
    from stitchlake.services.inspect.history import InstantListing
    from stitchlake.table.handle import TableHandle

#: `--out` file extension -> format.
OUT_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}
JSON_BATCH_ROWS = 10_000


def register(app: typer.Typer) -> None:
    """Add `init`, `validate`, `alter`, `read`, `sql`, `report` and `timeline show` to the root app."""
    add_commands(
        app,
        {
            "init": init_command,
            "validate": validate_command,
            "alter": alter_command,
            "read": read_command,
            "sql": sql_command,
            "report": report_command,
        },
    )
    add_group(app, "timeline", "Inspect the table's timeline of instants.", {"show": timeline_show_command})


# -------------------------------------------------------------------------------------------------- init


def init_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="Table config YAML.", dir_okay=False)],
    as_json: JsonOption = False,
) -> Report:
    """Create the table a config describes (a no-op when it exists and matches)."""
    table = open_target(config, None, must_exist=False)
    created = table.init()
    name, path = values.table_name(table.config), values.table_path(table.config)
    message = (
        f"created table {name} at {path}"
        if created
        else f"table {name} already exists and matches the config (nothing to do)"
    )
    return Report({"table": name, "path": path, "created": created}, message=message)


def validate_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="Table config YAML.", dir_okay=False)],
    as_json: JsonOption = False,
) -> Report:
    """Check a config without touching any table: exit 0 when it is valid, 2 naming the YAML path otherwise."""
    from stitchlake.config.evolution import refuse_name_clashes

    table = open_target(config, None, must_exist=False)
    loaded = table.config
    if table.storage.local_path() is None or not table.exists():
        # As `stitch init` would; a table made before that check keeps its names (an object store is not asked:
        # validate touches no table there).
        refuse_name_clashes(loaded)
    streams = list(loaded.streams)
    data = {
        "valid": True,
        "config": str(config),
        "table": values.table_name(loaded),
        "path": values.table_path(loaded),
        "streams": streams,
    }
    return Report(data, message=f"{config}: valid ({len(streams)} stream(s): {', '.join(streams)})")


def alter_command(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Table config YAML with the new schema.", dir_okay=False)
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    as_json: JsonOption = False,
) -> Report:
    """Change the table's schema to what the config describes (compatible changes only; exit 2 naming the rest).

    Alter first, then roll the new config out to the writers: a config behind the table is refused, and so is
    one ahead of it until it is applied here.
    """
    from stitchlake.jobs.results import plain
    from stitchlake.services.upkeep.alter import alter

    table = open_target(config, None, must_exist=False)
    table.properties  # noqa: B018 - a missing table is refused here, naming `stitch init`
    result = alter(table, dry_run)
    data = {
        "instant": result.instant,
        "completed": result.completed,
        "schema_version": result.schema_version,
        "changes": result.changes,
        "dry_run": result.dry_run,
        "published": plain(result.published),
    }
    message = output.with_published(result.message, result.published)
    return Report(data, lines=[f"  {change}" for change in result.changes], message=message)


# ---------------------------------------------------------------------------------------------- timeline


def timeline_show_command(
    config: ConfigOption = None,
    table: TableOption = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="Show at most this many instants, newest first (0: all).")
    ] = 20,
    action: Annotated[Action | None, typer.Option("--action", help="Only this action.")] = None,
    state: Annotated[State | None, typer.Option("--state", help="Only this state.")] = None,
    stream: Annotated[str | None, typer.Option("--stream", help="Only instants of this stream.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="List archived instants instead.")] = False,
    as_json: JsonOption = False,
) -> Report:
    """List instants (newest first) with their state, timings, stream, rows and files.

    An instant's id is the time it was requested (yyyyMMddHHmmssSSS, UTC); `read --as-of <id>` shows the table right
    after it completed (the completed column: date and time, UTC).
    """
    from stitchlake.services.inspect.history import list_instants

    handle = open_target(config, table)
    listing = list_instants(handle, limit, action, state, stream, archived)
    return _timeline_report(handle, listing, limit, archived, (action, state, stream))


def _timeline_report(
    handle: TableHandle,
    listing: InstantListing,
    limit: int,
    archived: bool,
    filters: tuple[str | None, str | None, str | None],
) -> Report:
    name = values.table_name(handle.config)
    action, state, stream = filters
    records, matched, more = listing.records, listing.matched, listing.more
    data = {
        "table": name,
        "path": values.table_path(handle.config),
        "archived": archived,
        "filters": {"action": action, "state": state, "stream": stream},
        "limit": limit,
        "matched": matched,
        "more": more,
        "instants": [record.to_json() for record in records],
    }

    def human() -> None:
        what = "archived instants" if archived else "instants"
        if not records:
            filtered = any(f is not None for f in filters)
            printing.info(f"no {what} match the filters" if filtered else f"no {what} on the timeline of {name}")
            return
        if matched is None:
            caption = f"newest {len(records):,} matching {what}; older ones were not searched (--limit 0 searches all)"
        elif matched > len(records):
            caption = f"newest {len(records):,} of {matched:,} {what} (--limit 0 shows all)"
        else:
            caption = f"{matched:,} {what}"
        title = f"{'archived timeline' if archived else 'timeline'} of {name} (times in UTC)"
        printing.print_table(tables.timeline_table(records, title=title, caption=caption))

    return Report(data, human=human)


# ------------------------------------------------------------------------------------------------ report


def report_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Write the report to FILE.html.", dir_okay=False)],
    config: ConfigOption = None,
    table: TableOption = None,
    as_json: JsonOption = False,
) -> Report:
    """Write the operator's view of the table as one self-contained HTML file (metadata only): its shape, commits
    over time per stream, compaction and clean history, Kafka lag, and `stitch status`'s warnings with their fixes."""
    from stitchlake.services.inspect.report import report

    if out.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--out {out}: give a .html file name")
    if out.is_dir():
        raise UsageError(f"--out {out}: is a folder; give a file name")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: folder {out.parent} does not exist")
    handle = open_target(config, table)
    # The commands it suggests change the table, which `--table` cannot: they name a config.
    target = f"-c {shlex.quote(str(config))}" if config is not None else "-c CONFIG.yaml"
    made = report(handle, target, progress=lambda step: printing.hint(f"report: {step}"))
    temp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        temp.write_text(made.html, encoding="utf-8")
        os.replace(temp, out)
    except OSError as exc:
        raise StitchError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)
    size = out.stat().st_size
    data = {"out": str(out), "bytes": size, **made.summary()}
    return Report(
        data,
        title="wrote",
        fields=[
            ("report", "out"),
            ("size", lambda d: values.human_size(d["bytes"])),
            ("charts", lambda d: ", ".join(d["charts"])),
            ("warnings", lambda d: len(d["warnings"])),
        ],
    )


# -------------------------------------------------------------------------------------------------- read


def read_command(
    config: ConfigOption = None,
    table: TableOption = None,
    as_of: AsOfOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    before_images: BeforeImagesOption = False,
    columns: Annotated[
        str | None,
        typer.Option(
            "--columns",
            help="Comma-separated columns to read; with --since/--until also _op, _commit_time, _streams "
            "(then exactly those named).",
        ),
    ] = None,
    where: WhereOption = None,
    mode: ModeOption = ReadMode.SNAPSHOT,
    limit: LimitOption = 20,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Write the whole result to FILE.parquet, .csv or .json (JSON lines); with --engine spark, to a "
            "folder of part files named so (a re-run replaces the folder it wrote).",
        ),
    ] = None,
    engine: Annotated[
        Literal[EngineChoice.local, EngineChoice.spark],
        typer.Option(
            "--engine",
            help="local: read in this process; spark: a spark-submit job reads through format('stitchlake') (the "
            "JVM reader merges in Spark's tasks) and writes --out with Spark's writer.",
        ),
    ] = EngineChoice.local,
    as_json: JsonOption = False,
) -> Report:
    """Read the table: print a sample, or write the whole result to a file (one file slice at a time), or, with
    --engine spark, to a folder of part files written by Spark."""
    # Refuse bad arguments before reading anything.
    wanted = split_columns(columns)
    if engine is EngineChoice.spark:
        from stitchlake.jobs.requests import SparkReadRequest

        request = SparkReadRequest(
            mode,
            as_of,
            since,
            until,
            tuple(wanted) if wanted else None,
            tuple(where or ()),
            before_images,
            limit,
            str(out.absolute()) if out is not None else None,  # not resolved: a link is replaced, not its target
            out_format(out) if out is not None else None,
        )
        handle = open_target(config, table)
        if out is not None:
            from stitchlake.reading.output_folder import leftovers

            for left in leftovers(out.absolute()):
                printing.hint(f"{left}: left by an interrupted `stitch read --engine spark`; remove it when none runs")
        return spark_read_report(handle, request)
    target = (out, check_out_path(out)) if out is not None else None
    handle = open_target(config, table)
    rows = handle.scan(
        mode, as_of=as_of, since=since, until=until, columns=wanted, filter=where or None, before_images=before_images
    )
    return result_report(rows.schema, rows.batches(), limit, target)


def sql_command(
    query: Annotated[
        str,
        typer.Argument(
            help="The SQL; the table is `t` (and also its own name); its metadata tables are t$timeline, t$files, "
            "t$file_groups, t$streams, t$savepoints and t$rescales."
        ),
    ],
    config: ConfigOption = None,
    table: TableOption = None,
    as_of: AsOfOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    before_images: BeforeImagesOption = False,
    where: WhereOption = None,
    mode: ModeOption = ReadMode.SNAPSHOT,
    limit: LimitOption = 20,
    out: OutOption = None,
    as_json: JsonOption = False,
) -> Report:
    """Run SQL over the table with DuckDB (read as `stitch read` reads it: merged, as of, or its changes), and over
    its metadata tables (`SELECT * FROM t$files`: docs/operations.md, "Metadata tables"; always as of now)."""
    from stitchlake.reading.options import ReadOptions
    from stitchlake.reading.sql import results
    from stitchlake.services.inspect.metadata_tables import sql_tables

    target = (out, check_out_path(out)) if out is not None else None
    handle = open_target(config, table)
    asked = ReadOptions(mode, as_of, since, until, None, where or None, before_images)
    with results(handle, query, asked, tables=sql_tables(handle)) as reader:
        return result_report(reader.schema, reader, limit, target)


def result_report(
    schema: pa.Schema, batches: Iterable[pa.RecordBatch], limit: int, target: tuple[Path, str] | None
) -> Report:
    """Rows read or queried, as they stream in: a sample on the terminal (or in `--json`) with the count of all of
    them, or all of them written to `--out` batch by batch. Only `--limit 0` on the terminal holds every row."""
    if target is None:
        sample, total = take_sample(schema, batches, limit or None)
        records = {"rows": total, "shown": sample.num_rows, "columns": sample.column_names}
        return Report(
            {**records, "records": sample.to_pylist()},
            human=lambda: printing.print_table(tables.rows_table(sample, total)),
        )
    path, out_format = target
    rows, size = write_result(schema, batches, path, out_format)
    return Report(
        {"rows": rows, "path": str(path), "format": out_format, "bytes": size},
        title="wrote",
        fields=[("rows", "rows"), ("path", "path"), ("format", "format"), ("size", "size")],
        source={
            "rows": values.human_count(rows),
            "path": path,
            "format": out_format,
            "size": values.human_size(size),
        },
    )


def spark_read_report(handle: TableHandle, request: SparkReadRequest) -> Report:
    """`stitch read --engine spark`: the job's sample (an Arrow file it leaves) printed as `stitch read` prints one,
    or what it wrote; with the reader that merged (`jvm`, or `python` when the JVM reader's jar is absent)."""
    import tempfile
    from dataclasses import replace

    import pyarrow as pa

    from stitchlake.cli.jobs import launch_job

    with tempfile.TemporaryDirectory(prefix="stitch-read-") as folder:
        if request.out is None:
            request = replace(request, sample=str(Path(folder) / "sample.arrow"))
        ran = launch_job(handle, request, EngineChoice.spark)
        done = ran.result
        where = {"engine": ran.engine, "reader": done.reader, "seconds": ran.seconds, "log": ran.log}
        if request.sample is not None:
            with pa.memory_map(request.sample) as source:
                sample = pa.ipc.open_file(source).read_all()
            records = {"rows": done.rows, "shown": sample.num_rows, "columns": sample.column_names}

            def human() -> None:
                printing.print_table(tables.rows_table(sample, done.rows))
                printing.hint(f"read on Spark by the {done.reader} reader in {ran.seconds:.1f}s; Spark log: {ran.log}")

            return Report({**records, "records": sample.to_pylist(), **where}, human=human)
    return Report(
        {"rows": done.rows, "path": done.out, "format": done.format, "files": done.files, "bytes": done.bytes, **where},
        title="wrote",
        fields=[
            ("rows", "rows"),
            ("path", "path"),
            ("format", "format"),
            ("part files", "files"),
            ("size", "size"),
            ("reader", "reader"),
            ("engine", "engine"),
            ("seconds", "seconds"),
            ("Spark log", "log"),
        ],
        source={
            "rows": values.human_count(done.rows),
            "path": done.out,
            "format": done.format,
            "files": done.files,
            "size": values.human_size(done.bytes),
            **where,
        },
    )


def take_sample(schema: pa.Schema, batches: Iterable[pa.RecordBatch], limit: int | None) -> tuple[pa.Table, int]:
    """The first `limit` rows (all when None) and the number of rows in all: the rest is counted, not kept."""
    import pyarrow as pa

    kept: list[pa.RecordBatch] = []
    held = total = 0
    for batch in batches:
        total += batch.num_rows
        if limit is None or held < limit:
            part = batch if limit is None else batch.slice(0, limit - held)
            kept.append(part)
            held += part.num_rows
    return pa.Table.from_batches(kept, schema), total


def split_columns(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UsageError("--columns: give at least one column name, e.g. --columns order_id,amount")
    return names


def out_format(path: Path) -> str:
    """The format `--out` names by its suffix (a file's, or a Spark output folder's)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", str(path)):  # `s3://b/x` reaches us as the Path `s3:/b/x`
        raise UsageError(f"--out {path}: give a local path; --out does not write to an object store")
    found = OUT_FORMATS.get(path.suffix.lower())
    if found is None:
        raise UsageError(f"--out {path}: unknown file type {path.suffix or '(none)'!r} (use .parquet, .csv or .json)")
    return found


def check_out_path(path: Path) -> str:
    """The format for `--out`, refusing (exit 2) before any reading what cannot be written."""
    found = out_format(path)
    if path.is_dir():
        raise UsageError(f"--out {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"--out {path}: folder {path.parent} does not exist")
    return found


def write_result(schema: pa.Schema, batches: Iterable[pa.RecordBatch], path: Path, out_format: str) -> tuple[int, int]:
    """Write rows to `path` batch by batch through a temporary file, so a failed write never leaves half a file and
    no more than a batch is held. Returns rows and bytes."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    rows = 0
    try:
        if out_format == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(str(temp), schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
                    rows += batch.num_rows
        elif out_format == "csv":
            import pyarrow.csv as pacsv
            import pyarrow.types as patypes

            nested = [f.name for f in schema if patypes.is_nested(f.type)]
            if nested:
                raise UsageError(
                    f"--out {path}: CSV cannot hold nested values ({', '.join(nested)}); write .parquet or .json, "
                    "or leave those columns out with --columns"
                )
            with pacsv.CSVWriter(str(temp), schema) as csv_writer:
                for batch in batches:
                    csv_writer.write_batch(batch)
                    rows += batch.num_rows
        else:
            with temp.open("w", encoding="utf-8") as handle:
                for batch in batches:
                    for start in range(0, batch.num_rows, JSON_BATCH_ROWS):
                        part = batch.slice(start, JSON_BATCH_ROWS)
                        handle.writelines(json_output.json_line(row) + "\n" for row in part.to_pylist())
                    rows += batch.num_rows
        os.replace(temp, path)
    except OSError as exc:
        raise StitchError(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)
    return rows, path.stat().st_size
