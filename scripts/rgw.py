"""A throw-away S3 server for tests: Ceph's RADOS Gateway over one monitor and one in-memory OSD on 127.0.0.1.

Why Ceph: it is a real, Debian-packaged S3 implementation that honours conditional writes (`If-None-Match: *`
answers 412 on an existing key, `If-Match` takes the unquoted ETag), which the commit protocol relies on.
Everything (config, mon store, OSD, logs, sockets, pid files) lives under one private directory; nothing in
/etc/ceph or /var/lib/ceph is used. Authentication between the daemons is off; S3 clients sign with a user
created by `radosgw-admin`. Stdlib only, so tests and scripts can import it before anything else is installed.

    python -m scripts.rgw start --dir /tmp/rgw [--port 7480] [--watch-pid PID]   # prints JSON
    python -m scripts.rgw status --dir /tmp/rgw
    python -m scripts.rgw stop --dir /tmp/rgw
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import glob
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import quote, urlsplit

from scripts import local_daemons, run_captured
from scripts.local_daemons import Daemons, State, free_port, log_tail

PACKAGES = ("ceph-mon", "ceph-osd", "radosgw", "ceph-common")
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
DEFAULT_ACCESS_KEY = "stitchlake-test"
DEFAULT_SECRET_KEY = "stitchlake-test-secret"
REGION = "us-east-1"
START_TIMEOUT_S = 90.0
STEP_TIMEOUT_S = 60.0
APT_TIMEOUT_S = 900.0
MEMSTORE_BYTES = 4 << 30  # an upper bound only: memstore allocates what is written


@dataclasses.dataclass(frozen=True)
class RgwServer(State):
    """How to reach a running gateway, and which processes to stop."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str


#: With the AWS C++ SDK inside pyarrow 26, every pyarrow.fs.S3FileSystem write to Ceph 16's gateway fails
#: (UploadPart: 411 MissingContentLength) unless checksums are only sent when required; the SDK reads these when an
#: S3FileSystem is created.
CHECKSUM_ENV = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}


def client_env(endpoint: str, access_key: str, secret_key: str, region: str = REGION) -> dict[str, str]:
    """AWS_* variables for clients that configure themselves from the environment (obstore, pyarrow, boto, the
    CLI and Spark jobs started with them) to reach a gateway over plain http."""
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        **CHECKSUM_ENV,
    }


class RgwError(RuntimeError):
    """Ceph could not be installed or started; the message carries the relevant log tails."""


# ---------------------------------------------------------------------------------------------- install


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None]


def ensure_installed() -> None:
    """Install Debian's Ceph packages when a binary is missing (root only)."""
    if not missing_binaries():
        return
    failed = local_daemons.apt_install(PACKAGES, APT_TIMEOUT_S)
    if failed or missing_binaries():
        raise RgwError(failed or f"still missing {missing_binaries()} after apt-get install {' '.join(PACKAGES)}")


def _class_dir() -> str:
    """The folder of RADOS object classes; radosgw fails with -95 ('couldn't init storage provider') without it."""
    found = sorted(glob.glob("/usr/lib/*/rados-classes")) + sorted(glob.glob("/usr/lib*/rados-classes"))
    if not found:
        raise RgwError("no rados-classes folder under /usr/lib (is ceph-osd installed?)")
    return found[0]


# ---------------------------------------------------------------------------------------------- helpers


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _all_log_tails(workdir: Path) -> str:
    """Log tails, the gateway's first (it fails most often) and the chatty cluster log last and short."""

    def rank(path: Path) -> tuple[int, str]:
        order = ("client.rgw", "rgw", "osd", "mon", "client.admin", "watchdog", "ceph.log")
        return next((i for i, p in enumerate(order) if path.name.startswith(p)), len(order) - 1), path.name

    parts = []
    for path in sorted((workdir / "log").glob("*"), key=rank):
        if path.stat().st_size:
            parts.append(f"--- {path} ---\n{log_tail(path, 8 if path.name == 'ceph.log' else 25)}")
    return "\n".join(parts) or "(no logs)"


