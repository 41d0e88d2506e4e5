"""The table's schema versions: `table.json` is version 0, each completed `alter` instant adds the next one.

A data file records the version it was written under, so it is always read with the columns and types it has,
then evolved to the schema the read asks for (`io.schemas.evolve`). Time travel reads under the version in force
at its time. Archived alters live on in the archive checkpoint, with every version a file may still need.
"""

from __future__ import annotations

from stitchlake.config.stored import StoredSchema
from stitchlake.errors import CorruptFileError, StitchError
from stitchlake.timeline.archive import Checkpoint, SchemaVersion
from stitchlake.timeline.instant import Action
from stitchlake.timeline.metadata import AlterCommit
from stitchlake.timeline.timeline import Timeline

__all__ = ["SchemaVersion", "at_time", "history"]


def history(timeline: Timeline, base: StoredSchema, checkpoint: Checkpoint | None = None) -> list[SchemaVersion]:
    """Every schema version, oldest first: version 0 (`table.json`), archived alters, then active ones."""
    versions = {0: SchemaVersion(0, "", base)}
    if checkpoint is not None:
        versions.update({v.version: v for v in checkpoint.schemas})
    for instant in timeline.completed([Action.ALTER]):
        if checkpoint is not None and (instant.completed or "") <= checkpoint.horizon:
            continue
        commit = timeline.commit(instant)
        if not isinstance(commit, AlterCommit) or commit.properties is None:
            raise CorruptFileError(f"alter {instant.requested}: its completed instant file holds no schema")
        version = SchemaVersion(commit.schema_version, instant.completed or "", commit.properties)
        versions[version.version] = version
    return [versions[number] for number in sorted(versions)]


def at_time(versions: list[SchemaVersion], time: str | None) -> SchemaVersion:
    """The version in force at a completion time (None: now)."""
    if time is None:
        return versions[-1]
    found = [v for v in versions if v.since <= time]
    if not found:
        raise StitchError(f"no schema version is known at {time}")
    return found[-1]
