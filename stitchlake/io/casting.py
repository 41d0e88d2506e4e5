"""Casting a flat column to its table type by stitchlake's grammar of values: text trimmed, timestamps with a 'T' or
a space and UTC when they name no zone, digits past the microsecond cut, booleans in words, numbers never read as
times or from booleans, a value past its type's range a bad row. Top-level columns (`writing.batch`) and the leaves
of nested JSON values (`io.json_records`) are read by it alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stitchlake.config.values import FALSE_WORDS, NON_FINITE_TEXT, TRUE_WORDS, WHOLE_TEXT


class Inconvertible(Exception):
    """No value of a column's type can be read as the type wanted (a boolean as a number, a struct as text)."""

    def __init__(self, kind: pa.DataType) -> None:
        super().__init__(f"{kind} cannot be converted")
        self.type = kind


def is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _cast_rowwise(column: pa.Array, kind: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Cast value by value (only on the error path): unparsable values become null and are flagged."""
    values: list[object] = []
    failed = np.zeros(len(column), dtype=bool)
    for row, item in enumerate(column):
        if not item.is_valid:
            values.append(None)
            continue
        try:
            values.append(pc.cast(pa.array([item.as_py()], column.type), kind)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError, ValueError):
            values.append(None)
            failed[row] = True
    return pa.array(values, kind), failed


def _prepare_text(column: pa.Array, kind: pa.DataType) -> pa.Array:
    """Text that Arrow's casts are strict about: trimmed, timestamps with a 'T' or a space, booleans in words."""
    column = pc.utf8_trim_whitespace(column)
    if pa.types.is_boolean(kind):  # the words `--where` takes too (`config.values`: one grammar)
        lowered = pc.utf8_lower(column)
        return pc.if_else(
            pc.is_in(lowered, pa.array(list(TRUE_WORDS))),
            "true",
            pc.if_else(pc.is_in(lowered, pa.array(list(FALSE_WORDS))), "false", "not a boolean"),
        )
    if pa.types.is_integer(kind):  # ASCII digits and a sign: Arrow's cast alone also reads 0x10 as 16
        whole = pc.match_substring_regex(column, f"^{WHOLE_TEXT.pattern}$")
        return pc.if_else(whole, pc.replace_substring_regex(column, r"^\+", ""), "not a whole number")
    if pa.types.is_timestamp(kind):
        column = pc.replace_substring_regex(column, r"^(\d{4}-\d{2}-\d{2}) ", r"\1T")
        column = pc.replace_substring_regex(column, r"^(\d{4}-\d{2}-\d{2})$", r"\1T00:00:00")
        # Text without a zone is UTC, as everywhere else in stitchlake (defaults, as_of).
        zoned = pc.match_substring_regex(column, r"(Z|[+-]\d{2}:?\d{2})$")
        return pc.if_else(pc.fill_null(zoned, True), column, pc.binary_join_element_wise(column, "Z", ""))
    return column


def cast_values(column: pa.Array, kind: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """A flat column cast to `kind` by the one grammar of values (top-level columns and nested leaves alike): the
    cast values and a mask of the rows whose value does not parse or fit (null there). Inconvertible: no value of
    the column's type could be read as `kind`."""
    if pa.types.is_dictionary(column.type):  # categorical values (pandas, Parquet): read as their plain values are
        column = column.dictionary_decode()
    if column.type == kind:
        return column, np.zeros(len(column), dtype=bool)
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), kind), np.zeros(len(column), dtype=bool)
    if is_text(column.type) and not is_text(kind):
        column = _prepare_text(column, kind)
    if pa.types.is_timestamp(column.type) and pa.types.is_timestamp(kind) and column.type.unit == "ns":
        # Timestamps are kept in µs (as Spark does): nanoseconds are cut off, not a reason to reject the row; cut
        # down to the microsecond, as text is (1 ns before 1970 is the microsecond before it, not 1970 itself).
        # Floored as UTC: in a zone's local time an hour a clock turns back is ambiguous, and Arrow refuses it.
        utc = pc.cast(column, pa.timestamp("ns", "UTC")) if column.type.tz else column
        floored = pc.floor_temporal(utc, multiple=1, unit="microsecond")
        column = pc.cast(pc.cast(floored, pa.timestamp("us", utc.type.tz)), pa.timestamp("us", column.type.tz))
    if pa.types.is_timestamp(column.type) and pa.types.is_timestamp(kind) and column.type.tz is None:
        column = pc.assume_timezone(column, "UTC") if column.type.unit else column
    if pa.types.is_boolean(column.type) and not (pa.types.is_boolean(kind) or is_text(kind)):
        raise Inconvertible(column.type)  # Arrow reads true as 1: a key or amount must not become 1
    if pa.types.is_temporal(kind) and (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        # Arrow takes a number as the raw count of the type's unit: epoch milliseconds would land in 1970 as
        # microseconds, without a word. A number has no unit to say which: each is a bad row (`bad_rows` decides),
        # as the same number in CSV text is.
        return pa.nulls(len(column), kind), pc.is_valid(column).to_numpy(zero_copy_only=False)
    try:
        cast, failed = pc.cast(column, kind, safe=True), np.zeros(len(column), dtype=bool)
    except pa.ArrowNotImplementedError:
        raise Inconvertible(column.type) from None
    except (pa.ArrowInvalid, OverflowError):
        cast, failed = _cast_slowly(column, kind)
    if pa.types.is_floating(kind):
        overflowed = _overflowed(column, cast)
        if overflowed.any():  # `1e400`, a double past a float's range: not the value given
            cast, failed = pc.if_else(pa.array(overflowed), pa.scalar(None, kind), cast), failed | overflowed
    return cast, failed


def _cast_slowly(column: pa.Array, kind: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """A cast Arrow refused as a whole: text timestamps with more than 6 decimals cut to µs first (design.md §2:
    nanoseconds are cut, not a reason to reject the row), then value by value."""
    if pa.types.is_timestamp(kind) and is_text(column.type):
        column = pc.replace_substring_regex(column, r"(\.\d{6})\d+", r"\1")
        try:
            return pc.cast(column, kind, safe=True), np.zeros(len(column), dtype=bool)
        except (pa.ArrowInvalid, OverflowError):
            pass
    return _cast_rowwise(column, kind)


def _overflowed(source: pa.Array, cast: pa.Array) -> np.ndarray:
    """Rows a cast to a float type took to ±infinity from a finite value (text past the type's range, a double past
    a float's): the value given is not the one stored."""
    if not pc.any(pc.is_inf(cast)).as_py():  # the common case: no infinity, nothing to tell apart
        return np.zeros(len(source), dtype=bool)
    if is_text(source.type):
        said = pc.match_substring_regex(source, f"^{NON_FINITE_TEXT.pattern}$", ignore_case=True)
    elif pa.types.is_floating(source.type):
        said = pc.is_inf(source)
    else:
        return np.zeros(len(source), dtype=bool)
    infinite = pc.and_(pc.is_inf(cast), pc.invert(said))
    return pc.fill_null(infinite, False).to_numpy(zero_copy_only=False)
