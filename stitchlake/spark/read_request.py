"""A Spark read's options, checked and resolved once: the same rules for the Python data source and for the JVM
reader's planner, so both refuse the same options with the same words and read the same times.

No pyspark here: the planner process imports it and starts quickly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from stitchlake.errors import UsageError
from stitchlake.vocabulary import ReadMode

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle as Table

#: Option values Spark hands over as text that mean true.
TRUE_TEXTS = ("true", "1", "yes")


class ReadRequest:
    """The table a read's options name, at the time they resolve to: a snapshot (`as_of`, None: now) or a change
    read (`since`, `until`; `until` fixed here so every task diffs the same two states whatever commits meanwhile)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        from stitchlake.reading.snapshot import read_mode, refuse_reversed_range, resolve_time
        from stitchlake.spark.tables import open_for_spark

        self.mode = read_mode(options.get("mode", ReadMode.SNAPSHOT))
        as_of, since, until = options.get("as_of"), options.get("since"), options.get("until")
        if as_of is not None and (since is not None or until is not None):
            raise UsageError("use either as_of (a snapshot) or since/until (changes), not both")
        self.changes = since is not None or until is not None
        self.before_images = str(options.get("before_images", "false")).lower() in TRUE_TEXTS
        if self.before_images and not self.changes:
            raise UsageError("before_images is for change reads: give since and/or until")
        if not options.get("path") and not options.get("config"):
            raise UsageError(
                "the stitchlake data source needs a table path: spark.read.format('stitchlake').load(path), or in "
                "SQL CREATE TABLE t USING stitchlake OPTIONS (path '...') with no column list (the table has its "
                "own schema, and the path is kept with it)"
            )
        table = open_for_spark(dict(options))
        table.require()
        timeline = table.timeline()
        self.as_of: str | None = None
        self.since: str | None = None
        self.until: str | None = None
        if self.changes:
            end = resolve_time(table, timeline, until)
            self.since = resolve_time(table, timeline, since, since=True)
            refuse_reversed_range(self.since, end)
            latest = timeline.latest_completed()
            self.until = end if end is not None else (latest.completed if latest else None)
            self.table: Table = table.at_time(end)
        else:
            self.as_of = resolve_time(table, timeline, as_of)
            self.table = table.at_time(self.as_of)
