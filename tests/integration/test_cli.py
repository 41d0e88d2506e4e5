"""The `stitch` CLI (design.md §7, §8): real config files and tables on disk, run through typer's CliRunner and, where
the process boundary matters (entry point, exit status, imports, stdout purity), as a real subprocess.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest: tests/unit/test_cli.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import stitchlake
from stitchlake.api import Table
from tests.support.cli import console, invoke, python

ROOT = Path(__file__).resolve().parents[2]


def run_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real console script, as cron or Airflow would run it."""
    return console(*args, cwd=cwd, env=env, timeout=600)


def test_version_and_help_from_the_console_script(tmp_path: Path) -> None:
    version = run_process("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout.strip()) == (0, f"stitch {stitchlake.__version__}")
    helped = python("-m", "stitchlake", "--help", cwd=ROOT)
    assert helped.returncode == 0, helped.stderr
    for command in ("init", "read", "timeline"):
        assert command in helped.stdout


def test_help_imports_neither_pyspark_nor_pyarrow() -> None:
    code = (
        "import sys; from stitchlake.cli.app import app; from typer.testing import CliRunner; "
        "result = CliRunner().invoke(app, ['--help']); assert result.exit_code == 0, result.output; "
        "print('pyspark' in sys.modules, 'pyarrow' in sys.modules)"
    )
    done = python("-c", code, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_metadata_commands_do_not_import_pyspark(written: tuple[Table, list[Any]], config_file: Path) -> None:
    code = (
        "import sys; from stitchlake.cli.app import app; from typer.testing import CliRunner; "
        f"result = CliRunner().invoke(app, ['timeline', 'show', '-c', {str(config_file)!r}]); "
        "assert result.exit_code == 0, result.output; "
        f"result = CliRunner().invoke(app, ['init', '-c', {str(config_file)!r}]); "
        "assert result.exit_code == 0, result.output; "
        "print('pyspark' in sys.modules)"
    )
    done = python("-c", code, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_data_commands_run_without_importing_pandas(written: tuple[Table, list[Any]], config_file: Path) -> None:
    """The console script refuses pandas (`stitchlake.cli.without_pandas`): a read, a query and a compaction work,
    with their answers, and the interpreter's own import log names no pandas module (a refused `import pandas` is
    logged too, as `pandas` alone; importing it would load `pandas.core` and the rest)."""

    def imported_by(*args: str) -> tuple[str, set[str]]:
        done = python("-X", "importtime", "-m", "stitchlake", *args, "-c", config_file, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
        return done.stdout, {name for name in lines if name != "pandas"}  # its refused attempts: see above

    out, modules = imported_by("read", "--json")
    assert sorted(row["k"] for row in json.loads(out)["records"]) == [1, 2, 3, 4]
    assert "pyarrow" in modules and not any(name.startswith("pandas.") for name in modules)
    out, modules = imported_by("sql", "SELECT count(*) AS n FROM t", "--json")
    assert json.loads(out)["records"] == [{"n": 4}]
    assert "duckdb" in modules and not any(name.startswith("pandas.") for name in modules)
    out, modules = imported_by("compact", "--engine", "local")
    assert "compaction" in out and not any(name.startswith("pandas.") for name in modules)


def test_missing_table_exits_2_without_traceback(tmp_path: Path) -> None:
    result = invoke("read", "--table", str(tmp_path / "missing"))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and "missing" in result.stderr

    done = run_process("read", "--table", "missing", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr


#: The console script's `main()` in a process whose C-level exit handlers abort, as a native thread pool's
#: destructor does when one of its workers is still alive at exit (apache/arrow#34314); and a Python atexit
#: handler that must still run.
ABORTING_AT_EXIT = """
import atexit, ctypes, sys
libc = ctypes.CDLL("libc.so.6")
libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)  # how C++ registers static destructors
atexit.register(lambda: print("atexit handlers ran", file=sys.stderr))
from stitchlake.cli.app import main
sys.argv = ["stitch", *sys.argv[1:]]
main()
"""


def test_the_exit_code_survives_native_teardown_at_exit(tmp_path: Path) -> None:
    """A refusal's exit 2 stays 2 (and its JSON is flushed) though tearing the process down would abort it: once,
    under load, an ingest refused with exit 5 ended in SIGABRT at exit (`terminate called without an active
    exception`) from a native thread pool's destructor."""
    done = python("-c", ABORTING_AT_EXIT, "read", "--table", tmp_path / "missing", "--json", timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert json.loads(done.stdout)["ok"] is False
    assert "atexit handlers ran" in done.stderr


def test_timeline_show_json_from_the_console_script(written: tuple[Table, list[Any]], config_file: Path) -> None:
    done = run_process(
        "timeline", "show", "-c", str(config_file), "--json", "--stream", "orders", cwd=config_file.parent
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [i["stream"] for i in document["instants"]] == ["orders"]
