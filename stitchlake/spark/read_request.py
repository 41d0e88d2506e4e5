"""A Spark read's options, checked and resolved once: the same rules for the Python data source and for the JVM
reader's planner, so both refuse the same options with the same words and read the same times.

No pyspark here: the planner process imports it and starts quickly.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from stitchlake.errors import UsageError
from stitchlake.spark.packing import MAX_PARTITION_BYTES, MIN_PARTITIONS, OPEN_COST_IN_BYTES
from stitchlake.vocabulary import ReadMode

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle as Table

#: Option values Spark hands over as text that mean true, and false.
TRUE_TEXTS = ("true", "1", "yes")
FALSE_TEXTS = ("false", "0", "no")
#: The options that say what a read returns: kept with a catalog table (`read.catalog_schema`).
READ_OPTIONS = (
    "path",
    "config",
    "as_of",
    "since",
    "until",
    "mode",
    "before_images",
    MAX_PARTITION_BYTES,
    OPEN_COST_IN_BYTES,
    MIN_PARTITIONS,
)
#: The JVM reader's own option: a plan file (docs/spark-reader.md).
PLAN_OPTION = "plan"
#: Other table formats' time-travel and change-feed options (lower case, as Spark hands them over), with ours.
FOREIGN_OPTIONS = {
    "timestampasof": "as_of",
    "versionasof": "as_of",
    "as-of-timestamp": "as_of",
    "snapshot-id": "as_of",
    "startingversion": "since",
    "startingtimestamp": "since",
    "start-snapshot-id": "since",
    "endingversion": "until",
    "endingtimestamp": "until",
    "end-snapshot-id": "until",
    "readchangefeed": "since and until",
}


def refuse_misspelled(options: Mapping[str, str]) -> None:
    """A read option that is close to one of ours (`as-of`, `asOf`, `sinc`) or another format's time travel is
    refused (exit 2): ignored, it would read the table as of now without a word. Other keys pass, since Spark and
    catalogs add their own (`owner`, `option.*`, ...)."""
    known = (*READ_OPTIONS, PLAN_OPTION)
    for key in options:
        lower = key.lower()
        if lower in known:
            continue
        listed = ", ".join(o for o in known if o not in ("path", "config"))
        if lower in FOREIGN_OPTIONS:
            raise UsageError(f"read option {key!r} is another table format's; stitchlake's is {FOREIGN_OPTIONS[lower]}")
        letters = re.sub(r"[^a-z]", "", lower)
        close = [o for o in known if re.sub(r"[^a-z]", "", o) == letters] or difflib.get_close_matches(
            lower, known, n=1, cutoff=0.8
        )
        if close:
            raise UsageError(f"unknown read option {key!r}: did you mean {close[0]!r}? (read options: {listed})")


def flag(options: Mapping[str, str], name: str) -> bool:
    """A true/false option; any other text is refused (exit 2) rather than read as false."""
    text = str(options.get(name, "false")).strip().lower()
    if text not in TRUE_TEXTS + FALSE_TEXTS:
        raise UsageError(f"option {name} must be true or false, got {text!r}")
    return text in TRUE_TEXTS


class ReadRequest:
    """The table a read's options name, at the time they resolve to: a snapshot (`as_of`, None: now) or a change
    read (`since`, `until`; `until` fixed here so every task diffs the same two states whatever commits meanwhile)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        from stitchlake.reading.options import refuse_mixed_choices
        from stitchlake.reading.snapshot import read_mode, refuse_reversed_range, resolve_time, resolve_until
        from stitchlake.spark.tables import open_for_spark

        refuse_misspelled(options)
        self.mode = read_mode(options.get("mode", ReadMode.SNAPSHOT))
        as_of, since, until = options.get("as_of"), options.get("since"), options.get("until")
        self.changes = since is not None or until is not None
        self.before_images = flag(options, "before_images")
        refuse_mixed_choices(self.mode, as_of, since, until, self.before_images)
        if not options.get("path") and not options.get("config"):
            raise UsageError(
                "the stitchlake data source needs a table path: spark.read.format('stitchlake').load(path), or in "
                "SQL CREATE TABLE t USING stitchlake OPTIONS (path '...') with no column list (the table has its "
                "own schema, and the path is kept with it)"
            )
        table = open_for_spark(dict(options))
        table.require()
        self.as_of: str | None = None
        self.since: str | None = None
        self.until: str | None = None
        if self.changes:
            timeline = table.read_timeline()
            end = resolve_until(table, timeline, until)
            self.since = resolve_time(table, timeline, since, since=True)
            if until is not None:
                refuse_reversed_range(self.since, end)
            self.until = end
            self.table: Table = table.at_time(end)
        else:
            self.as_of = resolve_time(table, table.read_timeline(), as_of)
            self.table = table.at_time(self.as_of)
