"""Everything the `stitch` CLI shows: rich tables, key/value summaries, JSON, human sizes, times and durations.

Commands gather plain data into a `Report` and return it; `show` prints it as one JSON object (`--json`) or for a
person, so no command branches on `--json`. Failures go through `failure`: with `--json` stdout still carries
exactly one object (`{"ok": false, "exit_code": ..., "error": ...}`), because schedulers read stdout (the
pyiceberg `cli/output.py` split). Consoles are made per call: rich reads `COLUMNS` and whether the stream is
a terminal when a console is created, and the test runner swaps `sys.stdout` between invocations.
Messages are printed as plain text, never as rich markup: table paths and column values may contain `[...]`.
rich itself is imported on first use, so `stitch --help` does not pay for it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, TextIO

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    from stitchlake.config import TableConfig
    from stitchlake.jobs.results import PlannedRuns
    from stitchlake.services.history import InstantRecord
    from stitchlake.services.publish import Published
    from stitchlake.services.status import StatusReport

#: What a secret config value (one that came from `${ENV}`) is shown as (= stitchlake.config.SECRET_PLACEHOLDER,
#: spelled out so `--help` does not import the config module).
SECRET = "<secret from the environment>"
#: Values taken from `${ENV}` by the configs this process loaded: masked in everything printed (`redact`).
_secrets: set[str] = set()
#: Whether this invocation asked for `--json` (set once by the root command, before any command runs).
_json_mode = [False]
NULL = "null"
#: Width to measure a table's natural width with, when stdout is a file or a pipe.
UNBOUNDED_WIDTH = 10_000


# ------------------------------------------------------------------------------------------------ consoles


def stdout_console() -> Console:
    """A console on the current stdout; no highlighting, so values keep the colours of their own style."""
    return _console_class()(highlight=False)


def stderr_console() -> Console:
    return _console_class()(stderr=True, highlight=False)


@functools.cache
def _console_class() -> type[Console]:
    """rich's Console, except that a closed pipe (`stitch status | head -1`) is not an error.

    rich exits 1 when its stream's reader has gone; a command whose work is done (an ingest that committed) would
    then report failure to its scheduler. Here the stream is silenced instead and the command exits with its own
    code (Python's advice on SIGPIPE: point the stream at devnull).
    """
    from rich.console import Console

    class PipeTolerantConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            silence(sys.stderr if self.stderr else sys.stdout)

    return PipeTolerantConsole


def silence(stream: TextIO) -> None:
    """Send whatever is written to `stream` from now on (its pending buffer too) to devnull: its reader is gone."""
    try:
        descriptor = stream.fileno()
    except (OSError, ValueError):  # not a file descriptor (a test runner's buffer)
        descriptor = None
    if descriptor is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, descriptor)
        finally:
            os.close(devnull)
        return
    replacement = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process, as sys.stdout does
    if stream is sys.stderr:
        sys.stderr = replacement
    else:
        sys.stdout = replacement


def register_secrets(values: Iterable[str]) -> None:
    """Mask these values (from `${ENV}` in a config) in everything printed from now on: messages, tables, JSON."""
    _secrets.update(values)


def redact(value: str) -> str:
    """`value` with registered secrets masked (see `stitchlake.config.redact`)."""
    if not _secrets:
        return value
    from stitchlake.config import redact as redact_secrets

    return redact_secrets(value, _secrets)


def text(value: str, style: str = "", *, data: bool = False) -> Text:
    """Plain text for rich (never parsed as markup), with secrets masked: every printed line goes through here.

    `data` marks a value read from the table: data is shown as it is, never masked.
    """
    from rich.text import Text

    return Text(value if data else redact(value), style=style)


def info(message: str) -> None:
    """One line of human output on stdout, never re-wrapped (cron logs are grepped)."""
    stdout_console().print(text(message), soft_wrap=True)


def error(message: str) -> None:
    """`error: <message>` in red on stderr."""
    stderr_console().print(text(f"error: {message}", "red"), soft_wrap=True)


def hint(message: str) -> None:
    """A secondary line on stderr (e.g. how to see more), dimmed."""
    stderr_console().print(text(message, "dim"), soft_wrap=True)


def print_table(table: RichTable) -> None:
    """Print a rich table; when stdout is not a terminal, let it be as wide as it needs instead of 80 columns."""
    console = stdout_console()
    if not console.is_terminal:
        unbounded = console.options.update(max_width=UNBOUNDED_WIDTH)
        console.width = max(console.width, console.measure(table, options=unbounded).maximum)
    console.print(table)


# ----------------------------------------------------------------------------------------------- reports


def set_json(enabled: bool) -> None:
    _json_mode[0] = enabled


def json_mode() -> bool:
    return _json_mode[0]


#: A summary line: its label, and the value's attribute path on the report's source (`result.instant`), or a
#: function of the source for a value the result does not hold as such (a count of a list).
Field = tuple[str, "str | Callable[[Any], Any]"]


@dataclass
class Report:
    """What a command found or did: `data` is the `--json` object; the rest says how a person sees it.

    `message` is one line; `fields` a key/value summary read from `source` (the command's typed result, such as a
    `JobRun`; `data` when there is none), shown where the value is there; `human` replaces both with custom
    rendering (tables).
    """

    data: dict[str, Any]
    message: str | None = None
    title: str | None = None
    fields: Sequence[Field] = ()
    human: Callable[[], None] | None = None
    #: Lines printed before the message (e.g. what a dry run would do).
    lines: Sequence[str] = ()
    #: What the summary reads: the typed result (by attribute), or a mapping (by key); default `data`.
    source: Any = None


def field_value(source: Any, key: str | Callable[[Any], Any]) -> Any:
    """A summary value: `key` applied to `source`, or followed attribute by attribute (a mapping by key); None
    where a link is missing (a job that ran nothing has no `last.result`)."""
    if callable(key):
        return key(source)
    value = source
    for name in key.split("."):
        if value is None:
            return None
        value = value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)
    return value


def published_lines(results: Sequence[Published]) -> list[str]:
    """One line per published table version, or per format left to a publish already running."""
    from stitchlake.io.published import PUBLISHERS
    from stitchlake.services.publish import PublishResult
    from stitchlake.vocabulary import PublishFormat

    lines = []
    for r in results:
        if not isinstance(r, PublishResult):
            lines.append(f"{r.format}: left to the publish already running ({r.deferred})")
            continue
        version = f"{PUBLISHERS[PublishFormat(r.format)].version_word} {r.version}"
        found = f" as {r.identifier}" if r.identifier else ""
        found += f" in {r.catalog}" if r.catalog else ""
        lines.append(f"published {r.format} {version} ({r.rows:,} rows) at {r.table_location}{found}")
    return lines


def with_published(message: str, published: Sequence[Published]) -> str:
    """`message`, then what the action published (compaction, erase, restore and alter republish)."""
    return "\n".join([message, *published_lines(published)])


def rewrite_report(title: str, runs: PlannedRuns[Any], message: str, fields: Sequence[Field], resumed: str) -> Report:
    """The report of a planned rewrite (compaction, rescale): `message` led by the pending plans that ran first
    (`resumed` names them), its last run's own `fields` (label, attribute of its result) between its instant and
    its counts, then where and how long it ran."""
    earlier = [run.result.instant for run in runs.resumed if run.result is not None]
    return Report(
        runs.to_json(),
        message=f"ran pending {resumed} {', '.join(earlier)} first; {message}" if earlier else message,
        title=title,
        fields=[
            ("instant", "done.instant"),
            ("completed", "done.completed"),
            *[(label, f"done.{key}" if isinstance(key, str) else _of_done(key)) for label, key in fields],
            ("file groups", "done.file_groups"),
            ("rows", "done.rows"),
            ("bytes", "done.bytes"),
            ("engine", "last.engine"),
            ("seconds", "last.seconds"),
            ("Spark log", "last.log"),
        ],
        source=runs,
    )


def _of_done(key: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A field computed from the last run's result, read from the runs."""
    return lambda runs: None if runs.done is None else key(runs.done)


def show(report: Report) -> None:
    """Print a command's report: one JSON object with `ok: true`, or the human view."""
    if json_mode():
        message = {"message": report.message} if report.message and "message" not in report.data else {}
        emit_json({"ok": True, **report.data, **message})
        return
    if report.human is not None:
        report.human()
        return
    for line in report.lines:
        info(line)
    if report.message:
        info(report.message)
    source = report.source if report.source is not None else report.data
    pairs = [(label, field_value(source, key)) for label, key in report.fields]
    shown = [(label, _plain(value)) for label, value in pairs if value not in (None, [], {}, "")]
    if shown:
        key_values(shown, report.title)


def _plain(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def failure(message: str, exit_code: int, details: Mapping[str, Any] | None = None) -> None:
    """A failed command: `error: ...` on stderr, and with `--json` one JSON object on stdout too."""
    error(message)
    if json_mode():
        emit_json({"ok": False, "exit_code": exit_code, "error": message, **(details or {})})


# -------------------------------------------------------------------------------------------------- JSON


#: How `--json` writes the floats JSON has no number for: as the strings pandas and Spark JSON writers use, so a
#: reader tells NaN and the infinities from null (and stitch reads them back into a double column).
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def jsonable(value: Any) -> Any:
    """A value json.dumps can write: ISO times, exact decimals as text, bytes as base64, NaN and the infinities
    as the strings "NaN", "Infinity" and "-Infinity" (null is reserved for null)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE[str(value)]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.date | dt.time):  # datetimes too
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if value.is_finite():
            return str(value)
        return NON_FINITE["nan" if value.is_nan() else "inf" if value > 0 else "-inf"]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def json_line(value: Any) -> str:
    """One compact JSON document on one line (`--json`, and newline-delimited JSON files)."""
    return json.dumps(jsonable(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


#: Top-level `--json` keys that hold rows read from the table: data, never masked.
DATA_KEYS = frozenset({"records"})


def emit_json(document: Mapping[str, Any]) -> None:
    """The `--json` contract: exactly one JSON object on stdout and nothing else there.

    On one line, because Airflow's BashOperator pushes the last line of stdout to XCom.
    """
    plain = jsonable(document)
    shown = {key: value if key in DATA_KEYS else _redacted(value) for key, value in plain.items()}
    try:
        sys.stdout.write(json_line(shown) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader is gone: the command still exits with its own code
        silence(sys.stdout)


def _redacted(value: Any) -> Any:
    """A jsonable value with secrets masked in every string (before encoding, so escaping cannot hide them)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ human values


def human_size(size: int | None) -> str:
    if size is None:
        return "-"
    if abs(size) < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_duration(seconds: float | None) -> str:
    """`45 ms`, `1.25 s`, `3 m 05 s`, `2 h 03 m`, `3 d 04 h`: precise when short, readable when long."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} m {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} m"
    return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"


def human_count(count: int | None) -> str:
    return "-" if count is None else f"{count:,}"


def instant_datetime(instant_time: str) -> dt.datetime:
    from stitchlake.services.history import instant_datetime as parsed

    return parsed(instant_time)


def human_time(instant_time: str | None) -> str:
    """An instant time (`yyyyMMddHHmmssSSS`, UTC) as `yyyy-MM-dd HH:mm:ss`."""
    if not instant_time:
        return "-"
    return instant_datetime(instant_time).strftime("%Y-%m-%d %H:%M:%S")


def iso_time(instant_time: str | None) -> str | None:
    """An instant time as ISO-8601 UTC with milliseconds, for `--json`."""
    if not instant_time:
        return None
    return instant_datetime(instant_time).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cell(value: Any) -> Text:
    """A table cell for one value of a read result."""
    if value is None:
        return text(NULL, "dim", data=True)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return text(f"0x{raw[:16].hex()}{'…' if len(raw) > 16 else ''}", data=True)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return text(value.isoformat(), data=True)
    if isinstance(value, bool):
        return text("true" if value else "false", data=True)
    return text(str(value), data=True)


# ---------------------------------------------------------------------------------------------- secrets


def masked(config: TableConfig, yaml_path: str, value: Any) -> Any:
    """`value`, unless the config took it from the environment (`${VAR}`): then a placeholder."""
    return SECRET if yaml_path in config.secret_paths else value


def table_name(config: TableConfig) -> str:
    return str(masked(config, "table.name", config.table.name))


def table_path(config: TableConfig) -> str:
    return str(masked(config, "table.path", config.table.path))


# ------------------------------------------------------------------------------------------------ tables


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
    info(f"table {report.table} at {report.path}")
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

    for warning in report.warnings:
        stdout_console().print(text(f"warning: {warning}", "yellow"), soft_wrap=True)
    for entries, title, dead_label in (
        (report.writers, "pending writers", "no (failed write)"),
        (report.pending_compactions, "pending compactions", "no (not running)"),
    ):
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
                text("yes", "green") if entry.alive else text(dead_label, "red"),
                text(human_duration(entry.pending_s)),
                text(human_duration(age) if age is not None else "-"),
                text(entry.host or "-"),
                text(str(entry.pid or "-")),
            )
        print_table(grid)
