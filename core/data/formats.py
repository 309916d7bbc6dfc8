"""The text formats public data sets come in, read into pyarrow tables for the importer (core.data.importers).

- Delimited text (.csv .tsv .txt .dat .data): the delimiter is sniffed from the first lines (comma, tab, semicolon,
  pipe, or MovieLens' two-character "::"), quoted fields respected; a delimiter of more than one character is
  translated to one unused control character while pyarrow streams the file (no quoting then, as in
  MovieLens' .dat files), so a 10M-row file is never held as Python strings.
- svmlight / LETOR ranking files (`label qid:Q idx:val ... # comment`, MSLR-WEB10K, Yahoo, Istella, LETOR 4.0),
  parsed in blocks with numpy and pyarrow string kernels into dense float32 features f1..fN.
- JSON lines (.jsonl .ndjson, and .json holding one object per line) via pyarrow.json.

The happy path never loops over rows in Python; the error path may (it locates the first bad line). Messages
name the file and the line and echo at most one bad token, truncated.

The reading rules every reader of user files shares (the importer and the predict CLI): what a number is
(NUMBER), how column names compare (normalise_name), how a delimiter is sniffed (sniff_delimiter).
"""

from __future__ import annotations

import csv
import io
from contextlib import contextmanager
import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from core.errors import ConfigError, DataError

DELIMITED_SUFFIXES = (".csv", ".tsv", ".txt", ".dat", ".data")
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
SVMLIGHT_SUFFIXES = (".svm", ".svmlight", ".libsvm", ".letor")
CANDIDATES = ("::", "\t", ",", ";", "|")  # sniffed delimiters, in order of preference on a tie
SUFFIX_DELIMITER = {".tsv": "\t", ".dat": "::"}  # preferred on a tie; else ","
SEP = "\x1f"  # what a multi-character delimiter becomes while pyarrow reads the file (ASCII unit separator)
NAMED_DELIMITERS = {"\\t": "\t", "tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " ",
                    "colons": "::"}
SAMPLE_BYTES = 1 << 16
MAX_LINE_BYTES = 1 << 24  # line 1 is read to its end up to this size
SAMPLE_RECORDS = 50
NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"  # what a reader reads as a number (pyarrow regex too)
INTEGER = r"^\s*[-+]?\d+\s*$"  # what a reader reads as a whole number
_NUMBER = re.compile(NUMBER)
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .()#%+-]{0,39}$")
_SVM_FIRST = re.compile(rb"^\s*[-+]?[0-9.]+(?:[eE][-+]?\d+)?\s+qid:", re.MULTILINE)


def is_number(text: str) -> bool:
    """Whether `text` reads as a number (NUMBER): '3', '-0.5', '.5', '1e-3', with blanks around."""
    return bool(_NUMBER.match(text))


def looks_like_column_name(name: str) -> bool:
    """Whether `name` is shaped like a column name (a letter or '_' first, then up to 39 letters, digits,
    blanks or `_ .()#%+-`): a line 1 whose fields all are may be shown as a header; other text may be a secret."""
    return bool(_COLUMN_NAME.match(name))


def normalise_name(name: str) -> str:
    """A column name as readers compare it (with aliases too): lower case, without blanks, "_" and "-"."""
    return re.sub(r"[\s_-]+", "", str(name)).lower()


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def normalise_delimiter(text: str) -> str:
    """RunConfig's delimiter as the separator itself: "" (sniff), "\\t" (the two characters) or "tab" -> a tab,
    "comma" ",", "semicolon" ";", "pipe" "|", "colons" "::", any other text as given."""
    if not text:
        return ""
    delimiter = NAMED_DELIMITERS.get(text.lower() if len(text) > 1 else text, text)
    if any(c in delimiter for c in '\n\r"') or SEP in delimiter:
        raise ConfigError("delimiter", f"{text!r} cannot separate columns (no newline or double quote)")
    return delimiter


def describe(delimiter: str) -> str:
    """How a message names a delimiter: tabs, ',' ..."""
    return "tabs" if delimiter == "\t" else repr(delimiter)


