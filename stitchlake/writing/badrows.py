"""The bad-row policy (`bad_rows: fail | quarantine`), written once for every engine and every writer.

Rows are judged by `batch.prepare`; a whole landing file that cannot be read, or lacks a column the stream
needs, is judged here. `fail` stops the write with one message (counts per reason, the first few rows and
where they came from) and nothing is published; `quarantine` sets them aside under
`.stitch/quarantine/<instant>/` with their reason, and the rest is written.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from stitchlake.config import BadRows
from stitchlake.errors import InputRejected
from stitchlake.io.datafiles import write_parquet_atomic
from stitchlake.io.json_records import WRONG_JSON_TYPE
from stitchlake.io.kafka import OFFSET as KAFKA_OFFSET
from stitchlake.paths import quarantine_folder
from stitchlake.storage import Storage
from stitchlake.timeline.metadata import QuarantinedFile
from stitchlake.writing.batch import LINE, REASON, ROW, SOURCE, UNPARSABLE, column_of

#: Rows shown in a message (and carried back from Spark tasks) besides the counts.
SAMPLE_ROWS = 3
TO_CHANGE_POLICY = "set bad_rows: quarantine to set bad rows aside and keep the rest"
FILE_TO_DO = (
    "fix or replace the file (or move it out of the landing folder), or set bad_rows: quarantine to set such "
    "files aside and ingest the rest"
)


@dataclass
class Rejected:
    """What was rejected in one write: counts per reason, a few examples, and what was set aside where."""

    by_reason: Counter[str] = field(default_factory=Counter)
    sample: list[dict[str, Any]] = field(default_factory=list)
    #: Quarantine files written (rows), table-relative.
    files: list[str] = field(default_factory=list)
    #: Landing files rejected whole.
    rejected: list[QuarantinedFile] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(self.by_reason.values())

    def __bool__(self) -> bool:
        return bool(self.by_reason) or bool(self.rejected)

    def add_rows(self, bad: pa.Table | None) -> None:
        if bad is None or not bad.num_rows:
            return
        self.by_reason.update(bad.column(REASON).to_pylist())
        room = SAMPLE_ROWS - len(self.sample)
        if room > 0:
            self.sample += bad.slice(0, room).to_pylist()

    def merge(self, other: Rejected) -> None:
        self.by_reason.update(other.by_reason)
        self.sample = (self.sample + other.sample)[:SAMPLE_ROWS]
        self.files += other.files
        self.rejected += other.rejected

    def describe(self) -> str:
        """A short human summary: counts per reason and where the first few came from."""
        parts = []
        if self.by_reason:
            # The count says "rows", and an example's value is quoted after "value": a bare number after a
            # column name ("unparsable value in fare_amount: 1") reads as the value that did not parse.
            summary = ", ".join(f"{reason}: {_rows(count)}" for reason, count in self.by_reason.most_common())
            examples = "; ".join(_example(row) for row in self.sample)
            parts.append(f"{self.count} bad row{'s' if self.count != 1 else ''} ({summary}); first: {examples}")
        if self.rejected:
            shown = "; ".join(f"{item.reason}" for item in self.rejected[:SAMPLE_ROWS])
            parts.append(f"{len(self.rejected)} unreadable landing file(s): {shown}")
        return "; ".join(parts)

    def enforce(self, policy: BadRows) -> None:
        """The `bad_rows` policy, before anything is written: `fail` refuses the whole batch when it has a bad
        row or an unreadable file (exit 5); `quarantine` lets it through, the bad ones set aside."""
        if self and policy == BadRows.FAIL:
            raise self.rejection()

    def apply_policy(
        self,
        policy: BadRows,
        rows: Sequence[pa.Table | None],
        storage: Storage,
        instant: str,
        tag: str,
        mark: Callable[[str], None],
        *,
        enforce: bool = True,
    ) -> None:
        """One writer's bad rows (a table per file or batch it read, in order) under the policy, before it writes:
        counted, then `fail` refuses the write (exit 5) and `quarantine` sets them aside as one file of this writer
        (`tag`). Every writer, in every engine, calls this.

        `enforce=False` counts without refusing: a Spark task leaves that to the driver, whose one message then
        counts every task's rows (`enforce` there)."""
        for part in rows:
            self.add_rows(part)
        if policy == BadRows.FAIL:
            if enforce:
                self.enforce(policy)
            return
        present = [part for part in rows if part is not None and part.num_rows]
        if present:
            aside = present[0] if len(present) == 1 else pa.concat_tables(present, promote_options="permissive")
            self.files.append(quarantine_rows(storage, instant, aside, tag, mark))

    def rejection(self) -> InputRejected:
        """`bad_rows: fail`: one error naming the first bad row's file and column (for `--json` too)."""
        first = self.sample[0] if self.sample else None
        return InputRejected(
            f"{self.describe()} — nothing was written ({TO_CHANGE_POLICY})",
            file=str(first[SOURCE]) if first else None,
            column=column_of(str(first[REASON])) if first else None,
        )


