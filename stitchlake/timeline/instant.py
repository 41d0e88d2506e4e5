"""Instants and their file names (design.md §4).

`<requested>.<action>.requested|inflight` while pending, `<requested>_<completed>.<action>` once complete:
the completion time is in the name, so ordering by completion needs no file reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from stitchlake.vocabulary import Action, State

__all__ = [
    "ACTION_NAMES",
    "COMPLETED_NAME",
    "Action",
    "Instant",
    "State",
    "completed_file_name",
    "parse_file_name",
    "pending_file_name",
]


#: Every action's name, for parsing file names.
ACTION_NAMES = frozenset(a.value for a in Action)


#: A completed compaction is a `commit`, as in Hudi.
COMPLETED_NAME: dict[str, str] = {Action.COMPACTION: "commit"}
_ACTION_OF_COMPLETED = {value: key for key, value in COMPLETED_NAME.items()}


_PENDING = re.compile(r"^(\d{17})\.([a-z]+)\.(requested|inflight)$")
_COMPLETED = re.compile(r"^(\d{17})_(\d{17})\.([a-z]+)$")


@dataclass(frozen=True)
class Instant:
    """One action on the table's timeline, in its most advanced state."""

    requested: str
    action: Action
    state: State
    completed: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def file_name(self) -> str:
        """The timeline file that represents this instant's current state."""
        if self.state is State.COMPLETED:
            return completed_file_name(self.requested, self.completed or "", self.action)
        return pending_file_name(self.requested, self.action, self.state)

    def __str__(self) -> str:
        return f"{self.requested} {self.action} ({self.state.label})"


def pending_file_name(requested: str, action: str, state: State) -> str:
    return f"{requested}.{action}.{state.label}"


def completed_file_name(requested: str, completed: str, action: str) -> str:
    return f"{requested}_{completed}.{COMPLETED_NAME.get(action, action)}"


@lru_cache(maxsize=1 << 16)
def parse_file_name(name: str) -> Instant | None:
    """The instant a timeline file name stands for, or None for a name that is not an instant file. Kept (instants
    are immutable values): every timeline listing parses every name again."""
    match = _PENDING.match(name)
    if match:
        action = match.group(2)
        if action not in ACTION_NAMES:
            return None
        return Instant(match.group(1), Action(action), State(match.group(3)))
    match = _COMPLETED.match(name)
    if match:
        action = _ACTION_OF_COMPLETED.get(match.group(3), match.group(3))
        if action not in ACTION_NAMES or (action == Action.COMPACTION and match.group(3) != "commit"):
            return None
        return Instant(match.group(1), Action(action), State.COMPLETED, match.group(2))
    return None
