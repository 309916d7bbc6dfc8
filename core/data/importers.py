"""Read users' data files (or a folder of them) with pyarrow, with errors that name file, line, column.

Columns are found by ReadOptions.columns (a name or a 1-based position), else by name, else by one alias
(ALIASES); a file whose line 1 is data has its columns taken by position (HEADERLESS_LAYOUTS).
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import torch

from core.data import formats, svmlight
from core.data.conversion import Column, Source, convert
from core.errors import ConfigError, DataError
from core.files import file_kind
from core.text import first_line, printable

SUFFIXES = (".csv", ".parquet", ".pq")  # what write_table writes (and `amp data generate --out` takes)
PARQUET_SUFFIXES = SUFFIXES[1:]
# what read_table reads
READ_SUFFIXES = (*SUFFIXES, *formats.DELIMITED_SUFFIXES[1:], *formats.JSON_SUFFIXES, *formats.SVMLIGHT_SUFFIXES)
# Names of the expected columns, used when the name is absent and exactly one of these is there (normalise_name).
ALIASES = {
    "user_id": ("userid", "user", "uid"),
    "item_id": ("movieid", "itemid", "item", "iid", "lessonid"),
    "timestamp": ("ts", "time", "datetime"),
    "text": ("sentence", "review", "reviewtext", "content"),
    "label": ("sentiment", "polarity", "target", "y", "relevance", "rel", "grade"),
    "query_id": ("qid", "query", "queryid"),
    "doc_id": ("docid", "did"),
}
# Header-less files: columns by position, the caller's in order or a layout here of the file's width.
HEADERLESS_LAYOUTS = {
    ("user_id", "item_id", "timestamp"): (("user_id", "item_id", "rating", "timestamp"),),  # MovieLens ratings
    ("user_id", "item_id"): (
        ("user_id", "item_id", "rating"),  # file order (SASRec's `user item rating`)
        ("user_id", "item_id", "rating", "timestamp"),
    ),
}


@dataclass(frozen=True)
class ReadOptions:
    """How to read a user's file (RunConfig's delimiter, columns, data format and query file); `columns`
    maps an expected column to the file's name or 1-based position for it."""

    delimiter: str = ""
    columns: Mapping[str, str] = field(default_factory=dict)
    data_format: str = "auto"
    query_file: str = ""


def data_files(path: str | Path) -> list[Path]:
    """The data files at `path`: the file itself or a folder's sorted READ_SUFFIXES files; not a FIFO or device."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise DataError(f"{path}: a link to {os.readlink(path)}, which does not exist")
    if path.is_dir():
        folder = _real(path)
        files = sorted(_real(p) for p in folder.iterdir() if p.suffix.lower() in READ_SUFFIXES and p.is_file())
        if not files:
            raise DataError(f"{folder}: folder holds no .csv or .parquet files (nor {', '.join(READ_SUFFIXES[3:])})")
        return files
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    file = _real(path)
    if not stat.S_ISREG(mode := file.stat().st_mode):
        raise DataError(
            f"{file}: {file_kind(mode)}, not a regular file; use a .csv or .parquet file or a folder of them"
        )
    return [file]  # any suffix: a file READ_SUFFIXES does not know is read by its content


def _real(path: Path) -> Path:
    """The path a link points to (errors name the file that is really read); other paths unchanged."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def read_table(
    path: str | Path,
    columns: list[Column],
    prefix_columns: str | None = None,
    options: ReadOptions | None = None,
    notes: list[str] | None = None,
) -> pa.Table:
    """Read `path` (file or folder) into one table of `columns` (and `prefix_columns`<N>), converted."""
    options = options or ReadOptions()
    files = data_files(path)
    if options.query_file and len(files) > 1:
        raise DataError(
            f"{path}: query_file {options.query_file} gives the query sizes of one file, and this "
            f"folder holds {len(files)}: put each file's sizes beside it as FILE.query instead"
        )
    notes = [] if notes is None else notes
    read = [_read_source(file, columns, prefix_columns, options, notes) for file in files]
    tables = [table for table, _ in read]
    if len(tables) == 1:
        return tables[0]
    if prefix_columns and all(src.kind == "svmlight" for _, src in read):
        tables = _same_features(tables, prefix_columns)  # svmlight files differ in their largest index
    first = tables[0].schema
    for file, table in zip(files, tables):
        if table.schema.names != first.names:
            raise DataError(f"{file}: columns {table.schema.names} differ from the folder's first file {first.names}")
    return pa.concat_tables([t.cast(first) for t in tables])


