"""Table locks: the short critical section around drawing instant times and publishing (design.md §4, §6).

The lock is held only for milliseconds (draw a time, publish one instant file), never while data is written,
so a plain lease is enough and a crashed holder costs at most one lease of waiting.

`FileSystemLock` uses nothing but `Storage.put_if_absent`, `read_bytes`, `list_names` and `delete`, so it
works on local disks and on object stores with conditional puts alike (no fcntl, no rename, no
compare-and-swap). Its design:

- Lock files are ``.stitch/locks/<name>.<generation:020d>`` holding JSON
  ``{owner, host, pid, acquired_at, expires_at}`` (epoch seconds). The **highest** generation is the current
  lease. It is free when a ``<name>.<generation:020d>.released`` companion exists or when its ``expires_at``
  has passed.
- Acquiring = ``put_if_absent`` of generation ``highest + 1``; the storage guarantees exactly one racer wins
  a generation. The winner then lists once more: if a higher generation already exists, its listing was
  stale and it just recreated a generation that cleanup had deleted (a "ghost"); it deletes its ghost and
  keeps waiting. The highest generation is never deleted, so this check is sufficient.
- Release = ``put_if_absent`` of the companion for **our** generation only; another owner's files are never
  written or deleted. Releasing a lock we no longer hold is a no-op with a warning.
- After winning generation ``g`` the winner deletes, best effort, every file of generations ``< g - 1``, so
  the folder stays at a handful of files. Keeping ``g - 1`` makes ghosts rare (a racer that listed just
  before us collides on ``g`` instead of recreating ``g - 1``).
- **Renewal** is supported and is simply acquiring the next generation while still holding the current one:
  ``renew()`` checks that our generation is still the highest and not released, then ``put_if_absent``\\s
  ``g + 1`` with a fresh ``expires_at`` (keeping the original ``acquired_at``). If anyone took over in the
  meantime, the put or the ghost check fails and `LockLost` is raised. No in-place rewrite is ever needed,
  so renewal is as race-free as acquisition. Callers doing something unexpectedly long call ``renew()``
  between steps; the normal short critical section needs none.
- **Fencing**: ``check()`` raises `LockLost` when our generation is no longer the highest, i.e. our lease
  expired *and* someone took it over. ``fence()`` also refuses once our own lease ran out, and publishing
  calls it inside the create-if-absent, after the slow durable write and right before the link. A publish
  that outlives its lease is not harmless: another process may meanwhile have taken the lock, presumed the
  frozen publisher dead (expired heartbeat) and started undoing its instant, and a completion that appears
  after that would name deleted files (found by the torture test with SIGSTOPped processes). The create after
  the fence takes time too (`publish_s`, the storage's bounded create): a lease with less left is renewed first.
  What remains is
  the instant between ``fence()`` and the link; closing it needs a storage-level fencing token (a
  conditional put on the lock generation), which plain files cannot give.
- **Clocks**: ``expires_at`` is written by the holder and compared with the waiter's wall clock, so host
  clocks must agree to well within ``expire_s`` (NTP does this easily for the 30 s default). A lock file
  that cannot be read or parsed (it should never happen: files are created whole) is treated as held until
  the observer has seen it unchanged for ``expire_s`` of its own monotonic clock, so it cannot block forever.
- A ``SIGKILL``\\ed holder's lease is taken over once its ``expires_at`` has passed, never before.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import re
import socket
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from stitchlake.errors import ConfigError, LockLost, LockTimeout, StitchError
from stitchlake.paths import LOCKS_DIR
from stitchlake.storage import Storage

log = logging.getLogger(__name__)

#: Table-relative folder of the filesystem lock provider (design.md §3).
LOCKS_FOLDER = LOCKS_DIR
RELEASED_SUFFIX = ".released"
_GEN_DIGITS = 20
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_FILE_RE = re.compile(r"^(?P<name>.+)\.(?P<gen>\d{20})(?P<released>\.released)?$")
_FIRST_POLL_S = 0.01
_MAX_POLL_S = 0.2


def default_owner() -> str:
    """A lock owner id unique per lock object: readable host and pid, plus a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def format_epoch(ts: float | None) -> str:
    """An epoch time as ISO-8601 UTC with milliseconds, for messages people read."""
    if ts is None:
        return "unknown time"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class LockHolder:
    """Who holds a lock, as far as the provider can tell (for error messages)."""

    owner: str
    host: str | None = None
    pid: int | None = None
    since: float | None = None
    expires_at: float | None = None

    def describe(self) -> str:
        pid = "?" if self.pid is None else self.pid
        text = f"owner {self.owner!r} (host {self.host or '?'}, pid {pid})"
        text += f" since {format_epoch(self.since)}"
        if self.expires_at is not None:
            text += f", lease until {format_epoch(self.expires_at)}"
        return text


