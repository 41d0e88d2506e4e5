"""What a client may rely on after healing, judged from the operation history and the CLI's answers only."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

from scripts.partitions.hosts import PartitionsError
from scripts.partitions.rounds import Round, expected_rows
from scripts.partitions.run import Op, Run
from scripts.partitions.settings import ROWS_PER_FILE, STREAMS

# ============================================================================================= checker


def _rows(answer: dict[str, Any]) -> dict[int, dict[str, str | None]]:
    out: dict[int, dict[str, str | None]] = {}
    for record in answer.get("records", []):
        if record.get("_op") == "D":
            continue
        out[int(record["k"])] = {f"v{s}": record.get(f"v{s}") for s in STREAMS}
    return out


def _diff(name: str, got: dict[int, dict[str, str | None]], want: dict[int, dict[str, str | None]]) -> list[str]:
    if got == want:
        return []
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    wrong = [(k, got[k], want[k]) for k in sorted(set(got) & set(want)) if got[k] != want[k]][:3]
    return [f"{name}: {len(got)} rows, expected {len(want)}; missing keys {missing}, unexpected {extra}, wrong {wrong}"]


def check(run: Run, round_: Round, spark: bool = False) -> list[str]:
    """What a client may rely on after healing, judged from the operation history and the CLI's answers only
    (with `spark`, also from a Spark local[2] read of the table)."""
    violations: list[str] = []
    try:
        answers = run.query(
            round_.config,
            [["timeline", "show", "-n", "0"], ["read", "-n", "0"], ["read", "-n", "0", "--mode", "read_optimized"]],
        )
    except PartitionsError as exc:  # a table that no longer reads is the worst violation of all
        return [f"the table cannot be read after healing: {exc}"]
    timeline = answers[0]["instants"]
    completed = [i for i in timeline if i.get("state") == "completed"]
    deltas = [i for i in completed if i.get("action") == "deltacommit"]
    pending = [i for i in timeline if i.get("state") != "completed"]
    if pending:
        violations.append(f"instants still pending after healing: {[(i['instant'], i['action']) for i in pending]}")
    by_instant = {str(i["instant"]): i for i in deltas}
    # Ingests and streams; a stream that ended without an answer may have committed its batch in flight: one write.
    writers = [op for op in round_.ops if op.command in ("ingest", "stream")]
    acknowledged = [(op, instant, rows) for op in writers for instant, rows in op.writes()]
    seen: Counter[str] = Counter(instant for _op, instant, _rows in acknowledged)
    for instant, count in seen.items():
        if count > 1:
            violations.append(f"instant {instant} acknowledged to {count} writers")
    for op, instant, rows in acknowledged:
        found = by_instant.get(instant)
        if found is None:
            violations.append(f"acknowledged write lost: op {op.id} instant {instant} is not completed")
        elif found.get("stream") != op.stream or found.get("rows") != rows:
            violations.append(f"op {op.id} was told {rows} rows of {op.stream} in {instant}, the timeline {found}")
    for stream in STREAMS:
        unowned = [i for i in deltas if i.get("stream") == stream and str(i["instant"]) not in seen]
        unknown = [op for op in writers if op.stream == stream and op.outcome == "unknown"]
        if len(unowned) > len(unknown):
            violations.append(
                f"stream {stream}: {len(unowned)} completed deltacommits nobody was told of "
                f"({[i['instant'] for i in unowned]}) but only {len(unknown)} writes ended without an answer: "
                "a write that was told it failed is visible"
            )
        landed = len(round_.landed.get(stream, [])) * ROWS_PER_FILE
        committed = sum(int(i.get("rows") or 0) for i in deltas if i.get("stream") == stream)
        if committed != landed:
            violations.append(f"stream {stream}: completed deltacommits hold {committed} rows, {landed} landed")
        ordered = sorted((i for i in deltas if i.get("stream") == stream), key=lambda i: str(i["instant"]))
        for first, second in itertools.pairwise(ordered):
            if str(second["instant"]) < str(first["completed"]):
                violations.append(
                    f"stream {stream}: deltacommits {first['instant']}..{first['completed']} and "
                    f"{second['instant']}..{second['completed']} overlap: two holders of the stream's claim committed"
                )
    done = {str(i["instant"]) for i in completed}
    for op in round_.ops:
        if op.command in ("compact", "clean") and op.outcome == "ok":
            lost = [instant for instant in op.instants() if instant not in done]
            if lost:
                violations.append(f"acknowledged {op.command} lost: op {op.id} instant(s) {lost} not completed")
    want = expected_rows(round_)
    violations += _diff("snapshot", _rows(answers[1]), want)
    violations += _diff("read_optimized", _rows(answers[2]), want)
    if completed:
        newest = max(str(i["instant"]) for i in completed)
        as_of = run.query(round_.config, [["read", "-n", "0", "--as-of", newest]])[0]
        violations += _diff(f"as of {newest}", _rows(as_of), want)
    violations += check_feed(run, round_, want, completed)
    if spark:
        violations += _diff("Spark read", _rows(run.spark_read(round_.table)), want)
    return violations


def _feed(run: Run, round_: Round, since: str) -> Op:
    return run.batch(-1, "ctl", "check", [["read", "-n", "0", "--since", since, "-c", str(round_.config)]])[0]


def check_feed(
    run: Run, round_: Round, want: dict[int, dict[str, str | None]], completed: list[dict[str, Any]]
) -> list[str]:
    """The change feed from the start holds the snapshot's rows. After a clean it may be refused (exit 2, outside
    the retention), naming the first `since` that reads: then the feed from there must read, and every row it
    returns is the snapshot's."""
    feed = _feed(run, round_, "20000101000000000")
    error = str(feed.answer.get("error"))
    if feed.exit == 0:
        return _diff("change feed", _rows(feed.answer), want)
    if not (feed.exit == 2 and "outside the retention" in error and cleaned(completed)):
        return [f"change feed: the read failed ({feed.exit}): {error}"]
    named = re.search(r"Read changes since (\d{17})", error)
    if named is None:
        round_.events.append("the change feed from the start was refused; no later `since` reads")
        return []
    later = _feed(run, round_, named.group(1))
    round_.events.append(f"the change feed from the start was refused (a clean); read since {named.group(1)}")
    if later.exit != 0:
        return [f"change feed since {named.group(1)}, which the refusal named: failed ({later.exit}): {later.answer}"]
    rows = _rows(later.answer)
    return _diff(f"change feed since {named.group(1)}", rows, {k: want.get(k, {}) for k in rows})


def cleaned(completed: list[dict[str, Any]]) -> bool:
    """Whether a clean completed: only then may a read of older history be refused as outside the retention."""
    return any(i.get("action") == "clean" for i in completed)


def history(run: Run, round_: Round) -> str:
    lines = [round_.describe(), *("  " + e for e in round_.events), *(op.line() for op in round_.ops)]
    return "\n".join(lines)
