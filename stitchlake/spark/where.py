"""`stitch read --where` as Spark conditions with the local read's meaning (`reading.filters`,
`reading.changes`), so `--engine spark` returns the rows `stitch read` does.

On a snapshot every condition holds on the merged rows. On change rows the conditions on the key and partition
columns hold on every row, those on the change columns (`_op`, `_commit_time`, `_streams`) compare as text, and
value conditions keep every `D` row (its values are gone) and, with before-images, keep or drop an update's `-U`
row with its `+U` row, by the new values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from stitchlake.config import TableConfig
    from stitchlake.reading.filters import Condition


#: The column a change read's value filter is computed in (dropped at once).
KEPT = "_sl__kept"


def filtered(
    frame: DataFrame, config: TableConfig, where: Sequence[str], changes: bool, before_images: bool
) -> DataFrame:
    """`frame` (a `format("stitchlake")` read, before any column is dropped) with the `--where` texts applied."""
    from pyspark.sql import functions as F

    from stitchlake.reading.changes import split_change_filter
    from stitchlake.reading.filters import conditions

    if not where:
        return frame
    types = {c.name: c.type for c in config.all_columns()}
    if not changes:
        every = _all(term(c, types.get(c.column)) for c in conditions(config, list(where)))
        return frame if every is None else frame.filter(every)
    table_part, on_changes = split_change_filter(list(where))
    found = conditions(config, table_part) if table_part else []
    common = {c.name for c in config.common_columns}
    on_keys = _all(term(c, types.get(c.column)) for c in found if c.column in common)
    on_values = _all(term(c, types.get(c.column)) for c in found if c.column not in common)
    if on_keys is not None:
        frame = frame.filter(on_keys)
    if on_values is not None:  # a window is not allowed in a filter: computed as a column first
        kept = _values_kept(on_values, [c.name for c in config.common_columns], before_images)
        frame = frame.withColumn(KEPT, kept).filter(F.col(KEPT)).drop(KEPT)
    # Last, as the local read checks them: a -U row is judged by its +U row's values, which `_op=-U` would drop.
    for condition in on_changes:  # each on its own
        frame = frame.filter(term(condition))
    return frame


#: Column types whose values Spark compares with its own NaN rules (NaN equals NaN and is greater than any number).
FLOATING = ("float", "double")


def term(condition: Condition, kind: str | None = None) -> Column:
    """One condition as a Spark column expression, its values typed as the column (a `float` column against a
    double literal is widened, and 0.1 then matches no float). Floats compare as the local read does (IEEE 754,
    `reading.filters.Condition.expression`), not by Spark's rules: NaN equals nothing and orders with nothing."""
    from pyspark.sql import functions as F

    from stitchlake.reading.filters import COMPARE

    column = F.col(condition.column)
    floating = kind if kind in FLOATING else None
    values = [v for v in condition.values if not (floating and v != v)]  # v != v: NaN
    literals = [F.lit(v).cast(floating) if floating else F.lit(v) for v in values]
    if condition.op == "=":
        matched = column.isin(*literals)
    elif not literals:  # against NaN: `!=` holds for every value, the orderings for none
        return column.isNotNull() if condition.op == "!=" else F.lit(False)
    else:
        matched = COMPARE[condition.op](column, literals[0])
    # Spark's NaN equals NaN and is greater than any number; `!=` against a number already holds for it.
    return matched & ~F.isnan(column) if floating and condition.op != "!=" else matched


def _values_kept(values: Column, common: list[str], before_images: bool) -> Column:
    """Which change rows a value condition keeps (`reading.changes._filter_changes`): `D` rows always; with
    before-images a `-U` row as its key's `+U` row (a key has one change in a read)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from stitchlake.reading.changes import OP

    matches = F.coalesce(values, F.lit(False))  # null counts as false, as in the local read
    if not before_images:
        return matches | (F.col(OP) == "D")
    new_values = F.max(F.when(F.col(OP) == "+U", matches)).over(Window.partitionBy(*common))
    return (
        F.when(F.col(OP) == "D", True).when(F.col(OP) == "-U", F.coalesce(new_values, F.lit(False))).otherwise(matches)
    )


def _all(terms: Any) -> Column | None:
    out: Column | None = None
    for item in terms:
        out = item if out is None else out & item
    return out
