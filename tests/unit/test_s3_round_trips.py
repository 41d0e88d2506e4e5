"""Round trips on S3: commands wait for a number of request *waves* that does not grow with the timeline.

The in-process part: no JVM, no server, no `stitch` subprocess (the rest: tests/integration/test_s3_round_trips.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stitchlake.storage import storage_for
from tests.support.counting_storage import SCHEME


def test_the_counting_scheme_is_gone_afterwards(tmp_path: Path) -> None:
    from stitchlake.errors import ConfigError

    with pytest.raises(ConfigError):
        storage_for(f"{SCHEME}://bucket/x")