def _run(argv: list[str], workdir: Path, timeout: float = STEP_TIMEOUT_S) -> str:
    try:
        done = run_captured(argv, timeout)
    except subprocess.TimeoutExpired as exc:
        raise RgwError(f"{argv[0]} timed out after {timeout:g}s; logs:\n{_all_log_tails(workdir)}") from exc
    if done.returncode != 0:
        raise RgwError(
            f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}\n"
            f"logs:\n{_all_log_tails(workdir)}"
        )
    return done.stdout


# ---------------------------------------------------------------------------------------------- S3 (SigV4)


def s3_request(
    server: RgwServer,
    method: str,
    path: str,
    body: bytes = b"",
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    """One SigV4-signed path-style request, e.g. s3_request(srv, "PUT", "/bucket"); returns (status, headers, body).

    Enough S3 for fixtures (create/empty/delete buckets) without boto3 or pyarrow.
    """
    parts = urlsplit(server.endpoint)
    now = datetime.datetime.now(datetime.UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/{server.region}/s3/aws4_request"
    payload_hash = hashlib.sha256(body).hexdigest()
    canonical_uri = quote(path, safe="/~")
    canonical_query = "&".join(f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted((query or {}).items()))
    signed = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    signed.update({k.lower(): v for k, v in (headers or {}).items()})
    names = ";".join(sorted(signed))
    canonical = "\n".join(
        [
            method,
            canonical_uri,
            canonical_query,
            *(f"{k}:{signed[k].strip()}" for k in sorted(signed)),
            "",
            names,
            payload_hash,
        ]
    )
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{server.secret_key}".encode()
    for part in (amz_date[:8], server.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={server.access_key}/{scope}, SignedHeaders={names}, Signature={signature}"
    )
    signed.pop("host")
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    try:
        target = canonical_uri + (f"?{canonical_query}" if canonical_query else "")
        conn.request(method, target, body=body, headers=signed)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def create_bucket(server: RgwServer, bucket: str) -> None:
    status, _headers, body = s3_request(server, "PUT", f"/{bucket}")
    if status != 200:
        raise RgwError(f"create bucket {bucket!r}: HTTP {status} {body[:300]!r}")


def delete_bucket(server: RgwServer, bucket: str) -> None:
    """Delete every object (and multipart upload) of `bucket`, then the bucket; a missing bucket is fine."""
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    token: str | None = None
    while True:
        query = {"list-type": "2", "max-keys": "1000"}
        if token:
            query["continuation-token"] = token
        status, _headers, body = s3_request(server, "GET", f"/{bucket}", query=query)
        if status == 404:
            return
        if status != 200:
            raise RgwError(f"list bucket {bucket!r}: HTTP {status} {body[:300]!r}")
        root = ET.fromstring(body)
        for item in root.iter(f"{ns}Contents"):
            s3_request(server, "DELETE", f"/{bucket}/{item.findtext(f'{ns}Key')}")
        token = root.findtext(f"{ns}NextContinuationToken")
        if root.findtext(f"{ns}IsTruncated") != "true" or not token:
            break
    status, _headers, body = s3_request(server, "GET", f"/{bucket}", query={"uploads": ""})
    if status == 200:
        root = ET.fromstring(body)
        for upload in root.iter(f"{ns}Upload"):
            key, upload_id = upload.findtext(f"{ns}Key"), upload.findtext(f"{ns}UploadId")
            s3_request(server, "DELETE", f"/{bucket}/{key}", query={"uploadId": upload_id or ""})
    status, _headers, body = s3_request(server, "DELETE", f"/{bucket}")
    if status not in (204, 404):
        raise RgwError(f"delete bucket {bucket!r}: HTTP {status} {body[:300]!r}")


def s3_ready(server: RgwServer) -> bool:
    """True once a signed ListBuckets succeeds, i.e. the gateway is up and knows our user."""
    try:
        status, _headers, _body = s3_request(server, "GET", "/", timeout=2.0)
    except OSError:
        return False
    return status == 200


# ---------------------------------------------------------------------------------------------- start / stop


def _config(workdir: Path, fsid: str, mon_port: int, rgw_port: int) -> str:
    d = str(workdir)
    return f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
public network = 127.0.0.1/32
ms bind msgr1 = false
ms bind ipv6 = false
ms mon client mode = crc secure
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
log to stderr = false
err to stderr = true
crash dir = {d}/crash
exporter sock dir = {d}/run
keyring = {d}/keyring
osd class dir = {_class_dir()}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail crit = 1
mon data avail warn = 2
paxos propose interval = 0.05
paxos min wait = 0.01
mon tick interval = 1
mgr initial modules =
debug ms = 0

[mon]
mon data = {d}/mon/$cluster-$id
mon cluster log file = {d}/log/$cluster.log

[osd]
osd data = {d}/osd/$cluster-$id
osd objectstore = memstore
memstore device bytes = {MEMSTORE_BYTES}
osd op num shards = 1
osd op num threads per shard = 2
osd max object size = 5368709120

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw data = {d}/rgw
rgw thread pool size = 64
rgw enable usage log = false
rgw dns name =
rgw gc processor period = 60
rgw dynamic resharding = false
"""


class Gateway(Daemons[RgwServer]):
    """mon, OSD and radosgw must all run and S3 answer. A stop also finds the daemons by Ceph's pid files, stops
    the gateway first and the monitor last (an OSD says goodbye to the monitor, which takes 5 s if it is gone),
    and the watchdog after them."""

    module, state, error = "rgw", RgwServer, RgwError
    order = {"rgw": 0, "client": 0, "osd": 1, "mon": 2}

    def ready(self, state: RgwServer) -> bool:
        return s3_ready(state)

    def rank(self, name: str) -> int:
        return super().rank(name.split(":")[-1].split(".")[0])

    def logs(self, workdir: Path) -> str:
        return _all_log_tails(workdir)

    def stop(self, workdir: Path | str) -> None:
        """Stop every daemon started under `workdir` (state file and ceph pid files); the data stays for autopsy."""
        workdir = Path(workdir).resolve()
        state = self.read_state(workdir)
        pids = dict(state.pids) if state else {}
        pids.update({f"pidfile:{k}": v for k, v in _pidfile_pids(workdir).items()})
        watchdog = pids.pop("watchdog", None)
        self.kill(workdir, pids)
        if watchdog is not None and watchdog != os.getpid():
            self.kill(workdir, {"watchdog": watchdog}, grace_s=2.0)
        if state is not None:
            local_daemons.write_state(workdir, dataclasses.replace(state, pids={}))


GATEWAY = Gateway()
status, stop = GATEWAY.status, GATEWAY.stop


def start(
    workdir: Path | str,
    port: int | None = None,
    access_key: str = DEFAULT_ACCESS_KEY,
    secret_key: str = DEFAULT_SECRET_KEY,
    watch_pid: int | None = None,
    timeout: float = START_TIMEOUT_S,
) -> RgwServer:
    """Start mon + memstore OSD + radosgw under `workdir` (or return the one already running there).

    A stale or half-started set in `workdir` is stopped and wiped first. With `watch_pid`, a small watchdog
    process stops the daemons once that process is gone, so a killed test run leaves no orphans. Free ports
    can be taken between probing and binding, so a bind failure is retried with new ports.
    """
    for attempt in range(3):
        try:
            return _start_once(workdir, port, access_key, secret_key, watch_pid, timeout)
        except RgwError as exc:
            text = str(exc)
            if port is not None or attempt == 2 or not ("Address already in use" in text or "bind" in text):
                raise
    raise AssertionError("unreachable")


def _start_once(
    workdir: Path | str, port: int | None, access_key: str, secret_key: str, watch_pid: int | None, timeout: float
) -> RgwServer:
    workdir = Path(workdir).resolve()
    running = status(workdir)
    if running is not None:
        return running
    ensure_installed()
    stop(workdir)
    for sub in ("mon", "osd", "rgw", "run", "log", "crash"):
        shutil.rmtree(workdir / sub, ignore_errors=True)
    (workdir / local_daemons.STATE_FILE).unlink(missing_ok=True)
    for sub in ("mon/ceph-a", "osd/ceph-0", "rgw", "run", "log", "crash"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    mon_port = free_port()
    rgw_port = port or free_port()
    if port and not _port_free(port):
        raise RgwError(f"port {port} is already in use")
    fsid = str(uuid.uuid4())
    conf = workdir / "ceph.conf"
    conf.write_text(_config(workdir, fsid, mon_port, rgw_port))
    base = ["--conf", str(conf), "--cluster", "ceph"]
    server = RgwServer(
        endpoint=f"http://127.0.0.1:{rgw_port}",
        access_key=access_key,
        secret_key=secret_key,
        region=REGION,
        dir=str(workdir),
        pids={},
    )
    pids: dict[str, int] = {}
    with GATEWAY.starting(workdir, pids):
        monmap = workdir / "monmap"
        _run(
            [
                "monmaptool",
                "--create",
                "--clobber",
                "--fsid",
                fsid,
                "--addv",
                "a",
                f"[v2:127.0.0.1:{mon_port}]",
                str(monmap),
            ],
            workdir,
        )
        _run(["ceph-mon", *base, "--mkfs", "-i", "a", "--monmap", str(monmap)], workdir)
        GATEWAY.spawn(workdir, server, pids, "mon", ["ceph-mon", *base, "-f", "-i", "a"])
        cli = ["ceph", *base, "--connect-timeout", "10"]
        osd_uuid = str(uuid.uuid4())
        osd_id = _run([*cli, "osd", "new", osd_uuid], workdir).strip()
        _run(["ceph-osd", *base, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid], workdir)
        GATEWAY.spawn(workdir, server, pids, "osd", ["ceph-osd", *base, "-f", "-i", osd_id])
        GATEWAY.wait(
            "the OSD to come up",
            lambda: _osd_up(cli),
            workdir,
            pids,
            deadline,
        )
        GATEWAY.spawn(workdir, server, pids, "rgw", ["radosgw", *base, "-f", "-n", "client.rgw.a"])
        admin = ["radosgw-admin", *base, "-n", "client.admin"]
        GATEWAY.wait("radosgw to listen", lambda: not _port_free(rgw_port), workdir, pids, deadline)
        _run(
            [
                *admin,
                "user",
                "create",
                "--uid",
                "stitchlake",
                "--display-name",
                "stitchlake tests",
                "--access-key",
                access_key,
                "--secret",
                secret_key,
            ],
            workdir,
        )
        GATEWAY.wait("S3 to answer", lambda: s3_ready(server), workdir, pids, deadline)
    return GATEWAY.started(workdir, server, pids, watch_pid)


def _osd_up(cli: list[str]) -> bool:
    try:
        done = run_captured([*cli, "osd", "dump", "--format", "json"], 10)
        osds = json.loads(done.stdout).get("osds", [])
    except (subprocess.TimeoutExpired, ValueError):
        return False
    return bool(osds) and all(osd.get("up") == 1 and osd.get("in") == 1 for osd in osds)


def _pidfile_pids(workdir: Path) -> dict[str, int]:
    found = {}
    for path in (workdir / "run").glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            found[path.stem] = int(path.read_text().strip())
    return found


def _start_command(args: argparse.Namespace) -> RgwServer:
    return start(args.dir, args.port, args.access_key, args.secret_key, args.watch_pid, args.timeout)


def _start_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--access-key", default=DEFAULT_ACCESS_KEY)
    parser.add_argument("--secret-key", default=DEFAULT_SECRET_KEY)
    parser.add_argument("--timeout", type=float, default=START_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    return GATEWAY.command_line(__doc__ or "", argv, _start_options, _start_command)


if __name__ == "__main__":
    sys.exit(main())