def flag(delimiter: str) -> str:
    """The --delimiter value that selects `delimiter`."""
    return "'\\t'" if delimiter == "\t" else repr(delimiter)


def refuse_binary(file: Path) -> None:
    """DataError when the start of a CSV file holds NUL bytes: binary data or UTF-16 text, not UTF-8 CSV."""
    with open(file, "rb") as handle:
        head = handle.read(1 << 16)
    at = head.find(b"\0")
    if at >= 0:
        before = head[:at]
        line, column = before.count(b"\n") + 1, at - (before.rfind(b"\n") + 1) + 1
        raise DataError(f"{file}: line {line}, column {column} (byte): a NUL byte; this is binary data or "
                        "UTF-16 text, not a UTF-8 CSV file")


def utf8_error_position(file: Path) -> str:
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


class _Translating(io.RawIOBase):
    """A binary file whose multi-character delimiter reads as SEP: pyarrow's CSV reader pulls blocks from it,
    so the translation streams (a delimiter cut by a block boundary is completed from the next block)."""

    def __init__(self, file: Path, delimiter: str):
        super().__init__()
        self._handle = open(file, "rb")  # noqa: SIM115 - closed by close()
        self._from, self._to = delimiter.encode("utf-8"), SEP.encode()
        self._carry = b""
        self._line = 1
        self.file = file

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = size if size and size > 0 else -1
        data = self._carry + self._handle.read(max(want - len(self._carry), 1) if want > 0 else -1)
        self._carry = b""
        at = data.find(self._to)
        if at >= 0:
            line = self._line + data.count(b"\n", 0, at)
            raise DataError(f"{self.file}: line {line}: a control character (unit separator, 0x1f) in a file "
                            f"separated by {describe(self._from.decode())}; remove it")
        out = data.replace(self._from, self._to)
        while out:  # a delimiter's start at the block's end waits for the next block to complete it
            keep = next((k for k in range(len(self._from) - 1, 0, -1) if out.endswith(self._from[:k])), 0)
            if not keep:
                break
            if len(out) > keep:
                out, self._carry = out[:-keep], out[-keep:]
                break
            more = self._handle.read(1)
            if not more:
                break  # the end of the file: the characters are data
            out = (out + more).replace(self._from, self._to)
        self._line += out.count(b"\n")
        return out

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._handle.close()
        super().close()


def read_delimited(file: Path, delimiter: str, column_names: list[str] | None = None,
                   column_types: dict | None = None, **parse) -> pa.Table:
    """pyarrow's CSV reader for `file` separated by `delimiter` (any length); `column_names` for a file without
    a header; extra ParseOptions in `parse` (e.g. invalid_row_handler, on the error path)."""
    threads = parse.pop("use_threads", True)
    convert = pacsv.ConvertOptions(column_types=column_types or {})
    block = 1 << 20
    while True:
        read = pacsv.ReadOptions(column_names=column_names, use_threads=threads, block_size=block)
        try:
            with delimited_source(file, delimiter) as (source, separation):
                return pacsv.read_csv(source, read_options=read, convert_options=convert,
                                      parse_options=pacsv.ParseOptions(**separation, **parse))
        except pa.ArrowInvalid as exc:
            if "straddl" not in str(exc) or block >= 1 << 30:
                raise
            block *= 16  # a row longer than the block (a long review): larger blocks


@contextmanager
def delimited_source(file: Path, delimiter: str):
    """(source, ParseOptions arguments) for pyarrow's CSV readers of `file` separated by `delimiter`: the file and
    the delimiter when it is one character; else the file streamed with the delimiter read as SEP, unquoted."""
    if len(delimiter) == 1:
        yield file, {"delimiter": delimiter}
        return
    with _Translating(file, delimiter) as stream:
        yield stream, {"delimiter": SEP, "quote_char": False}


def _lines(handle, delimiter: str):
    """Lines of a text handle with a multi-character delimiter translated (error path and samples)."""
    for line in handle:
        yield line.replace(delimiter, SEP)


def _reader(handle, delimiter: str):
    if len(delimiter) == 1:
        return csv.reader(handle, delimiter=delimiter)
    return csv.reader(_lines(handle, delimiter), delimiter=SEP, quoting=csv.QUOTE_NONE)


