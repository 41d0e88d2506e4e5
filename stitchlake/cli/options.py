"""Options every command shares, spelled once, how they name a table, and how a module registers its commands.

Kept apart from `stitchlake.cli.app` so command modules import their helpers from here and the app imports the command
modules: imports point one way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from stitchlake.cli import printing
from stitchlake.errors import UsageError
from stitchlake.vocabulary import EngineChoice, ReadMode

if TYPE_CHECKING:
    from stitchlake.api import Table


def add_commands(app: typer.Typer, commands: Mapping[str, Callable[..., object]]) -> None:
    """Register each of `commands` under its name, in the order `--help` lists them."""
    for name, command in commands.items():
        app.command(name)(command)


def add_group(app: typer.Typer, name: str, help: str, commands: Mapping[str, Callable[..., object]]) -> None:
    """A group of `commands` under `stitch NAME` (which alone prints the group's help)."""
    group = typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=None)
    add_commands(group, commands)
    app.add_typer(group, name=name)


ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Table config YAML.", dir_okay=False, show_default=False),
]
TableOption = Annotated[
    str | None,
    typer.Option(
        "--table",
        help="Table folder or URI (holding .stitch/table.json), instead of -c; only to read: a command that changes "
        "the table refuses it (its lock and other runtime settings are in the config).",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON object on stdout (and nothing else there), also on failure."),
]


EngineOption = Annotated[
    EngineChoice,
    typer.Option(
        "--engine",
        help="auto: in-process for small work, Spark otherwise (says which); local: in this process; "
        "spark: a spark-submit job.",
    ),
]
#: `stitch clean`: its work is deleting files, so `auto` runs it here; only `spark` sends it to Spark.
CleanEngineOption = Annotated[
    EngineChoice,
    typer.Option(
        "--engine",
        help="auto and local: in this process; spark: the files are deleted by a spark-submit job.",
    ),
]
#: Metadata-only commands (rollback, savepoint, archive): they never run on Spark, so `spark` is not offered.
#: What a command that always runs in this process accepts for `--engine` (kept so scripts that pass it work).
InProcessEngineOption = Annotated[
    Literal[EngineChoice.auto, EngineChoice.local],
    typer.Option(
        "--engine",
        help="Metadata only: always runs in this process (auto and local both mean that; never Spark).",
    ),
]

RetriesOption = Annotated[
    int,
    typer.Option(
        "--retries",
        min=0,
        max=20,
        help="Run again up to N times after a write conflict (exit 3), waiting 1, 2, 4 ... s (at most 30 s) between.",
    ),
]

#: What a read returns, the same options for `stitch read` and `stitch sql`.
AsOfOption = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        help="Time travel: the table as it was right after an instant completed (its id, as `timeline show` lists "
        "it), or at a time (yyyyMMddHHmmssSSS or ISO, UTC), or at a savepoint (its name).",
    ),
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Changes after a time or a savepoint; an instant id: from its request on, its own changes in "
        "(incremental read, adds _op).",
    ),
]
BeforeImagesOption = Annotated[
    bool,
    typer.Option(
        "--before-images",
        help="With --since/--until: an update is a -U row (as of --since) then a +U row; a delete keeps its values.",
    ),
]
UntilOption = Annotated[
    str | None,
    typer.Option(
        "--until",
        help="Changes up to a time, an instant id (its changes in) or a savepoint (incremental read); a time after "
        "the latest completion only once no commit can still complete before it.",
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        help="Filter 'col=value', 'col>=value' (also != < <= >), several separated by commas; repeat --where "
        "to add more (all must hold; equalities on one column combine as IN).",
    ),
]
ModeOption = Annotated[ReadMode, typer.Option("--mode", help="snapshot merges logs; read_optimized: base files.")]
#: Past this a row count is no limit but a typo (and overflowed into an exit 1).
MAX_LIMIT = 10**12
LimitOption = Annotated[
    int, typer.Option("--limit", "-n", min=0, max=MAX_LIMIT, help="Rows to print (0: all); --out writes all.")
]
OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out", "-o", help="Write the whole result to FILE.parquet, .csv or .json (JSON lines).", dir_okay=False
    ),
]


def open_target(config: Path | None, table: str | None, *, must_exist: bool = True, changes: bool = False) -> Table:
    """The table named by `-c/--config` or `--table` (exactly one; UsageError, exit 2, otherwise).

    With `must_exist` (the default) the table must have been created and the config must agree with its
    stored properties (NotFoundError / ConfigError, exit 2), so commands never work on a wrong table. A command
    that `changes` the table refuses `--table` (exit 2): the folder holds none of the config's runtime settings.
    """
    if (config is None) == (table is None):
        raise UsageError("name the table with either -c/--config CONFIG.yaml or --table PATH (exactly one)")
    from stitchlake.api import Table
    from stitchlake.config import load_config
    from stitchlake.table.handle import open_table

    if config is not None:
        loaded = load_config(config)
        printing.register_secrets(loaded.secret_values)  # before anything can print them, errors included
        handle = Table(loaded)
    else:
        assert table is not None
        if Path(table).is_file():
            raise UsageError(f"--table {table}: is a file; --table takes a table folder (use -c for a config file)")
        handle = open_table(table, Table)
        if changes:  # refused before anything is read or planned, whether there would be anything to do or not
            handle.require_config()
    if must_exist:
        handle.require()
    return handle
