"""What a round waits for: the landing files the table consumed, and the duties the actors still owe."""

from __future__ import annotations

import time
from pathlib import Path

from scripts.torture.common import read_lines, table_dir
from scripts.torture.processes import Slot
from scripts.torture.worker import consumed_on_disk

#: What each kind of actor must have logged at least once before the storm may end (`Ledger.owed`): a run in
#: which chance gave a kind nothing to do tortured less than it says. The restorer is steered towards what it
#: still owes (`Restorer.restore`), and the last round lasts until every duty is done.
DUTIES: dict[str, tuple[str, ...]] = {
    "writer": ("commit",),
    "cleaner": ("clean",),
    "restorer": ("savepoint", "restoring"),
    "archiver": ("archive", "horizon"),
    "eraser": ("erase",),
    "reader": ("horizon",),
}


class Ledger:
    """The run's progress as the table and the actors' logs tell it (read by the supervisor, never written)."""

    def __init__(self, work: Path, slots: list[Slot]) -> None:
        self.work = work
        self.slots = slots
        self.duties_done: set[str] = set()
        self.duties_read_at = 0.0

    def consumed(self) -> dict[str, set[str]] | None:
        """What the table says it consumed (None while a restore or archive moves things under the look)."""
        return consumed_on_disk(table_dir(self.work))

    def owed(self) -> list[str]:
        """The duties (DUTIES) that no process of a kind has done yet, as `kind: event` (a second writer of a
        stream may never win its stream: one of the kind doing it is the duty). Logs are read at most twice a
        second, and a duty once done stays done."""
        now = time.monotonic()
        if now >= self.duties_read_at:
            self.duties_read_at = now + 0.5
            for slot in self.slots:
                kind = slot.kind
                if any(f"{kind}: {event}" not in self.duties_done for event in DUTIES.get(kind, ())):
                    log = self.work / "logs" / f"{slot.role.replace(':', '-')}.jsonl"
                    events = {record.get("event") for record in read_lines(log)}
                    self.duties_done |= {f"{kind}: {event}" for event in DUTIES[kind] if event in events}
        kinds = dict.fromkeys(slot.kind for slot in self.slots)
        return [f"{k}: {e}" for k in kinds for e in DUTIES.get(k, ()) if f"{k}: {e}" not in self.duties_done]

    def progress(self, last: bool) -> tuple[int, int]:
        """What a round waits for, as a value that changes while the run gets there: the landing files the table
        consumed (a restore may lower it: that is movement too) and, in the last round, the duties left."""
        consumed = self.consumed()
        return sum(len(files) for files in consumed.values()) if consumed else -1, len(self.owed()) if last else 0