def sample_records(file: Path, delimiter: str, limit: int = SAMPLE_RECORDS) -> list[list[str]]:
    """The first complete records (blank lines skipped) of `file` read with `delimiter`, from its first 64 KiB."""
    with open(file, "rb") as handle:
        head = handle.read(SAMPLE_BYTES)
        while b"\n" not in head and len(head) < MAX_LINE_BYTES and (more := handle.read(SAMPLE_BYTES)):
            head += more  # a line 1 longer than the sample (a very wide header): read on to its end
        complete = not handle.read(1)
    text = head.decode("utf-8-sig", errors="replace")
    if not complete:  # the last line may be cut: keep whole lines only
        text = text[: text.rfind("\n") + 1] if "\n" in text else text
    out: list[list[str]] = []
    limit_before = csv.field_size_limit()
    try:
        csv.field_size_limit(sys.maxsize)
        for row in _reader(io.StringIO(text, newline=""), delimiter):
            if row:
                out.append(row)
            if len(out) >= limit:
                break
    except csv.Error:
        pass  # a quote left open at the sample's end: the records so far
    finally:
        csv.field_size_limit(limit_before)
    return out


def sniff_delimiter(file: Path, known: set[str]) -> str:
    """The delimiter of a text file, from its first lines: among the candidates that split every sampled line
    into the same number (> 1) of fields, the one whose line 1 names most of the `known` column names
    (compared by normalise_name), then the suffix's own (tabs for .tsv, '::' for .dat), then the candidate order
    (:: tab , ; |). When none splits consistently: the one splitting most lines alike; else the suffix's."""
    suffix = file.suffix.lower()
    preferred = SUFFIX_DELIMITER.get(suffix, ",")
    with open(file, "rb") as handle:
        head = handle.read(SAMPLE_BYTES)
        while b"\n" not in head and len(head) < MAX_LINE_BYTES and (more := handle.read(SAMPLE_BYTES)):
            head += more
    text = head.decode("utf-8", errors="replace")
    scored = []
    for rank, delimiter in enumerate(CANDIDATES):
        if delimiter not in text:
            continue
        records = sample_records(file, delimiter)
        if not records:
            continue
        counts = [len(r) for r in records]
        mode = max(set(counts), key=counts.count)
        if mode < 2:
            continue
        alike = counts.count(mode) / len(counts)
        named = sum(normalise_name(f) in known for f in records[0])
        scored.append((alike == 1.0, named, delimiter == preferred, alike, -rank, delimiter))
    if not scored:
        return preferred if preferred != "::" else ","
    return max(scored)[-1]


def record_at(file: Path, delimiter: str, header: bool, index: int) -> tuple[int, list[str]]:
    """(line, fields) of data record `index` (0-based, a header not counted): the line where it starts as an
    editor counts them (blank lines and quoted fields holding newlines included). Error path only: reads the
    file record by record; (index + 1 + header, []) if it cannot be read as text."""
    limit = csv.field_size_limit()
    try:
        csv.field_size_limit(sys.maxsize)
        with open(file, encoding="utf-8-sig", errors="replace", newline="") as handle:
            reader, record, end = _reader(handle, delimiter), -1 if header else 0, 0
            for row in reader:
                start, end = end + 1, reader.line_num
                if not row:  # a blank line: pyarrow skips it too
                    continue
                if record == index:
                    return start, row
                record += 1
    except (csv.Error, OSError, ValueError):
        pass
    finally:
        csv.field_size_limit(limit)
    return index + 1 + header, []


# ---- svmlight / LETOR ---------------------------------------------------------------------------------------