def _same_features(tables: list[pa.Table], prefix: str) -> list[pa.Table]:
    """svmlight tables padded with zero features to the widest one's f1..fN."""
    width = max(sum(_is_prefixed(n, prefix) for n in t.column_names) for t in tables)
    out = []
    for table in tables:
        have = sum(_is_prefixed(n, prefix) for n in table.column_names)
        for k in range(have + 1, width + 1):
            table = table.append_column(f"{prefix}{k}", pa.array(np.zeros(table.num_rows, np.float32)))
        out.append(table)
    return out


def _known_names(columns: list[Column], options: ReadOptions) -> set[str]:
    """Normalised names that mark line 1 as a header: the expected names, their aliases, the mapped names."""
    known = {formats.normalise_name(c.name) for c in columns}
    known.update(alias for c in columns for alias in ALIASES.get(c.name, ()))
    known.update(formats.normalise_name(v) for v in options.columns.values() if not str(v).strip().isdigit())
    return known


def _line1_is_data(records: list[list[str]], known: set[str]) -> bool:
    """Whether line 1 is data, not a header: it names no `known` column and holds numbers in the columns that
    are numbers on the sampled lines after it (all numbers, for a file of one line)."""
    first = records[0]
    if any(formats.normalise_name(f) in known for f in first):
        return False
    rest = [r for r in records[1:] if len(r) == len(first)]
    if not rest:
        return all(formats.is_number(f) for f in first)
    numeric = [j for j in range(len(first)) if all(formats.is_number(r[j]) for r in rest)]
    return bool(numeric) and all(formats.is_number(first[j]) for j in numeric)


def _positional_names(columns: list[Column], prefix: str | None, count: int) -> list[str]:
    """Names for the `count` columns of a header-less file (HEADERLESS_LAYOUTS, else the columns in order)."""
    layouts = HEADERLESS_LAYOUTS.get(tuple(c.name for c in columns if c.required), ())
    layout = next((layout for layout in layouts if len(layout) == count), None)
    names = list(layout) if layout else [c.name for c in columns][:count]
    k = 0
    while len(names) < count:
        k += 1
        names.append(f"{prefix}{k}" if prefix else f"column{len(names) + 1}")
    return names


