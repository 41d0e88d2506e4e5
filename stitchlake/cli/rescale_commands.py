"""`stitch rescale`: change a table's bucket count, rewriting every file group of the partitions into the new count.

Planned in this process (metadata only), run like a compaction on the engine its size picks (`--engine`), and
resumable: a rescale whose process died is run by `stitch rescale --resume` (or first thing by the next
`stitch rescale`). Writers of the partitions are fenced while it runs (exit 4 for them, nothing published).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stitchlake.cli import output
from stitchlake.cli.jobs import choose_engine, execute
from stitchlake.cli.options import ConfigOption, EngineChoice, EngineOption, JsonOption, TableOption, open_target
from stitchlake.cli.output import Report
from stitchlake.errors import UsageError

if TYPE_CHECKING:
    from stitchlake.table.handle import Table


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
    if resume and (buckets is not None or partition):
        raise UsageError("--resume runs a pending rescale as planned; it takes no --buckets or --partition")
    if not resume and buckets is None:
        raise UsageError("give --buckets N (the new bucket count), or --resume to finish a pending rescale")
    handle = open_target(config, table, must_exist=False)
    said = handle.config.table.buckets  # what the YAML says: no reminder to edit it when it has the new count
    if buckets is not None and not partition and handle.config.table.buckets == buckets:
        # The config says the new count already (edited first, as for `stitch alter`): rescale the table to it.
        handle.follow_buckets()
    handle.require()
    resumed = _resume_pending(handle, engine)
    if resume:
        if not resumed:
            return Report({"result": None, "resumed": []}, message="no pending rescale to run")
        last = resumed[-1]
        return _report(handle, {**last, "resumed": resumed[:-1]}, resumed[:-1], said)
    from stitchlake.jobs.requests import RescaleRequest
    from stitchlake.services import rescale

    assert buckets is not None
    planned = rescale.schedule(handle, buckets, list(partition or []) or None)
    if planned is None:
        if resumed:  # the rescale a crash left behind was this one: its run is the answer
            return _report(handle, {**resumed[-1], "resumed": resumed[:-1]}, resumed[:-1], said)
        where = f"partition(s) {', '.join(partition)}" if partition else "every partition"
        data: dict[str, Any] = {"result": None, "resumed": resumed}
        return Report(data, message=f"nothing to rescale: {where} already has {buckets} buckets")
    request = RescaleRequest(instant=planned)
    result = execute(handle, request, choose_engine(handle, request, engine, rescale.plan_bytes(handle, planned)))
    result["resumed"] = resumed
    return _report(handle, result, resumed, said)


def _resume_pending(handle: Table, engine: EngineChoice) -> list[dict[str, Any]]:
    """Run each pending rescale nobody runs (its process died, or it was only planned), oldest first."""
    from stitchlake.jobs.requests import RescaleRequest
    from stitchlake.services import rescale

    done = []
    for plan in rescale.runnable_plans(handle):
        request = RescaleRequest(instant=plan.requested)
        chosen = choose_engine(handle, request, engine, rescale.plan_bytes(handle, plan.requested))
        result = execute(handle, request, chosen)
        done_now = result.get("result")
        if done_now:
            done.append(result)
            if done_now.get("whole_table"):
                handle.follow_buckets(int(done_now["buckets"]))  # what the job did in its own process
    return done


def _report(handle: Table, result: dict[str, Any], resumed: list[dict[str, Any]], said: int) -> Report:
    done = result.get("result") or {}
    scope = "every partition" if done.get("whole_table") else f"{done.get('partitions')} partition(s)"
    message = (
        f"rescale {done['instant']} completed: {scope} into {done['buckets']} buckets, "
        f"{done['file_groups']} file group(s), {done['rows']} rows"
        if done
        else "nothing to rescale"
    )
    if resumed:
        message = f"ran pending rescale(s) {', '.join(r['result']['instant'] for r in resumed)} first; {message}"
    source = handle.config.source_file
    if done.get("whole_table") and said != done["buckets"] and source and Path(source).is_file():
        message += f"\nset `buckets: {done['buckets']}` under `table:` in {source}: commands refuse the old count"
    flat = {**result, **{f"result_{k}": v for k, v in done.items()}}
    return Report(
        result,
        message=output.with_published(message, done) if done else message,
        title="rescale",
        fields=[
            ("instant", "result_instant"),
            ("completed", "result_completed"),
            ("buckets", "result_buckets"),
            ("partitions", "result_partitions"),
            ("file groups", "result_file_groups"),
            ("rows", "result_rows"),
            ("bytes", "result_bytes"),
            ("engine", "engine"),
            ("seconds", "seconds"),
            ("Spark log", "log"),
        ],
        summary=flat,
    )
