"""Pinned artifacts from Maven Central, fetched on first use into `.venv/maven/` (never committed).

The peers' Spark connectors, Spark's own Delta and Iceberg readers, Hadoop's S3 connector, Trino and Kafka ship
only through Maven Central. Each is named here once with its exact version; `fetch` copies it with
`mvn dependency:copy` (Maven's own local repository caches downloads across checkouts) and `fetch_tree` copies an
artifact with its runtime dependencies through a throw-away POM. One installer at a time: several test workers
may ask at once, so a file lock guards each artifact.

Maven itself is the one on PATH, or else Apache Maven's own distribution from Maven Central, installed on first use
into `.venv/` (`mvn()`; the JVM reader's build takes it from `python -m scripts.maven_jars --mvn`).

Run as a script to fetch coordinates by hand: `python -m scripts.maven_jars G:A:V[:packaging[:classifier]]...`
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from scripts import ROOT, run_captured

#: Where fetched artifacts live: inside the virtual environment, so `rm -rf .venv` starts clean.
FOLDER = ROOT / ".venv" / "maven"
FETCH_TIMEOUT_S = 1800.0


def _artifact_name(coordinate: str) -> str:
    """`G:A:V[:packaging[:classifier]]` -> the file name Maven gives it (`A-V[-classifier].packaging`)."""
    parts = coordinate.split(":")
    if len(parts) < 3:
        raise ValueError(f"not a Maven coordinate (G:A:V[:packaging[:classifier]]): {coordinate}")
    _, artifact, version = parts[:3]
    packaging = parts[3] if len(parts) > 3 else "jar"
    classifier = f"-{parts[4]}" if len(parts) > 4 else ""
    return f"{artifact}-{version}{classifier}.{packaging}"


#: Apache Maven's distribution, for a machine without `mvn`: Maven Central serves it like any artifact.
MAVEN_VERSION = "3.9.16"
MAVEN_HOME = ROOT / ".venv" / f"apache-maven-{MAVEN_VERSION}"
CENTRAL = "https://repo.maven.apache.org/maven2"


def mvn() -> str:
    """`mvn` on PATH, else Maven installed into `.venv/` from Maven Central (once; its SHA-512 checked)."""
    found = shutil.which("mvn")
    if found is not None:
        return found
    launcher = MAVEN_HOME / "bin" / "mvn"
    if not launcher.exists():
        with _Locked(MAVEN_HOME.parent / "maven-install"):  # not FOLDER's lock: `fetch` holds that one
            if not launcher.exists():
                _install_maven()
    return str(launcher)


def _install_maven() -> None:
    name = f"apache-maven-{MAVEN_VERSION}-bin.tar.gz"
    url = f"{CENTRAL}/org/apache/maven/apache-maven/{MAVEN_VERSION}/{name}"
    print(f"'mvn' is not on PATH: installing Maven {MAVEN_VERSION} from {url} into {MAVEN_HOME}", file=sys.stderr)
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
            data = response.read()
        with urllib.request.urlopen(url + ".sha512", timeout=60) as response:
            digest = response.read().decode("ascii").split()[0]
    except OSError as exc:
        raise RuntimeError(
            f"cannot download Maven ({url}): {exc}; install it (Debian/Ubuntu: apt-get install maven)"
        ) from exc
    if hashlib.sha512(data).hexdigest() != digest:
        raise RuntimeError(f"{url}: its SHA-512 is not the one Maven Central publishes for it; not installed")
    with tempfile.TemporaryDirectory(dir=MAVEN_HOME.parent) as folder:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 on: no member may land outside the folder
                archive.extractall(folder, filter="data")
            else:
                archive.extractall(folder)  # Maven Central's archive, its digest checked above
        unpacked = Path(folder) / f"apache-maven-{MAVEN_VERSION}"
        (unpacked / "bin" / "mvn").chmod(0o755)
        unpacked.rename(MAVEN_HOME)  # whole or not at all: a cut download never looks installed


def _run(argv: Sequence[str], cwd: Path | None = None) -> None:
    done = run_captured(argv, FETCH_TIMEOUT_S, cwd=cwd)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        errors = [line for line in output.splitlines() if "ERROR" in line][:6] or output.splitlines()[-20:]
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed (exit {done.returncode}):\n" + "\n".join(errors))


class _Locked:
    """An exclusive lock on `<folder>/.lock` for the time a fetch takes."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / ".lock"

    def __enter__(self) -> None:
        self.handle = open(self.path, "a+")
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        self.handle.close()


def fetch(coordinates: Iterable[str], folder: Path = FOLDER) -> list[Path]:
    """Each artifact alone (no dependencies: connector bundles carry theirs), in the order given."""
    out = []
    with _Locked(folder):
        for coordinate in coordinates:
            target = folder / _artifact_name(coordinate)
            if not target.exists():
                parts = coordinate.split(":")
                artifact = ":".join([*parts[:3], parts[3] if len(parts) > 3 else "jar", *parts[4:5]])
                with tempfile.TemporaryDirectory(dir=folder) as scratch:
                    _run(
                        [
                            mvn(),
                            "-B",
                            "-q",
                            "dependency:copy",
                            f"-Dartifact={artifact}",
                            f"-DoutputDirectory={scratch}",
                        ]
                    )
                    os.replace(Path(scratch) / target.name, target)
            out.append(target)
    return out


def fetch_tree(
    coordinate: str, excludes: Sequence[str] = (), folder: Path = FOLDER, also: Sequence[str] = ()
) -> list[Path]:
    """A jar and its runtime dependencies (minus `excludes`, `G:A` each, `*` for any artifact of a group), in a
    folder of their own; `also` names more artifacts resolved with it (pinned versions of what it calls).

    For artifacts that are not bundles (Hadoop's S3 connector with the AWS SDK modules it calls, Kafka's broker):
    a throw-away POM names the dependencies, each with every exclusion, and Maven resolves the rest. The folder
    is fetched again when the request changes.
    """
    _, artifact, version = coordinate.split(":")[:3]
    target = folder / f"{artifact}-{version}-with-dependencies"
    done = target / ".complete"
    wanted = "\n".join([coordinate, *also, "excludes:", *excludes])
    with _Locked(folder):
        if (done.read_text() if done.exists() else "") != wanted:
            shutil.rmtree(target, ignore_errors=True)
            exclusions = "".join(
                f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
                for g, a in (e.split(":") for e in excludes)
            )
            dependencies = "".join(
                f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                f"<exclusions>{exclusions}</exclusions></dependency>"
                for g, a, v in (c.split(":")[:3] for c in (coordinate, *also))
            )
            pom = (
                '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
                "<groupId>stitchlake.local</groupId><artifactId>fetch</artifactId><version>0</version>"
                f"<dependencies>{dependencies}</dependencies></project>"
            )
            with tempfile.TemporaryDirectory(dir=folder) as scratch:
                (Path(scratch) / "pom.xml").write_text(pom)
                _run(
                    [
                        mvn(),
                        "-B",
                        "-q",
                        "dependency:copy-dependencies",
                        "-DincludeScope=runtime",
                        f"-DoutputDirectory={target}",
                    ],
                    cwd=Path(scratch),
                )
            done.write_text(wanted)
    return sorted(p for p in target.iterdir() if p.suffix == ".jar")


if __name__ == "__main__":
    if sys.argv[1:] == ["--mvn"]:
        print(mvn())
        sys.exit(0)
    for path in fetch(sys.argv[1:]):
        print(path)
