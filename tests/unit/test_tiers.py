"""The tier rule of tests/conftest.py: what a unit test may not start, and that every marker it gives is declared."""

from __future__ import annotations

import shutil
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


def _make_test_options() -> list[str]:
    """The pytest options `make test` passes (its recipe line, without the variables)."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    recipe = lines[next(n for n, line in enumerate(lines) if line.startswith("test: ")) + 1]
    return [word for word in recipe.split() if word.startswith("--")]


def test_make_test_hands_modules_out_in_the_collection_order(tmp_path: Path) -> None:
    """The slowest-first order above is only the order xdist hands modules out in with `make test`'s options:
    without `--no-loadscope-reorder` it re-sorts them by their number of tests (the one-test modules, the slowest
    among them, last). Two modules here: one of one test, collected first, and one of five."""
    options = _make_test_options()
    assert "--dist" in options and "--no-loadscope-reorder" in options
    (tmp_path / "test_one.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "test_many.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('i', range(5))\ndef test_b(i):\n    pass\n"
    )
    (tmp_path / "conftest.py").write_text(
        "def pytest_collection_modifyitems(items):\n    items.sort(key=lambda item: 'many' in item.nodeid)\n"
    )

    def first_run(extra: list[str]) -> str:
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "-v", *extra]
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return next(line for line in done.stdout.splitlines() if "PASSED" in line)

    assert "test_one.py" in first_run(["--dist", "loadfile", "--no-loadscope-reorder"])
    assert "test_many.py" in first_run(["--dist", "loadfile"])  # xdist's own order: the flag is what keeps ours


def _recipes(target: str) -> list[str]:
    """The commands `make target` would run, in order (`make -n`: nothing is run)."""
    done = subprocess.run(
        ["make", "-n", "-s", target], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("target", ["test", "test-fast", "conformance"])
def test_the_test_targets_run_pytest_under_eatmydata_where_it_is_installed(target: str) -> None:
    """The Makefile's test targets (what `make -n` would run): pytest under eatmydata when this machine has it, the
    plain pytest command when it has not (the same tests, with real fsyncs)."""
    [command] = [line for line in _recipes(target) if " -m pytest " in line]
    words = command.split()
    while "=" in words[0] and words[0].split("=")[0].isupper():  # settings before the command
        words = words[1:]
    eatmydata = shutil.which("eatmydata")
    if eatmydata is None:
        assert words[0].endswith("/python"), command
    else:
        assert words[0] == eatmydata and words[1].endswith("/python"), command


@pytest.mark.parametrize("target", ["test", "test-fast", "conformance", "demo", "torture"])
def test_the_targets_byte_compile_the_project_before_they_start_its_processes(target: str) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set no process writes bytecode, and every `stitch` compiled the package from
    source again (about a fifth of a CLI-heavy module's CPU): the targets compile it first (`make -n` shows it)."""
    lines = _recipes(target)
    compiled = [i for i, line in enumerate(lines) if " -m compileall " in line]
    assert compiled, lines[-20:]
    assert {"stitchlake", "scripts", "tests"} <= set(lines[compiled[0]].split())
    started = [i for i, line in enumerate(lines) if " -m pytest " in line or " -m scripts." in line]
    assert started and compiled[0] < started[0], lines[-20:]