def _resolve(src: Source, names: list[str], columns: list[Column], options: ReadOptions) -> dict[str, int]:
    """Expected column -> its index among `names` (options.columns, else the name, else one alias)."""
    expected = [c.name for c in columns]
    where = "line 1: " if src.kind == "csv" else ""
    for key, target in options.columns.items():
        if key not in expected:
            raise DataError(
                f"{src}: column mapping {key}={formats.shorten(str(target), 40)}: this task reads no "
                f"column {formats.shorten(key, 40)!r} (it reads {', '.join(expected)})"
            )
    positions: dict[str, int] = {}
    normed = [formats.normalise_name(n) for n in names]
    for col in columns:
        target = str(options.columns.get(col.name, "")).strip()
        if not target:
            continue
        mapping = f"column mapping {col.name}={formats.shorten(target, 40)}"
        if target.isdigit():
            index = int(target) - 1
            if not 0 <= index < len(names):
                raise DataError(f"{src}: {where}{mapping}: the file has {len(names)} columns (positions count from 1)")
        else:
            hits = [i for i, n in enumerate(names) if n == target] or [
                i for i, n in enumerate(normed) if n == formats.normalise_name(target)
            ]
            if not hits:
                raise DataError(
                    f"{src}: {where}{mapping}: no column {formats.shorten(target, 40)!r} ({_found_columns(names, src)})"
                )
            index = hits[0]
        positions[col.name] = index
    for col in columns:
        if col.name in positions:
            continue
        taken = set(positions.values())
        if col.name in names and names.index(col.name) not in taken:
            positions[col.name] = names.index(col.name)
            continue
        aliases = {formats.normalise_name(col.name), *ALIASES.get(col.name, ())}
        hits = [i for i, n in enumerate(normed) if i not in taken and n in aliases]
        if len(hits) == 1:
            positions[col.name] = hits[0]
        elif len(hits) > 1 and col.required:
            raise DataError(
                f"{src}: {where}missing column {col.name!r}; {formats.shorten(', '.join(names[i] for i in hits), 80)} "
                f"could each be it: choose one with --column {col.name}=NAME"
            )
    src.positions, src.names = positions, list(names)
    for name, index in positions.items():
        if names[index] == name:
            src.shown[name] = repr(name)
        elif src.header:
            src.shown[name] = f"{formats.shorten(names[index], 40)!r} ({name})"
        else:
            src.shown[name] = f"{index + 1} ({name})"
    return positions


def _read_source(
    file: Path, columns: list[Column], prefix: str | None, options: ReadOptions, notes: list[str]
) -> tuple[pa.Table, Source]:
    if file.stat().st_size == 0:
        raise DataError(f"{file}: empty file (line 1: no header)")
    shape, delimiter, how = _format_of(file, columns, options)
    said = [how] if how else []  # for the run's log: how the file was read, when it is not the usual way
    if shape == "parquet":
        src, table = Source(file, "parquet"), _read_parquet(file)
    elif shape == "json":
        src, table = Source(file, "json"), formats.read_jsonl(file)
    elif shape == "svmlight":
        if not any(c.name == "query_id" for c in columns):
            raise DataError(
                f"{file}: an svmlight file holds ranking data (label qid:<id> <index>:<value> ...); "
                f"this task reads {', '.join(c.name for c in columns)}"
            )
        table, lines, queries = svmlight.read_ranking_file(file, options.query_file)
        said += [queries] if queries else []
        src = Source(file, "svmlight", row_lines=lines)
        options = ReadOptions()  # its columns are fixed: query_id, doc_id, label, f1..fN
    elif shape == "label_text":
        if not {"label", "text"} <= {c.name for c in columns}:
            raise DataError(
                f"{file}: 'label text' lines hold a label and a text (sentiment data); this task "
                f"reads {', '.join(c.name for c in columns)}"
            )
        src, table = Source(file, "label_text"), formats.read_label_text(file)
        options = ReadOptions()  # its columns are fixed: label, text
    else:
        src, table = _read_delimited(file, columns, prefix, options, delimiter)
    if said:
        notes.append(f"{file.name}: {'; '.join(said)}")
    names = table.schema.names
    positions = _resolve(src, names, columns, options)
    used = {names[i] for i in positions.values()} | {n for n in names if prefix and _is_prefixed(n, prefix)}
    where = "line 1: " if src.kind == "csv" else ""
    _refuse_repeated(file, names, used, where)
    for col in columns:
        if col.required and col.name not in positions:
            hint = f"; {col.hint}" if col.hint else ""
            raise DataError(f"{file}: {where}missing column {col.name!r} ({_found_columns(names, src)}){hint}")
    if table.num_rows == 0:
        raise DataError(f"{file}: empty file (a header at line 1 but no data rows)")
    taken = set(positions.values())
    extra = sorted(
        (n for i, n in enumerate(names) if prefix and i not in taken and _is_prefixed(n, prefix)), key=_natural_key
    )
    out = {c.name: convert(src, c, table.column(positions[c.name])) for c in columns if c.name in positions}
    out.update({n: convert(src, Column(n, "float"), table.column(n)) for n in extra})
    return pa.table(out), src


