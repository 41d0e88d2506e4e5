"""The `stitch` command line: the root app, and one guard through which every command runs.

Command modules (`table_commands.py`, `job_commands.py`, `rescale_commands.py` beside this one) expose
`register(app)`; their commands take the shared options from `stitchlake.cli.options`, return a
`stitchlake.cli.output.Report`, and simply raise `StitchError`s. The guard
prints the report (human or `--json`), and turns errors into a message, one JSON object on stdout with `--json`,
and the design.md §8 exit code, which comes from the error class (`StitchError.exit_code`); 130 on Ctrl-C, 143 on
SIGTERM.

Keep this module and every command module free of top-level pyarrow/pandas/pyspark/stitchlake.reading imports
(import them inside the command function): `stitch --help` must stay fast and metadata commands run without
a JVM. `tests/integration/test_cli.py` checks that `--help` imports neither pyspark nor pyarrow.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from typer._click.exceptions import UsageError as ClickUsageError
from typer.core import TyperGroup

from stitchlake import __version__
from stitchlake.cli import (
    job_commands,
    output,
    printing,
    rescale_commands,
    table_commands,
    without_pandas,
)
from stitchlake.errors import (
    DEBUG_ENV,
    DETAILS_NOTE,
    STANDS_AFTER_STOP,
    StitchError,
    Terminated,
    debugging,
    describe_os_error,
)

if TYPE_CHECKING:
    pass

P = ParamSpec("P")
R = TypeVar("R")

EXIT_INTERRUPTED = 130


# ---------------------------------------------------------------------------------------------- logging

#: Libraries whose warnings repeat what our own error message says (kazoo logs every failed connection
#: attempt, with the host names): shown only with STITCH_DEBUG=1.
QUIET_LOGGERS = ("kazoo",)


class _OutputFormatter(logging.Formatter):
    """`LEVEL logger: message`; an exception a record carries is summed up on the same line, its traceback shown
    only with STITCH_DEBUG=1, as for the guard's own errors (a cron mail holds what went wrong, not a stack)."""

    def format(self, record: logging.LogRecord) -> str:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and not debugging():
            summary = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record = logging.makeLogRecord({**record.__dict__, "msg": summary, "args": None, "exc_info": None})
            record.exc_text = None
        return super().format(record)


class _OutputHandler(logging.Handler):
    """Log records as dimmed lines on stderr through `stitchlake.cli.output`, so secrets are masked there too."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            printing.hint(self.format(record))
        except Exception:
            self.handleError(record)


def configure_logging() -> None:
    """Route library logging through `stitchlake.cli.output` (warnings and up; everything with STITCH_DEBUG=1).
    Idempotent."""
    root = logging.getLogger()
    if any(isinstance(handler, _OutputHandler) for handler in root.handlers):
        return
    handler = _OutputHandler()
    handler.setFormatter(_OutputFormatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debugging() else logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debugging() else logging.CRITICAL)


# ------------------------------------------------------------------------------------------------ the guard


def _noted(exc: BaseException) -> str:
    """What the interrupted job added to the interrupt (e.g. a publish whose version was committed anyway)."""
    notes = [note for note in getattr(exc, "__notes__", []) if not note.startswith(DETAILS_NOTE)]
    return "".join(f"; {note}" for note in notes)


def interruption_note(exc: BaseException) -> str:
    """The rest of an interrupt's message: the running instant was aborted, unless the job had published it first."""
    stands = any(note.startswith(STANDS_AFTER_STOP) for note in getattr(exc, "__notes__", []))
    return ("" if stands else "; the running instant was aborted") + _noted(exc)


