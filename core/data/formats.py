"""The text formats data sets come in (delimited, JSON lines, `label text`), read into pyarrow tables for the
importer; a file whose suffix says nothing is recognised by its content (sniff_format). A multi-character
delimiter is read as SEP, unquoted."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Set
from contextlib import contextmanager
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
WHITESPACE = "\\s+"  # the delimiter "one or more spaces or tabs" (as typed: the regex), blanks at line ends ignored
CANDIDATES = ("::", "\t", ",", ";", "|", WHITESPACE)  # sniffed delimiters, in order of preference on a tie
SUFFIX_DELIMITER = {".tsv": "\t", ".dat": "::"}  # preferred on a tie; else ","
SEP = "\x1f"  # what a multi-character delimiter becomes while pyarrow reads the file (ASCII unit separator)
NAMED_DELIMITERS = {
    "\\t": "\t",
    "tab": "\t",
    "comma": ",",
    "semicolon": ";",
    "pipe": "|",
    "space": " ",
    "colons": "::",
    "whitespace": WHITESPACE,
    "blanks": WHITESPACE,
}
SAMPLE_BYTES = 1 << 16
MAX_LINE_BYTES = 1 << 24  # line 1 is read to its end up to this size
SAMPLE_RECORDS = 50
NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"  # what a reader reads as a number (pyarrow regex too)
INTEGER = r"^\s*[-+]?\d+\s*$"  # what a reader reads as a whole number
_NUMBER = re.compile(NUMBER)
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .()#%+-]{0,39}$")
_SVM_LABEL = rb"^\s*[-+]?[0-9.]+(?:[eE][-+]?\d+)?"
_SVM_QID = re.compile(_SVM_LABEL + rb"\s+qid:")
_SVM_PLAIN = re.compile(_SVM_LABEL + rb"(?:\s+\d+:\S+)+\s*$")  # `label idx:val ...`, no qid:
_WS_RUN, _WS_EDGE = re.compile(rb"[ \t]+"), re.compile(rb"(?m)^[ \t]+|[ \t]+(?=\r?$)")
LABEL_PREFIX = "__label__"  # fastText's, before each label
LABEL_TEXT_SHARE = 0.9  # of the sampled lines (line 1 among them) that must read `label text`
FORMAT_NAMES = {
    "delimited": "delimited text",
    "json": "JSON lines",
    "svmlight": "svmlight / LETOR",
    "label_text": "label text lines",
    "parquet": "Parquet",
}


def is_number(text: str) -> bool:
    """Whether `text` reads as a number (NUMBER): '3', '-0.5', '.5', '1e-3', with blanks around."""
    return bool(_NUMBER.match(text))


def looks_like_column_name(name: str) -> bool:
    """Whether `name` is shaped like a column name (_COLUMN_NAME)."""
    return bool(_COLUMN_NAME.match(name))


def normalise_name(name: str) -> str:
    """A column name as readers compare it (with aliases too): lower case, without blanks, "_" and "-"."""
    return re.sub(r"[\s_-]+", "", str(name)).lower()


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def normalise_delimiter(text: str) -> str:
    """RunConfig's delimiter as the separator itself ("" sniffs; NAMED_DELIMITERS; any other text as given)."""
    if not text:
        return ""
    delimiter = NAMED_DELIMITERS.get(text.lower() if len(text) > 1 else text, text)
    if any(c in delimiter for c in '\n\r"') or SEP in delimiter:
        raise ConfigError("delimiter", f"{text!r} cannot separate columns (no newline or double quote)")
    return delimiter


def describe(delimiter: str) -> str:
    """How a message names a delimiter: tabs, whitespace, ',' ..."""
    return {"\t": "tabs", WHITESPACE: "whitespace"}.get(delimiter, repr(delimiter))


def flag(delimiter: str) -> str:
    """The --delimiter value that selects `delimiter`."""
    return {"\t": "'\\t'", WHITESPACE: "'\\s+'"}.get(delimiter, repr(delimiter))


def _position(data: bytes, at: int, first_line: int = 1) -> str:
    """'line L, column C (byte)' of byte `at` of `data`, whose first line is `first_line`."""
    before = data[:at]
    line, column = first_line + before.count(b"\n"), at - before.rfind(b"\n")
    return f"line {line}, column {column} (byte)"


def refuse_binary(file: Path, expected: str = "a UTF-8 CSV file") -> None:
    """DataError when the start of a text file holds NUL bytes: binary data or UTF-16 text, not `expected`."""
    with open(file, "rb") as handle:
        head = handle.read(1 << 16)
    at = head.find(b"\0")
    if at >= 0:
        raise DataError(
            f"{file}: {_position(head, at)}: a NUL byte; this is binary data or UTF-16 text, not {expected}"
        )


