"""The `stitch` command line: the root app, one error guard for every command, and helpers for command modules.

A command module (`cli/table_commands.py`, `cli/job_commands.py`, ...) exposes `register(app: typer.Typer)` and
reuses from here:

- `ConfigOption`, `TableOption`, `JsonOption`: the common options as `Annotated` types, e.g.
  `def cmd(config: ConfigOption = None, table: TableOption = None, as_json: JsonOption = False) -> None`.
- `open_target(config, table) -> Table`: the table those options name (exactly one of them, else exit 2).
- `run_command(fn)` / `@guarded`: the error guard. Commands registered on `app` already run inside it (the root
  group invokes every command through `run_command`), so they simply raise `StitchError`s.
- `cli.output` for everything printed; with `--json`, print exactly one object with `output.emit_json`.

Exit codes (DESIGN §8) come from the errors: `StitchError.exit_code`; 130 on Ctrl-C; 1 for anything unexpected.

Keep this module and every command module free of top-level pyarrow/pandas/pyspark/stitchlake.reader imports
(import them inside the command function): `stitch --help` must stay fast and metadata commands run without
a JVM. `tests/test_cli.py` checks that `--help` imports neither pyspark nor pyarrow.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

from cli import output
from stitchlake import __version__
from stitchlake.errors import StitchError, UsageError, describe_os_error

if TYPE_CHECKING:
    from stitchlake.table import Table

P = ParamSpec("P")
R = TypeVar("R")

#: Set to 1 to see tracebacks (also of expected errors) on stderr.
DEBUG_ENV = "STITCH_DEBUG"
EXIT_INTERRUPTED = 130


# ---------------------------------------------------------------------------------------------- logging

#: Libraries whose warnings repeat what our own error message says (kazoo logs every failed connection
#: attempt, with the host names): shown only with STITCH_DEBUG=1.
QUIET_LOGGERS = ("kazoo",)


class _OutputHandler(logging.Handler):
    """Log records as dimmed lines on stderr through `cli.output`, so secrets are masked there too."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            output.hint(self.format(record))
        except Exception:
            self.handleError(record)


def configure_logging() -> None:
    """Route library logging through `cli.output` (warnings and up; everything with STITCH_DEBUG=1). Idempotent."""
    root = logging.getLogger()
    if any(isinstance(handler, _OutputHandler) for handler in root.handlers):
        return
    handler = _OutputHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if _debug() else logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if _debug() else logging.CRITICAL)


# ------------------------------------------------------------------------------------------------ the guard


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def run_command(fn: Callable[[], R]) -> R:
    """Run `fn` and turn what it raises into a message on stderr and the DESIGN §8 exit code.

    - `StitchError` -> `error: <message>` and `exc.exit_code` (1 failure, 2 usage/config, 3 conflict, 4 busy,
      5 input rejected); no traceback unless `STITCH_DEBUG=1`.
    - `KeyboardInterrupt` -> exit 130.
    - anything else -> a one-line `error: unexpected ...` and exit 1; the traceback only with `STITCH_DEBUG=1`.
    - typer/click exits, aborts and usage errors, and broken pipes (`stitch read | head`), pass through to
      typer, which already handles them.

    The exit is a `typer.Exit(code)`, which typer turns into the process exit status (and `CliRunner` into
    `result.exit_code`).
    """
    try:
        return fn()
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except StitchError as exc:
        if _debug():
            traceback.print_exception(exc)
        output.error(str(exc) or type(exc).__name__)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        output.error("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise
        if _debug():
            traceback.print_exception(exc)
        output.error(describe_os_error(exc))
        raise typer.Exit(1) from None
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            raise
        message = str(exc).strip().splitlines()
        output.error(f"unexpected {type(exc).__name__}: {message[0] if message else '(no message)'}")
        if _debug():
            traceback.print_exception(exc)
        else:
            output.hint(f"(set {DEBUG_ENV}=1 to see the traceback)")
        raise typer.Exit(1) from None


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of `run_command`, for functions run outside the root app (commands on it need nothing)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return run_command(lambda: fn(*args, **kwargs))

    return wrapper


class GuardedGroup(TyperGroup):
    """The root command group: every subcommand (and sub-app) is invoked through `run_command`."""

    def invoke(self, ctx: typer.Context) -> Any:
        return run_command(lambda: super(GuardedGroup, self).invoke(ctx))


# ----------------------------------------------------------------------------------------- common options

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
    typer.Option("--json", help="Print one JSON object on stdout (and nothing else there)."),
]


def open_target(config: Path | None, table: str | None, *, must_exist: bool = True) -> Table:
    """The table named by `-c/--config` or `--table` (exactly one; UsageError, exit 2, otherwise).

    With `must_exist` (the default) the table must have been created and the config must agree with its
    stored properties (NotFoundError / ConfigError, exit 2), so commands never work on a wrong table.
    """
    if (config is None) == (table is None):
        raise UsageError("name the table with either -c/--config CONFIG.yaml or --table PATH (exactly one)")
    from stitchlake.config import load_config
    from stitchlake.table import Table, open_table

    if config is not None:
        loaded = load_config(config)
        output.register_secrets(loaded.secret_values)  # before anything can print them, errors included
        handle = Table(loaded)
    else:
        assert table is not None
        if Path(table).is_file():
            raise UsageError(f"--table {table}: is a file; --table takes a table folder (use -c for a config file)")
        handle = open_table(table)
    if must_exist:
        handle.require()
    return handle


# ------------------------------------------------------------------------------------------------ the app


def _print_version(value: bool) -> None:
    if value:
        output.info(f"stitch {__version__}")
        raise typer.Exit()


_root = typer.Typer(
    name="stitch",
    cls=GuardedGroup,
    # Plain click-style help: rich-formatted help costs more than the whole rest of `stitch --help`.
    rich_markup_mode=None,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@_root.callback()
def _root_options(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """stitch several data streams into one wide table (stitchlake).

    Exit codes: 0 done or nothing to do, 1 failure, 2 bad usage or config, 3 write conflict (retry),
    4 busy or lock timeout (retry later), 5 input rejected.
    """
    configure_logging()


def _register_commands(root: typer.Typer) -> None:
    """Add the built-in command modules, and `cli/job_commands.py` when it exists."""
    from cli import table_commands

    table_commands.register(root)
    try:
        # Not `from cli import job_commands`: for a missing submodule that raises a bare ImportError.
        import cli.job_commands as job_commands
    except ModuleNotFoundError as exc:
        if exc.name != "cli.job_commands":  # the module exists but one of its own imports is missing
            raise
    else:
        job_commands.register(root)


_registered = False


def get_app() -> typer.Typer:
    """The root app with every command module registered.

    Registration happens on first use rather than at import, so a command module may import its helpers
    from `cli.app` at the top without an import cycle, whichever module is imported first.
    """
    global _registered
    if not _registered:
        _registered = True
        _register_commands(_root)
    return _root


def __getattr__(name: str) -> typer.Typer:
    """`from cli.app import app` gives the fully registered root app (see `get_app`)."""
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The `stitch` console script."""
    get_app()(prog_name="stitch")


if __name__ == "__main__":
    main()
