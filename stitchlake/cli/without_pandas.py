"""A `stitch` process runs without pandas: pyarrow would import it (0.2-0.3 s of CPU) for nothing.

pyarrow asks whether pandas is installed the first time it converts anything (`pa.array`, a compute call, an empty
table), and asking imports it: about a fifth of a small `stitch read`, an eighth of a small `stitch ingest`. No
stitch command hands pyarrow a pandas object or asks it for one, so the console script refuses the import (`refuse`):
pyarrow then takes pandas as absent. Only the `stitch` process does this (and the torture test's workers, which are
stitch writers); the library imported by a user's program, and Spark's drivers (PySpark needs pandas), are left as
they are.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

REFUSED = "pandas"


class _RefusePandas:
    """A finder first on `sys.meta_path` that fails `import pandas` as a missing module would."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == REFUSED or name.startswith(REFUSED + "."):
            raise ModuleNotFoundError(f"the stitch command runs without {REFUSED}", name=name)
        return None


def refuse() -> None:
    """From now on `import pandas` fails in this process, unless it was imported already (then nothing changes)."""
    if REFUSED in sys.modules or any(isinstance(finder, _RefusePandas) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _RefusePandas())