def is_utf8_error(exc: Exception) -> bool:
    """Whether a pyarrow error says the text is not UTF-8."""
    return "UTF8" in str(exc) or "UTF-8" in str(exc)


def not_utf8(file: Path) -> DataError:
    """The error for a file that is not UTF-8, naming the first bad byte (error path: reads the file again)."""
    line, size, carry = 1, 1 << 24, b""
    with open(file, "rb") as handle:
        while chunk := handle.read(size):
            data = carry + chunk
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.start < len(data) - 4 or len(chunk) < size:  # not a character cut by the chunk
                    return DataError(f"{file}: {_position(data, exc.start, line)}: text is not valid UTF-8")
            cut = data.rfind(b"\n") + 1
            line += data.count(b"\n", 0, cut)
            carry = data[cut:]
    return DataError(f"{file}: somewhere: text is not valid UTF-8")


def line_blocks(handle, size: int = 1 << 20):
    """(first line's number, whole lines) of a binary file, `size` bytes at a time; the last may lack its newline."""
    line, carry = 1, b""
    while chunk := handle.read(size):
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield line, data[:cut]
            line += data.count(b"\n", 0, cut)
    if carry:
        yield line, carry


class _Translated(io.RawIOBase):
    """A binary file whose multi-character delimiter reads as SEP, a whole line at a time."""

    def __init__(self, file: Path, delimiter: str):
        super().__init__()
        self._handle = open(file, "rb")
        self._blocks, self._out = line_blocks(self._handle), b""
        self.file, self.delimiter = file, delimiter

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._handle.close()
        super().close()

    def read(self, size: int = -1) -> bytes:
        want = size if size and size > 0 else sys.maxsize
        while len(self._out) < want and (block := next(self._blocks, None)):
            line, lines = block
            at = lines.find(SEP.encode())
            if at >= 0:
                line += lines.count(b"\n", 0, at)
                raise DataError(
                    f"{self.file}: line {line}: a control character (unit separator, 0x1f) in a file "
                    f"separated by {describe(self.delimiter)}; remove it"
                )
            self._out += _translate(lines, self.delimiter)
        out, self._out = self._out[:want], self._out[want:]
        return out


def _translate(lines: bytes, delimiter: str) -> bytes:
    """Whole lines with `delimiter` (more than one character) as SEP."""
    if delimiter != WHITESPACE:
        return lines.replace(delimiter.encode("utf-8"), SEP.encode())
    if (
        any(blanks in lines for blanks in (b"\t", b"  ", b"\n ", b" \n", b" \r"))
        or lines.startswith(b" ")
        or lines.endswith(b" ")
    ):
        return _WS_RUN.sub(SEP.encode(), _WS_EDGE.sub(b"", lines))
    return lines.replace(b" ", SEP.encode())  # single spaces between fields only (SASRec's files): C speed


def read_delimited(
    file: Path, delimiter: str, column_names: list[str] | None = None, column_types: dict | None = None, **parse
) -> pa.Table:
    """pyarrow's CSV reader for `file` separated by `delimiter` (any length); extra ParseOptions in `parse`."""
    threads = parse.pop("use_threads", True)
    convert = pacsv.ConvertOptions(column_types=column_types or {})

    def read(block: int) -> pa.Table:
        with delimited_source(file, delimiter) as (source, separation):
            return pacsv.read_csv(
                source,
                read_options=pacsv.ReadOptions(column_names=column_names, use_threads=threads, block_size=block),
                convert_options=convert,
                parse_options=pacsv.ParseOptions(**separation, **parse),
            )

    return _in_growing_blocks(read)


def _in_growing_blocks(read):
    """read(block size) for pyarrow's readers, with 16 times larger blocks while a row is longer than a block."""
    block = 1 << 20
    while True:
        try:
            return read(block)
        except pa.ArrowInvalid as exc:
            if "straddl" not in str(exc) or block >= 1 << 30:
                raise
            block *= 16


@contextmanager
def delimited_source(file: Path, delimiter: str):
    """(source, ParseOptions arguments) for pyarrow's CSV readers of `file` separated by `delimiter`."""
    if len(delimiter) == 1:
        yield file, {"delimiter": delimiter}
        return
    with _Translated(file, delimiter) as stream:
        yield stream, {"delimiter": SEP, "quote_char": False}


