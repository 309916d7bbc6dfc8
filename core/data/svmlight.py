"""svmlight / LETOR ranking files (`label qid:Q idx:val ...`), parsed in blocks into dense float32 features
f1..fN; lines without `qid:` take their queries from a sizes file (`.query`, `.group` or query_file).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from core.data import formats
from core.data.conversion import FLOAT32_MAX
from core.errors import DataError
from core.files import UnreadableFile, open_regular

QUERY_SUFFIXES = (".query", ".group")  # LightGBM's, XGBoost's: the query sizes of the file they extend


def _svm_problem(text: str, with_qid: bool = True) -> str | None:
    """What is wrong with one svmlight line (comment already allowed), or None (error path only)."""
    tokens = text.split("#", 1)[0].split()
    if not tokens:
        return None
    if not formats.is_number(tokens[0]):
        return f"{formats.shorten(tokens[0], 40)!r} is not a label (a number) at the start of the line"
    if with_qid and (len(tokens) < 2 or not re.fullmatch(r"qid:[-+]?\d+", tokens[1])):
        shown = formats.shorten(tokens[1], 40) if len(tokens) > 1 else ""
        return f"{shown!r} is not qid:<id> (the query's whole number, after the label)"
    for token in tokens[2 if with_qid else 1 :]:
        match = re.fullmatch(r"(\d+):(\S+)", token)
        if not match or not formats.is_number(match.group(2)) and match.group(2).lower() not in ("nan", "inf", "-inf"):
            return f"{formats.shorten(token, 40)!r} is not <index>:<value>"
        if int(match.group(1)) < 1:
            return f"{formats.shorten(token, 40)!r}: feature indices start at 1"
        value = float(match.group(2))
        if not np.isfinite(value):
            return f"{formats.shorten(token, 40)!r} is not a finite number"
        if abs(value) > FLOAT32_MAX:
            return f"{formats.shorten(token, 40)!r} is not a number that fits in float32"
    return None


_COMMENT = re.compile(rb"[ \t]*#[^\r\n]*")  # from a line's first '#' (and the blanks before it) to its end


def _strip_comments(part: bytes) -> bytes:
    """`part` without its comments; newlines (and a '\r' before one) stay, so line numbers do too."""
    return _COMMENT.sub(b"", part) if b"#" in part else part


def _svm_dense(part: bytes, first_line: int, with_qid: bool = True):
    """A block whose lines hold the same indices in order, read by pyarrow's CSV parser; else None."""
    raw = np.frombuffer(part, np.uint8)
    ends = np.flatnonzero(raw == 10)
    starts = np.r_[0, ends + 1]
    ends = np.r_[ends, len(raw)]
    length = ends - starts - (raw[np.maximum(ends - 1, 0)] == 13)
    data = np.flatnonzero(length > 0)
    if not len(data):
        return None
    line1 = part[starts[data[0]] : ends[data[0]]].rstrip(b"\r")
    fields = line1.replace(b":", b" ").split(b" ")
    first = 3 if with_qid else 1  # the token of the first index
    if len(fields) < 3 or len(fields) % 2 == 0 or (with_qid and fields[1] != b"qid"):
        return None
    for byte in (32, 58):  # every data line must hold as many spaces and colons as line 1 (one pass each)
        at = np.flatnonzero(raw == byte)  # per line: counted between one data line's start and the next's
        per_line = np.diff(np.searchsorted(at, np.r_[starts[data], len(raw)]))
        if (per_line != per_line[0]).any():
            return None
    names = [f"c{i}" for i in range(len(fields))]
    types = {n: pa.float64() if i == 0 or (i > first and (i - first) % 2) else pa.int64() for i, n in enumerate(names)}
    if with_qid:
        types["c1"] = pa.string()
    try:
        table = pacsv.read_csv(
            pa.BufferReader(part.replace(b":", b" ")),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types=types, null_values=[], strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(data) or (with_qid and not pc.all(pc.equal(table.column(1), "qid")).as_py()):
        return None
    features: dict[int, np.ndarray] = {}
    pairs = []
    for i in range(first, len(fields), 2):
        index, value = table.column(i).to_numpy(), table.column(i + 1).to_numpy()
        if not len(index) or index.min() < 1 or not np.isfinite(value).all() or np.abs(value).max() > FLOAT32_MAX:
            return None  # the general path names the bad token
        pairs.append((index, value))
    if all(index[0] == index.min() == index.max() for index, _ in pairs) and len(
        {int(index[0]) for index, _ in pairs}
    ) == len(pairs):  # the same indices on every line
        features = {int(index[0]): value.astype(np.float32) for index, value in pairs}
    elif pairs:  # as many entries on every line, different indices: scatter them
        width = max(int(index.max()) for index, _ in pairs)
        dense = np.zeros((width, table.num_rows), np.float32)
        rows = np.arange(table.num_rows)
        for index, value in pairs:
            dense[index - 1, rows] = value
        features = {int(k): dense[k - 1] for k in np.unique(np.concatenate([index for index, _ in pairs]))}
    qid = table.column(2).combine_chunks() if with_qid else pa.array(np.zeros(table.num_rows, np.int64))
    return first_line + data, table.column(0).combine_chunks(), qid, features


def _svm_block(file: Path, part: bytes, first_line: int, with_qid: bool = True):
    """Whole lines `part` -> (line numbers, labels, qids, {feature index: values})."""
    part = _strip_comments(part)
    fast = _svm_dense(part, first_line, with_qid)
    if fast is not None:
        return fast
    raw = np.frombuffer(part, np.uint8)
    ends = np.flatnonzero(raw == 10) + 1
    if not part.endswith(b"\n"):
        ends = np.append(ends, len(part))
    offsets = np.concatenate([[0], ends]).astype(np.int32)
    lines = pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.tobytes()), pa.py_buffer(part))
    try:
        lines.validate(full=True)
    except pa.ArrowInvalid:
        raise formats.not_utf8(file) from None
    colons = np.diff(np.searchsorted(np.flatnonzero(raw == 58), offsets))  # per line
    spaced = part.replace(b":", b" ")  # same length: the line offsets hold
    trimmed = pc.ascii_trim_whitespace(
        pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.tobytes()), pa.py_buffer(spaced))
    )
    tokens = pc.ascii_split_whitespace(trimmed)  # a blank line: one empty token
    flat = tokens.values
    offs = tokens.offsets.to_numpy().astype(np.int64)
    counts = np.diff(offs)
    data = np.flatnonzero(pc.binary_length(trimmed).to_numpy() > 0)
    starts, n_tok = offs[:-1][data], counts[data]

    def fail(bad_rows: np.ndarray | None = None):
        rows = data if bad_rows is None else bad_rows
        for row in rows:  # the first line Python finds wrong (error path only)
            text = part[offsets[row] : offsets[row + 1]].decode("utf-8", errors="replace")
            problem = _svm_problem(text, with_qid)
            if problem:
                return DataError(f"{file}: line {first_line + int(row)}: {problem}")
        row = int(rows[0]) if len(rows) else 0
        shape = "<label> qid:<id> <index>:<value> ..." if with_qid else "<label> <index>:<value> ..."
        return DataError(f"{file}: line {first_line + row}: not an svmlight line ('{shape}')")

    first = 3 if with_qid else 1  # the token of each line's first index
    shape_ok = (n_tok >= first) & (n_tok % 2 == 1) & (colons[data] == (n_tok - 1) // 2)
    if not shape_ok.all():
        raise fail(data[~shape_ok][:1])
    if with_qid and not pc.all(pc.equal(pc.take(flat, pa.array(starts + 1)), "qid")).as_py():
        raise fail()
    try:
        qid = (
            pc.cast(pc.take(flat, pa.array(starts + 2)), pa.int64())
            if with_qid
            else pa.array(np.zeros(len(data), np.int64))
        )
        labels = pc.cast(pc.take(flat, pa.array(starts)), pa.float64())
    except pa.ArrowInvalid:
        raise fail() from None
    pairs = (n_tok - first) // 2  # line i's pair j is at token starts[i] + first + 2j; g = before[i] + j overall
    before = np.cumsum(pairs) - pairs
    index_at = np.repeat(starts + first - 2 * before, pairs) + 2 * np.arange(int(pairs.sum()), dtype=np.int64)
    try:
        index = pc.cast(pc.take(flat, pa.array(index_at)), pa.int32()).to_numpy()
        value = pc.cast(pc.take(flat, pa.array(index_at + 1)), pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        raise fail() from None
    if len(index) and (index.min() < 1 or not np.isfinite(value).all() or np.abs(value).max() > FLOAT32_MAX):
        raise fail()
    row_of = np.repeat(np.arange(len(data)), pairs)
    width = int(index.max()) if len(index) else 0
    dense = np.zeros((width, len(data)), np.float32)
    dense[index - 1, row_of] = value  # feature-major: each feature a contiguous column
    present = np.unique(index)
    return first_line + data, labels, qid, {int(k): dense[k - 1] for k in present}


def read_svmlight(file: Path, block: int = 1 << 25, with_qid: bool = True) -> tuple[pa.Table, np.ndarray]:
    """An svmlight file -> (table of query_id, doc_id, label, f1..fN, each row's line)."""
    lines, labels, qids, blocks = [], [], [], []
    with open(file, "rb") as handle:
        for line, part in formats.line_blocks(handle, block):
            if part.strip():
                at, label, qid, features = _svm_block(file, part, line, with_qid)
                lines.append(at)
                labels.append(label)
                qids.append(qid)
                blocks.append(features)
    row_lines = np.concatenate(lines) if lines else np.zeros(0, np.int64)
    width = max((max(b, default=0) for b in blocks), default=0)
    columns = {
        "query_id": pa.chunked_array(qids, pa.int64()),
        "doc_id": pa.chunked_array([pa.array(row_lines).cast(pa.string())]),
        "label": pa.chunked_array(labels, pa.float64()),
    }
    zeros = [np.zeros(len(at), np.float32) for at in lines]
    for k in range(1, width + 1):
        columns[f"f{k}"] = pa.chunked_array([pa.array(b.get(k, z)) for b, z in zip(blocks, zeros)], pa.float32())
    return pa.table(columns), row_lines


# ---- query sizes beside a file without qid: -------------------------------------------------------------------


def query_sidecar(file: Path) -> Path | None:
    """`file`.query or `file`.group beside `file` (LightGBM's and XGBoost's names), when one is a file."""
    for suffix in QUERY_SUFFIXES:
        candidate = file.with_name(file.name + suffix)
        if candidate.is_file():
            return candidate
    return None


def read_query_sizes(path: Path) -> np.ndarray:
    """The query sizes of a sizes file: one whole number above 0 per line (blank lines skipped)."""
    try:
        with open_regular(path) as handle:
            raw = handle.read()
    except (OSError, UnreadableFile) as exc:
        raise DataError(f"{path}: cannot read the query sizes: {exc}") from None
    lines = [line for line in raw.splitlines() if line.strip()]
    try:
        sizes = np.array([int(line) for line in lines], dtype=np.int64)
    except ValueError:
        sizes = None
    if sizes is None or (sizes < 1).any() or not len(sizes):
        for number, line in enumerate(raw.splitlines(), 1):  # error path: the first bad line
            fields = line.split()
            if not fields:
                continue
            text = fields[0].decode("utf-8", errors="replace")
            if len(fields) > 1 or not re.fullmatch(r"\+?\d+", text) or int(text) < 1:
                shown = formats.shorten(line.decode("utf-8", errors="replace").strip(), 40)  # repr escapes it
                raise DataError(
                    f"{path}: line {number}: {shown!r} is not a query size (one whole number above "
                    "0 per line: how many consecutive rows the query holds)"
                )
        raise DataError(
            f"{path}: no query sizes (one whole number per line: how many consecutive rows each query holds)"
        )
    return sizes


def read_ranking_file(file: Path, query_file: str = "") -> tuple[pa.Table, np.ndarray, str]:
    """read_svmlight's (table, row lines) and where the queries came from ("" when the lines hold them); lines
    without qid: take query k as the next sizes[k] rows of `query_file` or the sizes file beside `file`."""
    kind = formats.svmlight_kind(file)
    if kind != "plain":
        if query_file:
            raise DataError(
                f"{file}: its lines name their queries (qid:); query_file {query_file} is for "
                "svmlight files without qid: leave it empty"
            )
        table, lines = read_svmlight(file)
        return table, lines, ""
    sizes_file = Path(query_file) if query_file else query_sidecar(file)
    if sizes_file is None:
        raise DataError(
            f"{file}: svmlight lines without qid: and no query sizes: put them in "
            f"{file.name}.query (or .group) beside it, one query's row count per line, or name "
            "that file with --query-file (setting query_file), or add qid:<id> after each label"
        )
    sizes = read_query_sizes(sizes_file)
    table, lines = read_svmlight(file, with_qid=False)
    if int(sizes.sum()) != table.num_rows:
        raise DataError(
            f"{sizes_file}: its {len(sizes):,} query sizes add up to {int(sizes.sum()):,} rows, but "
            f"{file} has {table.num_rows:,} data rows; the sizes must count every row once, in order"
        )
    query = pa.array(np.repeat(np.arange(len(sizes), dtype=np.int64), sizes))
    table = table.set_column(table.schema.get_field_index("query_id"), "query_id", query)
    how = "the query_file" if query_file else "beside it"
    return table, lines, f"{len(sizes):,} queries from {sizes_file.name} ({how}; the lines have no qid:)"
