"""ZooKeeper table lock (design.md §6): for writers on many hosts, or storage without conditional puts.

It is kazoo's `Lock` recipe (ephemeral sequential znodes, fair FIFO queue) at ``{zk_path}/{table_id}/{name}``.
Why these choices:

- **The lease is the ZooKeeper session.** `expire_s` is requested as the session timeout (the server clamps
  it to its ``minSessionTimeout``/``maxSessionTimeout``), so a ``SIGKILL``\\ed holder's ephemeral node, and
  with it the lock, disappears when the server expires its session. There is nothing to renew while the
  process lives; `renew()` is the inherited no-op.
- **One client per hold.** The lock is held for milliseconds, so `acquire()` opens a session and
  `release()` closes it: no session outlives its hold, and a forked or long-idle process never reuses a
  stale connection.
- **Fencing is conservative.** `check()` raises `LockLost` if the connection was SUSPENDED or LOST at any
  time since the acquire (while suspended we cannot know whether the session, and our node, survived), or
  if our znode is gone.
- Connection failures and timeouts both raise `LockTimeout` (exit 4, "retry later"), naming the hosts.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from stitchlake.concurrency.lock import LockHolder, TableLock, lease_seconds
from stitchlake.errors import ConfigError, LockLost, LockTimeout

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.recipe.lock import Lock as KazooLock

log = logging.getLogger(__name__)

_CONTENDER_RE = re.compile(r"__lock__(\d{10})$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
#: A floor for connecting, so `wait_s=0` ("fail fast if busy") still gets a chance to reach the server.
_MIN_CONNECT_S = 1.0


class ZooKeeperLock(TableLock):
    """A table lock held as an ephemeral sequential znode (see the module docstring)."""

    def __init__(
        self,
        hosts: str,
        *,
        zk_path: str = "/stitchlake",
        table_id: str = "table",
        name: str = "table",
        wait_s: float = 60.0,
        expire_s: float = 30.0,
        owner: str | None = None,
    ) -> None:
        if not hosts:
            raise ConfigError("concurrency.lock.hosts: the zookeeper lock provider needs 'host:port[,...]'")
        if not zk_path.startswith("/"):
            raise ConfigError(f"concurrency.lock.zk_path: {zk_path!r} must start with '/'")
        for label, segment in (("table id", table_id), ("lock name", name)):
            if not _SEGMENT_RE.match(segment):
                raise ConfigError(f"{label} {segment!r} must be letters, digits, '_', '-' or '.'")
        expire = lease_seconds(expire_s)
        super().__init__(name=name, wait_s=wait_s, owner=owner)
        self.hosts = hosts
        self.path = f"{zk_path.rstrip('/')}/{table_id}/{name}"
        self.expire_s = expire
        self._client: KazooClient | None = None
        self._lock: KazooLock | None = None
        self._lost_reason: str | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def describe(self) -> str:
        return f"table lock {self.path} on ZooKeeper {self.hosts}"

    def acquire(self, wait_s: float | None = None) -> None:
        from kazoo.client import KazooClient
        from kazoo.exceptions import CancelledError, KazooException
        from kazoo.exceptions import LockTimeout as KazooLockTimeout

        wait = self._wait_for(wait_s)
        deadline = time.monotonic() + wait
        connect_s = max(wait, _MIN_CONNECT_S)
        client = KazooClient(
            hosts=self.hosts,
            timeout=self.expire_s,
            connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.05, "max_delay": 0.5},
        )
        try:
            try:
                client.start(timeout=connect_s)
            except Exception as exc:  # kazoo raises its handler's timeout error, or socket errors
                raise LockTimeout(
                    f"could not take the {self.describe()}: no ZooKeeper server at {self.hosts} answered "
                    f"within {connect_s:g}s ({exc})"
                ) from None

            identifier = json.dumps({"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid()})
            lock = client.Lock(self.path, identifier)
            remaining = max(deadline - time.monotonic(), 0.0)
            # kazoo's timeout restarts whenever the queue moves; a timer bounds the total wait.
            timer = threading.Timer(remaining + 0.2, lock.cancel)
            timer.daemon = True
            timer.start()
            try:
                got = lock.acquire(blocking=True, timeout=remaining) if remaining > 0 else lock.acquire(blocking=False)
            except (KazooLockTimeout, CancelledError):
                got = False
            except KazooException as exc:
                raise LockTimeout(
                    f"could not take the {self.describe()}: ZooKeeper at {self.hosts} failed ({exc!r})"
                ) from None
            finally:
                timer.cancel()
            if not got:
                holder = self._holder(client)
                who = holder.describe() if holder is not None else "another owner"
                raise LockTimeout(f"could not take the {self.describe()} within {wait:g}s: it is held by {who}")

            self._lost_reason = None
            client.add_listener(self._on_state)
            if client.state != "CONNECTED":
                self._lost_reason = f"connection {client.state.lower()} right after acquire"
            self._client = client
            self._lock = lock
        except BaseException:  # refused, or interrupted: this session must not live on
            # An interrupt (Ctrl-C, SIGTERM, a scheduler's timeout) while waiting skipped kazoo's own clean-up: the
            # contender znode stayed, the session lived on in kazoo's threads, and the node became the holder once
            # the lock was free, refusing every writer of the table until this process ended. Closing the session
            # deletes its ephemeral node.
            _close(client)
            raise

    def _on_state(self, state: str) -> None:
        """kazoo connection listener: remember any suspension or loss of the session while we hold."""
        if state in ("SUSPENDED", "LOST") and self._lost_reason is None:
            self._lost_reason = f"ZooKeeper session {state.lower()}"

    def check(self) -> None:
        client, lock = self._client, self._lock
        if client is None or lock is None:
            raise LockLost(f"{self.describe()} is not held by {self.owner!r}")
        reason = self._lost_reason
        if reason is None:
            try:
                if lock.node is None or client.exists(f"{self.path}/{lock.node}") is None:
                    reason = "our lock znode is gone"
            except Exception as exc:  # connection trouble: we cannot prove we still hold it
                reason = f"cannot reach ZooKeeper ({exc!r})"
        if reason is not None:
            self._drop()
            raise LockLost(
                f"{self.describe()}: lock of owner {self.owner!r} may have been lost ({reason}); "
                "nothing may be published under it"
            )

    def release(self) -> None:
        from kazoo.exceptions import KazooException

        client, lock = self._client, self._lock
        if client is None or lock is None:
            log.warning("%s: not held by %s, nothing to release", self.describe(), self.owner)
            return
        if self._lost_reason is not None:
            log.warning("%s: %s since acquire; the lock may be gone", self.describe(), self._lost_reason)
        try:
            lock.release()
        except KazooException as exc:
            log.warning("%s: release failed (%r); closing the session frees it", self.describe(), exc)
        finally:
            self._drop()

    def _drop(self) -> None:
        """Forget the hold and close the session (which also deletes our ephemeral node, if any)."""
        client = self._client
        self._client = None
        self._lock = None
        if client is not None:
            client.remove_listener(self._on_state)
            _close(client)

    def _holder(self, client: KazooClient) -> LockHolder | None:
        """The current holder (first contender in the queue), for the timeout message."""
        try:
            contenders = []
            for child in client.get_children(self.path):
                match = _CONTENDER_RE.search(child)
                if match is not None:
                    contenders.append((match.group(1), child))
            if not contenders:
                return None
            data, stat = client.get(f"{self.path}/{min(contenders)[1]}")
            record: dict[str, Any] = json.loads(data.decode("utf-8") or "{}")
            return LockHolder(
                owner=str(record.get("owner", "unknown")),
                host=record.get("host"),
                pid=record.get("pid"),
                since=stat.ctime / 1000.0,
            )
        except Exception as exc:  # the message is best effort; never hide the timeout behind this
            log.debug("%s: could not read the holder: %r", self.describe(), exc)
            return None


def _close(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception as exc:  # closing is best effort
        log.debug("closing the ZooKeeper client failed: %r", exc)
