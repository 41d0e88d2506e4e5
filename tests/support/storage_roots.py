"""pytest plugin for the storage tests of both tiers: an empty root, once on local disk and once on S3
(`location`), and its `storage`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stitchlake.storage import Storage, storage_for

#: The backends a storage test runs on: S3 only with the S3 server (its marker).
BACKENDS = ["local", pytest.param("s3", marks=pytest.mark.s3)]


@pytest.fixture(params=BACKENDS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(root URI, storage options) of an empty root on one backend."""
    if request.param == "local":
        yield str(tmp_path / "root"), {}
        return
    bucket = request.getfixturevalue("s3_bucket")
    yield f"{bucket.url}/root", bucket.options


@pytest.fixture
def storage(location: tuple[str, dict[str, str]]) -> Storage:
    return storage_for(*location)