def _format_of(file: Path, columns: list[Column], options: ReadOptions) -> tuple[str, str, str]:
    """(format, delimiter or "", a note when found by content) of `file`: as given, by suffix or content."""
    shape, suffix = options.data_format or "auto", file.suffix.lower()
    known = suffix in READ_SUFFIXES
    if shape not in ("auto", *formats.FORMAT_NAMES):
        raise ConfigError("data_format", f"{shape!r} is not one of auto, {', '.join(formats.FORMAT_NAMES)}")
    if shape == "parquet" or (shape == "auto" and suffix in PARQUET_SUFFIXES):
        return "parquet", "", ""
    if shape != "auto":
        formats.refuse_binary(file, f"a UTF-8 text file ({formats.FORMAT_NAMES[shape]})")
        return shape, "", ""
    formats.refuse_binary(
        file, "a UTF-8 CSV file" if known else "a text data file (delimited, JSON lines, svmlight or label text)"
    )
    labelled = next((c.choices for c in columns if c.name == "label" and c.choices), None)
    labels = labelled if labelled and any(c.name == "text" for c in columns) and not options.delimiter else ()
    if suffix in formats.JSON_SUFFIXES:
        return "json", "", ""
    if suffix in formats.SVMLIGHT_SUFFIXES:
        return "svmlight", "", ""
    if known:
        if any(c.name == "query_id" for c in columns) and formats.svmlight_kind(file):
            return "svmlight", "", ""
        if labels and formats.looks_label_text(file, labels):
            return "label_text", "", f"read as {formats.FORMAT_NAMES['label_text']} (by content)"
        return "delimited", "", ""
    found = formats.sniff_format(file, _known_names(columns, options), labels or None)
    if found is None and options.delimiter:  # the delimiter given says how
        return "delimited", "", "read as delimited text (by the delimiter given)"
    if found is None:
        raise DataError(formats.unrecognised(file))
    shape, delimiter = found
    sep = f" separated by {formats.describe(delimiter)}" if delimiter and not options.delimiter else ""
    return shape, "" if options.delimiter else delimiter, f"read as {formats.FORMAT_NAMES[shape]}{sep} (by content)"


def _read_delimited(
    file: Path, columns: list[Column], prefix: str | None, options: ReadOptions, sniffed: str = ""
) -> tuple[Source, pa.Table]:
    """A delimited text file: the delimiter given or sniffed, header or not, id columns read as text."""
    known = _known_names(columns, options)
    delimiter = formats.normalise_delimiter(options.delimiter)
    src = Source(
        file, "csv", delimiter=delimiter or sniffed or formats.sniff_delimiter(file, known), sniffed=not delimiter
    )
    sample = formats.sample_records(file, src.delimiter)
    if not sample:
        raise DataError(f"{file}: empty file (line 1: no header)")
    src.header = not _line1_is_data(sample, known)
    names = sample[0] if src.header else _positional_names(columns, prefix, len(sample[0]))
    positions = _resolve(src, names, columns, options)
    text_columns = [names[positions[c.name]] for c in columns if c.kind == "id" and c.name in positions]
    table = _read_csv(src, text_columns, None if src.header else names)
    return src, table


def _found_columns(names: list[str], src: Source | None = None) -> str:
    """What line 1 holds, for a missing-column message: its names, or a hint when another separator splits it."""
    if src is not None and not src.header:
        return (
            f"line 1 holds data, not a header, so its {len(names)} columns are taken by position as "
            f"{formats.shorten(', '.join(names), 60)}; add a header line or map columns with --column NAME=POSITION"
        )
    used = src.delimiter if src is not None else ","
    if len(names) == 1:
        for sep in ("::", ";", "\t", "|", ","):
            parts = names[0].split(sep)
            if sep != used and len(parts) > 1 and all(formats.looks_like_column_name(p.strip()) for p in parts):
                if src is None or src.kind != "csv":
                    return f"line 1 seems separated by {formats.describe(sep)}"
                how = "the sniffed" if src.sniffed else "the given"
                return (
                    f"line 1 seems separated by {formats.describe(sep)}, but {how} delimiter was "
                    f"{formats.describe(used)}: set --delimiter {formats.flag(sep)}"
                )
    return "found: " + formats.shorten(printable(", ".join(names)), 80)


