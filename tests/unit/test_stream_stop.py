"""How `stitch stream` ends after a stop request: Spark's query object is given (its life is Spark's; what is tested
is how the job reads it). The whole job under a real SIGTERM: tests/integration/test_streaming.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class EndingQuery:
    """A streaming query whose running micro-batch ends on the second look at its status, failing with `error` (as
    `run_stream`'s batch function records it), and whose stop interrupts a batch that began meanwhile."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.failed: list[BaseException] = []
        self.isActive = True
        self.looks = 0
        self.stopped = False

    @property
    def status(self) -> dict[str, Any]:
        self.looks += 1
        if self.looks >= 2:  # the batch ends: a failed one ends the query
            if self.error is not None:
                self.failed.append(self.error)
                self.isActive = False
            return {"isTriggerActive": False}
        return {"isTriggerActive": True}

    def stop(self) -> None:
        self.stopped, self.isActive = True, False
        self.failed.append(InterruptedError("the next micro-batch, interrupted by the stop"))

    def awaitTermination(self, _timeout: float) -> None:
        raise AssertionError("the stop request is seen before any wait")

    def exception(self) -> BaseException | None:
        return self.error


def test_a_micro_batch_failing_after_the_stop_request_fails_the_stream(tmp_path: Path) -> None:
    """A stop request let the running micro-batch finish and then reported "stopped on request", exit 0, even when
    that batch failed (bad rows under `fail`, a conflict): a scheduler took a batch that never committed for done.
    A batch the stop interrupts is no failure of the stream."""
    from stitchlake.spark.streaming import _await

    stop = tmp_path / "stop"
    stop.touch()
    failed = EndingQuery(RuntimeError("micro-batch 12: 3 bad row(s)"))
    with pytest.raises(RuntimeError, match="micro-batch 12"):
        _await(failed, str(stop), failed.failed)
    finished = EndingQuery(None)
    assert _await(finished, str(stop), finished.failed) == "stopped on request after the running micro-batch"
    assert finished.stopped and finished.looks == 2
