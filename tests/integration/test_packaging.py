"""What `pip install stitchlake` puts into site-packages: the `stitchlake` package and its metadata, nothing else
(a top-level `cli` or `tests` would collide with other projects'), and the `stitch` command pointing into it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.cli import python

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_only_the_stitchlake_package_and_its_metadata(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(ROOT),
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = tmp_path.glob("stitchlake-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    [info] = [t for t in tops if t.endswith(".dist-info")]
    assert tops == {"stitchlake", info}, sorted(tops)
    assert "stitchlake/cli/app.py" in names and "stitchlake/__main__.py" in names and "stitchlake/py.typed" in names
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "stitch = stitchlake.cli.app:main" in entry_points


def test_python_dash_m_stitchlake_is_the_stitch_command() -> None:
    done = python("-m", "stitchlake", "--help")
    assert done.returncode == 0 and "Usage: stitch" in done.stdout, done.stdout + done.stderr
