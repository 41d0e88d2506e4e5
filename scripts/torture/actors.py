"""The actors: one `Worker` process per role (writer, compactor, cleaner, reader, restorer, archiver, eraser).

Each role's behaviour is a class of its own on the shared `WorkerBase` (`writers`, `table_services`, `savepoints`,
`readers`); `Worker` is any of them, and runs the step `ROLE_STEPS` names for its role's kind.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from scripts.torture.readers import Reader
from scripts.torture.savepoints import Restorer, restore_function
from scripts.torture.table_services import Archiver, Cleaner, Compactor
from scripts.torture.worker import Retry, WorkerBase, consumed_on_disk
from scripts.torture.writers import Eraser, Writer, ingest_local


class Worker(Writer, Eraser, Compactor, Cleaner, Archiver, Restorer, Reader):
    """A worker of any role (`--role kind[:name]`); tests drive a role's step on it directly."""

    def role_step(self) -> Callable[[], None]:
        return functools.partial(ROLE_STEPS[self.kind], self)


#: Each kind of role, and its one pass of the worker's loop.
ROLE_STEPS: dict[str, Callable[[Worker], None]] = {
    "writer": Writer.ingest,
    "compactor": Compactor.compact,
    "cleaner": Cleaner.clean,
    "reader": Reader.read,
    "restorer": Restorer.restore,
    "archiver": Archiver.archive,
    "eraser": Eraser.erase,
}


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.torture _worker")
    parser.add_argument("--role", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    Worker(args.role, Path(args.workdir), args.seed).run()
    return 0


__all__ = ["ROLE_STEPS", "Retry", "Worker", "WorkerBase", "consumed_on_disk", "ingest_local", "restore_function"]
