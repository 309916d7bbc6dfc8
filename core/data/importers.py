"""Read users' CSV / Parquet files (or a folder of them) with pyarrow, with errors that name file, line, column.

Every reader here is columnar: the happy path never loops over rows in Python. The slow, row-locating
work (finding the first bad value, the byte that is not UTF-8) only runs once a read has already failed,
so a bad file costs a second pass but a good one never does.

Line numbers assume one record per line (line 1 is the header, data row i is line i + 2); a quoted field
holding a newline shifts them, which the messages say by calling them "line N (record N-1)".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import torch

from core.errors import DataError

SUFFIXES = (".csv", ".parquet", ".pq")


@dataclass(frozen=True)
class Column:
    """One expected column: its name and the kind of values it must hold.

    kind: "id" (any value, mapped to contiguous ids later), "int", "float", "number" (int or float,
    e.g. timestamps; datetimes are turned into seconds), "text" (UTF-8 strings) or "label" (any, checked
    by the task).
    """

    name: str
    kind: str
    required: bool = True
    choices: tuple[str, ...] | None = None  # for "label": allowed values (compared lower-cased, trimmed)


def data_files(path: str | Path) -> list[Path]:
    """The CSV/Parquet files at `path`: the file itself, or the sorted data files of a folder."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
        if not files:
            raise DataError(f"{path}: folder holds no .csv or .parquet files")
        return files
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if path.suffix.lower() not in SUFFIXES:
        raise DataError(f"{path}: unsupported file type {path.suffix or '(none)'}; use .csv or .parquet")
    return [path]


def read_table(path: str | Path, columns: list[Column], prefix_columns: str | None = None) -> pa.Table:
    """Read `path` (file or folder) into one table holding `columns` (plus every column whose name starts
    with `prefix_columns`, e.g. "f" for ranking features), checked and converted.

    Raises DataError naming the file and the line or column for: empty files, missing columns,
    values of the wrong type, text that is not UTF-8.
    """
    tables = [_read_one(file, columns, prefix_columns) for file in data_files(path)]
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    for file, table in zip(data_files(path), tables):
        if table.schema.names != first.names:
            raise DataError(f"{file}: columns {table.schema.names} differ from the folder's first file {first.names}")
    return pa.concat_tables([t.cast(first) for t in tables])


def _read_one(file: Path, columns: list[Column], prefix: str | None) -> pa.Table:
    if file.stat().st_size == 0:
        raise DataError(f"{file}: empty file (line 1: no header)")
    if file.suffix.lower() in (".parquet", ".pq"):
        table = _read_parquet(file)
    else:  # ids stay the text they are in the file: "007" and "7" are two lessons, and map back as written
        table = _read_csv(file, text_columns=[c.name for c in columns if c.kind == "id"])
    names = table.schema.names
    for col in columns:
        if col.required and col.name not in names:
            raise DataError(f"{file}: line 1: missing column {col.name!r} (found: {', '.join(names)})")
    if table.num_rows == 0:
        raise DataError(f"{file}: empty file (a header at line 1 but no data rows)")
    wanted = [c for c in columns if c.name in names]
    extra = sorted((n for n in names if prefix and _is_prefixed(n, prefix)), key=_natural_key)
    out = {c.name: _convert(file, c, table.column(c.name)) for c in wanted}
    out.update({n: _convert(file, Column(n, "float"), table.column(n)) for n in extra})
    return pa.table(out)


def _is_prefixed(name: str, prefix: str) -> bool:
    return name.startswith(prefix) and name[len(prefix):].isdigit()


def _natural_key(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _read_csv(file: Path, text_columns: list[str] = ()) -> pa.Table:
    try:
        table = pacsv.read_csv(file, convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in text_columns}))
    except pa.ArrowInvalid as exc:
        text = str(exc)
        if "UTF8" in text or "UTF-8" in text:
            raise DataError(f"{file}: {_utf8_error_position(file)}: text is not valid UTF-8") from None
        if "Empty CSV file" in text:
            raise DataError(f"{file}: empty file (line 1: no header)") from None
        row = re.search(r"Row #(\d+)", text)
        where = f"line {int(row.group(1))}: " if row else ""
        raise DataError(f"{file}: {where}cannot parse CSV: {text.splitlines()[0]}") from None
    if any(pa.types.is_binary(t) or pa.types.is_large_binary(t) for t in table.schema.types):
        # pyarrow reads a column holding invalid UTF-8 as bytes rather than failing: report the first bad byte.
        raise DataError(f"{file}: {_utf8_error_position(file)}: text is not valid UTF-8")
    return table


def _read_parquet(file: Path) -> pa.Table:
    try:
        return pq.read_table(file)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{file}: not a readable Parquet file: {exc}") from None


