"""What a command reports: a `Report` shown as one JSON object (`--json`) or for a person, and failures.

Commands gather plain data into a `Report` and return it; `show` prints it as one JSON object (`--json`) or for a
person, so no command branches on `--json`. Failures go through `failure`: with `--json` stdout still carries
exactly one object (`{"ok": false, "exit_code": ..., "error": ...}`), because schedulers read stdout (the
pyiceberg `cli/output.py` split). Consoles are made per call: rich reads `COLUMNS` and whether the stream is
a terminal when a console is created, and the test runner swaps `sys.stdout` between invocations.
Messages are printed as plain text, never as rich markup: table paths and column values may contain `[...]`.
rich itself is imported on first use, so `stitch --help` does not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stitchlake.cli.json_output import emit_json
from stitchlake.cli.printing import error, info, json_mode
from stitchlake.cli.tables import key_values

if TYPE_CHECKING:
    from stitchlake.jobs.results import JobRun, PlannedRuns
    from stitchlake.services.publish import Published

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


def job_report(run: JobRun[Any], message: str, title: str, fields: Sequence[Field]) -> Report:
    """The report of one job run: the run as `--json` gives it, `message`, and a summary under `title` of `fields`
    read from the typed run (`result.<attribute>` of the job's result, or the run's own `engine`, `seconds`, `log`)."""
    return Report(run.to_json(), message=message, title=title, fields=fields, source=run)


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