def looks_svmlight(file: Path) -> bool:
    """Whether the first data line of `file` reads `<label> qid:...` (comment and blank lines skipped)."""
    with open(file, "rb") as handle:
        head = handle.read(SAMPLE_BYTES)
    for line in head.splitlines():
        body = line.split(b"#", 1)[0].strip()
        if body:
            return bool(_SVM_FIRST.match(body))
    return False


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _svm_problem(text: str) -> str | None:
    """What is wrong with one svmlight line (comment already allowed), or None (error path only)."""
    tokens = text.split("#", 1)[0].split()
    if not tokens:
        return None
    if not is_number(tokens[0]):
        return f"{shorten(tokens[0], 40)!r} is not a label (a number) at the start of the line"
    if len(tokens) < 2 or not re.fullmatch(r"qid:[-+]?\d+", tokens[1]):
        shown = shorten(tokens[1], 40) if len(tokens) > 1 else ""
        return f"{shown!r} is not qid:<id> (the query's whole number, after the label)"
    for token in tokens[2:]:
        match = re.fullmatch(r"(\d+):(\S+)", token)
        if not match or not is_number(match.group(2)) and match.group(2).lower() not in ("nan", "inf", "-inf"):
            return f"{shorten(token, 40)!r} is not <index>:<value>"
        if int(match.group(1)) < 1:
            return f"{shorten(token, 40)!r}: feature indices start at 1"
        value = float(match.group(2))
        if not np.isfinite(value):
            return f"{shorten(token, 40)!r} is not a finite number"
        if abs(value) > FLOAT32_MAX:
            return f"{shorten(token, 40)!r} is not a number that fits in float32"
    return None


def _strip_comments(part: bytes) -> bytes:
    """`part` without its comments: from each line's first '#' (and the blanks before it) to the line's end;
    newlines stay, so line numbers do too. Vectorised (numpy), a few passes over the bytes."""
    if b"#" not in part:
        return part
    raw = np.frombuffer(part, np.uint8)
    hashes = np.flatnonzero(raw == 35)
    newlines = np.flatnonzero(raw == 10)
    line = np.searchsorted(newlines, hashes)
    first = np.r_[True, line[1:] != line[:-1]]
    starts, line = hashes[first].copy(), line[first]
    ends = np.where(line < len(newlines), newlines[np.minimum(line, max(len(newlines) - 1, 0))], len(raw))
    ends = np.where((ends > 0) & (raw[np.maximum(ends - 1, 0)] == 13), ends - 1, ends)  # a '\r' ends the line
    ends = np.where(ends < starts, starts, ends)
    for _ in range(64):  # the blanks before '#' go too: a line's fields end where its comment starts
        back = (starts > 0) & np.isin(raw[np.maximum(starts - 1, 0)], (32, 9))
        if not back.any():
            break
        starts[back] -= 1
    delta = np.zeros(len(raw) + 1, np.int32)
    np.add.at(delta, starts, 1)
    np.add.at(delta, ends, -1)
    keep = np.cumsum(delta[:-1]) == 0
    keep |= raw == 13  # a '\r' before the newline stays: pyarrow and the tokenizer treat it as the line's end
    return raw[keep].tobytes()


