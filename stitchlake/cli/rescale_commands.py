"""`stitch rescale`: change a table's bucket count, rewriting every file group of the partitions into the new count.

Planned in this process (metadata only), run like a compaction on the engine its size picks (`--engine`), and
resumable: a rescale whose process died is run by `stitch rescale --resume` (or first thing by the next
`stitch rescale`). Writers of the partitions are fenced while it runs (exit 4 for them, nothing published).
"""

from __future__ import annotations

from typing import Annotated

import typer

from stitchlake.cli import output
from stitchlake.cli.jobs import progress_display
from stitchlake.cli.options import ConfigOption, EngineOption, JsonOption, TableOption, open_target
from stitchlake.cli.output import Report
from stitchlake.jobs import launch
from stitchlake.vocabulary import EngineChoice


def register(app: typer.Typer) -> None:
    app.command("rescale")(rescale_command)


def rescale_command(
    config: ConfigOption = None,
    table: TableOption = None,
    buckets: Annotated[
        int | None, typer.Option("--buckets", min=1, max=65536, help="The new number of buckets per partition.")
    ] = None,
    partition: Annotated[
        list[str] | None,
        typer.Option(
            "--partition",
            help="Rescale only this partition, by its path as `stitch status` shows it (p=v/q=w); repeat for more. "
            "Default: every partition, and partitions created later get the new count too.",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Only run a pending rescale whose process died (or that never ran).")
    ] = False,
    engine: EngineOption = EngineChoice.auto,
    as_json: JsonOption = False,
) -> Report:
    """Rewrite every file group of a table (or of the partitions named) into N buckets, as one instant.

    Writers of those partitions are fenced until it completes (they exit 4 and publish nothing: run them again).
    A whole-table rescale changes the table's count: set `buckets: N` in the config, before (then this command
    takes it) or after; other commands refuse a config with another count.
    """
    handle = open_target(config, table, must_exist=False, changes=True)
    said = handle.config.table.buckets  # what the YAML says: no reminder to edit it when it has the new count
    with progress_display("rescale") as progress:
        runs = launch.rescale(
            handle, buckets, partitions=tuple(partition or ()), resume=resume, engine=engine, progress=progress
        )
    done = runs.done
    if done is None:
        if resume:
            return Report(runs.to_json(), message="no pending rescale to run")
        where = f"partition(s) {', '.join(partition or ())}" if partition else "every partition"
        return Report(runs.to_json(), message=f"nothing to rescale: {where} already has {buckets} buckets")
    scope = "every partition" if done.whole_table else f"{done.partitions} partition(s)"
    message = (
        f"rescale {done.instant} completed: {scope} into {done.buckets} buckets, "
        f"{done.file_groups} file group(s), {done.rows} rows"
    )
    from stitchlake.services.rewrites.rescale import buckets_reminder

    reminder = buckets_reminder(handle, said)  # the handle follows a whole-table rescale's new count
    if reminder:
        message += f"\n{reminder}"
    fields = [("buckets", "buckets"), ("partitions", "partitions")]
    return output.rewrite_report("rescale", runs, output.with_published(message, done.published), fields, "rescale(s)")
