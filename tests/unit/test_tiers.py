"""The tier rule of tests/conftest.py: what a unit test may not start, and that every marker it gives is declared."""

from __future__ import annotations

import subprocess
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


def test_the_slowest_modules_are_collected_first_and_each_still_exists() -> None:
    """A renamed module would silently lose its early place: every name in SLOWEST_FIRST is a module of
    tests/integration, and the whole suite's collection begins with them, in order (tests/unit has modules of the
    same names, which keep their places)."""
    integration = ROOT / "tests" / "integration"
    assert [name for name in SLOWEST_FIRST if not (integration / name).is_file()] == []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    modules: list[str] = []
    for line in done.stdout.splitlines():
        module = line.split("::", 1)[0]
        if "::" in line and (not modules or modules[-1] != module):
            modules.append(module)
    first = [f"tests/integration/{name}" for name in SLOWEST_FIRST]
    assert modules[: len(first)] == first
    assert len(modules) > len(first) and len(set(modules)) == len(modules), "each module's tests stay together"
