"""The bad-input catalogue (issues 7, 12 and 16): every way a cron job can hand `stitch` something wrong.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_bad_input.py).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import stitchlake
from stitchlake.errors import InputRejected
from tests.integration.test_bad_input import (  # noqa: F401 (fixtures)
    CONFIG,
    build_template,
    copy_workspace,
    orders,
    template,
    workspace,
    write_parquet,
)


def test_text_that_is_not_utf8_is_refused_by_the_api_too(workspace: Path) -> None:
    """Arrow builds strings without checking them; stored, Latin-1 bytes made every later read of the table fail."""
    table = stitchlake.open(workspace / "table.yaml")
    status = pa.array(["café".encode("latin-1")], pa.binary()).view(pa.string())
    with pytest.raises(InputRejected, match="column status holds text that is not UTF-8") as refused:
        table.write("orders", pa.table(orders([5], status=status)))
    assert refused.value.column == "status"
    assert table.read().num_rows == 4


def test_whole_landing_files_set_aside_get_a_copy_each_whatever_their_names(tmp_path: Path) -> None:
    """Folders were flattened to `__`, so `x/y.csv` and `x__y.csv` shared one copy path and the second file's
    copy overwrote the first's evidence (both commits pointed at the one left)."""
    from stitchlake.storage.local import LocalStorage
    from stitchlake.writing.badrows import quarantine_file

    storage = LocalStorage(str(tmp_path))
    names = ["x/y.csv", "x__y.csv", "x~sy.csv", ".hidden.csv", "~dhidden.csv", "s3://b/x/y.csv", "s3_b__x__y.csv"]
    copies = [quarantine_file(storage, "20261201000000000", n, n.encode(), "bad", lambda _p: None) for n in names]
    paths = [c.copy for c in copies]
    assert len(set(paths)) == len(names), paths
    assert [storage.read_bytes(p or "") for p in paths] == [n.encode() for n in names]
    assert not any(p.rsplit("/", 1)[1].startswith(".") for p in paths if p)
