"""`python -m scripts.peer_steady` (issue 35): which table state it reads, its steady figure, its arguments.

Its reads start a JVM with Iceberg's runtime and are run by hand after `make bench-peers` (docs/benchmarks.md);
nothing here does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import peer_steady


def test_the_steady_figure_leaves_the_first_third_of_the_rounds_out() -> None:
    assert peer_steady.steady([9.0, 8.0, 1.0, 2.0, 3.0, 4.0]) == 2.5
    assert peer_steady.steady([5.0, 1.0, 2.0]) == 1.5


def test_the_uncompacted_state_is_the_last_deltacommit_before_the_last_compaction(tmp_path: Path) -> None:
    """Not the last deltacommit: one written after the compaction would put logs back into the "compacted" read's
    slices and a commit's worth of rows into the "uncompacted" one."""
    from tests.support.tables import MODELS, batch, new_table

    table = new_table(tmp_path)
    model = MODELS[0]

    def write(key: int) -> str:
        rows = batch(model, [{"k": key, "amount": key, "status": "a", "ots": 1}])
        return str(table.write(model.name, rows).completed)

    write(1)
    with pytest.raises(SystemExit, match="no compaction on the timeline"):
        peer_steady.stitchlake_before_compaction(Path(table.path))
    second = write(2)
    table.compact()
    write(3)
    assert peer_steady.stitchlake_before_compaction(Path(table.path)) == second


def test_fewer_than_three_rounds_are_refused_before_any_environment_is_installed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        peer_steady.main(["--rounds", "2", "--workdir", "/nonexistent"])
    assert exited.value.code == 2 and "--rounds must be at least 3" in capsys.readouterr().err
