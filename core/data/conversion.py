"""A read column's values as its Column's kind; a DataError at the first value that does not fit, naming the
file, the line (or Parquet row) and the column."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.data import formats
from core.errors import DataError
from core.text import first_line

FLOAT32_MAX = float(np.finfo(np.float32).max)  # models train in float32: a larger feature is an inf there


@dataclass(frozen=True)
class Column:
    """One expected column: its name and kind (id, int, float, number, text, label)."""

    name: str
    kind: str
    required: bool = True
    choices: tuple[str, ...] | None = None  # for "label": allowed values (compared lower-cased, trimmed)
    minimum: float | None = None  # for "int" / "float": smallest allowed value
    why: str = ""  # said after a value below `minimum`, e.g. what the values mean
    hint: str = ""  # said when the column is missing: another way to do without it


@dataclass
class Source:
    """A file as read: its format, and how its data rows map to the lines a user sees."""

    file: Path
    kind: str  # "csv" (delimited text, any delimiter), "parquet", "json", "svmlight" or "label_text"
    delimiter: str = ","
    header: bool = True
    sniffed: bool = False
    row_lines: np.ndarray | None = None  # svmlight: the line of each row
    shown: dict = field(default_factory=dict)  # expected column -> how a message names it
    positions: dict = field(default_factory=dict)  # expected column -> its index in the file's columns
    names: list = field(default_factory=list)  # the file's column names (header-less: the positional ones)

    def __str__(self) -> str:
        return str(self.file)

    def __fspath__(self) -> str:
        return str(self.file)

    def line(self, index: int) -> int:
        """The line (1-based, as an editor counts) where data row `index` is (error path)."""
        if self.row_lines is not None:
            return int(self.row_lines[index])
        if self.kind in ("json", "label_text"):  # a row per non-blank line
            return formats.json_line(self.file, index)
        return formats.record_at(self.file, self.delimiter, self.header, index)[0]


def convert(file: Source, col: Column, values: pa.ChunkedArray) -> pa.ChunkedArray:
    """_as_kind, with any conversion pyarrow refuses (e.g. an unsigned 64-bit id past int64) as a DataError."""
    try:
        return _as_kind(file, col, values)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        reason = formats.shorten(first_line(str(exc)).split(":")[0], 60)
        raise DataError(
            f"{file}: column {col.name!r}: cannot read its {values.type} values as {col.kind} values ({reason})"
        ) from None


def _first_bad_row(values: pa.ChunkedArray, ok: pa.ChunkedArray) -> tuple[int, str]:
    """Index and text of the first value where `ok` is false (or null)."""
    bad = np.flatnonzero(~pc.fill_null(ok, False).to_numpy(zero_copy_only=False))
    index = int(bad[0])
    return index, str(values[index].as_py())


def _place(file: Source, col: Column, index: int) -> str:
    """'line L, column 'c'' for a text file (the line a user sees), 'row R, column 'c'' for Parquet."""
    shown = file.shown.get(col.name, repr(col.name))
    return f"line {file.line(index)}, column {shown}" if file.kind != "parquet" else f"row {index + 1}, column {shown}"


def _fail_value(file: Source, col: Column, index: int, value: str, expected: str) -> DataError:
    return DataError(f"{file}: {_place(file, col, index)}: {formats.shorten(value, 40)!r} is not {expected}")


def _require(file: Source, col: Column, values: pa.ChunkedArray, ok: pa.ChunkedArray, expected: str) -> None:
    """DataError at the first of `values` where `ok` is false (or null): it is not `expected`."""
    if not pc.all(pc.fill_null(ok, False)).as_py():
        raise _fail_value(file, col, *_first_bad_row(values, ok), expected)


def _missing_value(file: Source, col: Column, index: int) -> DataError:
    """The first null of a column: an empty field, or a marker pyarrow reads as missing ('NA', 'nan', 'null')."""
    raw = ""
    if file.kind == "csv":  # error path: the field as the text the file holds
        _, fields = formats.record_at(file.file, file.delimiter, file.header, index)
        position = file.positions.get(col.name, file.names.index(col.name) if col.name in file.names else None)
        raw = fields[position] if position is not None and position < len(fields) else ""
    if raw.strip():
        return DataError(
            f"{file}: {_place(file, col, index)}: {formats.shorten(raw, 40)!r} marks a missing value; a value is needed"
        )
    what = "the field is empty" if file.kind == "csv" else "the value is missing (null)"
    return DataError(f"{file}: {_place(file, col, index)}: {what}; a value is needed")


def _as_kind(file: Source, col: Column, values: pa.ChunkedArray) -> pa.ChunkedArray:
    """`values` as the column's kind, or DataError at the first value that does not fit."""
    kind, t = col.kind, values.type
    if values.null_count and kind != "text":
        raise _missing_value(file, col, int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]))
    if kind == "label" and col.choices is not None:
        return _check_choices(file, col, values)
    if kind == "id" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        ok = pc.not_equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
        if not pc.all(ok).as_py():
            raise _missing_value(file, col, _first_bad_row(values, ok)[0])
    if kind in ("id", "label"):
        return values
    if kind == "text":
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            try:
                return pc.cast(values, pa.string())
            except pa.ArrowInvalid:
                raise DataError(f"{file}: column {col.name!r}: text is not valid UTF-8") from None
        return pc.fill_null(values, "")
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        if kind == "number":  # datetimes become seconds: only their order matters to the tasks
            return pc.cast(pc.cast(values, pa.timestamp("s")), pa.int64())
        raise _fail_value(file, col, 0, str(values[0].as_py()), f"a number ({kind})")
    if pa.types.is_boolean(t):
        return _check_range(file, col, pc.cast(values, pa.int64() if kind != "float" else pa.float64()))
    if pa.types.is_integer(t):
        return _check_range(file, col, pc.cast(values, pa.float64() if kind == "float" else pa.int64()))
    if pa.types.is_floating(t):
        return _floats_as(file, col, values)
    # Strings where numbers belong: locate the first one that does not parse.
    text = pc.cast(values, pa.string())
    ok = pc.match_substring_regex(text, formats.NUMBER if kind != "int" else formats.INTEGER)
    expected = {"int": "a whole number", "float": "a number", "number": "a number or a date-time"}[kind]
    _require(file, col, text, ok, expected)
    return _floats_as(file, col, pc.cast(pc.utf8_trim_whitespace(text), pa.float64()), text)


