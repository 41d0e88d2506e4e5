"""An Iceberg REST catalog on loopback for the publish tests: the REST protocol over pyiceberg's SqlCatalog.

No REST catalog server (Polaris, Lakekeeper, Gravitino, Nessie, the Java reference fixture) installs from PyPI,
Debian or npm, which is all this project's CI reaches. So the tests serve the protocol themselves: every request
pyiceberg's `RestCatalog` makes travels over HTTP as JSON, is parsed with pyiceberg's own request models, and is
carried out by a SQLite `SqlCatalog` that owns the metadata files, exactly as a real server owns them. What the
test proves is stitchlake's side: a `publish.iceberg_catalog` of `type: rest` creates, evolves, overwrites and
expires the published table through the REST client alone, and readers of that catalog see it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableRequest

#: The AWS SDK inside pyarrow sends checksums Ceph's gateway refuses unless told to send them only when required
#: (stitchlake.io.published.iceberg sets the same for its own writes).
S3_CHECKSUMS = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}
#: pyiceberg's default separator of a multi-level namespace in a URL path.
SEPARATOR = "\x1f"
#: Catalog errors as the REST spec's error responses.
_STATUS = {
    NoSuchNamespaceError: HTTPStatus.NOT_FOUND,
    NoSuchTableError: HTTPStatus.NOT_FOUND,
    NamespaceAlreadyExistsError: HTTPStatus.CONFLICT,
    TableAlreadyExistsError: HTTPStatus.CONFLICT,
    CommitFailedException: HTTPStatus.CONFLICT,
}


class RestCatalogServer:
    """`uri` serves the REST catalog; its tables live under `warehouse` (the server chooses their locations): a
    folder under `root` by default, or an `s3://` prefix with `io` (pyiceberg's FileIO properties, `s3.endpoint`,
    `s3.access-key-id`..., with which the server writes the tables' metadata files there, as a real server with
    an object-store warehouse does). The catalog's database is a SQLite file under `root` either way."""

    def __init__(self, root: Path, warehouse: str | None = None, io: Mapping[str, str] | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.warehouse = warehouse or (root / "warehouse").as_uri()
        if self.warehouse.startswith("s3://"):
            for name, value in S3_CHECKSUMS.items():  # pyarrow's S3 client and Ceph's gateway, as stitch sets them
                os.environ.setdefault(name, value)
        self.catalog = SqlCatalog(
            "served", uri=f"sqlite:///{root / 'served.db'}", warehouse=self.warehouse, **dict(io or {})
        )
        self.requests: list[tuple[str, str]] = []
        #: Query strings as sent (e.g. the `warehouse` a client asks the config endpoint for).
        self.queries: list[str] = []
        self._lock = threading.Lock()  # SQLite and metadata commits one at a time, as a server's database does
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.uri = f"http://127.0.0.1:{self.http.server_address[1]}"

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any] | None]:
        parts = [unquote(p) for p in urlparse(path).path.strip("/").split("/")]
        if parts[:1] != ["v1"]:
            return HTTPStatus.NOT_FOUND, _error("NotFound", f"no route {path}", HTTPStatus.NOT_FOUND)
        route = parts[1:]
        with self._lock:
            self.requests.append((method, "/".join(route)))
            self.queries.append(urlparse(path).query)
            try:
                return self._route(method, route, json.loads(body) if body else None, body)
            except tuple(_STATUS) as exc:
                status = next(code for kind, code in _STATUS.items() if isinstance(exc, kind))
                return status, _error(type(exc).__name__, str(exc), status)
            except Exception as exc:  # a server answers 500, it does not drop the connection
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                return status, _error(type(exc).__name__, str(exc), status)

    def _route(self, method: str, route: list[str], document: Any, body: bytes) -> tuple[int, dict[str, Any] | None]:
        catalog = self.catalog
        if route == ["config"]:
            return HTTPStatus.OK, {"defaults": {}, "overrides": {}}
        if route == ["namespaces"] and method == "GET":
            return HTTPStatus.OK, {"namespaces": [list(n) for n in catalog.list_namespaces()]}
        if route == ["namespaces"] and method == "POST":
            namespace = tuple(document["namespace"])
            catalog.create_namespace(namespace, document.get("properties") or {})
            return HTTPStatus.OK, {"namespace": list(namespace), "properties": document.get("properties") or {}}
        namespace = tuple(route[1].split(SEPARATOR)) if len(route) > 1 else ()
        if len(route) == 2 and method in ("GET", "HEAD"):
            properties = catalog.load_namespace_properties(namespace)
            if method == "HEAD":
                return HTTPStatus.NO_CONTENT, None
            return HTTPStatus.OK, {"namespace": list(namespace), "properties": properties}
        if len(route) == 3 and route[2] == "tables" and method == "GET":
            names = [{"namespace": list(i[:-1]), "name": i[-1]} for i in catalog.list_tables(namespace)]
            return HTTPStatus.OK, {"identifiers": names}
        if len(route) == 3 and route[2] == "tables" and method == "POST":
            request = CreateTableRequest.model_validate({"location": None, **document})  # optional in the spec
            optional: dict[str, Any] = {"partition_spec": request.partition_spec, "sort_order": request.write_order}
            table = catalog.create_table(
                (*namespace, request.name),
                schema=request.table_schema,
                location=request.location,
                properties=request.properties,
                **{name: value for name, value in optional.items() if value is not None},
            )
            return HTTPStatus.OK, _loaded(table.metadata_location, table.metadata)
        if len(route) == 4 and route[2] == "tables":
            identifier = (*namespace, route[3])
            if method == "HEAD":
                found = catalog.table_exists(identifier)
                return (HTTPStatus.NO_CONTENT if found else HTTPStatus.NOT_FOUND), None
            if method == "GET":
                table = catalog.load_table(identifier)
                return HTTPStatus.OK, _loaded(table.metadata_location, table.metadata)
            if method == "POST":
                commit = CommitTableRequest.model_validate_json(body)
                done = catalog.commit_table(catalog.load_table(identifier), commit.requirements, commit.updates)
                return HTTPStatus.OK, _loaded(done.metadata_location, done.metadata)
            if method == "DELETE":
                catalog.drop_table(identifier)
                return HTTPStatus.NO_CONTENT, None
        return HTTPStatus.NOT_FOUND, _error("NotFound", f"no route {method} {'/'.join(route)}", HTTPStatus.NOT_FOUND)


def _loaded(location: str, metadata: Any) -> dict[str, Any]:
    """A LoadTableResult (also the shape of a CommitTableResponse, which ignores `config`)."""
    return {"metadata-location": location, "metadata": json.loads(metadata.model_dump_json()), "config": {}}


def _error(kind: str, message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": int(status)}}


class _Handler(BaseHTTPRequestHandler):
    server_state: RestCatalogServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        status, document = self.server_state.handle(self.command, self.path, self.rfile.read(length))
        payload = json.dumps(document).encode() if document is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload and self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_HEAD = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows failures, not every request."""


@contextmanager
def rest_catalog(
    root: Path, warehouse: str | None = None, io: Mapping[str, str] | None = None
) -> Iterator[RestCatalogServer]:
    """A REST catalog serving on loopback until the block ends (`warehouse`, `io`: see `RestCatalogServer`)."""
    server = RestCatalogServer(root, warehouse, io)
    thread = threading.Thread(target=server.http.serve_forever, name="iceberg-rest", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.http.shutdown()
        server.http.server_close()
        thread.join(timeout=10)
