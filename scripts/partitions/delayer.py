"""A link's delay without netem: every packet of a writer host's link held for a fixed time, then let through.

    python -m scripts.partitions.delayer QUEUE DELAY_S      # run inside the host's network namespace

This kernel has no `sch_netem` (nor `sch_fq`), so `tc` cannot delay packets. Netfilter can hand them to a user-space
program instead: the round's iptables rules send the host's `eth0` traffic, both ways, to NFQUEUE `QUEUE` (queues
are per network namespace), and this program gives each packet its verdict `DELAY_S` seconds after it read it (a
moment after the kernel queued it), in arrival order, as netem's `delay` would. It prints `bound` once it holds the
queue (the rules go in only then: a queue nobody holds drops its packets). SIGTERM ends it after the packets it
holds are released at their time (the rules are removed first, so no new ones come); SIGKILL drops them, as a lost
packet.

It uses libnetfilter_queue through the `NetfilterQueue` package (`pyproject.toml`'s `partitions` extra, which
`hosts.ensure_tools` installs where the harness runs: it builds against Debian's `libnetfilter-queue-dev`).
"""

from __future__ import annotations

import importlib
import select
import signal
import socket
import sys
import time
from collections import deque
from typing import Any

#: Packets the kernel may hold for the queue at once before it drops new ones (a few seconds of a busy link).
MAX_HELD = 65536


def serve(queue: int, delay_s: float) -> None:
    netfilterqueue: Any = importlib.import_module("netfilterqueue")
    held: deque[tuple[float, Any]] = deque()
    stopping = False

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    nfq = netfilterqueue.NetfilterQueue()
    nfq.bind(
        queue, lambda packet: held.append((time.monotonic() + delay_s, packet)), MAX_HELD, netfilterqueue.COPY_META
    )
    sock = socket.fromfd(nfq.get_fd(), socket.AF_NETLINK, socket.SOCK_RAW)
    print("bound", flush=True)
    try:
        while True:
            if stopping and not held:
                nfq.run(block=False)  # packets queued before the rules went and not read yet: unbinding drops them
                if not held:
                    break
            wait = max(0.0, held[0][0] - time.monotonic()) if held else 0.2
            try:
                readable, _, _ = select.select([sock], [], [], wait)
            except InterruptedError:
                continue
            if readable:
                nfq.run(block=False)
            now = time.monotonic()
            while held and held[0][0] <= now:
                held.popleft()[1].accept()
    finally:
        nfq.unbind()
        sock.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    serve(int(args[0]), float(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