class TableLock(ABC):
    """A named, exclusive, lease-style lock on one table.

    `with lock:` acquires with the configured `wait_s` and always releases. Only the owner that acquired the
    lock can release it.
    """

    def __init__(self, *, name: str, wait_s: float, owner: str | None = None) -> None:
        if wait_s < 0:
            raise ConfigError(f"concurrency.lock.wait_s: must be >= 0, got {wait_s!r}")
        self.name = name
        self.wait_s = float(wait_s)
        self.owner = owner or default_owner()
        #: How long the create a fence guards may take (the table storage's `create_budget_s`, set by
        #: `bound_creates`): a lease wants that much left at the fence, and is renewed first when it has less.
        self.publish_s = 0.0
        #: The lease: how long the lock stays ours without a word from us (the session timeout on ZooKeeper).
        self.expire_s = 30.0

    def bound_creates(self, budget_s: float) -> None:
        """Guard creates that may take `budget_s` (the storage's bounded create) with this lock's fences. A lease no
        longer than that cannot promise the create lands within it (a commit fenced under it could land after
        another writer took the lock): said in a warning, not refused, for short leases are what fault tests use
        to make takeovers happen, on stores that answer in milliseconds."""
        if budget_s > 0 and self.expire_s <= budget_s:
            _warn_short_lease(self.expire_s, budget_s)
        self.publish_s = budget_s

    @abstractmethod
    def acquire(self, wait_s: float | None = None) -> None:
        """Take the lock, waiting up to `wait_s` (default: the configured wait); LockTimeout otherwise."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock back. A no-op (with a warning) if we do not hold it any more."""

    @abstractmethod
    def check(self) -> None:
        """Fencing before publishing: LockLost if someone else took the lock over since we acquired it."""

    @property
    @abstractmethod
    def held(self) -> bool:
        """Whether this object believes it holds the lock (`check()` verifies it)."""

    def fence(self) -> None:
        """The check right before publishing: `check()`, and for leases also refuse once our own lease ran out.

        A holder frozen past its lease (a stall, a SIGSTOP) may find nobody took over yet, but another process
        may do so at any moment and act on a timeline without our publish; so an expired lease never publishes.
        """
        self.check()

    def renew(self) -> None:  # noqa: B027 - optional hook, a no-op for session-based providers
        """Extend our lease. A no-op for providers whose ownership lasts as long as the client session."""

    def describe(self) -> str:
        """Which lock this is, for messages."""
        return f"table lock {self.name!r}"

    def _wait_for(self, wait_s: float | None) -> float:
        """The seconds an `acquire` waits (the configured wait unless `wait_s` is given; never negative), refusing
        a second `acquire` while held: no provider's lock is re-entrant."""
        if self.held:
            raise StitchError(f"{self.describe()} is already held by {self.owner!r}; it is not re-entrant")
        return self.wait_s if wait_s is None else max(float(wait_s), 0.0)

    def __enter__(self) -> TableLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@functools.cache
def _warn_short_lease(expire_s: float, budget_s: float) -> None:
    """Once a process: a table's lock is made for every transaction."""
    log.warning(
        "concurrency.lock.expire_s: %g s is no longer than a create on this table's storage may take (%g s, retries "
        "included): a commit fenced under the lease could land after it ran out and another writer took the lock; "
        "set it above %g s (the default 30 s is)",
        expire_s,
        budget_s,
        budget_s,
    )


def lease_seconds(expire_s: float) -> float:
    """`concurrency.lock.expire_s` as seconds, refused (exit 2) unless positive: every provider's lease (a lock
    file's, a ZooKeeper session's) ends that long after its holder last renewed it."""
    if expire_s <= 0:
        raise ConfigError(f"concurrency.lock.expire_s: must be > 0, got {expire_s!r}")
    return float(expire_s)


def _lock_file_name(name: str, generation: int, released: bool = False) -> str:
    return f"{name}.{generation:0{_GEN_DIGITS}d}" + (RELEASED_SUFFIX if released else "")