def file_rejection(error: InputRejected) -> InputRejected:
    """`bad_rows: fail` meeting a landing file it cannot take whole (unreadable, a column missing): say what to do."""
    return InputRejected(
        f"{error} — nothing was ingested: {FILE_TO_DO}", file=error.file, column=error.column, yaml_path=error.yaml_path
    )


def _rows(count: int) -> str:
    return f"{count:,} row{'s' if count != 1 else ''}"


def _example(row: dict[str, Any]) -> str:
    reason = str(row[REASON])
    prefix = next((p for p in (UNPARSABLE, WRONG_JSON_TYPE) if reason.startswith(p)), None)
    column = reason[len(prefix) :] if prefix else None
    if prefix and column and row.get(column) is not None:  # show the value: the fix is in the data, not here
        value = str(row[column])
        shown = f"{value[:40] + '...' if len(value) > 40 else value!r}"
        reason = f"{prefix.removesuffix(' in ')} {shown} in {column}"
    if row.get(KAFKA_OFFSET) is not None:  # a Kafka record is named by its offset
        return f"{row[SOURCE]} offset {row[ROW]} ({reason})"
    if row.get(LINE) is not None:  # a JSON line by its line, as an editor shows it
        return f"{row[SOURCE]} line {row[LINE]} ({reason})"
    return f"{row[SOURCE]} row {row[ROW]} ({reason})"


def quarantine_rows(storage: Storage, instant: str, bad: pa.Table, tag: str, mark: Callable[[str], None]) -> str:
    """Set rejected rows aside with their reason (one file per writer task, `tag` tells them apart)."""
    path = f"{quarantine_folder(instant)}/rows-{tag}.parquet"
    mark(path)
    write_parquet_atomic(storage, path, bad)
    return path


def quarantine_file(
    storage: Storage, instant: str, name: str, data: bytes | None, reason: str, mark: Callable[[str], None]
) -> QuarantinedFile:
    """Set a whole landing file aside (a copy, so the evidence survives the landing folder's own retention).

    The reason goes on the timeline, which no erase can rewrite: a reader's quote of the offending line is cut
    from it (the copy holds the line; `stitch delete --purge` can remove the copy, never the timeline)."""
    copy = None
    if data is not None:
        copy = f"{quarantine_folder(instant)}/files/{_safe(name)}"
        mark(copy)
        storage.write_atomic(copy, data)  # a speculative attempt of the same task may write it at once
    return QuarantinedFile(name, without_quoted_rows(reason), copy)


#: Arrow's CSV reader quotes the line it could not split ("Expected 3 columns, got 4: <the line>").
_QUOTED_ROW = re.compile(r"(Expected \d+ columns, got \d+): .*")


def without_quoted_rows(reason: str) -> str:
    """A reader's error without the data it quotes (the message of a landing file that cannot be read ends with
    the reader's error in parentheses)."""
    return _QUOTED_ROW.sub(lambda m: m.group(1) + (")" if reason.endswith(")") else ""), reason)


def _safe(name: str) -> str:
    """A landing name as one file name under the quarantine folder, its folders flattened with `~` escapes (`/` as
    `~s`, `:` as `~c`, `~` as `~~`, a leading dot as `~d`): every two names stay apart (flattening `x/y.csv` to
    `x__y.csv` gave `x__y.csv`'s copy the same path, and one file's evidence overwrote the other's), and no character
    an object store treats specially is added."""
    flat = name.replace("~", "~~").replace("/", "~s").replace(":", "~c")
    return ("~d" + flat[1:] if flat.startswith(".") else flat) or "file"
