"""Commands that take the table's history in hand: rollback, savepoints (create, list, delete, restore) and
archive. All metadata only: they run in this process and never start a JVM (`--engine` is accepted for scripts
that pass it). `stitchlake.cli.job_commands.register` registers them beside the job commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from stitchlake.cli import output, printing, tables, values
from stitchlake.cli.jobs import launch_job
from stitchlake.cli.options import (
    ConfigOption,
    InProcessEngineOption,
    JsonOption,
    TableOption,
    open_target,
)
from stitchlake.cli.output import Report
from stitchlake.errors import UsageError
from stitchlake.vocabulary import EngineChoice, SavepointAction

if TYPE_CHECKING:
    pass


# ---------------------------------------------------------------------------------------------- rollback


def rollback_command(
    config: ConfigOption = None,
    table: TableOption = None,
    instant: Annotated[
        str | None,
        typer.Option(
            "--instant",
            help="A pending instant of a dead writer, or the table's latest deltacommit (no other stream committed "
            "after it).",
        ),
    ] = None,
    stream: Annotated[
        str | None,
        typer.Option(
            "--stream",
            "-s",
            help="Undo this stream's latest deltacommit, keeping the newer commits of other streams.",
        ),
    ] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Roll back every write whose heartbeat expired.")] = False,
    engine: InProcessEngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Undo failed writes (--failed), a dead writer's pending instant, or a completed deltacommit.

    A completed deltacommit can be undone only while it is the latest: --instant T takes the table's latest
    deltacommit, --stream S the latest of one stream even when other streams committed after it (its logs hold
    only that stream's columns). Either is refused once a compaction or erase absorbed the commit or a savepoint
    pins it; older commits, and those, are taken back by restoring a savepoint taken before them (`stitch
    savepoint restore`). The undone commit's landing files become pending again: the next ingest takes them
    unless you move them away.
    """
    from stitchlake.jobs.requests import RollbackRequest

    if sum((instant is not None, failed, stream is not None)) != 1:
        raise UsageError("give exactly one of --instant T, --stream S or --failed")
    handle = open_target(config, table, changes=True)
    request = RollbackRequest(instant, failed, stream)
    ran = launch_job(handle, request, engine)
    fields = [
        ("instant", "result.instant"),
        ("finished", "result.finished"),
        ("rolled back", "result.rolled_back"),
        ("reset compactions", "result.reset_compactions"),
        ("deleted files", "result.deleted_files"),
    ]
    return output.job_report(ran, ran.result.message, "rollback", fields)


# --------------------------------------------------------------------------------------------- savepoint


def savepoint_create_command(
    config: ConfigOption = None,
    table: TableOption = None,
    name: Annotated[str | None, typer.Option("--name", help="A name to read and restore it by.")] = None,
    instant: Annotated[
        str | None, typer.Option("--instant", help="Completed instant (default: the latest commit, rewrite or alter).")
    ] = None,
    engine: InProcessEngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Pin the table's state as of a completed instant against cleaning."""
    from stitchlake.jobs.requests import SavepointRequest

    handle = open_target(config, table, changes=True)
    request = SavepointRequest(SavepointAction.CREATE, name=name, instant=instant)
    ran = launch_job(handle, request, engine)
    pinned = ran.result
    fields = [
        ("instant", "result.instant"),
        ("name", "result.name"),
        ("as of", "result.savepoint_of"),
        ("files pinned", "result.files"),
    ]
    message = f"savepoint {pinned.name or pinned.instant} pins the state as of {pinned.savepoint_of}"
    return output.job_report(ran, message, "savepoint", fields)


def savepoint_list_command(
    config: ConfigOption = None, table: TableOption = None, as_json: JsonOption = False
) -> Report:
    """List savepoints."""
    from stitchlake.services.upkeep.savepoint import list_savepoints

    handle = open_target(config, table)
    found = list_savepoints(handle)

    def human() -> None:
        if not found:
            printing.info("no savepoints")
            return
        tables.print_grid(
            "savepoints",
            ("instant", "name", "as of", "of instant", "files"),
            [
                (item.instant, item.name or "-", values.human_time(item.savepoint_of), item.of_instant, str(item.files))
                for item in found
            ],
        )

    return Report({"savepoints": [s.to_json() for s in found]}, human=human)


def savepoint_delete_command(
    name: Annotated[str, typer.Option("--name", help="Savepoint name or instant.")],
    config: ConfigOption = None,
    table: TableOption = None,
    engine: InProcessEngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Unpin a savepoint (its files become cleanable)."""
    from stitchlake.jobs.requests import SavepointRequest

    handle = open_target(config, table, changes=True)
    request = SavepointRequest(SavepointAction.DELETE, savepoint=name)
    ran = launch_job(handle, request, engine)
    return Report(ran.to_json(), message=f"deleted savepoint {name}")


def savepoint_restore_command(
    name: Annotated[str, typer.Option("--name", help="Savepoint name or instant.")],
    config: ConfigOption = None,
    table: TableOption = None,
    force: Annotated[bool, typer.Option("--force", help="Also roll back live writers.")] = False,
    engine: InProcessEngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Bring the table back to a savepoint (refused while writers are alive, unless --force).

    Every instant completed after the savepoint's state is undone, savepoints taken since included: the report
    names each savepoint removed and why. A restore that undoes a whole-table rescale gives the table its old bucket
    count back: the report says which `buckets` the config must then say.
    """
    from stitchlake.jobs.requests import RestoreRequest

    handle = open_target(config, table, changes=True)
    request = RestoreRequest(name, force)
    ran = launch_job(handle, request, engine)
    message = output.with_published(ran.result.message, ran.result.published)
    fields = [
        ("instant", "result.instant"),
        ("as of", "result.savepoint_of"),
        ("undone", "result.undone"),
        ("deleted files", "result.deleted_files"),
    ]
    return output.job_report(ran, message, "restore", fields)


# ----------------------------------------------------------------------------------------------- archive


def archive_command(
    config: ConfigOption = None,
    table: TableOption = None,
    keep: Annotated[
        int | None, typer.Option("--keep", min=1, help="Instants to keep active (default: archive.keep_instants).")
    ] = None,
    engine: InProcessEngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Move old completed instants to the archive (keeps the active timeline short)."""
    from stitchlake.jobs.requests import ArchiveRequest

    handle = open_target(config, table, changes=True)
    request = ArchiveRequest(keep)
    ran = launch_job(handle, request, engine)
    fields = [("archived", "result.archived"), ("horizon", "result.horizon"), ("active", "result.kept")]
    return output.job_report(ran, ran.result.message, "archive", fields)
