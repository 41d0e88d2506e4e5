"""The demo generator: its landing files are readable, realistic on purpose, and its truth is right.

The part that starts the CLI, Spark, a server or other processes, or runs long (the rest:
tests/unit/test_demo_data.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from scripts import child_env, demo_data, module_argv
from tests.support.demo_landing import FILES, ORDERS, landing_files, read_files


def test_same_seed_same_data_and_cli(tmp_path: Path, generated: tuple[Path, dict[str, Any]]) -> None:
    out, _ = generated
    result = subprocess.run(
        [
            *module_argv("demo_data"),
            "--out",
            str(tmp_path),
            "--orders",
            str(ORDERS),
            "--seed",
            "11",
            "--files-per-stream",
            str(FILES),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=child_env(),
    )
    assert "truth:" in result.stdout
    assert pq.read_table(tmp_path / "truth.parquet").equals(pq.read_table(out / "truth.parquet"))
    for stream, extension in demo_data.EXTENSION.items():
        assert read_files(landing_files(tmp_path, stream, extension), extension).equals(
            read_files(landing_files(out, stream, extension), extension)
        )
