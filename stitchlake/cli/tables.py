"""The rich tables the CLI prints: compact tables, key/value summaries, the timeline, rows, `stitch status`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Literal

from stitchlake.cli.printing import info, print_table, stdout_console, text
from stitchlake.cli.values import cell, human_count, human_duration, human_size, human_time
from stitchlake.vocabulary import Recovery

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.table import Table as RichTable

    from stitchlake.services.inspect.history import InstantRecord
    from stitchlake.services.inspect.status import StatusReport

#: What a pending instant whose process is gone is, by what recovery does with it: a write is rolled back, a
#: compaction or rescale plan waits to be run (never-run plans included), a deletion is finished.
NOT_RUNNING = {
    Recovery.ROLL_BACK: "no (failed write)",
    Recovery.RERUN: "no (not running)",
    Recovery.FINISH: "no (to be finished)",
}


def compact_table(title: str | None = None, caption: str | None = None) -> RichTable:
    """A table with a header rule and no frame: more columns fit before a terminal makes them fold."""
    from rich import box
    from rich.table import Table as RichTable

    return RichTable(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )


def key_values(pairs: Iterable[tuple[str, object]], title: str | None = None) -> None:
    """A two-column summary (`rows  1,234`), e.g. after writing a file."""
    from rich.table import Table as RichTable

    grid = RichTable(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    grid.add_column("key", style="bold")
    grid.add_column("value")
    for key, value in pairs:
        grid.add_row(text(key), text(str(value)))
    print_table(grid)


#: (header, justify); times are UTC, which the title says once instead of in every header. The instant id is the
#: requested time (`yyyyMMddHHmmssSSS`); the completion time is shown whole, date and time, as a day may lie between.
TIMELINE_COLUMNS: tuple[tuple[str, Literal["left", "right"]], ...] = (
    ("instant", "left"),
    ("action", "left"),
    ("state", "left"),
    ("completed", "left"),
    ("duration", "right"),
    ("stream", "left"),
    ("rows", "right"),
    ("files", "right"),
)
_STATE_STYLE = {"completed": "green", "inflight": "yellow", "requested": "cyan"}


def timeline_table(records: Sequence[InstantRecord], title: str, caption: str | None = None) -> RichTable:
    """Instants as `timeline show` lists them."""
    table = compact_table(title=title, caption=caption)
    for name, justify in TIMELINE_COLUMNS:
        # The instant is the id people copy into other commands, and action and state are short words:
        # never cut those in a narrow terminal; let the rest fold.
        table.add_column(name, justify=justify, no_wrap=name in ("instant", "action", "state"), overflow="fold")
    for record in records:
        table.add_row(
            text(record.instant),
            text(record.action),
            text(record.state, _STATE_STYLE.get(record.state, "")),
            text(human_time(record.completed)),
            text(human_duration(record.duration_s)),
            text(record.stream or "-"),
            text(human_count(record.rows)),
            text(human_count(record.files)),
        )
    return table


def rows_table(shown: pa.Table, total: int) -> RichTable:
    """The rows shown of a read result of `total` rows, with a `shown of total` caption."""
    import pyarrow.types as pat

    data = shown
    caption = f"{shown.num_rows:,} of {total:,} rows"
    table = compact_table(caption=caption)
    table.min_width = len(caption)  # a caption wraps to its table's width: one narrow column would fold it
    for field in data.schema:
        numeric = pat.is_integer(field.type) or pat.is_floating(field.type) or pat.is_decimal(field.type)
        table.add_column(field.name, justify="right" if numeric else "left", overflow="fold")
    for row in shown.to_pylist():
        table.add_row(*(cell(row[name]) for name in data.column_names))
    return table


def print_status(report: StatusReport) -> None:
    """`stitch status`: totals, then the tables an operator scans: partitions, large file groups, streams, the
    warnings, live writers and pending compactions. Empty sections are skipped."""
    info(f"table {report.table} at {report.path} (format {report.format_version})")
    pairs: list[tuple[str, object]] = [
        (name.replace("_", " "), human_size(value) if "bytes" in name else human_count(value))
        for name, value in asdict(report.totals).items()
    ]
    pairs += [
        (name.replace("_", " "), human_time(value) if isinstance(value, str) else human_count(value))
        for name, value in asdict(report.timeline).items()
    ]
    key_values(pairs)

    if report.partitions:
        grid = compact_table(title="partitions (latest file slices)")
        columns = ("buckets", "file_groups", "base_files", "log_files", "max_logs_per_slice", "rows", "bytes")
        grid.add_column("partition")
        for name in columns:
            # `rows` counts rows in base files only: log rows are not known per key until merged.
            grid.add_column("base rows" if name == "rows" else name.replace("_", " "), justify="right")
        for partition, health in report.partitions.items():
            cells = asdict(health)
            values = [human_size(cells[n]) if n == "bytes" else human_count(cells[n]) for n in columns]
            grid.add_row(text(str(partition)), *(text(v) for v in values))
        print_table(grid)

    if report.large_file_groups:
        grid = compact_table(title="large file groups (latest slice over compaction.max_file_group_mb)")
        for name in ("partition", "file group", "bytes", "base file", "log files"):
            grid.add_column(name, justify="left" if name in ("partition", "file group") else "right")
        for group in report.large_file_groups:
            grid.add_row(
                text(group.partition or "(unpartitioned)"),
                text(group.file_group),
                text(human_size(group.bytes)),
                text(human_size(group.base_bytes)),
                text(human_count(group.log_files)),
            )
        print_table(grid)

    if report.streams:
        grid = compact_table(title="streams (latest deltacommit)")
        for name in ("stream", "instant", "completed", "rows", "files"):
            grid.add_column(name, justify="right" if name in ("rows", "files") else "left")
        for name, last in report.streams.items():
            if last is None:
                grid.add_row(text(name), text("never written", "dim"), text("-"), text("-"), text("-"))
                continue
            grid.add_row(
                text(name),
                text(last.instant),
                text(human_time(last.completed)),
                text(human_count(last.rows)),
                text(human_count(last.files)),
            )
        print_table(grid)

    if report.published:
        grid = compact_table(title="published formats")
        for name in ("format", "location", "last publish", "version", "state"):
            grid.add_column(name, justify="right" if name == "version" else "left")
        for fmt in report.published:
            state = text("behind the table", "yellow") if fmt.stale else text("current")
            grid.add_row(
                text(fmt.format + ("" if fmt.configured else " (not in publish.formats)")),
                text(fmt.location),
                text(fmt.last_publish or "never"),
                text("-" if fmt.version is None else str(fmt.version)),
                state,
            )
        print_table(grid)

    for warning in report.warnings:
        stdout_console().print(text(f"warning: {warning}", "yellow"), soft_wrap=True)
    for entries, title in ((report.writers, "pending writers"), (report.pending_compactions, "pending compactions")):
        if not entries:
            continue
        grid = compact_table(title=title)
        for name in ("instant", "action", "state", "stream", "alive", "pending", "heartbeat age", "host", "pid"):
            grid.add_column(name, justify="right" if name in ("pending", "heartbeat age", "pid") else "left")
        for entry in entries:
            age = entry.heartbeat_age_s
            grid.add_row(
                text(entry.instant),
                text(str(entry.action)),
                text(entry.state),
                text(entry.stream or "-"),
                text("yes", "green") if entry.alive else text(NOT_RUNNING[entry.recovery], "red"),
                text(human_duration(entry.pending_s)),
                text(human_duration(age) if age is not None else "-"),
                text(entry.host or "-"),
                text(str(entry.pid or "-")),
            )
        print_table(grid)