def run_command(fn: Callable[[], R]) -> R | None:
    """Run `fn`, print the report it returns, and turn what it raises into a message and the design.md §8 exit code.

    - `StitchError` -> `error: <message>` and `exc.exit_code` (1 failure, 2 usage/config, 3 conflict, 4 busy,
      5 input rejected); no traceback unless `STITCH_DEBUG=1`.
    - `KeyboardInterrupt` (SIGINT) -> exit 130; `Terminated` (SIGTERM) -> exit 143. Both unwind through the running
      job, which aborts its instant on the way out.
    - an `OSError` (disk full, permissions) -> what failed on which file and what to do, exit 1.
    - anything else -> a one-line `error: unexpected ...` and exit 1; the traceback only with `STITCH_DEBUG=1`.
    - a click usage error (a bad option value, a missing option) -> one `error:` line naming the command's help,
      exit 2; typer/click exits and aborts pass through to typer.
    - a closed stdout or stderr (`stitch status | head -1`) changes nothing: `stitchlake.cli.output` stops writing
      to it, and the command exits with its own code.

    With `--json`, stdout carries exactly one JSON object, on success and on failure.
    """
    try:
        result = fn()
    except typer.Exit:
        raise
    except ClickUsageError as exc:  # a bad option or argument: one `error:` line like every other failure
        command = exc.ctx.command_path if exc.ctx is not None else "stitch"
        output.failure(f"{exc.format_message()} (`{command} -h` for help)", exc.exit_code, {"error_type": "UsageError"})
        raise typer.Exit(exc.exit_code) from None
    except (typer.Abort, typer.TyperException):
        raise
    except StitchError as exc:
        if debugging():
            traceback.print_exception(exc)
        details = {"error_type": type(exc).__name__, **exc.details()}
        output.failure(str(exc) or type(exc).__name__, exc.exit_code, details)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt as exc:
        output.failure("interrupted" + interruption_note(exc), EXIT_INTERRUPTED, {"error_type": "KeyboardInterrupt"})
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Terminated as exc:
        output.failure(str(exc) + interruption_note(exc), Terminated.exit_code, {"error_type": "Terminated"})
        raise typer.Exit(Terminated.exit_code) from None
    except OSError as exc:  # a closed stdout or stderr is not one: `stitchlake.cli.output` silences those and goes on
        if debugging():
            traceback.print_exception(exc)
        details = {"error_type": type(exc).__name__, **({"file": exc.filename} if exc.filename else {})}
        output.failure(describe_os_error(exc), 1, details)
        raise typer.Exit(1) from None
    except Exception as exc:
        message = str(exc).strip().splitlines()
        said = f"unexpected {type(exc).__name__}: {message[0] if message else '(no message)'}"
        output.failure(said, 1, {"error_type": type(exc).__name__})
        if debugging():
            traceback.print_exception(exc)
        else:
            printing.hint(f"(set {DEBUG_ENV}=1 to see the traceback)")
        raise typer.Exit(1) from None
    if isinstance(result, output.Report):
        output.show(result)
        return None
    return result


def guarded(fn: Callable[P, R]) -> Callable[P, R | None]:
    """Decorator form of `run_command`, for functions run outside the root app (commands on it need nothing)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
        return run_command(lambda: fn(*args, **kwargs))

    return wrapper


class GuardedGroup(TyperGroup):
    """The root command group: every subcommand (and sub-app) is invoked through `run_command`."""

    def invoke(self, ctx: Any) -> Any:
        printing.set_json("--json" in [*getattr(ctx, "_protected_args", []), *ctx.args])
        return run_command(lambda: super(GuardedGroup, self).invoke(ctx))


# ------------------------------------------------------------------------------------------------ the app


def _print_version(value: bool) -> None:
    if value:
        printing.info(f"stitch {__version__}")
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


table_commands.register(_root)
job_commands.register(_root)
rescale_commands.register(_root)
#: The root app with every command registered.
app = _root


def _terminate(signum: int, _frame: Any) -> None:
    raise Terminated(signal.Signals(signum).name)


def run(args: list[str] | None = None) -> int:
    """The command's exit code: the CLI in this process, as the console script runs it (`sys.argv` when `args` is
    None), for callers that go on afterwards."""
    try:
        app(args=args, prog_name="stitch")
    except SystemExit as done:
        return _exit_code(done)
    return 0


def _exit_code(done: SystemExit) -> int:
    """A `SystemExit`'s code as a process's: its number, or 1 after printing its message."""
    if done.code is None or isinstance(done.code, int):
        return done.code or 0
    print(done.code, file=sys.stderr)
    return 1


def main() -> None:
    """The `stitch` console script. SIGTERM unwinds like Ctrl-C (see `Terminated`); the process ends through
    `end_process`, so its exit code is the command's.

    pandas is refused in this process (`without_pandas`): pyarrow would import it on its first conversion, for
    nothing.
    """
    signal.signal(signal.SIGTERM, _terminate)
    without_pandas.refuse()
    end_process_after(run)


def end_process(code: int) -> NoReturn:
    """End this process with `code` without tearing the interpreter down (`os._exit`, after the atexit handlers and
    a flush). A native thread pool destroyed at exit while one of its workers is alive aborts the process
    ("terminate called without an active exception", apache/arrow#34314): it turned a refusal's exit 5 into a
    SIGABRT once under load, and a test harness's host process that had run reads into one. The exit code is what
    schedulers and scripts act on; it must be the command's. Any process that ran stitchlake's reads or writes
    ends this way."""
    atexit._run_exitfuncs()  # logging's flush, temporary folders: what a normal exit would still do
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (`stitch ... | head`) has nothing left to flush
            stream.flush()
    os._exit(code)


def end_process_after(main: Callable[[], int | None]) -> NoReturn:
    """Runs `main` and ends the process as `end_process` does, with `main`'s exit code also when it ends by an
    exception, which would otherwise tear the interpreter down (and may abort there): a `SystemExit` keeps its code,
    Ctrl-C is 130, SIGTERM (`Terminated`, outside a command's guard) 143, anything else prints its traceback and is
    1. For `stitch` and the harnesses that run stitchlake's reads and writes in their own process (the torture and
    partition runs)."""
    try:
        code = main() or 0
    except SystemExit as done:
        code = _exit_code(done)
    except KeyboardInterrupt:
        code = 130
    except Terminated:
        code = Terminated.exit_code
    except BaseException:  # the traceback, then the same end as any other
        traceback.print_exc()
        code = 1
    end_process(code)


if __name__ == "__main__":
    main()
