"""The tier rule of tests/conftest.py: what a unit test may not start, and that every marker it gives is declared."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_MARKERS, SLOWEST_FIRST, UnitGuard, forbidden, in_unit_tier

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["java", "-cp", "x.jar", "Main"],
        ["/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "-version"],
        ["/opt/spark/bin/spark-submit", "job.py"],
        [sys.executable, "-m", "stitchlake", "ingest", "-c", "t.yaml"],
        [str(Path(sys.executable).parent / "stitch"), "status"],
    ],
)
def test_a_jvm_spark_submit_or_the_cli_is_forbidden(argv: list[str]) -> None:
    assert forbidden(argv)


@pytest.mark.parametrize(
    "argv",
    [[sys.executable, "-c", "print(1)"], ["git", "status"], [sys.executable, "-m", "pip", "--version"], ["javac"]],
)
def test_other_processes_are_allowed(argv: list[str]) -> None:
    assert not forbidden(argv)


def test_the_guard_fails_the_unit_test_that_starts_a_jvm_and_records_the_rest(request: pytest.FixtureRequest) -> None:
    guard = UnitGuard()
    guard.audit("subprocess.Popen", ("java", ["java", "-version"], None, None))  # outside a unit test: not its business
    assert guard.started == []
    guard.current = request.node
    assert in_unit_tier(request.node)
    guard.audit("subprocess.Popen", (sys.executable, [sys.executable, "-c", "pass"], None, None))
    with pytest.raises(RuntimeError, match="may not start"):
        guard.audit("subprocess.Popen", ("java", ["java", "-version"], None, None))
    with pytest.raises(RuntimeError, match="may not start"):
        guard.audit("os.posix_spawn", ("/usr/bin/java", ["java"], {}))
    assert len(guard.started) == 3


def test_every_marker_given_from_a_fixture_is_declared() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    names = {line.split(":", 1)[0] for line in declared["markers"]}
    assert set(FIXTURE_MARKERS.values()) <= names
    assert "--strict-markers" in declared["addopts"]


def test_the_slowest_modules_are_scheduled_first_and_each_still_exists(request: pytest.FixtureRequest) -> None:
    """A renamed module would silently lose its early place: every name in SLOWEST_FIRST is a module of
    tests/integration, and this session's collection (whatever it holds of them) begins with them, in order."""
    integration = ROOT / "tests" / "integration"
    assert [name for name in SLOWEST_FIRST if not (integration / name).is_file()] == []
    modules: list[str] = []
    for item in request.session.items:
        name = Path(str(item.path)).name
        if not modules or modules[-1] != name:
            modules.append(name)
    early = [name for name in modules if name in SLOWEST_FIRST]
    assert modules[: len(early)] == early == sorted(early, key=SLOWEST_FIRST.index)
