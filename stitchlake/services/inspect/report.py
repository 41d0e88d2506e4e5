"""`stitch report`: the operator's view of a table as one self-contained HTML file (issue 38).

Built from metadata only: `stitch status` (its warnings, each next to the command that fixes it) and the metadata
tables (`services.metadata_tables`): the table's shape (file-group sizes per partition and bucket, logs piled up
per stream), commits over time per stream, compaction and clean history, Kafka lag per partition, streams,
savepoints and bucket counts over time. The charts are SVG drawn here, inline; the page has no script and
fetches nothing (no fonts, no images, no stylesheets from elsewhere), so it opens the same offline, attached to a
mail or in a browser with scripts off.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from stitchlake.services.inspect.metadata_tables import KAFKA_TIMEOUT_S, Snapshot
from stitchlake.services.inspect.status import StatusReport, status
from stitchlake.services.published_state import PublishedFormat
from stitchlake.timeline.clock import to_datetime

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle

#: Colours of the streams' marks, in the config's order (repeating past the last).
PALETTE = ("#2f6fb3", "#e07b24", "#2e9e5b", "#c0392b", "#8e5ea2", "#16a2b8", "#b8860b", "#d6589f")
#: Lanes of the history chart besides the streams' deltacommits, with their colours.
SERVICE_COLOURS = {
    "compaction": "#444444",
    "clean": "#7f8c8d",
    "rescale": "#9b59b6",
    "savepoint": "#27ae60",
    "rollback": "#c0392b",
    "restore": "#c0392b",
    "erase": "#d35400",
    "alter": "#2980b9",
    "publish": "#16a085",
}
#: Partitions drawn in the shape chart (the largest by bytes); the rest are counted under it.
MAX_PARTITIONS = 40
#: Rows of each history table (newest first).
MAX_HISTORY_ROWS = 25
#: A command in a warning: `stitch ...` between backticks.
_COMMAND = re.compile(r"`(stitch [^`]+)`")


@dataclass
class Warning:
    """A warning of `stitch status`, and the commands it names to fix it (with the table named)."""

    text: str
    commands: list[str]


@dataclass
class TableReport:
    """What `stitch report` wrote: the page, and what it holds (`--json`)."""

    table: str
    path: str
    generated: str
    html: str
    sections: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    warnings: list[Warning] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Everything but the page itself; `counts` (rows of each metadata table) as `metadata_rows`."""
        data = asdict(self)
        del data["html"]
        data["metadata_rows"] = data.pop("counts")
        return data


def report(
    table: TableHandle,
    target: str = "",
    now: float | None = None,
    kafka_timeout_s: float = KAFKA_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
) -> TableReport:
    """The report of `table`; `target` is how commands name it (`-c t.yaml`), appended to the fix commands."""
    say = progress or (lambda _message: None)
    say("reading the table's status")
    health = status(table, now)
    say("reading the metadata tables")
    snap = Snapshot.take(table, kafka_timeout_s)
    data = {name: snap.get(name).to_pylist() for name in ("timeline", "file_groups", "streams", "savepoints")}
    data["rescales"] = snap.get("rescales").to_pylist()
    moment = dt.datetime.fromtimestamp(time.time() if now is None else now, dt.UTC)
    generated = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    page = _Page(table.config.table.name, table.path, generated)
    warnings = [Warning(text, [f"{c} {target}".strip() for c in _COMMAND.findall(text)]) for text in health.warnings]
    streams = list(table.config.streams)
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(streams)}
    say("drawing")
    page.overview(health)
    page.warnings(warnings)
    page.shape(data["file_groups"], data["streams"], colours)
    page.history(data["timeline"], streams, colours)
    page.services(data["timeline"])
    page.kafka(data["streams"], colours)
    page.streams(data["streams"])
    page.savepoints(data["savepoints"])
    page.published(health.published)
    page.rescales(data["rescales"])
    return TableReport(
        table=table.config.table.name,
        path=table.path,
        generated=generated,
        html=page.render(),
        sections=page.sections,
        charts=page.charts,
        warnings=warnings,
        streams=streams,
        counts={name: len(rows) for name, rows in data.items()},
    )


