"""Where the CLI prints: consoles made per call (rich reads `COLUMNS` and whether the stream is a terminal when a
console is created, and the test runner swaps `sys.stdout` between invocations), messages as plain text (never rich
markup: table paths and values may hold `[...]`), the secrets masked in everything printed, and whether this
invocation asked for `--json`. rich is imported on first use, so `stitch --help` does not pay for it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text


#: What a secret config value (one that came from `${ENV}`) is shown as (= stitchlake.config.SECRET_PLACEHOLDER,
#: spelled out so `--help` does not import the config module).
SECRET = "<secret from the environment>"
#: Values taken from `${ENV}` by the configs this process loaded: masked in everything printed (`redact`).
_secrets: set[str] = set()
#: Whether this invocation asked for `--json` (set once by the root command, before any command runs).
_json_mode = [False]
NULL = "null"
#: Width to measure a table's natural width with, when stdout is a file or a pipe.
UNBOUNDED_WIDTH = 10_000


def stdout_console() -> Console:
    """A console on the current stdout; no highlighting, so values keep the colours of their own style."""
    return _console_class()(highlight=False)


def stderr_console() -> Console:
    return _console_class()(stderr=True, highlight=False)


@functools.cache
def _console_class() -> type[Console]:
    """rich's Console, except that a closed pipe (`stitch status | head -1`) is not an error.

    rich exits 1 when its stream's reader has gone; a command whose work is done (an ingest that committed) would
    then report failure to its scheduler. Here the stream is silenced instead and the command exits with its own
    code (Python's advice on SIGPIPE: point the stream at devnull).
    """
    from rich.console import Console

    class PipeTolerantConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            silence(sys.stderr if self.stderr else sys.stdout)

    return PipeTolerantConsole


def silence(stream: TextIO) -> None:
    """Send whatever is written to `stream` from now on (its pending buffer too) to devnull: its reader is gone."""
    try:
        descriptor = stream.fileno()
    except (OSError, ValueError):  # not a file descriptor (a test runner's buffer)
        descriptor = None
    if descriptor is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, descriptor)
        finally:
            os.close(devnull)
        return
    replacement = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process, as sys.stdout does
    if stream is sys.stderr:
        sys.stderr = replacement
    else:
        sys.stdout = replacement


def register_secrets(values: Iterable[str]) -> None:
    """Mask these values (from `${ENV}` in a config) in everything printed from now on: messages, tables, JSON."""
    _secrets.update(values)


def redact(value: str) -> str:
    """`value` with registered secrets masked (see `stitchlake.config.redact`)."""
    if not _secrets:
        return value
    from stitchlake.config import redact as redact_secrets

    return redact_secrets(value, _secrets)


def text(value: str, style: str = "", *, data: bool = False) -> Text:
    """Plain text for rich (never parsed as markup), with secrets masked: every printed line goes through here.

    `data` marks a value read from the table: data is shown as it is, never masked.
    """
    from rich.text import Text

    return Text(value if data else redact(value), style=style)


def info(message: str) -> None:
    """One line of human output on stdout, never re-wrapped (cron logs are grepped)."""
    stdout_console().print(text(message), soft_wrap=True)


def error(message: str) -> None:
    """`error: <message>` in red on stderr."""
    stderr_console().print(text(f"error: {message}", "red"), soft_wrap=True)


def hint(message: str) -> None:
    """A secondary line on stderr (e.g. how to see more), dimmed."""
    stderr_console().print(text(message, "dim"), soft_wrap=True)


def print_table(table: RichTable) -> None:
    """Print a rich table; when stdout is not a terminal, let it be as wide as it needs instead of 80 columns."""
    console = stdout_console()
    if not console.is_terminal:
        unbounded = console.options.update(max_width=UNBOUNDED_WIDTH)
        console.width = max(console.width, console.measure(table, options=unbounded).maximum)
    console.print(table)


def set_json(enabled: bool) -> None:
    _json_mode[0] = enabled


def json_mode() -> bool:
    return _json_mode[0]
