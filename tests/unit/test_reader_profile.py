"""`python -m scripts.reader_profile` (issue 35): its arguments, refused before a session starts or a table is made.

The measurements themselves start a JVM and are run by hand (docs/benchmarks.md); nothing here does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import reader_profile


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--series", "0"], "--series 0: give 1 or more reads"),
        (["--compact-at", "2"], "--compact-at 2: needs --series"),
        (["--series", "2", "--compact-at", "2"], "--compact-at 2: needs --series"),
        (["--series", "3", "--compact-at", "-1"], "--compact-at -1: needs --series"),
    ],
)
def test_a_series_that_cannot_run_as_asked_is_refused_before_anything_runs(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    with pytest.raises(SystemExit) as exited:
        reader_profile.main([*args, "--workdir", str(work)])
    assert exited.value.code == 2 and said in capsys.readouterr().err
    assert not work.exists()