def _svm_dense(part: bytes, first_line: int):
    """The fast path for a block of regular lines (MSLR-WEB10K, Yahoo, Istella: every line has the same
    indices in the same order, single spaces): pyarrow's multi-threaded CSV parser reads the block with ':' as
    a space and fixed column types. None when the block is not that regular (the general path then reads it)."""
    raw = np.frombuffer(part, np.uint8)
    ends = np.flatnonzero(raw == 10)
    starts = np.r_[0, ends + 1]
    ends = np.r_[ends, len(raw)]
    length = ends - starts - (raw[np.maximum(ends - 1, 0)] == 13)
    data = np.flatnonzero(length > 0)
    if not len(data):
        return None
    line1 = part[starts[data[0]]:ends[data[0]]].rstrip(b"\r")
    fields = line1.replace(b":", b" ").split(b" ")
    if len(fields) < 3 or len(fields) % 2 == 0 or fields[1] != b"qid":
        return None
    for byte in (32, 58):  # every data line must hold as many spaces and colons as line 1 (one pass each)
        at = np.flatnonzero(raw == byte)  # per line: counted between one data line's start and the next's
        per_line = np.diff(np.searchsorted(at, np.r_[starts[data], len(raw)]))
        if (per_line != per_line[0]).any():
            return None
    names = [f"c{i}" for i in range(len(fields))]
    types = {n: pa.float64() if i == 0 or (i >= 4 and i % 2 == 0) else pa.int64() for i, n in enumerate(names)}
    types["c1"] = pa.string()
    try:
        table = pacsv.read_csv(pa.BufferReader(part.replace(b":", b" ")),
                               read_options=pacsv.ReadOptions(column_names=names),
                               parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False),
                               convert_options=pacsv.ConvertOptions(column_types=types, null_values=[],
                                                                    strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(data) or not pc.all(pc.equal(table.column(1), "qid")).as_py():
        return None
    features: dict[int, np.ndarray] = {}
    pairs = []
    for i in range(3, len(fields), 2):
        index, value = table.column(i).to_numpy(), table.column(i + 1).to_numpy()
        if not len(index) or index.min() < 1 or not np.isfinite(value).all() or np.abs(value).max() > FLOAT32_MAX:
            return None  # the general path names the bad token
        pairs.append((index, value))
    if all(index[0] == index.min() == index.max() for index, _ in pairs) and \
            len({int(index[0]) for index, _ in pairs}) == len(pairs):  # the same indices on every line
        features = {int(index[0]): value.astype(np.float32) for index, value in pairs}
    elif pairs:  # as many entries on every line, different indices: scatter them
        width = max(int(index.max()) for index, _ in pairs)
        dense = np.zeros((width, table.num_rows), np.float32)
        rows = np.arange(table.num_rows)
        for index, value in pairs:
            dense[index - 1, rows] = value
        features = {int(k): dense[k - 1] for k in np.unique(np.concatenate([index for index, _ in pairs]))}
    return first_line + data, table.column(0).combine_chunks(), table.column(2).combine_chunks(), features


def _svm_block(file: Path, part: bytes, first_line: int):
    """Parse whole lines `part` (line `first_line` first) -> (line numbers, labels (float64), qids (int64),
    {feature index: float32 values}) of its data lines; DataError naming the line of the first malformed one."""
    part = _strip_comments(part)
    fast = _svm_dense(part, first_line)
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
        raise DataError(f"{file}: {utf8_error_position(file)}: text is not valid UTF-8") from None
    colons = np.diff(np.searchsorted(np.flatnonzero(raw == 58), offsets))  # per line
    spaced = part.replace(b":", b" ")  # same length: the line offsets hold
    trimmed = pc.ascii_trim_whitespace(
        pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.tobytes()), pa.py_buffer(spaced)))
    tokens = pc.ascii_split_whitespace(trimmed)  # a blank line: one empty token
    flat = tokens.values
    offs = tokens.offsets.to_numpy().astype(np.int64)
    counts = np.diff(offs)
    data = np.flatnonzero(pc.binary_length(trimmed).to_numpy() > 0)
    starts, n_tok = offs[:-1][data], counts[data]

    def fail(bad_rows: np.ndarray | None = None):
        rows = data if bad_rows is None else bad_rows
        for row in rows:  # the first line Python finds wrong (error path only)
            text = part[offsets[row]:offsets[row + 1]].decode("utf-8", errors="replace")
            problem = _svm_problem(text)
            if problem:
                return DataError(f"{file}: line {first_line + int(row)}: {problem}")
        row = int(rows[0]) if len(rows) else 0
        return DataError(f"{file}: line {first_line + row}: not an svmlight line "
                         "('<label> qid:<id> <index>:<value> ...')")

    shape_ok = (n_tok >= 3) & (n_tok % 2 == 1) & (colons[data] == (n_tok - 1) // 2)
    if not shape_ok.all():
        raise fail(data[~shape_ok][:1])
    keyword = pc.take(flat, pa.array(starts + 1))
    if not pc.all(pc.equal(keyword, "qid")).as_py():
        raise fail()
    try:
        qid = pc.cast(pc.take(flat, pa.array(starts + 2)), pa.int64())
        labels = pc.cast(pc.take(flat, pa.array(starts)), pa.float64())
    except pa.ArrowInvalid:
        raise fail() from None
    pairs = (n_tok - 3) // 2  # line i's pair j is at token starts[i] + 3 + 2j; g = before[i] + j overall
    before = np.cumsum(pairs) - pairs
    index_at = np.repeat(starts + 3 - 2 * before, pairs) + 2 * np.arange(int(pairs.sum()), dtype=np.int64)
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


def read_svmlight(file: Path, block: int = 1 << 25) -> tuple[pa.Table, np.ndarray]:
    """An svmlight / LETOR file -> (table of query_id, doc_id (the line number, as text), label (float64; the
    importer checks it), f1..fN float32 (N: the largest index in the file; a missing entry is 0), the line
    number of each row). Reads `block` bytes at a time: memory is the dense features plus about a block."""
    lines, labels, qids, blocks = [], [], [], []
    line, carry = 1, b""
    with open(file, "rb") as handle:
        while True:
            chunk = handle.read(block)
            buf = carry + chunk
            if chunk:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    carry = buf
                    continue
                part, carry = buf[:cut], buf[cut:]
            else:
                part, carry = buf, b""
            if part.strip():
                at, label, qid, features = _svm_block(file, part, line)
                lines.append(at)
                labels.append(label)
                qids.append(qid)
                blocks.append(features)
            line += part.count(b"\n")
            if not chunk:
                break
    row_lines = np.concatenate(lines) if lines else np.zeros(0, np.int64)
    width = max((max(b, default=0) for b in blocks), default=0)
    columns = {"query_id": pa.chunked_array(qids, pa.int64()),
               "doc_id": pa.chunked_array([pa.array(row_lines).cast(pa.string())]),
               "label": pa.chunked_array(labels, pa.float64())}
    zeros = [np.zeros(len(at), np.float32) for at in lines]
    for k in range(1, width + 1):
        columns[f"f{k}"] = pa.chunked_array([pa.array(b.get(k, z)) for b, z in zip(blocks, zeros)], pa.float32())
    return pa.table(columns), row_lines


# ---- JSON lines ---------------------------------------------------------------------------------------------

def read_jsonl(file: Path) -> pa.Table:
    """A JSON lines file (one object per line) -> table; DataError naming the first bad line."""
    with open(file, "rb") as handle:
        start = handle.read(SAMPLE_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start == b"[":
        raise DataError(f"{file}: line 1: a JSON array; use JSON lines (one object {{...}} per line)")
    block = 1 << 20
    while True:
        try:
            return pajson.read_json(file, read_options=pajson.ReadOptions(block_size=block))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            if "straddl" in str(exc) and block < 1 << 30:  # a line longer than the block: larger blocks
                block *= 16
                continue
            raise DataError(f"{file}: {_jsonl_problem(file, str(exc))}") from None


def _kind(value) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", dict: "object", list: "array"}.get(type(value), "value")


def _jsonl_problem(file: Path, reason: str) -> str:
    """Where and why a JSON lines file does not read (error path: parses it line by line in Python)."""
    seen: dict[str, tuple[str, int]] = {}
    with open(file, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"line {number}, column {exc.start + 1} (byte): text is not valid UTF-8"
            if not text.strip():
                continue
            try:
                value = json.loads(text.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                return f"line {number}, column {exc.colno}: not valid JSON ({exc.msg}); JSON lines hold one object per line"
            if not isinstance(value, dict):
                return f"line {number}: a JSON {_kind(value)} where an object {{...}} is expected"
            for key, item in value.items():
                if item is None:
                    continue
                kind = _kind(item)
                first = seen.setdefault(key, (kind, number))
                if first[0] != kind:
                    return (f"line {number}: field {shorten(key, 40)!r} holds a {kind} where line {first[1]} "
                            f"holds a {first[0]}")
    return f"cannot read JSON lines: {shorten(reason.splitlines()[0] if reason else '', 80)}"


def json_line(file: Path, index: int) -> int:
    """The line of data row `index` (0-based) of a JSON lines file: blank lines are skipped (error path)."""
    row = -1
    with open(file, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if raw.strip():
                row += 1
                if row == index:
                    return number
    return index + 1


def is_json_lines(file: Path) -> bool:
    """Whether a .json file's first non-blank character opens an object (JSON lines) rather than an array."""
    with open(file, "rb") as handle:
        start = handle.read(SAMPLE_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    return start == b"{"
