"""The undo role: the restorer pins savepoints, restores to one (undoing history while writers write), unpins."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from scripts.torture.faults import optional_module, quiet_faults
from scripts.torture.tablefiles import Seen, instant_meta, list_timeline
from scripts.torture.worker import WorkerBase

#: A savepoint as the restorer lists it: its instant, and its metadata (name, the time it pins).
Savepoint = tuple[Seen, dict[str, Any]]


def restore_function() -> Callable[..., Any]:
    """`restore(table, which, force)`: in `services.restore`, or `services.savepoint` in older versions."""
    module = optional_module("stitchlake.services.undo.restore")
    if module is not None and hasattr(module, "restore"):
        return module.restore
    from stitchlake.services.upkeep import savepoint

    return savepoint.restore  # type: ignore[attr-defined]


def savepoint_name(point: Savepoint) -> str:
    seen, meta = point
    return str(meta.get("name") or seen.requested)


class Restorer(WorkerBase):
    """`restorer`: now and then a savepoint made, deleted, or restored to, through the CLI or the API.

    Logs what it deletes before deleting it: a savepoint that vanishes must have a reason on record.
    """

    def savepoints(self) -> list[Savepoint]:
        completed, _pending = list_timeline(self.table_dir)
        found = []
        for seen in completed:
            if seen.action == "savepoint":
                with contextlib.suppress(FileNotFoundError):
                    found.append((seen, instant_meta(self.table_dir, seen)))
        return found

    def savepoint_cli(self, verb: str, which: str, *extra: str) -> dict[str, Any]:
        """`stitch savepoint delete|restore --name WHICH`."""
        return self.cli("savepoint", verb, "--name", which, "-c", self.config, "--engine", "local", *extra)

    def make_savepoint(self, name: str, via_cli: bool) -> tuple[Any, Any]:
        """Create savepoint `name` (through the CLI or the API); its instant and the time it pins."""
        if via_cli:
            made = self.cli("savepoint", "create", "-c", self.config, "--name", name, "--engine", "local")
            return made.get("instant"), made.get("savepoint_of")
        from stitchlake.services.upkeep.savepoint import create

        point = create(self.table, None, name)
        return point.instant, point.savepoint_of

    @contextlib.contextmanager
    def unless_gone(self, seen: Seen) -> Iterator[None]:
        """A "no savepoint" answer about a savepoint listed a moment ago is right when it is gone now: a crashed
        restore to an older savepoint, finished meanwhile by a cleaner, undid it (the history check still
        requires a restore, a rollback or a logged delete to name it). Still on the timeline, it is a failure."""
        from stitchlake.errors import NotFoundError, StitchError

        try:
            yield
        except StitchError as exc:
            not_found = isinstance(exc, NotFoundError) or "no savepoint" in str(exc) or "deleted meanwhile" in str(exc)
            if not not_found or any(other == seen for other, _meta in self.savepoints()):
                raise
            self.log({"event": "busy", "error": "SavepointGone", "message": f"{seen.requested} gone meanwhile: {exc}"})

    def restore(self) -> None:
        """Now and then: pin a savepoint, restore to one (undoing whatever came after it), unpin old ones."""
        points = self.savepoints()
        via_cli = self.rng.random() < 0.3
        draw = self.rng.random()
        if points and self.owes("restoring"):
            draw = 0.6  # a restore is owed (DUTIES): try one now rather than hope a later draw gives it
        elif not points or self.owes("savepoint"):
            draw = 0.0
        if len(points) > 2 and not (0.45 <= draw < 0.8):
            self.delete_oldest(points, via_cli)
        elif draw < 0.45 or not points:
            self.pin_one(points, via_cli)
        elif draw < 0.8:
            self.restore_to_one(points, via_cli)
        if points:
            self.nap(0.8, 2.0)
        else:
            self.nap(0.1, 0.3)  # keep trying for a first savepoint: a loaded machine leaves few chances per round

    def delete_oldest(self, points: list[Savepoint], via_cli: bool) -> None:
        seen = points[0][0]
        which = savepoint_name(points[0])
        self.log({"event": "savepoint_delete", "instant": seen.requested, "name": which})
        with self.unless_gone(seen):
            if via_cli:
                self.savepoint_cli("delete", which)
            else:
                from stitchlake.services.upkeep.savepoint import delete

                delete(self.table, which)

    def pin_one(self, points: list[Savepoint], via_cli: bool) -> None:
        """A new savepoint, once there is a commit to pin; the first of a run with no fault firing inside."""
        completed, _pending = list_timeline(self.table_dir)
        if any(s.action == "deltacommit" for s in completed):
            self.done += 1
            name = f"sp{os.getpid()}n{self.done}"
            first = contextlib.nullcontext() if points else quiet_faults()
            with first:
                instant, of = self.make_savepoint(name, via_cli)
            self.log({"event": "savepoint", "name": name, "instant": instant, "savepoint_of": of})

    def restore_to_one(self, points: list[Savepoint], via_cli: bool) -> None:
        """Restore to a savepoint drawn at random, half of the time with `--force`."""
        point = self.rng.choice(points)
        seen, meta = point
        which = savepoint_name(point)
        force = self.rng.random() < 0.5
        self.log({"event": "restoring", "savepoint": which, "of": meta.get("savepoint_of"), "force": force})
        with self.unless_gone(seen):
            if via_cli:
                done = self.savepoint_cli("restore", which, *(["--force"] if force else []))
                instant, undone = done.get("instant"), done.get("undone")
            else:
                result = restore_function()(self.table, which, force)
                instant, undone = result.instant, result.undone
            self.log({"event": "restore", "instant": instant, "savepoint": which, "undone": undone})
