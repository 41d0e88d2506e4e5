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
    from rich.text import Text

    from stitchlake.services.inspect.history import InstantRecord
    from stitchlake.services.inspect.status import PartitionHealth, StatusReport

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


def print_grid(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[str | Text]], right: Iterable[str] = ()
) -> None:
    """A compact table under `title`: one row per item of `rows`, plain strings or styled text; the `right` columns
    (numbers) right-aligned."""
    grid = compact_table(title=title)
    aligned = set(right)
    for name in columns:
        grid.add_column(name, justify="right" if name in aligned else "left")
    for row in rows:
        grid.add_row(*(text(cell) if isinstance(cell, str) else cell for cell in row))
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
        # `rows` counts rows in base files only: log rows are not known per key until merged.
        headers = ["base rows" if name == "rows" else name.replace("_", " ") for name in PARTITION_COLUMNS]
        print_grid(
            "partitions (latest file slices)",
            ["partition", *headers],
            [(str(partition), *_partition_cells(health)) for partition, health in report.partitions.items()],
            right=headers,
        )

    if report.large_file_groups:
        print_grid(
            "large file groups (latest slice over compaction.max_file_group_mb)",
            ("partition", "file group", "bytes", "base file", "log files"),
            [
                (
                    group.partition or "(unpartitioned)",
                    group.file_group,
                    human_size(group.bytes),
                    human_size(group.base_bytes),
                    human_count(group.log_files),
                )
                for group in report.large_file_groups
            ],
            right=("bytes", "base file", "log files"),
        )

    if report.streams:
        print_grid(
            "streams (latest deltacommit)",
            ("stream", "instant", "completed", "rows", "files"),
            [
                (name, text("never written", "dim"), "-", "-", "-")
                if last is None
                else (name, last.instant, human_time(last.completed), human_count(last.rows), human_count(last.files))
                for name, last in report.streams.items()
            ],
            right=("rows", "files"),
        )

    if report.published:
        print_grid(
            "published formats",
            ("format", "location", "last publish", "version", "state"),
            [
                (
                    fmt.format + ("" if fmt.configured else " (not in publish.formats)"),
                    fmt.location,
                    fmt.last_publish or "never",
                    "-" if fmt.version is None else str(fmt.version),
                    text("behind the table", "yellow") if fmt.stale else "current",
                )
                for fmt in report.published
            ],
            right=("version",),
        )

    for warning in report.warnings:
        stdout_console().print(text(f"warning: {warning}", "yellow"), soft_wrap=True)
    for entries, title in ((report.writers, "pending writers"), (report.pending_compactions, "pending compactions")):
        if entries:
            print_grid(
                title,
                ("instant", "action", "state", "stream", "alive", "pending", "heartbeat age", "host", "pid"),
                [
                    (
                        entry.instant,
                        str(entry.action),
                        entry.state,
                        entry.stream or "-",
                        text("yes", "green") if entry.alive else text(NOT_RUNNING[entry.recovery], "red"),
                        human_duration(entry.pending_s),
                        human_duration(entry.heartbeat_age_s) if entry.heartbeat_age_s is not None else "-",
                        entry.host or "-",
                        str(entry.pid or "-"),
                    )
                    for entry in entries
                ],
                right=("pending", "heartbeat age", "pid"),
            )


#: The columns of `stitch status`'s partitions table (`PartitionHealth`'s fields).
PARTITION_COLUMNS = ("buckets", "file_groups", "base_files", "log_files", "max_logs_per_slice", "rows", "bytes")


def _partition_cells(health: PartitionHealth) -> list[str]:
    cells = asdict(health)
    return [human_size(cells[n]) if n == "bytes" else human_count(cells[n]) for n in PARTITION_COLUMNS]
