"""`stitch alter`: apply the compatible changes between a table's schema and its YAML as one `alter` instant.

The new schema version is recorded whole on the timeline (under the lock, refused while a restore or rollback
undoes history), so every later command reads it, files keep the version they were written under, and a restore
to a savepoint before the alter takes the alter back too. What may change, and why the rest may not, is in
`stitchlake.config.evolution`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stitchlake.config import stored_schema
from stitchlake.config.evolution import Change, changes, names_ever_used
from stitchlake.errors import ConfigError, ConflictError
from stitchlake.services.publish import Published, publish_after
from stitchlake.table.transaction import Transaction
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import AlterCommit, AlterPlan
from stitchlake.timeline.timeline import Timeline

if TYPE_CHECKING:
    from stitchlake.table.handle import TableHandle


@dataclass
class AlterResult:
    """What an alter did (or, with `dry_run`, would do)."""

    instant: str | None
    completed: str | None
    schema_version: int
    changes: list[str] = field(default_factory=list)
    dry_run: bool = False
    message: str = ""
    #: `publish.formats` published again with the new schema.
    published: list[Published] = field(default_factory=list)


def planned_changes(table: TableHandle) -> tuple[int, list[Change]]:
    """The current schema version, and every change from it to what `table.config` describes."""
    versions = table.schema_history()
    current = versions[-1]
    now = current.properties.with_buckets(table.layout().default)  # a rescale changes it, not alter
    found = changes(now, stored_schema(table.config), names_ever_used(v.properties for v in versions))
    return current.version, found


def alter(table: TableHandle, dry_run: bool = False) -> AlterResult:
    """Make the table's schema what its config describes, if every change is compatible (ConfigError otherwise)."""
    current, found = planned_changes(table)
    where = table.config.source_file or "config"
    if not found:
        return AlterResult(
            None, None, current, [], dry_run, f"nothing to alter: {where} matches schema version {current}"
        )
    refused = [change for change in found if not change.allowed]
    if refused:
        raise ConfigError(
            f"{where}: cannot alter the table at {table.path} (schema version {current}); nothing was changed:\n  "
            + "\n  ".join(map(str, refused)),
            file=table.config.source_file,
            yaml_path=refused[0].path,
        )
    lines = [str(change) for change in found]
    target = current + 1
    if dry_run:
        return AlterResult(
            None, None, target, lines, True, f"would make schema version {target}: {len(lines)} change(s)"
        )
    proposed = stored_schema(table.config, table.properties.schema.format_version)

    def plan(timeline: Timeline, _requested: str) -> AlterPlan:
        latest = table.schema_history(timeline)[-1].version
        if latest != current:
            raise ConflictError(
                f"another alter made schema version {latest} while this one was planned; nothing was changed — "
                "run again (it compares with the new version)"
            )
        return AlterPlan(schema_version=target, properties=proposed, changes=tuple(lines))

    txn = Transaction.begin_planned(table, Action.ALTER, plan=plan)
    assert txn is not None
    done = txn.complete(AlterCommit(schema_version=target, properties=proposed, changes=tuple(lines)))
    published = publish_after(table, f"alter {done.requested}", list(table.config.publish.formats))
    return AlterResult(
        done.requested,
        done.completed,
        target,
        lines,
        False,
        f"altered: schema version {target} ({len(lines)} change(s))",
        published,
    )