def _lines(handle, delimiter: str):
    """Lines of a text handle with a multi-character delimiter translated (error path and samples)."""
    for line in handle:
        yield _translate(line.encode("utf-8"), delimiter).decode("utf-8")


@contextmanager
def _reader(handle, delimiter: str):
    """A csv reader of a text handle with `delimiter` (any length) that reads fields of any size."""
    limit = csv.field_size_limit(sys.maxsize)
    try:
        if len(delimiter) == 1:
            yield csv.reader(handle, delimiter=delimiter)
        else:
            yield csv.reader(_lines(handle, delimiter), delimiter=SEP, quoting=csv.QUOTE_NONE)
    finally:
        csv.field_size_limit(limit)


def sample_records(file: Path, delimiter: str, limit: int = SAMPLE_RECORDS, text: str | None = None) -> list[list[str]]:
    """The first records (blank lines skipped) of `file` (or of its sample `text`) read with `delimiter`."""
    text = _head(file).decode("utf-8-sig", errors="replace") if text is None else text
    out: list[list[str]] = []
    with _reader(io.StringIO(text, newline=""), delimiter) as reader:
        try:
            for row in reader:
                if row:
                    out.append(row)
                if len(out) >= limit:
                    break
        except csv.Error:
            pass  # a quote left open at the sample's end: the records so far
    return out


def sniff_delimiter(file: Path, known: Set[str], strict: bool = False) -> str:
    """The delimiter of a text file: of the candidates splitting every sampled line alike, the one whose line 1
    names most `known` columns, then the suffix's, then CANDIDATES' order; else the one splitting most lines
    alike, else the suffix's (`strict`: "")."""
    preferred = SUFFIX_DELIMITER.get(file.suffix.lower(), ",")
    text = _head(file).decode("utf-8-sig", errors="replace")
    scored: list[tuple] = []
    for rank, delimiter in enumerate(CANDIDATES):
        if delimiter == WHITESPACE:
            if (scored and max(scored)[0]) or not (" " in text or "\t" in text):
                break
        elif delimiter not in text:
            continue
        records = sample_records(file, delimiter, text=text)
        if not records:
            continue
        counts = [len(r) for r in records]
        mode = max(set(counts), key=counts.count)
        if mode < 2 or (delimiter == WHITESPACE and (counts.count(mode) < len(counts) or len(counts) < 2)):
            continue  # blanks split one line of prose into "columns" too: two lines at least, all alike
        alike = counts.count(mode) / len(counts)
        named = sum(normalise_name(f) in known for f in records[0])
        scored.append((alike == 1.0, named, delimiter == preferred, alike, -rank, delimiter))
    if strict:
        return max(scored)[-1] if scored and max(scored)[0] else ""
    if not scored:
        return preferred if preferred != "::" else ","
    return max(scored)[-1]


def record_at(file: Path, delimiter: str, header: bool, index: int) -> tuple[int, list[str]]:
    """(line, fields) of data record `index` (0-based, no header), lines counted as an editor does (error path)."""
    try:
        with open(file, encoding="utf-8-sig", errors="replace", newline="") as f, _reader(f, delimiter) as reader:
            record, end = -1 if header else 0, 0
            for row in reader:
                start, end = end + 1, reader.line_num
                if not row:  # a blank line: pyarrow skips it too
                    continue
                if record == index:
                    return start, row
                record += 1
    except (csv.Error, OSError, ValueError):
        pass
    return index + 1 + header, []


