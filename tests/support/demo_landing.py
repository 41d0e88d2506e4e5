"""pytest plugin: the demo generator's output as its tests read it (tests/unit/test_demo_data.py and
tests/integration/test_demo_data.py). `generated` (module scope) generates one demo dataset; `landing_files` and
`read_files` read its landing files back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest

from scripts import demo_data

#: The dataset `generated` makes: this many orders, in this many files per stream.
ORDERS = 2000
FILES = 4


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The folder of a demo dataset (three days, seed 11) and its summary."""
    out = tmp_path_factory.mktemp("demo")
    summary = demo_data.generate(out, orders=ORDERS, days=3, seed=11, files_per_stream=FILES)
    return out, summary


def landing_files(out: Path, stream: str, extension: str) -> list[Path]:
    """A stream's landing files in the dataset at `out`, in arrival order."""
    return sorted((out / "landing" / stream).glob(f"*.{extension}"))


def read_files(files: list[Path], extension: str) -> pa.Table:
    """Landing files of one format as one table."""
    read = {"parquet": pq.read_table, "json": pajson.read_json, "csv": pacsv.read_csv}[extension]
    return pa.concat_tables([read(f) for f in files], promote_options="permissive")