class FileSystemLock(TableLock):
    """The default lock provider: generation files created with `Storage.put_if_absent` (module docstring)."""

    def __init__(
        self,
        storage: Storage,
        *,
        name: str = "table",
        wait_s: float = 60.0,
        expire_s: float = 30.0,
        owner: str | None = None,
    ) -> None:
        if not _NAME_RE.match(name):
            raise ConfigError(f"lock name {name!r} must be letters, digits, '_', '-' or '.'")
        expire = lease_seconds(expire_s)
        super().__init__(name=name, wait_s=wait_s, owner=owner)
        self.storage = storage
        self.expire_s = expire
        self._generation: int | None = None
        self._acquired_at: float | None = None
        self._expires_at: float | None = None
        # generation -> monotonic time we first failed to read it (see "Clocks" in the module docstring)
        self._unreadable_since: dict[int, float] = {}

    # -- public -------------------------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        return self._generation is not None

    @property
    def generation(self) -> int | None:
        """Our current generation, or None when not held."""
        return self._generation

    @property
    def expires_at(self) -> float | None:
        """When our lease ends (epoch seconds), or None when not held."""
        return self._expires_at if self.held else None

    def describe(self) -> str:
        return f"table lock {self.name!r} in {self.storage.uri.rstrip('/')}/{LOCKS_FOLDER}"

    def acquire(self, wait_s: float | None = None) -> None:
        wait = self._wait_for(wait_s)
        deadline = time.monotonic() + wait
        delay = _FIRST_POLL_S
        holder: LockHolder | None = None
        while True:
            top, holder, free = self._inspect()
            if free and self._take(top + 1, acquired_at=time.time()):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if holder is None:  # we lost a race for a free lock: name the winner
                    _top, holder, _free = self._inspect()
                raise LockTimeout(self._timeout_message(holder, wait))
            time.sleep(min(delay * random.uniform(0.5, 1.5), remaining))
            delay = min(delay * 2, _MAX_POLL_S)

    def renew(self) -> None:
        """Extend our lease by `expire_s` from now, by taking the next generation while still holding ours."""
        generation = self._require_held()
        top, released = self._scan()
        if top != generation or generation in released:
            self._lose(top)
        if not self._take(generation + 1, acquired_at=self._acquired_at or time.time()):
            top, _released = self._scan()
            self._lose(top)

    def check(self) -> None:
        generation = self._require_held()
        top, released = self._scan()
        if top == generation and generation not in released:
            return
        self._lose(top)

    def fence(self) -> None:
        self.check()
        left = (self._expires_at - time.time()) if self._expires_at is not None else None
        # A create that takes its whole budget must still land within the lease; a lease no longer than the budget
        # cannot promise that (`bound_creates` warns), and is renewed once half of it is gone, as much as it can be
        # helped.
        wanted = self.publish_s if self.publish_s < self.expire_s else self.expire_s / 2
        if left is not None and 0 < left < wanted:
            self.renew()  # still ours
        if self._expires_at is not None and time.time() >= self._expires_at:
            # Still ours (nobody took over), so `release()` still gives it back properly.
            raise LockLost(
                f"{self.describe()}: our lease (owner {self.owner!r}, generation {self._generation}) expired at "
                f"{format_epoch(self._expires_at)} before we could publish; nothing may be published under it"
            )
        left = (self._expires_at - time.time()) if self._expires_at is not None else None
        if left is not None and left < self.publish_s < self.expire_s:
            # A renewal that itself took long (a slow store) can leave less than the create may take: the create
            # could then land after a writer that took the lock over has passed its checks. (A lease no longer than
            # the budget never promised that: `bound_creates` warned.)
            raise LockLost(
                f"{self.describe()}: our lease (owner {self.owner!r}, generation {self._generation}) has "
                f"{left:.1f}s left, less than the {self.publish_s:g}s the create it guards may take; nothing was "
                "published — run again"
            )

    def release(self) -> None:
        if self._generation is None:
            log.warning("%s: not held by %s, nothing to release", self.describe(), self.owner)
            return
        generation = self._generation
        top, released = self._scan()
        if top != generation or generation in released:
            self._forget()
            holder = self._read_holder(top) if top > generation else None
            log.warning(
                "%s: our lease (generation %d) expired and was taken over%s; nothing to release",
                self.describe(),
                generation,
                f" by {holder.describe()}" if holder else "",
            )
            return
        stamp = {"owner": self.owner, "released_at": time.time()}
        self.storage.put_if_absent(self._path(generation, released=True), _dumps(stamp))
        self._forget()

    # -- internals ----------------------------------------------------------------------------------------

    def _path(self, generation: int, released: bool = False) -> str:
        return f"{LOCKS_FOLDER}/{_lock_file_name(self.name, generation, released)}"

    def _scan(self, listing: list[str] | None = None) -> tuple[int, set[int]]:
        """The highest generation (0 if none) and the generations that have a `.released` companion."""
        top = 0
        released: set[int] = set()
        for entry in self.storage.list_names(LOCKS_FOLDER) if listing is None else listing:
            match = _FILE_RE.match(entry)
            if match is None or match["name"] != self.name:
                continue
            generation = int(match["gen"])
            if match["released"]:
                released.add(generation)
            else:
                top = max(top, generation)
        return top, released

    def _read_holder(self, generation: int) -> LockHolder | None:
        """The holder recorded in a generation file; None if it is missing or unreadable."""
        try:
            record = json.loads(self.storage.read_bytes(self._path(generation)))
            return LockHolder(
                owner=str(record["owner"]),
                host=record.get("host"),
                pid=record.get("pid"),
                since=float(record["acquired_at"]),
                expires_at=float(record["expires_at"]),
            )
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def _inspect(self) -> tuple[int, LockHolder | None, bool]:
        """(highest generation, its holder if held, whether the lock is free right now)."""
        top, released = self._scan()
        if top == 0 or top in released:
            return top, None, True
        holder = self._read_holder(top)
        if holder is None:
            first = self._unreadable_since.setdefault(top, time.monotonic())
            if time.monotonic() - first >= self.expire_s:
                log.warning("%s: generation %d unreadable for %.1fs; taking over", self.describe(), top, self.expire_s)
                return top, None, True
            return top, LockHolder(owner=f"unknown (unreadable {self._path(top)})"), False
        if holder.expires_at is not None and holder.expires_at <= time.time():
            return top, holder, True
        return top, holder, False

    def _take(self, generation: int, *, acquired_at: float) -> bool:
        """Try to create `generation`; True when it is ours and the highest (see ghosts in the docstring)."""
        now = time.time()
        expires_at = now + self.expire_s
        record = {
            "owner": self.owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "acquired_at": acquired_at,
            "expires_at": expires_at,
        }
        if not self.storage.put_if_absent(self._path(generation), _dumps(record)):
            return False
        listing = self.storage.list_names(LOCKS_FOLDER)
        top, _released = self._scan(listing)
        if top > generation:  # a ghost of a cleaned-up generation: a newer holder exists
            with contextlib.suppress(OSError):
                self.storage.delete(self._path(generation))
            return False
        self._generation = generation
        self._acquired_at = acquired_at
        self._expires_at = expires_at
        self._unreadable_since.clear()
        self._cleanup(generation, listing)
        return True

    def _cleanup(self, generation: int, listing: list[str]) -> None:
        """Best effort: delete files of generations < generation - 1 so the folder stays small.

        `listing` is the one the ghost check just made (a file listed there and gone since is no loss), and the
        files go in one request where the storage can (S3's bulk delete): the lock is held meanwhile.
        """
        doomed = []
        for entry in listing:
            match = _FILE_RE.match(entry)
            if match is not None and match["name"] == self.name and int(match["gen"]) < generation - 1:
                doomed.append(f"{LOCKS_FOLDER}/{entry}")
        try:
            self.storage.delete_many(doomed)
        except OSError as exc:
            log.debug("%s: cleanup of old generations failed: %s", self.describe(), exc)

    def _require_held(self) -> int:
        if self._generation is None:
            raise LockLost(f"{self.describe()} is not held by {self.owner!r}")
        return self._generation

    def _forget(self) -> None:
        self._generation = None
        self._acquired_at = None
        self._expires_at = None

    def _lose(self, top: int) -> None:
        """Forget our lease and raise LockLost naming whoever has the lock now."""
        generation = self._generation
        expired = self._expires_at
        self._forget()
        holder = self._read_holder(top) if generation is not None and top > generation else None
        taken = f"it was taken over by {holder.describe()}" if holder else "its lock file is gone or released"
        raise LockLost(
            f"{self.describe()}: our lease (owner {self.owner!r}, generation {generation}) expired at "
            f"{format_epoch(expired)} and {taken}; nothing may be published under it"
        )

    def _timeout_message(self, holder: LockHolder | None, wait: float) -> str:
        who = holder.describe() if holder is not None else "another owner that just took it"
        return f"could not take the {self.describe()} within {wait:g}s: it is held by {who}"


def _dumps(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True).encode("utf-8")