# ------------------------------------------------------------------------------------------------ formatting


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def size(value: int | float | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{amount:,.0f} {unit}" if unit == "B" else f"{amount:,.1f} {unit}"
        amount /= 1024
    return f"{amount:,.1f} TiB"


def _when(value: dt.datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _instant_time(instant_time: str | None) -> str:
    """An instant time as `yyyy-mm-dd hh:mm:ss` (UTC), or "never"."""
    if not instant_time:
        return "never"
    return to_datetime(instant_time).strftime("%Y-%m-%d %H:%M:%S")


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = ()) -> str:
    right = set(numeric)
    head = "".join(f"<th{' class=n' if i in right else ''}>{_e(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if i in right else ''}>{_e(v)}</td>" for i, v in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _svg(width: float, height: float, body: str, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{_e(label)}" '
        f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">{body}</svg>'
    )


def _text(x: float, y: float, value: Any, anchor: str = "start", cls: str = "") -> str:
    css = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{css}>{_e(value)}</text>'


def _heat(fraction: float) -> str:
    """White-blue-dark for 0..1."""
    fraction = min(1.0, max(0.0, fraction))
    low, high = (235, 243, 251), (8, 48, 107)
    return "#" + "".join(f"{round(a + (b - a) * fraction):02x}" for a, b in zip(low, high, strict=True))


# ------------------------------------------------------------------------------------------------ the page

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:24px;color:#222;
background:#fff;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;font-size:13px}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:110px}
.card b{display:block;font-size:18px}.card span{color:#666;font-size:12px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}th,td{border-bottom:1px solid #eee;padding:3px 8px;
text-align:left}th{background:#f6f6f6}td.n,th.n{text-align:right}
.warn{border-left:4px solid #e67e22;background:#fdf3e7;padding:8px 12px;margin:8px 0;font-size:13px}
.warn code,.fix code{background:#222;color:#fff;padding:2px 6px;border-radius:3px;font-size:12.5px}
.fix{margin-top:6px}.ok{border-left:4px solid #2e9e5b;background:#eef8f1;padding:8px 12px;font-size:13px}
svg.chart{display:block;margin:6px 0;font-size:11px}svg.chart text{fill:#333}svg.chart .axis{fill:#666}
.legend{font-size:12px;margin:4px 0}.legend i{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
.note{color:#666;font-size:12px}
"""


class _Page:
    def __init__(self, name: str, path: str, generated: str) -> None:
        self.name, self.path, self.generated = name, path, generated
        self.parts: list[str] = []
        self.sections: list[str] = []
        self.charts: list[str] = []

    def section(self, title: str, body: str) -> None:
        anchor = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
        self.sections.append(title)
        self.parts.append(f'<section id="{anchor}"><h2>{_e(title)}</h2>{body}</section>')

    def chart(self, name: str, svg: str) -> str:
        self.charts.append(name)
        return f'<figure data-chart="{_e(name)}" style="margin:0">{svg}</figure>'

    def render(self) -> str:
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>stitchlake report: {_e(self.name)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{_e(self.name)}</h1>"
            f'<div class="sub">{_e(self.path)} &middot; generated {_e(self.generated)} (times in UTC) by '
            "<code>stitch report</code>, from the table's metadata</div>" + "".join(self.parts) + "</body></html>\n"
        )

    # -------------------------------------------------------------------------------------------- sections

    def overview(self, health: StatusReport) -> None:
        totals, line = health.totals, health.timeline
        cards = [
            ("partitions", _count(totals.partitions)),
            ("file groups", _count(totals.file_groups)),
            ("live files", _count(totals.live_files)),
            ("bytes", size(totals.bytes)),
            ("latest slices", size(totals.latest_slice_bytes)),
            ("largest file group", size(totals.largest_file_group_bytes)),
            ("buckets", _count(line.buckets)),
            ("active instants", _count(line.active_instants)),
            ("commits since compaction", _count(line.deltacommits_since_compaction)),
            ("last compaction", _instant_time(line.last_compaction)),
            ("last clean", _instant_time(line.last_clean)),
        ]
        body = "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in cards)
        running = [*health.writers, *health.pending_compactions]
        extra = ""
        if running:
            extra = "<p class=note>pending instants:</p>" + _table(
                ["instant", "action", "state", "stream", "alive", "pending"],
                [
                    (w.instant, w.action, w.state, w.stream or "", "yes" if w.alive else "no", f"{w.pending_s:,.0f} s")
                    for w in running
                ],
            )
        self.section("Overview", f'<div class="cards">{body}</div>{extra}')

    def warnings(self, warnings: list[Warning]) -> None:
        if not warnings:
            self.section(
                "Warnings", '<div class="ok">No warnings: <code>stitch status</code> found nothing to fix.</div>'
            )
            return
        items = []
        for warning in warnings:
            fixes = "".join(f"<code>{_e(c)}</code> " for c in warning.commands) or "see the warning"
            items.append(f'<div class="warn">{_e(warning.text)}<div class="fix">fix: {fixes}</div></div>')
        self.section(f"Warnings ({len(warnings)})", "".join(items))

    def shape(self, groups: list[dict[str, Any]], streams: list[dict[str, Any]], colours: dict[str, str]) -> None:
        body = ""
        if not groups:
            body = "<p class=note>no data files yet</p>"
        else:
            body += self.chart("file_group_sizes", _heatmap(groups))
            body += (
                "<p class=note>Each cell is one file group's latest slice (its base file and the logs since); "
                "darker is larger. Partitions are rows, buckets columns.</p>"
            )
        per_stream: dict[str, list[int]] = {}
        for row in streams:
            per_stream.setdefault(row["stream"], [int(row["log_files"] or 0), int(row["log_bytes"] or 0)])
        body += "<h3 style='font-size:14px'>Logs piled up since the last compaction, per stream</h3>"
        body += self.chart("logs_per_stream", _bars(per_stream, colours))
        self.section("Shape of the table", body)

    def history(self, instants: list[dict[str, Any]], streams: list[str], colours: dict[str, str]) -> None:
        if not instants:
            self.section("Commits over time", "<p class=note>no instants yet</p>")
            return
        self.section("Commits over time", self.chart("commits_over_time", _lanes(instants, streams, colours)))

    def services(self, instants: list[dict[str, Any]]) -> None:
        picked = [i for i in instants if i["action"] in ("compaction", "clean", "rescale", "erase")]
        picked.sort(key=lambda i: i["instant"], reverse=True)
        if not picked:
            self.section("Compaction and clean history", "<p class=note>no compaction or clean yet</p>")
            return
        rows = [
            (
                i["instant"],
                i["action"],
                i["state"],
                _when(i["completed_at"]),
                "-" if i["duration_s"] is None else f"{i['duration_s']:,.1f} s",
                _count(i["files"]),
                size(i["bytes"]),
            )
            for i in picked[:MAX_HISTORY_ROWS]
        ]
        more = f"<p class=note>newest {MAX_HISTORY_ROWS} of {len(picked)}</p>" if len(picked) > MAX_HISTORY_ROWS else ""
        headers = ["instant", "action", "state", "completed (UTC)", "took", "files written", "bytes written"]
        self.section("Compaction and clean history", _table(headers, rows, numeric=(4, 5, 6)) + more)

    def kafka(self, streams: list[dict[str, Any]], colours: dict[str, str]) -> None:
        fed = [row for row in streams if row["source"] == "kafka"]
        if not fed:
            return
        notes = sorted({f"{r['stream']}: {r['note']}" for r in fed if r["note"]})
        bars: dict[str, list[int]] = {}
        for row in fed:
            if row["partition"] is not None:
                bars[f"{row['stream']} / {row['topic']} [{row['partition']}]"] = [int(row["lag"] or 0), -1]
        body = ""
        if bars and not notes:
            tints = {k: colours.get(k.split(" / ")[0], PALETTE[0]) for k in bars}
            body += self.chart("kafka_lag", _bars(bars, tints, " record(s) behind the topic's end"))
        body += "".join(f"<p class=note>{_e(n)}</p>" for n in notes)
        body += _table(
            ["stream", "topic", "partition", "next offset (recorded)", "topic end", "lag"],
            [
                (
                    r["stream"],
                    r["topic"],
                    r["partition"],
                    _count(r["next_offset"]),
                    _count(r["end_offset"]),
                    _count(r["lag"]),
                )
                for r in fed
            ],
            numeric=(2, 3, 4, 5),
        )
        self.section("Kafka lag per partition", body)

    def streams(self, streams: list[dict[str, Any]]) -> None:
        seen: dict[str, dict[str, Any]] = {}
        for row in streams:
            seen.setdefault(row["stream"], row)
        rows = [
            (
                r["stream"],
                r["source"] or "-",
                _count(r["commits"]),
                _count(r["rows"]),
                r["last_instant"] or "never",
                _when(r["last_completed_at"]),
                _count(r["landing_files"]),
                _count(r["log_files"]),
                size(r["log_bytes"]),
            )
            for r in seen.values()
        ]
        headers = [
            "stream",
            "source",
            "commits",
            "rows",
            "last commit",
            "completed (UTC)",
            "landing files",
            "logs",
            "log bytes",
        ]
        self.section("Streams", _table(headers, rows, numeric=(2, 3, 6, 7, 8)))

    def savepoints(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            self.section("Savepoints", "<p class=note>no savepoints</p>")
            return
        shown = [
            (
                r["name"] or "-",
                r["instant"],
                r["savepoint_of"],
                _when(r["savepoint_of_at"]),
                _count(r["files"]),
                size(r["bytes"]),
            )
            for r in rows
        ]
        headers = ["name", "instant", "pins the state of", "at (UTC)", "files pinned", "bytes pinned"]
        self.section("Savepoints", _table(headers, shown, numeric=(4, 5)))

    def published(self, formats: list[PublishedFormat]) -> None:
        if not formats:
            return
        shown = [
            (
                f.format + ("" if f.configured else " (not in publish.formats)"),
                f.location,
                f.last_publish or "never",
                "-" if f.version is None else f.version,
                "behind the table" if f.stale else "current",
            )
            for f in formats
        ]
        headers = ["format", "location", "last publish", "version", "state"]
        self.section("Published formats", _table(headers, shown, numeric=(3,)))

    def rescales(self, rows: list[dict[str, Any]]) -> None:
        shown = [
            (
                r["instant"] or "(created)",
                _when(r["completed_at"]),
                r["partition"] or ("every partition" if r["whole_table"] else "-"),
                "-" if r["from_buckets"] is None else r["from_buckets"],
                r["to_buckets"],
            )
            for r in rows
        ]
        self.section(
            "Bucket counts over time", _table(["rescale", "completed (UTC)", "partition", "from", "to"], shown, (3, 4))
        )


# ------------------------------------------------------------------------------------------------ charts


def _heatmap(groups: list[dict[str, Any]]) -> str:
    """File groups' latest-slice bytes: a row per partition (the largest MAX_PARTITIONS), a cell per bucket."""
    by_partition: dict[str, dict[int, dict[str, Any]]] = {}
    for group in groups:
        by_partition.setdefault(group["partition"] or "(unpartitioned)", {})[int(group["bucket"] or 0)] = group
    ranked = sorted(by_partition, key=lambda p: -sum(g["bytes"] for g in by_partition[p].values()))
    shown = sorted(ranked[:MAX_PARTITIONS])
    buckets = max(max(g["buckets"] for g in groups), 1 + max(int(g["bucket"] or 0) for g in groups))
    largest = max(g["bytes"] for g in groups) or 1
    label_w = min(260, 12 + 6.6 * max(len(p) for p in shown))
    cell = max(6.0, min(28.0, 760 / buckets))
    row_h = 18.0
    top = 22.0
    width = max(label_w + cell * buckets + 20, label_w + 6 * 26 + 480)
    height = top + row_h * len(shown) + 34
    parts = []
    step = max(1, math.ceil(buckets / 16))
    for bucket in range(0, buckets, step):
        parts.append(_text(label_w + cell * bucket + cell / 2, top - 6, bucket, "middle", "axis"))
    for index, partition in enumerate(shown):
        y = top + row_h * index
        parts.append(_text(label_w - 6, y + row_h * 0.7, partition, "end"))
        for bucket, group in sorted(by_partition[partition].items()):
            tip = (
                f"{partition} / {group['file_group']}: {size(group['bytes'])} (base {size(group['base_bytes'])}, "
                f"{group['log_files']} log file(s) {size(group['log_bytes'])})"
            )
            parts.append(
                f'<rect x="{label_w + cell * bucket:.1f}" y="{y + 1:.1f}" width="{cell - 1.5:.1f}" '
                f'height="{row_h - 2:.1f}" '
                f'fill="{_heat(math.sqrt(group["bytes"] / largest))}" stroke="#ccd"><title>{_e(tip)}</title></rect>'
            )
    y = top + row_h * len(shown) + 16
    for i in range(6):
        parts.append(
            f'<rect x="{label_w + i * 26:.1f}" y="{y - 9:.1f}" width="24" height="10" '
            f'fill="{_heat(math.sqrt(i / 5))}"/>'
        )
    parts.append(_text(label_w + 6 * 26 + 6, y, f"0 to {size(largest)} per file group", cls="axis"))
    if len(ranked) > len(shown):
        parts.append(
            _text(label_w + 6 * 26 + 200, y, f"({len(ranked) - len(shown)} smaller partitions not drawn)", cls="axis")
        )
    return _svg(width, height, "".join(parts), "file-group sizes per partition and bucket")


def _bars(values: dict[str, list[int]], colours: dict[str, str], unit: str = "") -> str:
    """Horizontal bars: name -> [count or amount, bytes or -1]; the bar's length is bytes (or the amount when -1)."""
    if not values:
        return _svg(300, 24, _text(4, 16, "nothing to show", cls="axis"), "empty chart")
    label_w = min(320, 14 + 6.6 * max(len(k) for k in values))
    bar_w = 520.0
    row_h = 22.0
    lengths = {k: (v[1] if v[1] >= 0 else v[0]) for k, v in values.items()}
    largest = max(lengths.values()) or 1
    parts = []
    for index, (name, (amount, sized)) in enumerate(values.items()):
        y = 6 + row_h * index
        length = bar_w * lengths[name] / largest
        parts.append(_text(label_w - 6, y + 13, name, "end"))
        parts.append(
            f'<rect x="{label_w:.1f}" y="{y + 2:.1f}" width="{max(length, 1):.1f}" height="{row_h - 6:.1f}" '
            f'fill="{colours.get(name, PALETTE[0])}"><title>{_e(name)}</title></rect>'
        )
        caption = f"{amount:,} file(s), {size(sized)}" if sized >= 0 else f"{amount:,}{unit}"
        parts.append(_text(label_w + length + 6, y + 13, caption, cls="axis"))
    return _svg(label_w + bar_w + 170, 12 + row_h * len(values), "".join(parts), "bar chart")


def _lanes(instants: list[dict[str, Any]], streams: list[str], colours: dict[str, str]) -> str:
    """Instants over time, one lane per stream (its deltacommits, sized by rows) and per table service."""

    def moment(row: dict[str, Any]) -> dt.datetime:
        return row["completed_at"] or row["requested_at"]

    lanes: list[tuple[str, str]] = [(s, colours[s]) for s in streams]
    order = list(SERVICE_COLOURS)
    actions = sorted(
        {i["action"] for i in instants if i["action"] != "deltacommit"},
        key=lambda a: (order.index(a) if a in order else len(order), a),
    )
    lanes += [(a, SERVICE_COLOURS.get(a, "#555")) for a in actions]
    row_of = {name: index for index, (name, _c) in enumerate(lanes)}
    times = [moment(i) for i in instants]
    start, end = min(times), max(times)
    span = max((end - start).total_seconds(), 1.0)
    label_w, plot_w, row_h, top = 110.0, 900.0, 26.0, 10.0
    biggest = max((i["rows"] or 0 for i in instants if i["action"] == "deltacommit"), default=0) or 1
    parts = []
    for index, (name, _colour) in enumerate(lanes):
        y = top + row_h * index + row_h / 2
        parts.append(f'<line x1="{label_w}" y1="{y:.1f}" x2="{label_w + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(_text(label_w - 8, y + 4, name, "end"))
    for row in instants:
        lane = row["stream"] if row["action"] == "deltacommit" else row["action"]
        if lane not in row_of:
            continue
        x = label_w + plot_w * (moment(row) - start).total_seconds() / span
        y = top + row_h * row_of[lane] + row_h / 2
        colour = lanes[row_of[lane]][1]
        radius = 4.0 if row["action"] != "deltacommit" else 3.0 + 6.0 * math.sqrt((row["rows"] or 0) / biggest)
        filled = row["state"] == "completed"
        tip = f"{row['action']} {row['instant']} {row['state']}" + (f", {row['rows']:,} rows" if row["rows"] else "")
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour if filled else "#fff"}" '
            f'fill-opacity="0.75" stroke="{colour}"><title>{_e(tip)}</title></circle>'
        )
    bottom = top + row_h * len(lanes)
    parts.append(f'<line x1="{label_w}" y1="{bottom:.1f}" x2="{label_w + plot_w}" y2="{bottom:.1f}" stroke="#999"/>')
    for tick in range(5):
        at = start + dt.timedelta(seconds=span * tick / 4)
        x = label_w + plot_w * tick / 4
        parts.append(f'<line x1="{x:.1f}" y1="{bottom:.1f}" x2="{x:.1f}" y2="{bottom + 4:.1f}" stroke="#999"/>')
        parts.append(_text(x, bottom + 16, at.strftime("%m-%d %H:%M:%S"), "middle", "axis"))
    parts.append(_text(label_w, bottom + 32, "deltacommits sized by rows; hollow: not completed", cls="axis"))
    return _svg(label_w + plot_w + 70, bottom + 40, "".join(parts), "instants over time per stream and service")
