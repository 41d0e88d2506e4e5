"""pytest plugin: a real, throw-away S3 server (Ceph RADOS Gateway, see scripts/rgw.py) for the S3 tests.

`s3_server` (session scope) yields an `S3Server` (endpoint, keys, region); `s3_bucket` (function scope) creates a
fresh, uniquely named bucket for one test and yields an `S3Bucket` with its `s3://` URL and the AWS_* variables
that obstore, pyarrow and subprocesses (spark-submit, the CLI) understand; the bucket is emptied and removed
afterwards. `$STITCH_S3_ENDPOINT` (with `$STITCH_S3_ACCESS_KEY`, `$STITCH_S3_SECRET_KEY`, optional
`$STITCH_S3_REGION`) points the tests at an existing server instead.

Under pytest-xdist all workers share one gateway: it lives in the directory that the workers' base temp dirs
have in common, the first worker to take the file lock starts it and the others find it running (scripts/rgw.py
`start` returns the running server of a directory). No worker stops it, since another may still be using it; a
watchdog started with the server stops it when the xdist controller (the workers' parent) exits. Without xdist
the fixture stops it at the end of the session, with the same watchdog watching pytest in case it is killed.
If Ceph is not installed and cannot be (not root, no apt-get), the tests are skipped.
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scripts import rgw  # scripts/rgw.py: start/stop the gateway, minimal signed S3 requests
from tests.support.session_servers import serve

# pyarrow's S3 client reads rgw.CHECKSUM_ENV when an S3FileSystem is created, so the session fixture also puts
# them into os.environ.
CHECKSUM_ENV = rgw.CHECKSUM_ENV


@dataclass(frozen=True)
class S3Server:
    """Where the S3 server is and how to sign requests to it."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """AWS_* variables for clients that configure themselves from the environment (obstore, pyarrow, boto)."""
        return rgw.client_env(self.endpoint, self.access_key, self.secret_key, self.region)

    def options(self) -> dict[str, str]:
        """The same settings as a config's `storage:` block gives them (no environment needed)."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "allow_http": "true",
        }

    def _rgw(self) -> Any:  # scripts/rgw.py RgwServer (a script loaded at run time)
        return rgw.RgwServer(self.endpoint, self.access_key, self.secret_key, self.region, dir="", pids={})


@dataclass(frozen=True)
class S3Bucket:
    """One test's bucket: `url` is "s3://<name>", `env` the AWS_* variables for it (pass to subprocesses)."""

    name: str
    server: S3Server
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    @property
    def options(self) -> dict[str, str]:
        return self.server.options()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 endpoint (RADOS Gateway on 127.0.0.1) for the whole test session."""
    for key, value in CHECKSUM_ENV.items():
        os.environ.setdefault(key, value)
    external = os.environ.get("STITCH_S3_ENDPOINT")
    if external:
        yield S3Server(
            endpoint=external.rstrip("/"),
            access_key=os.environ.get("STITCH_S3_ACCESS_KEY", ""),
            secret_key=os.environ.get("STITCH_S3_SECRET_KEY", ""),
            region=os.environ.get("STITCH_S3_REGION", "us-east-1"),
        )
        return
    try:
        rgw.ensure_installed()
    except rgw.RgwError as exc:
        pytest.skip(f"no S3 server available: {exc}")
    for started in serve(
        tmp_path_factory,
        "rgw",
        "the RADOS Gateway",
        lambda workdir, owner: rgw.start(workdir, watch_pid=owner),
        rgw.stop,
        rgw.RgwError,
    ):
        yield S3Server(started.endpoint, started.access_key, started.secret_key, started.region)


def _bucket_name(nodeid: str) -> str:
    """A valid, unique S3 bucket name that still says which test made it."""
    slug = re.sub(r"[^a-z0-9]+", "-", nodeid.split("::")[-1].lower()).strip("-")[:40].strip("-") or "test"
    return f"t-{slug}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def s3_bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> Iterator[S3Bucket]:
    """A fresh, empty bucket for one test; emptied and deleted afterwards."""
    name = _bucket_name(request.node.nodeid)
    server = s3_server._rgw()
    try:
        rgw.create_bucket(server, name)
    except (rgw.RgwError, OSError) as exc:
        pytest.fail(f"could not create bucket {name} on {s3_server.endpoint}: {exc}", pytrace=False)
    yield S3Bucket(name=name, server=s3_server, env=s3_server.env())
    try:
        rgw.delete_bucket(server, name)
    except (rgw.RgwError, OSError) as exc:  # a leftover bucket costs memory, not correctness
        warnings.warn(f"could not delete bucket {name}: {exc}", stacklevel=1)


@dataclass(frozen=True)
class Place:
    """Where a test's table lives: on local disk (`root/table`) or in a fresh bucket of the S3 server."""

    backend: str
    root: Path
    table: str


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """A table location, once on local disk and once on S3 (the S3 server's settings in the environment)."""
    if request.param == "local":
        return Place("local", tmp_path, str(tmp_path / "table"))
    bucket = request.getfixturevalue("s3_bucket")
    for name, value in bucket.env.items():
        monkeypatch.setenv(name, value)
    return Place("s3", tmp_path, f"{bucket.url}/warehouse/wide")
