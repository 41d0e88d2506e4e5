"""The ZooKeeper lock when its waiter is interrupted, on a real ZooKeeper: a long-lived process (a notebook kernel,
a scheduler's worker) that survives a Ctrl-C or a timeout exception must not keep a contender node behind."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from kazoo.client import KazooClient

from stitchlake.concurrency.zookeeper import ZooKeeperLock


def _contenders(hosts: str, table_id: str) -> list[str]:
    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    try:
        lock = client.Lock(ZooKeeperLock(hosts, table_id=table_id).path)
        return list(lock.contenders())
    finally:
        client.stop()
        client.close()


def test_an_interrupt_while_waiting_for_the_lock_leaves_no_contender_behind(zookeeper_hosts: str) -> None:
    """Before, kazoo cleaned up only after its own errors: the interrupted waiter's node stayed, its session lived on
    in kazoo's threads, and once the holder released, that node held the lock: every writer of the table was
    refused (exit 4) for as long as the interrupted process lived."""
    table_id = "interrupted"
    holder = ZooKeeperLock(zookeeper_hosts, table_id=table_id, wait_s=30, expire_s=10)
    holder.acquire()
    waiter = ZooKeeperLock(zookeeper_hosts, table_id=table_id, wait_s=120, expire_s=10)
    main = threading.get_ident()

    def interrupt_once_waiting() -> None:
        while len(_contenders(zookeeper_hosts, table_id)) < 2:  # the waiter's node is there: it waits
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)  # a real signal: it wakes the wait, as a Ctrl-C does

    interrupter = threading.Thread(target=interrupt_once_waiting, daemon=True)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire()
    interrupter.join()
    holder.release()
    assert _contenders(zookeeper_hosts, table_id) == [], "the interrupted waiter's node is gone"
    later = ZooKeeperLock(zookeeper_hosts, table_id=table_id, wait_s=30, expire_s=10)
    later.acquire()
    later.release()
