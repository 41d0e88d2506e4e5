"""Options every command shares, spelled once, and how they name a table.

Kept apart from `cli.app` so command modules import their helpers from here and the app imports the command
modules: imports point one way.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli import output
from stitchlake.errors import UsageError

if TYPE_CHECKING:
    from stitchlake.api import Table


class EngineChoice(StrEnum):
    auto = "auto"
    local = "local"
    spark = "spark"


ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Table config YAML.", dir_okay=False, show_default=False),
]
TableOption = Annotated[
    str | None,
    typer.Option(
        "--table", help="Table folder or URI (holding .stitch/table.json), instead of -c.", show_default=False
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

RetriesOption = Annotated[
    int,
    typer.Option(
        "--retries",
        min=0,
        max=20,
        help="Run again up to N times after a write conflict (exit 3), waiting 1, 2, 4 ... s (at most 30 s) between.",
    ),
]


def open_target(config: Path | None, table: str | None, *, must_exist: bool = True) -> Table:
    """The table named by `-c/--config` or `--table` (exactly one; UsageError, exit 2, otherwise).

    With `must_exist` (the default) the table must have been created and the config must agree with its
    stored properties (NotFoundError / ConfigError, exit 2), so commands never work on a wrong table.
    """
    if (config is None) == (table is None):
        raise UsageError("name the table with either -c/--config CONFIG.yaml or --table PATH (exactly one)")
    from stitchlake.api import Table
    from stitchlake.config import load_config
    from stitchlake.table import open_table

    if config is not None:
        loaded = load_config(config)
        output.register_secrets(loaded.secret_values)  # before anything can print them, errors included
        handle = Table(loaded)
    else:
        assert table is not None
        if Path(table).is_file():
            raise UsageError(f"--table {table}: is a file; --table takes a table folder (use -c for a config file)")
        handle = open_table(table, Table)
    if must_exist:
        handle.require()
    return handle