def _floats_as(file: Source, col: Column, values: pa.ChunkedArray, text: pa.ChunkedArray | None = None):
    """float64 `values` as the column's kind, finite and in range, else DataError at the first that is not."""
    shown = values if text is None else text
    _require(file, col, shown, pc.is_finite(values), "a finite number")
    if col.kind == "int":
        ok = pc.and_(pc.equal(pc.floor(values), values), pc.less_equal(pc.abs(values), 2.0**53))
        if not pc.all(ok).as_py():
            index, value = _first_bad_row(shown, ok)
            whole = pc.equal(pc.floor(values), values)[index].as_py()
            expected = "a whole number" + (" of a usable size (at most 2**53)" if whole else "")
            raise _fail_value(file, col, index, value, expected)
        return _check_range(file, col, pc.cast(values, pa.int64()))
    if col.kind == "float":
        expected = f"a number that fits in float32 (at most {FLOAT32_MAX:.3g} in size)"
        _require(file, col, shown, pc.less_equal(pc.abs(values), FLOAT32_MAX), expected)
        if values.type == pa.float32() and col.minimum is None:
            return values  # features: float32 is what the models train on (svmlight reads them so)
    return _check_range(file, col, pc.cast(values, pa.float64()))


def _check_range(file: Source, col: Column, values: pa.ChunkedArray) -> pa.ChunkedArray:
    """`values`, or DataError at the first one below col.minimum."""
    if col.minimum is not None:
        expected = f"at least {col.minimum:g}" + (f"; {col.why}" if col.why else "")
        _require(file, col, values, pc.greater_equal(values, col.minimum), expected)
    return values


def _check_choices(file: Source, col: Column, values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Values as lower-cased trimmed strings, all within col.choices; else DataError at the first other."""
    text = pc.utf8_lower(pc.utf8_trim_whitespace(pc.cast(values, pa.string())))
    ok = pc.is_in(text, value_set=pa.array(col.choices))
    _require(file, col, values, ok, f"a known value ({', '.join(col.choices or ())})")
    return text
