"""Do conditional S3 writes have exactly one winner? N processes race on one key per round, for R rounds.

The commit protocol relies on `put(mode="create")` (If-None-Match: *) and `put(mode={"e_tag": ...})`
(If-Match) being atomic on the server, not just in one client. Each round every process waits on a barrier,
then writes its own id to the round's key; exactly one may succeed and the stored object must hold the
winner's id. `--mode update` first creates the key, lets everyone read the same ETag, then races If-Match.

    python -m scripts.s3_race_check                      # starts a throw-away RADOS Gateway (scripts/rgw.py)
    python -m scripts.s3_race_check --endpoint http://127.0.0.1:7480 --access-key K --secret-key S
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from scripts import rgw


@dataclasses.dataclass(frozen=True)
class RoundResult:
    key: str
    winners: list[int]
    losers_by_error: dict[str, int]  # exception class name -> count
    stored: str  # what the object holds afterwards

    @property
    def ok(self) -> bool:
        return (
            len(self.winners) == 1
            and self.stored == str(self.winners[0])
            and set(self.losers_by_error)
            <= {
                "AlreadyExistsError",
                "PreconditionError",
            }
        )


def store_kwargs(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1") -> dict[str, Any]:
    """Keyword arguments for obstore.store.S3Store against a plain-HTTP endpoint (picklable, unlike a store)."""
    return {
        "endpoint": endpoint,
        "access_key_id": access_key,
        "secret_access_key": secret_key,
        "region": region,
        "client_options": {"allow_http": True},
    }


def _racer(
    ident: int,
    bucket: str,
    kwargs: dict[str, Any],
    keys: list[str],
    mode: str,
    seeded: Barrier,
    barrier: Barrier,
    results: Any,
) -> None:
    """One contender: build its own store (obstore objects should not cross a fork), then race every round."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, **kwargs)
    for key in keys:
        put_mode: Any = "create"
        if mode == "update":
            seeded.wait()  # the parent has created the key
            put_mode = {"e_tag": (obstore.head(store, key)["e_tag"] or "").strip('"')}  # RGW wants it unquoted
        barrier.wait()
        try:
            obstore.put(store, key, str(ident).encode(), mode=put_mode)
            results.put((key, ident, ""))
        except Exception as exc:
            results.put((key, ident, type(exc).__name__))


def race(
    bucket: str, kwargs: dict[str, Any], procs: int = 8, rounds: int = 50, mode: str = "create"
) -> list[RoundResult]:
    """Run the race and return one result per round."""
    import obstore
    from obstore.store import S3Store

    ctx = mp.get_context("spawn")
    run = uuid.uuid4().hex[:8]
    keys = [f"race-{run}/{mode}/{i:04d}" for i in range(rounds)]
    seeded = ctx.Barrier(procs + 1)
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_racer, args=(i, bucket, kwargs, keys, mode, seeded, barrier, results), daemon=True)
        for i in range(procs)
    ]
    for worker in workers:
        worker.start()
    store = S3Store(bucket, **kwargs)
    if mode == "update":
        for key in keys:
            obstore.put(store, key, b"seed")
            seeded.wait()
    outcomes: dict[str, list[tuple[int, str]]] = {key: [] for key in keys}
    for _ in range(procs * rounds):
        key, ident, error = results.get(timeout=120)
        outcomes[key].append((ident, error))
    for worker in workers:
        worker.join(timeout=30)
    report = []
    for key in keys:
        errors: dict[str, int] = {}
        for _ident, error in outcomes[key]:
            if error:
                errors[error] = errors.get(error, 0) + 1
        stored = bytes(obstore.get(store, key).bytes()).decode()
        report.append(RoundResult(key, sorted(i for i, e in outcomes[key] if not e), errors, stored))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", help="an existing S3 endpoint; default: start a throw-away RADOS Gateway")
    parser.add_argument("--access-key", default=rgw.DEFAULT_ACCESS_KEY)
    parser.add_argument("--secret-key", default=rgw.DEFAULT_SECRET_KEY)
    parser.add_argument("--bucket", help="an existing bucket; default: create one")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--mode", choices=["create", "update", "both"], default="both")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="s3-race-") as tmp:
        started = None
        if args.endpoint:
            server = rgw.RgwServer(args.endpoint, args.access_key, args.secret_key, rgw.REGION, dir="", pids={})
        else:
            started = server = rgw.start(Path(tmp) / "rgw")
        try:
            bucket = args.bucket or f"race-{uuid.uuid4().hex[:10]}"
            if not args.bucket:
                rgw.create_bucket(server, bucket)
            kwargs = store_kwargs(server.endpoint, server.access_key, server.secret_key, server.region)
            failed = 0
            for mode in ("create", "update") if args.mode == "both" else (args.mode,):
                began = time.monotonic()
                report = race(bucket, kwargs, args.procs, args.rounds, mode)
                bad = [r for r in report if not r.ok]
                failed += len(bad)
                errors: dict[str, int] = {}
                for r in report:
                    for name, count in r.losers_by_error.items():
                        errors[name] = errors.get(name, 0) + count
                print(
                    f"{mode}: {args.procs} processes x {len(report)} rounds: "
                    f"{len(report) - len(bad)} rounds with exactly one winner, {len(bad)} bad; "
                    f"losers' errors {errors}; {time.monotonic() - began:.1f}s"
                )
                for r in bad[:10]:
                    print(f"  BAD {r}")
            if not args.bucket:
                rgw.delete_bucket(server, bucket)
        finally:
            if started is not None:
                rgw.stop(started.dir)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
