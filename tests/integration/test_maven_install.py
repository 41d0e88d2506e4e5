"""`make setup` on a machine without `mvn`: Maven itself comes from Maven Central into `.venv/`, as the jars do.

The JVM reader's build (`make jvm`) and the pinned artifacts (scripts/maven_jars.py) take Maven from
`maven_jars.mvn()`: the `mvn` on PATH, else Apache Maven's distribution, downloaded, checked against its published
SHA-512 and unpacked whole. Here PATH has no `mvn` (as seen by `mvn()`) and the install goes to a temporary folder.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import maven_jars


def test_without_mvn_on_path_maven_is_installed_from_maven_central_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / f"apache-maven-{maven_jars.MAVEN_VERSION}"
    monkeypatch.setattr(maven_jars, "MAVEN_HOME", home)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    launcher = maven_jars.mvn()
    assert launcher == str(home / "bin" / "mvn")
    version = subprocess.run([launcher, "-v"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"Apache Maven {maven_jars.MAVEN_VERSION}" in version
    assert maven_jars.mvn() == launcher  # installed once: the second call finds it
    assert sorted(p.name for p in tmp_path.iterdir()) == [home.name, "maven-install"]  # nothing half-unpacked left
