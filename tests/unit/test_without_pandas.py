"""`stitchlake.cli.without_pandas`: a `stitch` process never imports pandas, and pyarrow works without it.

Each case runs in a fresh interpreter: the refusal is for the whole process, and this one has pandas imported.
"""

from __future__ import annotations

import subprocess
import sys

REFUSED_THEN_ARROW = """
import sys
from stitchlake.cli import without_pandas
without_pandas.refuse()
without_pandas.refuse()  # twice: one finder
import pyarrow as pa, pyarrow.compute as pc
table = pa.table({"k": pa.array([3, 1, 3]), "v": ["a", None, "c"]})
assert pc.dictionary_encode(table["k"]).combine_chunks().indices.to_pylist() == [0, 1, 0]
assert pa.schema([pa.field("x", pa.int64())]).empty_table().num_rows == 0
assert table.group_by("k").aggregate([("v", "count")]).num_rows == 2
finders = [f for f in sys.meta_path if type(f).__name__ == "_RefusePandas"]
try:
    import pandas
except ModuleNotFoundError as refused:
    print("pandas" in sys.modules, len(finders), refused)
"""

ALREADY_IMPORTED = """
import sys
import pandas
from stitchlake.cli import without_pandas
without_pandas.refuse()
import pandas.api.types  # a program that had pandas keeps it
print(len([f for f in sys.meta_path if type(f).__name__ == "_RefusePandas"]))
"""


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_after_the_refusal_pyarrow_converts_computes_and_groups_without_importing_pandas() -> None:
    assert _python(REFUSED_THEN_ARROW) == "False 1 the stitch command runs without pandas"


def test_a_process_that_imported_pandas_keeps_it() -> None:
    assert _python(ALREADY_IMPORTED) == "0"
