"""`stitch report` (issue 38): one self-contained HTML file with the operator's view, opened in a real browser.

The table is real and made through the real CLI (tests/support/operator_table.py: three streams, one fed from a topic
of the
session's Kafka broker, a compaction, a savepoint, a rescale, records left in the topic). The report is written by
`stitch report` in its own process and opened in headless Chromium (Debian's package, installed here when missing,
as tests/support/s3_server.py installs Ceph): the DOM after load holds the charts, the screenshot is not blank, and no
script error or console error was raised.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import local_daemons
from tests.support.cli import stitch_json
from tests.support.operator_table import OperatorTable, build
from tests.support.processes import run_stitch
from tests.support.tables import write_table_yaml

#: Debian's package of headless Chromium.
CHROMIUM_PACKAGES = ("chromium",)
WINDOW = (1280, 2400)
#: Recorded into the DOM by a handler the test puts in front of the page: any script error, any console error.
CATCHER = (
    "<script>window.__errors=[];function __note(m){document.documentElement.setAttribute('data-errors',"
    "(document.documentElement.getAttribute('data-errors')||'')+String(m)+';');}"
    "window.addEventListener('error',function(e){__note(e.message);});"
    "var __ce=console.error;"
    "console.error=function(){__note([].join.call(arguments,' '));__ce.apply(console,arguments);};"
    "</script>"
)


def chromium() -> str:
    """The `chromium` binary, installed from Debian's packages when missing (root only); the test fails clearly
    when it cannot be."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    failed = local_daemons.apt_install(CHROMIUM_PACKAGES, 1800)
    found = shutil.which("chromium")
    if failed or not found:
        pytest.fail(f"headless Chromium is needed to render the report and could not be installed: {failed}")
    return found


def browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",  # tests run as root
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={page.parent / 'chromium-profile'}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def operator_table(demo_data: Path, kafka_broker: str, tmp_path_factory: pytest.TempPathFactory) -> OperatorTable:
    return build(tmp_path_factory.mktemp("operator"), demo_data, kafka_broker)


def test_the_report_renders_its_charts_in_headless_chromium(operator_table: OperatorTable, tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    out = tmp_path / "report.html"
    made = stitch_json("report", "-c", str(operator_table.config), "--out", str(out))
    assert made["out"] == str(out) and made["bytes"] == out.stat().st_size > 0
    assert made["charts"] == ["file_group_sizes", "logs_per_stream", "commits_over_time", "kafka_lag"], made
    assert made["streams"] == ["orders", "payments", "shipments"]
    assert {"timeline", "file_groups", "streams", "savepoints", "rescales"} <= set(made["metadata_rows"])
    page = out.read_text(encoding="utf-8")
    # Self-contained: nothing to fetch (the SVG namespace is a name, not a fetch).
    assert not re.search(r"""(src|href)\s*=|@import|url\(|<link|<img|<iframe""", page, re.I), "fetches something"
    assert len(re.findall(r"https?://", page)) == page.count('xmlns="http://www.w3.org/2000/svg"')
    for text in ("before-rescale", operator_table.topic, "payments", "shipments", "compaction", "rescale"):
        assert text in page, text

    watched = tmp_path / "watched.html"
    watched.write_text(page.replace("<head>", "<head>" + CATCHER, 1), encoding="utf-8")
    dumped = browse(watched, "--virtual-time-budget=3000", "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = dumped.stdout
    assert 'data-errors="' not in dom, re.findall(r'data-errors="[^"]*"', dom)
    for name in made["charts"]:
        chart = re.search(rf'<figure data-chart="{name}"[^>]*>(.*?)</figure>', dom, re.S)
        assert chart is not None, f"chart {name} is not in the rendered page"
        assert "<svg" in chart.group(1) and re.search(r"<(rect|circle)\b", chart.group(1)), name
    assert dom.count("<circle") >= len(
        stitch_json("timeline", "show", "-c", str(operator_table.config), "-n", "0")["instants"]
    )

    shot = tmp_path / "report.png"
    taken = browse(watched, f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    errors = [
        line for line in taken.stderr.splitlines() if "Uncaught" in line or ("CONSOLE" in line and "rror" in line)
    ]
    assert not errors, errors
    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    pixels = np.asarray(image, dtype=np.int16).reshape(-1, 3)
    inked = int((pixels.min(axis=1) < 200).sum())
    coloured = int((pixels.max(axis=1) - pixels.min(axis=1) > 60).sum())
    assert inked > 0.02 * len(pixels), f"the screenshot is nearly blank: {inked} inked pixels"
    assert coloured > 2000, f"the charts' colours are missing from the screenshot: {coloured} coloured pixels"
    keep = Path("/tmp/stitch-report-screenshot.png")
    shutil.copy(shot, keep)  # for a person to look at


def test_warnings_show_the_command_that_fixes_them_and_a_broker_that_is_down_is_no_failure(
    operator_table: OperatorTable, tmp_path: Path
) -> None:
    from stitchlake.api import open as open_table
    from stitchlake.services.inspect.report import report

    config = str(operator_table.config)
    stitch_json("compact", "-c", config, "--schedule")
    # The plan nobody runs is stale once compaction.stale_plan_minutes have passed: look from two hours on.
    later = report(open_table(config), f"-c {config}", now=time.time() + 7200, kafka_timeout_s=5)
    [warning] = [w for w in later.warnings if "compaction plan" in w.text]
    assert warning.commands == [f"stitch compact -c {config}"]
    assert f"<code>stitch compact -c {config}</code>" in later.html

    # The same table, its brokers unreachable: the lag is unknown, the report and the query still work.
    document: dict[str, Any] = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
    document["streams"]["orders"]["source"]["bootstrap_servers"] = f"127.0.0.1:{local_daemons.free_port()}"
    down = write_table_yaml(tmp_path, document, "down.yaml")
    queried = run_stitch(
        "sql", "-c", str(down), "SELECT partition, lag, note FROM t$streams WHERE stream = 'orders'", "--json"
    )
    assert queried.returncode == 0, queried.stdout + queried.stderr
    rows = json.loads(queried.stdout)["records"]
    assert rows and all(r["lag"] is None and r["note"].startswith("lag unknown") for r in rows), rows
    out = tmp_path / "down.html"
    made = stitch_json("report", "-c", str(down), "--out", str(out))
    assert "kafka_lag" not in made["charts"]
    assert "lag unknown" in out.read_text(encoding="utf-8")


def test_report_refuses_a_bad_out_path_before_reading(operator_table: OperatorTable, tmp_path: Path) -> None:
    for out, says in ((tmp_path / "r.txt", ".html"), (tmp_path / "missing" / "r.html", "does not exist")):
        refused = run_stitch("report", "-c", str(operator_table.config), "--out", str(out), "--json")
        assert refused.returncode == 2, refused.stdout
        assert says in json.loads(refused.stdout)["error"]
