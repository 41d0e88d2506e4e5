"""`--json` on failure (issue 12): every command prints exactly one JSON object on stdout, whatever failed.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_json_failures.py).
"""

from __future__ import annotations

from tests.support.cli import COMMANDS


def test_every_command_is_covered() -> None:
    assert ("ingest",) in COMMANDS and ("savepoint", "restore") in COMMANDS and ("stream",) in COMMANDS
    assert len(COMMANDS) >= 15
