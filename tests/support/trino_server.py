"""pytest plugin: a real Trino server (scripts/trino_daemon.py) for the `trino`-marked tests.

`trino_server` (session scope) yields a `Trino`: the server's URI and a small client over the `trino` package
from PyPI. The server is installed on first use (Maven Central's tarball, unpacked into `.venv/`) and started once
per session on a free loopback port; each test makes its own catalogs with `CREATE CATALOG` (dynamic catalog
management), so tests never share a catalog. A watchdog stops the server if pytest is killed; otherwise the
fixture stops it at the end of the session. Under pytest-xdist the workers share one server, as they share the S3
server. `$STITCH_TRINO_URI` points the tests at an existing server instead (it must allow `CREATE CATALOG`).
A failed install or start fails the tests; they are never skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

# scripts/trino_daemon.py: install, start, stop (not named `trino`: that is the PyPI client's module)
from scripts import trino_daemon
from tests.support.session_servers import serve


@dataclass(frozen=True)
class Result:
    """What one statement returned: column names, rows as dicts, and Trino's statistics of the query (splits,
    rows and bytes read)."""

    columns: list[str]
    rows: list[dict[str, Any]]
    stats: dict[str, Any]


@dataclass(frozen=True)
class Trino:
    uri: str

    def query(self, sql: str) -> Result:
        import trino

        parts = urlsplit(self.uri)
        connection = trino.dbapi.connect(  # type: ignore[no-untyped-call]
            host=parts.hostname, port=parts.port, user="stitchlake-test"
        )
        try:
            cursor = connection.cursor()
            cursor.execute(sql)
            fetched = cursor.fetchall()
            columns = [d[0] for d in cursor.description or []]
            return Result(columns, [dict(zip(columns, row, strict=True)) for row in fetched], dict(cursor.stats))
        finally:
            connection.close()

    def create_catalog(self, connector: str, properties: Mapping[str, str], prefix: str = "c") -> str:
        """A new catalog of `connector` with `properties` (as a catalog properties file gives them); its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        given = ", ".join(f'"{key}" = {quote(value)}' for key, value in properties.items())
        self.query(f"CREATE CATALOG {name} USING {connector} WITH ({given})")
        return name


def quote(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


@pytest.fixture(scope="session")
def trino_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trino]:
    """A Trino server on 127.0.0.1 for the whole test session."""
    if external := os.environ.get("STITCH_TRINO_URI"):
        yield Trino(external.rstrip("/"))
        return
    for uri in serve(
        tmp_path_factory,
        "trino",
        "Trino",
        lambda workdir, owner: trino_daemon.start(workdir, watch_pid=owner).uri,
        trino_daemon.stop,
        trino_daemon.TrinoError,
    ):
        yield Trino(uri)