def _is_prefixed(name: str, prefix: str) -> bool:
    return name.startswith(prefix) and name[len(prefix) :].isdigit()


def _natural_key(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _read_csv(src: Source, text_columns: Sequence[str] = (), column_names: list[str] | None = None) -> pa.Table:
    """pyarrow reads the delimited file `src` (its header, else `column_names`); `text_columns` stay strings."""
    file = src.file
    try:
        table = formats.read_delimited(file, src.delimiter, column_names, {name: pa.string() for name in text_columns})
    except pa.ArrowInvalid as exc:
        text = str(exc)
        if formats.is_utf8_error(exc):
            raise formats.not_utf8(file) from None
        if "Empty CSV file" in text:
            raise DataError(f"{file}: empty file (line 1: no header)") from None
        raise DataError(f"{file}: {_csv_parse_problem(src, text, column_names)}") from None
    if any(pa.types.is_binary(t) or pa.types.is_large_binary(t) for t in table.schema.types):
        raise formats.not_utf8(file)
    return table


def _csv_parse_problem(src: Source, text: str, column_names: list[str] | None = None) -> str:
    """Where and why a delimited file does not parse (error path only)."""
    counts = re.search(r"Expected (\d+) columns, got (\d+)", text)
    if counts:
        first: list = []

        def keep_first(row):
            first.append(row)
            return "error"

        try:
            formats.read_delimited(
                src.file, src.delimiter, column_names, use_threads=False, invalid_row_handler=keep_first
            )
        except (pa.ArrowInvalid, OSError, DataError):
            pass
        index = first[0].number - 1 - src.header if first and first[0].number else None
        where = f"line {src.line(index)}: " if index is not None else ""
        expected, got = counts.groups()
        line1 = "the header has" if src.header else "line 1 has"
        sep = "a comma" if src.delimiter == "," else f"the delimiter {formats.describe(src.delimiter)}"
        quote = " or a quote must be quoted" if len(src.delimiter) == 1 else ""
        return (
            f"{where}cannot parse CSV: {got} fields where {line1} {expected} "
            f"(a field holding {sep}{quote or ' cannot be read'})"
        )
    reason = text.splitlines()[0].removeprefix("CSV parse error: ").split(":")[0]
    return f"cannot parse CSV: {formats.shorten(reason, 60)}"


def _refuse_repeated(file: Path, names: list[str], used: set[str] | None = None, where: str = "") -> None:
    """DataError at the first name (of `used`, else any) that `names` holds more than once."""
    for name, count in Counter(names).items():
        if count > 1 and (used is None or name in used):
            raise DataError(f"{file}: {where}column {name!r} appears {count} times; column names must be unique")


def _read_parquet(file: Path) -> pa.Table:
    try:
        return pq.read_table(file)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = formats.shorten(first_line(str(exc)), 120)
    try:
        names = pq.read_schema(file).names
    except (pa.ArrowInvalid, OSError):
        names = []
    _refuse_repeated(file, names)
    raise DataError(f"{file}: not a readable Parquet file: {reason}")


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
    """Raw ids in code order as a weights_only checkpoint and JSON hold them: int64 tensor, else strings."""
    if pa.types.is_integer(raw.type):
        return torch.from_numpy(raw.to_numpy(zero_copy_only=False).astype(np.int64))
    return [str(value) for value in raw.to_pylist()]


def write_table(table: pa.Table, out: str | Path) -> Path:
    """Write `table` as CSV or Parquet, chosen by the suffix of `out`."""
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
