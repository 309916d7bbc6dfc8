"""`predict`'s input, read a block at a time in bounded memory: CSV through pyarrow's streaming reader (columns read
as bytes, made text per batch, so a value that is not UTF-8 costs its row, not its block), Parquet a row group at
a time, or JSON lines (an object a line, its first line's keys the columns, each value as text: a list as its
JSON). Each batch carries its rows' line numbers (CSV: the header is line 1; blank lines are counted and skipped;
Parquet: 1-based rows). Messages name the user's columns with control characters escaped (core.text.printable).
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import threading
import types
import weakref
from pathlib import Path

from core.data.row_checks import shown_names
from core.errors import ConfigError, DataError
from core.files import UnreadableFile, open_regular
from core.runs.predict_output import JSON_SUFFIXES
from core.text import first_line, printable

BLOCK_BYTES = 2 << 20  # CSV bytes parsed at a time (the reader reads up to 32 blocks ahead: 64 MiB)
RELEASE_SECONDS = 60.0  # the most a closed CSV reader is waited for (its read-ahead of a local file: milliseconds)


class InputReader:
    """Batches of the input's needed columns, with each row's line number (CSV: the file's line where the row
    starts; Parquet: its 1-based row) and the rows the CSV parser had to skip (a wrong number of values)."""

    def __init__(self, path: Path, batch_rows: int):
        import pyarrow as pa
        import pyarrow.parquet as pq

        from core.data import formats

        self.path, self.batch_rows = path, batch_rows
        self.parquet = path.suffix.lower() in (".parquet", ".pq")
        self.json = path.suffix.lower() in JSON_SUFFIXES
        self.unit = "row" if self.parquet else "line"
        self.needed: list[str] = []
        self.delimiter = ","
        try:  # a FIFO or a device put in the file's place is refused, not read
            open_regular(path).close()
        except FileNotFoundError:
            raise ConfigError("--input", f"{path}: no such input file") from None
        except UnreadableFile as exc:
            raise ConfigError("--input", str(exc)) from None
        if not self.parquet:
            formats.refuse_binary(path)
        if self.json:
            self.schema = pa.schema([(str(n), pa.string()) for n in self._first_keys()])
        elif not self.parquet:
            self.delimiter = formats.sniff_delimiter(path, _declared())  # as training's importer sniffs it
        try:
            if self.parquet:
                self._file = pq.ParquetFile(path)
                self.schema = self._file.schema_arrow
            elif not self.json:
                with self._open_csv(lambda row: "skip") as csv:
                    names = csv.reader.schema.names
                self.schema = pa.schema([(n, pa.string()) for n in names])
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(
                f"{path}: cannot be read as {'Parquet' if self.parquet else 'CSV'}: {_arrow_reason(exc)}"
            ) from None
        except UnicodeDecodeError as exc:  # pyarrow decodes the column names itself
            raise DataError(
                f"{path}: line 1: a column name is not UTF-8 text (byte {exc.object[exc.start]:#04x}): "
                f"save the file as UTF-8"
            ) from None
        self.columns = list(self.schema.names)
        if not self.columns or (len(self.columns) == 1 and not self.columns[0]):
            raise DataError(f"{path}: no header line (the first line names the columns)")
        if not self.parquet and all(formats.is_number(name) for name in self.columns):
            # a file without a header: its first row would be read as the column names and silently lost
            raise DataError(f"{path}: line 1 holds numbers, not column names: add a header line naming the columns")

    @contextlib.contextmanager
    def _open_csv(self, invalid_row_handler, **options):
        """`.reader`: pyarrow's streaming CSV reader of the file (core.data.formats.delimited_source), blank lines
        kept, until the block ends. On leaving, waits until pyarrow has let the reader go: after close its I/O
        thread goes on reading ahead and frees the reader (and the Python handler in it) when that read ends. A
        process that ended first aborted at exit (that thread taking the GIL of a finalizing interpreter:
        "terminate called without an active exception", exit 134 after predict's one-line error)."""
        import pyarrow.csv as pacsv

        from core.data.formats import delimited_source

        released = threading.Event()
        holder = types.SimpleNamespace(reader=None)
        with delimited_source(self.path, self.delimiter) as (source, separation):
            try:  # the options, and the handler in them, pyarrow's alone: no name here holds them
                with pacsv.open_csv(
                    source,
                    read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                    parse_options=pacsv.ParseOptions(
                        **separation,
                        newlines_in_values=True,
                        ignore_empty_lines=False,
                        invalid_row_handler=_relay(invalid_row_handler, released),
                    ),
                    **options,
                ) as holder.reader:
                    yield holder
            finally:
                holder.reader = None
                released.wait(RELEASE_SECONDS)

    def columns_note(self) -> str:
        return f"the file's columns: {shown_names(self.columns)}"

    def find(self, name: str, aliases: tuple = ()) -> str | None:
        """The file's column for `name`: the same name (case, '_', '-' and spaces aside), else one of its
        aliases (`aliases`, and training's importer's)."""
        from core.data.formats import normalise_name
        from core.data.importers import ALIASES

        wanted = [normalise_name(name), *aliases, *ALIASES.get(name, ())]
        for key in wanted:
            found = [c for c in self.columns if normalise_name(c) == key]
            if found:
                return found[0]
        return None

    def require(self, name: str, why: str) -> str:
        column = self.find(name)
        if column is None:
            raise DataError(f"{self.path}: no column {name!r} ({why}); {self.columns_note()}")
        return column

    def id_type(self, name: str):
        """The type an id column has in the batches (and the output): binary is made text (_text_only); a
        nested type (a struct, a list) is no id (DataError)."""
        import pyarrow as pa

        t = self.schema.field(name).type
        if pa.types.is_dictionary(t):  # a categorical: decoded in the batches
            t = t.value_type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return pa.large_string() if pa.types.is_large_binary(t) else pa.string()
        if pa.types.is_nested(t) or pa.types.is_null(t):
            raise DataError(f"{self.path}: column {printable(name)!r} holds {t} values, not ids")
        return t

    def use(self, columns: list[str]) -> None:
        self.needed = list(dict.fromkeys(columns))
        for name in self.needed:  # which of two same-named columns is meant cannot be known
            where = [str(i + 1) for i, c in enumerate(self.columns) if c == name]
            if len(where) > 1:
                raise DataError(
                    f"{self.path}: {'line 1: ' if not self.parquet else ''}the column "
                    f"{printable(name)!r} appears {len(where)} times (columns {', '.join(where)}): "
                    f"rename all but one"
                )

    def __iter__(self):
        if self.json:
            yield from self._json_batches()
        elif self.parquet:
            yield from self._parquet_batches()
        else:
            yield from self._csv_batches()

    def _json_lines(self):
        """(line number, its object or the reason it is none) of each line that is not blank."""
        import json

        with open_regular(self.path) as unbuffered, io.BufferedReader(unbuffered) as f:
            for number, raw in enumerate(f, 1):
                if raw.strip():
                    try:
                        row = json.loads(raw.decode("utf-8"))
                    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                        row = f"not a JSON object: {first_line(exc)}"
                    yield number, row if isinstance(row, (dict, str)) else "not a JSON object of column: value"

    def _first_keys(self) -> list:
        with contextlib.closing(self._json_lines()) as lines:
            for number, row in lines:
                if isinstance(row, str):
                    raise DataError(f"{self.path}: line {number}: {row}")
                return list(row)
        return []

    def _json_batches(self):
        import json

        import numpy as np
        import pyarrow as pa

        def batch(rows, lines, problems):
            columns = {
                name: pa.array(
                    [
                        None if (v := row.get(name)) is None else v if isinstance(v, str) else json.dumps(v)
                        for row in rows
                    ],
                    pa.string(),
                )
                for name in self.needed
            }
            return pa.RecordBatch.from_pydict(columns), np.asarray(lines, dtype=np.int64), problems

        rows, lines, problems = [], [], []
        for number, row in self._json_lines():
            if isinstance(row, str):
                problems.append((number, row))
                continue
            rows.append(row)
            lines.append(number)
            if len(rows) == self.batch_rows:
                yield batch(rows, lines, problems)
                rows, lines, problems = [], [], []
        if rows or problems:
            yield batch(rows, lines, problems)

    def _parquet_batches(self):
        import numpy as np
        import pyarrow as pa

        first = 1
        batches = self._file.iter_batches(batch_size=self.batch_rows, columns=self.needed)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as exc:  # a damaged page: one line, and nothing written
                raise DataError(
                    f"{self.path}: cannot be read as Parquet after row {first - 1:,}: {first_line(exc)}"
                ) from None
            lines = np.arange(first, first + batch.num_rows, dtype=np.int64)
            first += batch.num_rows
            yield _text_only(batch, lines, [])

    def _csv_batches(self):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pacsv

        skipped: list = []  # (record number, line breaks inside it, why) per record the parser skips

        def invalid(row) -> str:
            text = row.text or ""
            why = f"{row.actual_columns} values, the header has {row.expected_columns} columns"
            skipped.append((int(row.number or 0), text.count("\n"), why))
            return "skip"

        # Every column is read (as bytes, made text per batch: a value that is not UTF-8 costs its row, not the
        # file): a blank line is a record too (so that line numbers count it), told apart by all its values being
        # null; an unquoted empty value is null as well and made "" again, a quoted one ("") stays "". Line
        # breaks inside quoted values are counted in every column, read or not.
        unique = len(set(self.columns)) == len(self.columns)
        convert = pacsv.ConvertOptions(
            column_types={c: pa.binary() for c in self.columns},
            include_columns=[] if unique else self.needed,
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=False,
        )
        record = 1  # the last record (header = 1) placed so far: the next batch's rows come after it
        extra_lines = 0  # line breaks inside quoted values of the records placed so far
        try:
            with self._open_csv(invalid, convert_options=convert) as csv:
                for batch in csv.reader:
                    n = batch.num_rows
                    blank = np.ones(n, dtype=bool)
                    breaks = np.zeros(n, dtype=np.int64)
                    for column in batch.columns:
                        blank &= column.is_null().to_numpy(zero_copy_only=False)
                        breaks += _line_breaks(column)
                    names = batch.schema.names
                    batch = pa.RecordBatch.from_arrays(
                        [pc.fill_null(batch.column(names.index(c)), b"") for c in self.needed], names=self.needed
                    )
                    lines, problems, record, extra_lines = _place_records(n, breaks, skipped, record, extra_lines)
                    if blank.any():  # blank lines: counted, not rows
                        batch, lines = batch.filter(pa.array(~blank)), lines[~blank]
                    yield _text_only(batch, lines, problems)
            _, problems, _, _ = _place_records(0, np.zeros(0, np.int64), skipped, record, extra_lines)
            if problems:  # bad records after the last good one
                yield (
                    pa.RecordBatch.from_pylist([], schema=pa.schema([(c, pa.string()) for c in self.needed])),
                    np.zeros(0, dtype=np.int64),
                    problems,
                )
        except pa.ArrowInvalid as exc:
            raise DataError(f"{self.path}: cannot be read as CSV: {_arrow_reason(exc)}") from None


def _relay(handler, released):
    """A function calling `handler` that sets the Event `released` once it is freed."""
    relay = lambda row: handler(row)  # noqa: E731
    weakref.finalize(relay, released.set)
    return relay


@functools.cache
def _declared() -> frozenset[str]:
    """The normalised names (and aliases) of the columns some registered task's file scorer reads
    (core.tasks.serving.FileScorer.input_columns): a delimiter is sniffed by them, as training's importer does."""
    from core.data.formats import normalise_name
    from core.data.importers import ALIASES
    from core.tasks import TASKS

    scorers = [
        serving.file_scorer
        for task in TASKS.values()
        if (serving := task.serving_class()) is not None and serving.file_scorer is not None
    ]
    columns = {name for scorer in scorers for name in scorer.input_columns}
    return frozenset({normalise_name(name) for name in columns} | {a for n in columns for a in ALIASES.get(n, ())})


def _binary_as_text(batch):
    """`batch` with its dictionary columns (a Parquet categorical) decoded and its binary columns cast to strings
    unchecked (values that are not UTF-8 stay as they are, for _text_only to find)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not any(
        pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type) or pa.types.is_dictionary(f.type)
        for f in batch.schema
    ):
        return batch
    columns = []
    for column in batch.columns:
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            target = pa.large_string() if pa.types.is_large_binary(column.type) else pa.string()
            column = pc.cast(column, options=pc.CastOptions(target_type=target, allow_invalid_utf8=True))
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _text_only(batch, lines, problems):
    """(batch, lines, problems) without the rows holding a value that is not UTF-8 text (a binary column, as
    CSV columns are read, or a Parquet one), each reported by its line instead."""
    import numpy as np
    import pyarrow as pa

    batch = _binary_as_text(batch)
    bad = np.zeros(batch.num_rows, dtype=bool)
    found = []
    for name, column in zip(batch.schema.names, batch.columns):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        try:
            column.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        for i, value in enumerate(
            column.cast(pa.binary() if pa.types.is_string(column.type) else pa.large_binary()).to_pylist()
        ):
            if value is None or bad[i]:
                continue
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad[i] = True
                why = f"{name} is not valid UTF-8 (byte {value[exc.start]:#04x} at position {exc.start + 1})"
                found.append((int(lines[i]), f"{why}: save the file as UTF-8"))
    if not bad.any():
        return batch, lines, problems
    return batch.filter(pa.array(~bad)), lines[~bad], sorted(problems + found)


def _place_records(n: int, breaks, skipped: list, record: int, extra_lines: int):
    """Line numbers of a batch's `n` good rows and of the skipped records (the CSV parser's bad ones, as
    (record number, line breaks inside, why)) that come before its last good row;
    later skipped records stay in `skipped` for the next batch (a parser may read ahead). Records are numbered
    from the header (1); a record's line adds the line breaks inside the quoted values of every record before
    it. Returns (lines, problems, the last record placed, line breaks placed so far)."""
    import numpy as np

    bad = np.array([s[0] for s in skipped], dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    # a good row's record: the last placed record + 1 + its index + the skipped records before it
    numbers = record + 1 + index + np.searchsorted(bad - record - 1 - np.arange(len(bad)), index, side="right")
    last = int(numbers[-1]) if n else None
    here = [s for s in skipped if last is None or s[0] < last] if n else list(skipped)
    if n:
        skipped[:] = [s for s in skipped if s[0] > last]
    else:
        skipped.clear()
    all_numbers = np.concatenate([numbers, np.array([s[0] for s in here], dtype=np.int64)])
    all_breaks = np.concatenate([breaks, np.array([s[1] for s in here], dtype=np.int64)])
    order = np.argsort(all_numbers, kind="stable")
    before = np.cumsum(all_breaks[order]) - all_breaks[order]
    lines = np.empty_like(all_numbers)
    lines[order] = all_numbers[order] + extra_lines + before
    problems = [(int(lines[n + j]), s[2]) for j, s in enumerate(here)]
    if len(all_numbers):
        record = int(all_numbers.max())
    return lines[:n], problems, record, extra_lines + int(all_breaks.sum())


def _line_breaks(values):
    import numpy as np
    import pyarrow.compute as pc

    return pc.fill_null(pc.count_substring(values, "\n"), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _arrow_reason(exc: BaseException) -> str:
    """pyarrow's error as a message may show it: without the row it quotes, control characters escaped."""
    return printable(re.sub(r"(Expected \d+ columns, got \d+):.*", r"\1", first_line(exc)))