def _utf8_error_position(file: Path) -> str:
    """'line L, column C' of the first byte that is not UTF-8 (error path only: reads the file in chunks)."""
    line, chunk_size, carry = 1, 1 << 24, b""
    with open(file, "rb") as handle:
        while chunk := handle.read(chunk_size):
            data = carry + chunk
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.start < len(data) - 4 or len(chunk) < chunk_size:  # not a character cut by the chunk
                    before = data[: exc.start]
                    column = exc.start - (before.rfind(b"\n") + 1) + 1
                    lines = line + before.count(b"\n")
                    return f"line {lines}, column {column} (byte)"
            cut = data.rfind(b"\n") + 1 if b"\n" in data else 0
            line += data[:cut].count(b"\n")
            carry = data[cut:]
    return "somewhere"


def _first_bad_row(values: pa.ChunkedArray, ok: pa.ChunkedArray) -> tuple[int, str]:
    """Index and text of the first value where `ok` is false (or null)."""
    bad = np.flatnonzero(~pc.fill_null(ok, False).to_numpy(zero_copy_only=False))
    index = int(bad[0])
    return index, str(values[index].as_py())


def _fail_value(file: Path, col: Column, index: int, value: str, expected: str) -> DataError:
    line = index + 2 if file.suffix.lower() == ".csv" else None
    where = f"line {line}, column {col.name!r}" if line else f"row {index + 1}, column {col.name!r}"
    return DataError(f"{file}: {where}: {value!r} is not {expected}")


_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def _convert(file: Path, col: Column, values: pa.ChunkedArray) -> pa.ChunkedArray:
    """`values` as the column's kind, or DataError at the first value that does not fit."""
    kind, t = col.kind, values.type
    null_count = values.null_count
    if null_count and kind != "text":
        index = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise _fail_value(file, col, index, "", "a value (the field is empty)")
    if kind == "label" and col.choices is not None:
        return _check_choices(file, col, values)
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
        return pc.cast(values, pa.int64() if kind != "float" else pa.float64())
    if pa.types.is_integer(t):
        return pc.cast(values, pa.float64()) if kind == "float" else pc.cast(values, pa.int64())
    if pa.types.is_floating(t):
        if kind == "int":
            ok = pc.equal(pc.floor(values), values)
            if not pc.all(ok).as_py():
                raise _fail_value(file, col, *_first_bad_row(values, ok), "a whole number")
            return pc.cast(values, pa.int64())
        return pc.cast(values, pa.float64())
    # Strings where numbers belong: locate the first one that does not parse.
    text = pc.cast(values, pa.string())
    ok = pc.match_substring_regex(text, _NUMBER if kind != "int" else r"^\s*[-+]?\d+\s*$")
    if pc.all(pc.fill_null(ok, False)).as_py():
        return pc.cast(pc.utf8_trim_whitespace(text), pa.int64() if kind == "int" else pa.float64())
    expected = {"int": "a whole number", "float": "a number", "number": "a number or a date-time"}[kind]
    raise _fail_value(file, col, *_first_bad_row(text, ok), expected)


def _check_choices(file: Path, col: Column, values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Values as lower-cased trimmed strings, all within col.choices; else DataError at the first other."""
    text = pc.utf8_lower(pc.utf8_trim_whitespace(pc.cast(values, pa.string())))
    ok = pc.is_in(text, value_set=pa.array(col.choices))
    if not pc.all(pc.fill_null(ok, False)).as_py():
        index, value = _first_bad_row(values, ok)
        raise _fail_value(file, col, index, value, f"a known value ({', '.join(col.choices)})")
    return text


def require_rows(path: str, split: dict, what: str, need: str) -> None:
    """DataError when a split built from `path` came out empty (too little data to validate on)."""
    if len(next(iter(split.values()))) == 0:
        raise DataError(f"{path}: too little data for a {what} split: {need}")


def contiguous_ids(values: pa.ChunkedArray, start: int = 0) -> tuple[np.ndarray, int]:
    """Raw ids (any type) -> contiguous int64 codes start..start+n-1, in order of first appearance; and n."""
    codes, raw = encode_ids(values, start)
    return codes, len(raw)


def encode_ids(values: pa.ChunkedArray, start: int = 0) -> tuple[np.ndarray, pa.Array]:
    """Like contiguous_ids, with the raw ids themselves: code start+i stands for raw[i]."""
    encoded = pc.dictionary_encode(values).combine_chunks()
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64) + start, encoded.dictionary


def id_vocabulary(raw: pa.Array) -> torch.Tensor | list[str]:
    """Raw ids in code order, in a form a weights_only checkpoint and a JSON manifest can hold: an int64
    tensor for integer ids (compact), else their strings."""
    if pa.types.is_integer(raw.type):
        return torch.from_numpy(raw.to_numpy(zero_copy_only=False).astype(np.int64))
    return [str(value) for value in raw.to_pylist()]


def write_table(table: pa.Table, out: str | Path) -> Path:
    """Write `table` as CSV or Parquet, chosen by the suffix of `out`."""
    from core.errors import ConfigError

    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in SUFFIXES:
        raise ConfigError("out", f"{out}: use a .csv or .parquet file name")
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".csv":
        pacsv.write_csv(table, out)
    else:
        pq.write_table(table, out)
    return out
