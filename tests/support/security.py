"""Hostile values (a secret, a folder name full of shell syntax), a config to put them in, and the static check that
no process start in a file can involve a shell: for the security tests of both tiers."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from tests.support.tables import landing_stream

SECRET = "hunter2-S3cr3t-$(touch PWNED)-value"


#: A folder name that a shell would split, chain and execute in several ways.
HOSTILE = "ws dir; $(touch PWNED) & `touch PWNED2` 'q\" #"


BASE: dict[str, Any] = {
    "table": {"name": "wide", "path": "table", "key": {"k": "long"}, "partition_by": {"p": "string"}, "buckets": 2},
    "streams": {"orders": landing_stream("orders", "parquet", {"amount": "long", "ots": "long"}, "ots")},
    "concurrency": {"heartbeat": {"interval_s": 1, "expire_s": 8}},
}


def process_calls(path: Path) -> list[tuple[int, tuple[str, ...], ast.Call]]:
    """(line, ("module", "function"), call) of every call in `path` that starts a process."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                aliases[name.asname or name.name] = tuple(name.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for name in node.names:
                aliases[name.asname or name.name] = (*node.module.split("."), name.name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = _qualified(node.func, aliases)
            if called and tuple(called[-2:]) in PROCESS_STARTERS | SHELL_STARTERS:
                found.append((node.lineno, tuple(called[-2:]), node))
    return found


def shell_problems(path: Path) -> list[str]:
    """Why each process start in `path` could involve a shell (empty when none does)."""
    problems = []
    for line, name, call in process_calls(path):
        where = f"{path.name}:{line}: {'.'.join(name)}"
        if name in SHELL_STARTERS:
            problems.append(f"{where} runs a shell command line")
            continue
        for keyword in call.keywords:
            if keyword.arg == "shell" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                problems.append(f"{where}(shell=...)")
        command = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
        if command is not None and _is_text(command):
            problems.append(f"{where} is given a command string, not an argv list")
    return problems


PROCESS_STARTERS = {
    ("subprocess", "run"),
    ("subprocess", "Popen"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("os", "execv"),
    ("os", "execvp"),
    ("os", "execve"),
    ("os", "spawnv"),
    ("os", "spawnvp"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
    ("asyncio", "create_subprocess_exec"),
}


#: These take a command line that a shell parses: never acceptable.
SHELL_STARTERS = {
    ("os", "system"),
    ("os", "popen"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
    ("asyncio", "create_subprocess_shell"),
    ("pty", "spawn"),
}


def _qualified(node: ast.expr, aliases: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """`subprocess.run` -> ("subprocess", "run"), following `import x as y` and `from x import y`."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, (node.id,))
    if isinstance(node, ast.Attribute):
        base = _qualified(node.value, aliases)
        return None if base is None else (*base, node.attr)
    return None


def _is_text(node: ast.expr) -> bool:
    """A command given as one string: a literal, an f-string, `"..." % x`, `"a" + b`, or `"...".format()`."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _is_text(node.func.value)
    return False
