"""The tier rule of tests/conftest.py: what a unit test may not start, and that every marker it gives is declared; and
the rule of tests/support: what test modules share lives there (no test module imports another), tables included
(no helper or fixture of a test module makes a table but through its makers)."""

from __future__ import annotations

import ast
import re
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


# ---------------------------------------------------------------------------------------------- tests/support

#: The test modules' packages. What two of their modules share lives in tests/support: a module importing another
#: runs that module's imports (and registers its fixtures) wherever it is imported, and hides which tier needs what.
TEST_PACKAGES = ("tests.unit", "tests.integration")
#: An import of a test module inside a string: a program run by `python -c`, a JVM session or a spawned process.
IMPORT_IN_CODE = re.compile(r"\b(?:from|import)\s+tests\.(?:unit|integration)\b")
#: What runs the CLI in the tests (tests/support/processes.py, cli.py and the like): `init` as its first argument
#: creates a table.
CLI_RUNNERS = frozenset({"run_stitch", "start_stitch", "console", "stitch", "stitch_json", "invoke", "python"})


def _test_modules() -> list[Path]:
    return sorted(path for package in TEST_PACKAGES for path in (ROOT / package.replace(".", "/")).rglob("*.py"))


def _names_a_test_module(name: str) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in TEST_PACKAGES)


def _called(call: ast.Call) -> str | None:
    function = call.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)


def imports_of_test_modules(tree: ast.AST) -> list[str]:
    """Where a module imports a test module: an import statement (`from tests import unit` and relative imports
    too), `importlib.import_module`, or an import in a program held in a string."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _names_a_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            named = [module, *(f"{module}.{a.name}" for a in node.names)]
            if node.level or any(_names_a_test_module(name) for name in named):
                found.append(f"line {node.lineno}: from {'.' * node.level}{module} import ...")
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and _names_a_test_module(first.value):
                found.append(f"line {node.lineno}: {_called(node)}({first.value!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            code = IMPORT_IN_CODE.search(node.value)
            if code:
                found.append(f"line {node.lineno}: a program running {code.group()!r}")
    return found


def support_table_makers() -> frozenset[str]:
    """The functions of tests/support that give a table (`Table`, not `pa.Table`, in what they return; fixtures
    aside): the makers test modules take their tables from."""
    makers = set()
    for path in (ROOT / "tests" / "support").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef) or node.returns is None or _is_fixture(node):
                continue
            if "Table" in {n.id for n in ast.walk(node.returns) if isinstance(n, ast.Name)}:
                makers.add(node.name)
    return frozenset(makers)


def _is_fixture(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(getattr(d, "func", d)).endswith("fixture") for d in function.decorator_list)


def _creates_a_table(call: ast.Call) -> bool:
    """A table handle's `init()` (no arguments: `Table.init`), or the CLI run with `init` as its command."""
    name = _called(call)
    if name == "init" and isinstance(call.func, ast.Attribute) and not call.args and not call.keywords:
        return True
    if name not in CLI_RUNNERS:
        return False
    words = [a for a in call.args if not (isinstance(a, ast.Name) and a.id == "app")]  # CliRunner().invoke(app, [])
    first = words[0] if words else None
    if isinstance(first, ast.List | ast.Tuple) and first.elts:
        first = first.elts[0]
    return isinstance(first, ast.Constant) and first.value == "init"


def local_table_makers(tree: ast.AST, makers: frozenset[str]) -> list[str]:
    """The helpers and fixtures (any function but a test) of a test module that make a table themselves (create it:
    `init()` on a handle, `stitch init`) instead of taking it from a maker of tests/support, or that are only a new
    name for one (a function, not a fixture, whose one statement returns a maker's table). A test itself may create
    its table: a test of creating one has to."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.name.startswith("test_"):
            continue
        if any(isinstance(node, ast.Call) and _creates_a_table(node) for node in ast.walk(function)):
            found.append(f"line {function.lineno}: {function.name} creates a table")
        body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        only = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
        maker = only.func.id if isinstance(only, ast.Call) and isinstance(only.func, ast.Name) else None
        if maker in makers and not _is_fixture(function):
            found.append(f"line {function.lineno}: {function.name} only renames {maker}")
    return found


def test_no_test_module_imports_another() -> None:
    """Helpers, constants and fixtures two test modules share live in tests/support (fixtures in its plugins,
    tests/conftest.py's pytest_plugins), whichever tiers the two are in."""
    found = {
        str(path.relative_to(ROOT)): imports_of_test_modules(ast.parse(path.read_text(encoding="utf-8")))
        for path in _test_modules()
    }
    assert {path: where for path, where in found.items() if where} == {}


def test_no_helper_of_a_test_module_makes_a_table_but_through_tests_support() -> None:
    """One way to make each kind of test table (tests/support/tables.py, spark_fixtures.demo_table and the makers
    beside them): a module's own maker drifts from them unseen."""
    makers = support_table_makers()
    assert {"new_table", "new_table_file", "demo_table"} <= makers
    found = {
        str(path.relative_to(ROOT)): local_table_makers(ast.parse(path.read_text(encoding="utf-8")), makers)
        for path in _test_modules()
    }
    assert {path: where for path, where in found.items() if where} == {}


#: (`TESTS` stands for `tests`, so that this module does not break the rule itself.)
BREAKS_THE_IMPORT_RULE = """
import TESTS.unit.test_cli
from TESTS.integration.test_read import changes
from TESTS import unit
from . import test_write
importlib.import_module("TESTS.integration.test_services")
CODE = "import json; from TESTS.integration.test_jvm_reader import ORDERS"
from TESTS.support.tables import new_table
DOC = "see TESTS/unit/test_cli.py"
""".replace("TESTS", "tests")

BREAKS_THE_MAKER_RULE = '''
def made(folder):
    table = stitchlake.open(folder / "t.yaml")
    table.init()
    return table

def by_cli(config):
    assert run_stitch("init", "-c", str(config)).returncode == 0

def in_process(config):
    return invoke("init", "-c", str(config))

def runner(config):
    return CliRunner().invoke(app, ["init", "-c", str(config)])

def renamed(folder, **changes):
    """A table."""
    return new_table(folder, **changes)

@pytest.fixture
def table(tmp_path):
    return new_table(tmp_path)

def history(folder):
    table = new_table(folder)
    table.write("a", rows)
    return table

def test_init(tmp_path):
    stitchlake.open(tmp_path).init()
'''


def test_the_guards_see_each_way_of_importing_a_test_module_and_of_making_a_table() -> None:
    """The two guards above, on code that breaks them (so that their empty answers there mean something)."""
    lines = [where.split(":")[0] for where in imports_of_test_modules(ast.parse(BREAKS_THE_IMPORT_RULE))]
    assert lines == [f"line {n}" for n in range(2, 8)]
    found = local_table_makers(ast.parse(BREAKS_THE_MAKER_RULE), frozenset({"new_table"}))
    assert [where.split(": ", 1)[1] for where in found] == [
        "made creates a table",
        "by_cli creates a table",
        "in_process creates a table",
        "runner creates a table",
        "renamed only renames new_table",
    ]
