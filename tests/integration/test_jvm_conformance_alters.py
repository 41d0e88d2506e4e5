"""Conformance across alters (issue 35): the generated tables of test_schema_evolution, each read merged by the JVM
too and compared cell by cell (test_jvm_conformance.py has the harness and the other cases). A module of its own so
that `make test`'s two workers run it and the other generated tables at once: together they are the longest work
of the suite.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.integration import test_schema_evolution as evolution
from tests.integration.test_jvm_conformance import (  # noqa: F401 - `harness`: this module's own merge JVM
    HISTORY_EXAMPLES,
    LOG_FORMATS,
    Harness,
    harness,
    in_scratch,
)

#: Every test here starts a JVM (the merge harness).
pytestmark = pytest.mark.spark


@settings(max_examples=HISTORY_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=evolution.histories(), log_format=LOG_FORMATS)
def test_generated_tables_across_alters_match(harness: Harness, plan: list[tuple[str, Any]], log_format: str) -> None:
    """Random writes, compactions and alters (an added column with a default, an int widened to long, a stream
    added and one dropped, a dropped column, a changed default), text and decimal orderings, nested columns, Parquet
    or Avro logs; every read under each schema version compared."""
    in_scratch(harness, lambda root: evolution.run_history(root, plan, log_format))