def read_jsonl(file: Path) -> pa.Table:
    """A JSON lines file (one object per line) -> table; DataError naming the first bad line."""
    with open(file, "rb") as handle:
        start = handle.read(SAMPLE_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start == b"[":
        raise DataError(f"{file}: line 1: a JSON array; use JSON lines (one object {{...}} per line)")
    try:
        return _in_growing_blocks(
            lambda block: pajson.read_json(file, read_options=pajson.ReadOptions(block_size=block))
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(f"{file}: {_jsonl_problem(file, str(exc))}") from None


_JSON_KINDS = {bool: "true/false", int: "number", float: "number", str: "string", dict: "object", list: "array"}


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
                return (
                    f"line {number}: a JSON {_JSON_KINDS.get(type(value), 'value')} where an object {{...}} is expected"
                )
            for key, item in value.items():
                if item is None:
                    continue
                kind = _JSON_KINDS.get(type(item), "value")
                first = seen.setdefault(key, (kind, number))
                if first[0] != kind:
                    return (
                        f"line {number}: field {shorten(key, 40)!r} holds a {kind} where line {first[1]} "
                        f"holds a {first[0]}"
                    )
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


def _head(file: Path) -> bytes:
    """The first SAMPLE_BYTES of `file` (line 1 read to its end), cut after its last whole line."""
    with open(file, "rb") as handle:
        head = handle.read(SAMPLE_BYTES)
        while b"\n" not in head and len(head) < MAX_LINE_BYTES and (more := handle.read(SAMPLE_BYTES)):
            head += more  # a very wide header: read on to its end
        complete = not handle.read(1)
    return head if complete or b"\n" not in head else head[: head.rfind(b"\n") + 1]


def _data_lines(file: Path) -> list[bytes]:
    """The sampled non-blank lines of `file` (a UTF-8 BOM dropped), stripped."""
    head = _head(file).removeprefix(b"\xef\xbb\xbf")
    return [line.strip() for line in head.splitlines() if line.strip()][:SAMPLE_RECORDS]


def svmlight_kind(file: Path) -> str | None:
    """ "qid" or "plain" (no qid:) when the first data line of `file` is svmlight, else None."""
    for line in _head(file).splitlines():
        body = line.split(b"#", 1)[0].strip()
        if body:
            return "qid" if _SVM_QID.match(body) else "plain" if _SVM_PLAIN.match(body) else None
    return None


def looks_label_text(file: Path, labels=None) -> bool:
    """Whether line 1 and LABEL_TEXT_SHARE of the sampled lines are `label text` lines."""
    lines = [line.decode("utf-8", errors="replace") for line in _data_lines(file)]
    if not lines:
        return False

    def is_label(line: str) -> bool:
        parts = line.lower().split(None, 1)  # a first token, a blank, then text
        if len(parts) < 2:
            return False
        return parts[0].startswith(LABEL_PREFIX) if labels is None else parts[0].removeprefix(LABEL_PREFIX) in labels

    return is_label(lines[0]) and sum(map(is_label, lines)) >= LABEL_TEXT_SHARE * len(lines)


_LABEL_LINE = r"^[ \t]*(?:__label__)?(?P<label>[^ \t]+)[ \t]+(?P<text>.*?)[ \t\r]*$"


def read_label_text(file: Path) -> pa.Table:
    """A `label text` file -> table of label (fastText's __label__ removed) and text; blank lines skipped."""
    try:  # one column: SEP never separates text
        lines = read_delimited(file, SEP, ["line"], {"line": pa.string()}, quote_char=False).column(0)
    except pa.ArrowInvalid as exc:
        if is_utf8_error(exc):
            raise not_utf8(file) from None
        raise DataError(f"{file}: a line holds a control character (unit separator, 0x1f); remove it") from None
    lines = lines.filter(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(lines)), 0))
    parts = pc.extract_regex(lines, _LABEL_LINE)
    if parts.null_count:
        index = int(np.flatnonzero(parts.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(
            f"{file}: line {json_line(file, index)}: not a 'label text' line (a label such as 1 or "
            "__label__pos, a blank, then the text)"
        )
    return pa.table({"label": pc.struct_field(parts, "label"), "text": pc.struct_field(parts, "text")})


def sniff_format(file: Path, known: Set[str] = frozenset(), labels=None) -> tuple[str, str] | None:
    """(format, delimiter) of a text file by its content, e.g. ("delimited", ","); None if nothing fits."""
    lines = _data_lines(file)
    if not lines:
        return None
    if lines[0][:1] in (b"{", b"["):
        return "json", ""
    if svmlight_kind(file):
        return "svmlight", ""
    if looks_label_text(file, labels):
        return "label_text", ""
    delimiter = sniff_delimiter(file, known, strict=True)
    return ("delimited", delimiter) if delimiter else None


def unrecognised(file: Path, tried: tuple[str, ...] = ("delimited", "json", "svmlight", "label_text")) -> str:
    """The message for a file none of `tried` reads: what was tried, line 1, how to give the format."""
    lines = _data_lines(file)
    try:
        line1 = f"line 1 reads {shorten(lines[0].decode('utf-8'), 80)!r}" if lines else "it holds no data lines"
    except UnicodeDecodeError:
        line1 = "line 1 is not UTF-8 text"
    names = [FORMAT_NAMES[k] + (" (no delimiter splits its lines alike)" if k == "delimited" else "") for k in tried]
    return (
        f"{file}: not a format this reads; tried {', '.join(names)}; {line1}; give the format with "
        "--data-format, or use a .csv, .parquet, .jsonl or .svm file"
    )
