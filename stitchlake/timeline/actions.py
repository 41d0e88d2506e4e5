"""The action registry: what each action on the timeline means (its plan and commit records, whether it writes
data, what recovery does with a crashed one, what a restore undoes, ...). Services ask here, never list actions.

Kept apart from `metadata` (the records themselves): the records are the on-disk shapes; this is behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stitchlake.timeline.metadata import (
    AlterCommit,
    AlterPlan,
    CleanCommit,
    CleanPlan,
    Commit,
    CompactionCommit,
    CompactionPlan,
    DeltaCommit,
    DeltaCommitPlan,
    EraseCommit,
    ErasePlan,
    Plan,
    PublishCommit,
    PublishPlan,
    RescaleCommit,
    RescalePlan,
    RestoreCommit,
    RestorePlan,
    RollbackCommit,
    RollbackPlan,
    SavepointCommit,
    SavepointPlan,
    UndoPlan,
)
from stitchlake.vocabulary import Action, Recovery


@dataclass(frozen=True)
class ActionKind:
    """What the timeline knows about an action: its records, and how it behaves in the table's history."""

    plan: type[Plan]
    commit: type[Commit]
    #: Its completion adds data files to the file-system view.
    writes_data: bool = False
    #: Its completion writes base files: it starts new file slices.
    rewrites: bool = False
    #: While pending, its plan holds the file groups it rewrites in place: an optimistic writer of one of them loses
    #: at publish, and a rescale of their partition waits for it. (A rescale lays partitions out anew and holds
    #: whole partitions instead: `table.guards.pending_rescales`.)
    holds_file_groups: bool = False
    #: What recovery does with a crashed one.
    recovery: Recovery = Recovery.ROLL_BACK
    #: Its plan depends on history that an undo requested meanwhile changes (it must not publish after one).
    undo_sensitive: bool = False
    #: A restore to an earlier savepoint undoes it: it changes data, or pins a state that will no longer exist.
    undone_by_restore: bool = False
    #: Its completion changes what a read-optimized read shows: a published copy older than it is stale.
    changes_published_rows: bool = False
    #: An incremental read (`--since`) reports the keys it changed.
    in_change_feed: bool = False
    #: What it cannot do while a restore or rollback undoes history, in words ("nothing can <this> right now"):
    #: beginning one is refused then. None: never refused when it begins (a rollback refuses itself only when it
    #: undoes a completed commit).
    refused_while_undoing: str | None = None

    @property
    def finished_not_undone(self) -> bool:
        """A crashed one is finished from its plan, never undone."""
        return self.recovery is Recovery.FINISH

    @property
    def undoes_history(self) -> bool:
        """Its plan takes back other instants (an `UndoPlan`: a restore, a rollback): while one is pending, the
        table may be partway through losing commits (`UndoPlan.undoes_commits` says whether it does)."""
        return issubclass(self.plan, UndoPlan)


#: Every action and what it means: the one place services learn it from.
ACTIONS: dict[Action, ActionKind] = {
    Action.DELTACOMMIT: ActionKind(
        DeltaCommitPlan,
        DeltaCommit,
        writes_data=True,
        undo_sensitive=True,
        undone_by_restore=True,
        in_change_feed=True,
        refused_while_undoing="ingest or write",
    ),
    Action.COMPACTION: ActionKind(
        CompactionPlan,
        CompactionCommit,
        writes_data=True,
        rewrites=True,
        holds_file_groups=True,
        recovery=Recovery.RERUN,
        undone_by_restore=True,
        changes_published_rows=True,
        refused_while_undoing="schedule a compaction",
    ),
    Action.ERASE: ActionKind(
        ErasePlan,
        EraseCommit,
        writes_data=True,
        rewrites=True,
        holds_file_groups=True,
        undone_by_restore=True,
        changes_published_rows=True,
        in_change_feed=True,
        refused_while_undoing="erase",
    ),
    Action.CLEAN: ActionKind(CleanPlan, CleanCommit, recovery=Recovery.FINISH, refused_while_undoing="clean"),
    Action.ROLLBACK: ActionKind(RollbackPlan, RollbackCommit, recovery=Recovery.FINISH),
    Action.RESTORE: ActionKind(
        RestorePlan,
        RestoreCommit,
        recovery=Recovery.FINISH,
        changes_published_rows=True,
        refused_while_undoing="restore",
    ),
    Action.SAVEPOINT: ActionKind(
        SavepointPlan,
        SavepointCommit,
        undo_sensitive=True,
        undone_by_restore=True,
        refused_while_undoing="create a savepoint",
    ),
    Action.ALTER: ActionKind(
        AlterPlan,
        AlterCommit,
        undone_by_restore=True,
        changes_published_rows=True,
        refused_while_undoing="alter the table",
    ),
    Action.PUBLISH: ActionKind(PublishPlan, PublishCommit, refused_while_undoing="publish the table"),
    Action.RESCALE: ActionKind(
        RescalePlan,
        RescaleCommit,
        writes_data=True,
        rewrites=True,
        recovery=Recovery.RERUN,
        undone_by_restore=True,
        changes_published_rows=True,
        refused_while_undoing="rescale the table",
    ),
}


def kind_of(action: Action | str) -> ActionKind:
    return ACTIONS[Action(action)]


def actions_where(predicate: Callable[[ActionKind], bool]) -> tuple[Action, ...]:
    """The actions whose meaning satisfies `predicate`, in declaration order."""
    return tuple(action for action, kind in ACTIONS.items() if predicate(kind))


#: Actions whose completion adds data files (the commits a keep-latest-commits retention counts).
WRITES_DATA = actions_where(lambda kind: kind.writes_data)
#: Actions whose completion writes base files: they start new file slices.
REWRITES = actions_where(lambda kind: kind.rewrites)
#: Rewrites whose pending plan holds its file groups (writers of them conflict; a rescale waits).
HOLDS_FILE_GROUPS = actions_where(lambda kind: kind.holds_file_groups)
#: Actions whose plan takes back other instants: a pending one may be undoing history.
UNDOES_HISTORY = actions_where(lambda kind: kind.undoes_history)
#: Instants a restore undoes.
UNDONE_BY_RESTORE = actions_where(lambda kind: kind.undone_by_restore)
#: Completed actions after which a published copy is stale.
CHANGES_PUBLISHED_ROWS = actions_where(lambda kind: kind.changes_published_rows)
#: Actions whose changed keys an incremental read reports.
IN_CHANGE_FEED = actions_where(lambda kind: kind.in_change_feed)
