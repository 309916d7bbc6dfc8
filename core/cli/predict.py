"""`amp-console predict RUN_OR_CHECKPOINT --input FILE --out FILE`: a trained model's predictions for a whole
file in the task's own input format (core.lab.predict's Predictor does the scoring):

- sentiment: a `text` column (a `label` column is ignored) -> line, p_positive, predicted (positive/negative);
- recommender: a `history` column of lesson ids separated by spaces or commas (and optionally `user_id`), one row per
  user; or the training interactions (user_id, item_id, timestamp), grouped per user keeping each user's last
  max_len lessons by time -> user_id (or line), rank, item_id, score: k rows per user, in the data's own ids;
- ranking: query_id, doc_id, f1..fN (label optional, copied) -> query_id, doc_id, score (, label);
- tiny: 10 numeric columns (x1..x10, f1..f10, or exactly 10 columns) -> line, p0, p1, predicted.

The input is read a block at a time (pyarrow's streaming CSV reader, which reads up to 32 blocks of BLOCK_BYTES
ahead, through core.data.csv_guard's RowGuard; a Parquet file's row batches, a row group at a time), so memory
stays bounded whatever the file's size
(the interactions format holds users x max_len lessons, and the distinct (user, lesson) pairs, so that a lesson
seen before the window is excluded too). CSV columns
are read as bytes and converted per batch, so one bad value costs its row, not its block: a bad row (empty
text, bytes that are not UTF-8, a value that is not a number, a wrong number of values, a history with no lesson
the model knows, a NUL byte, a CSV row over ROW_BYTES, which is skipped as it streams by, never held) is
skipped and reported on stderr by line ("line 17: f3 'abc' is not a number": the first 20, then a count), or,
with --strict, is a one-line error (exit 2). Line numbers are the file's lines (the header is line 1; a quoted
value spanning lines is counted in full, in any column; blank lines are counted, and skipped without a report);
a Parquet file's are its 1-based rows.

Nothing of the file is printed unless line 1 reads as a header of the columns predict reads (_plausible_header),
and what is printed has its control characters escaped (core.text.printable).

The output (CSV or Parquet, by its suffix) is written to a partial file beside it and renamed when complete
(core.lab.predict_output): an existing --out is replaced only on success. A full disk is one line (exit 1); a
stop signal (SIGINT, SIGTERM, SIGHUP) unwinds the command and removes the partial file (exit 128 + n); one left
by a predict killed with SIGKILL is removed by the next predict to the same --out. No torch at import time.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from pathlib import Path

from core.errors import ConfigError, DataError
from core.lab.predict_output import OUT_SUFFIXES
from core.text import first_line, printable

HISTORY_EDGES = " \t\r\n[](),"  # trimmed from a history cell before it is split into ids
MAX_REPORTED = 20  # bad rows shown one by one; the rest are counted
BLOCK_BYTES = 2 << 20  # CSV bytes parsed at a time (the reader reads up to 32 blocks ahead: 64 MiB)
ROW_BYTES = 1 << 20  # a CSV row longer than this (or half a block) is a bad row, skipped without being held
DEFAULT_BATCH = 4096
MAX_BATCH = 1 << 24
PROGRESS_SECONDS = 5.0  # off a terminal: a progress line this often
SHOWN = 40  # characters of a bad value shown


def register(sub) -> None:
    """Adds the `predict` command's parser to `sub`."""
    p = sub.add_parser(
        "predict", help="a trained model's predictions for a CSV/Parquet file in the task's input format",
        description="Score a whole file with a run's model (best checkpoint by default): reviews -> P(positive), "
                    "user histories -> top-k lesson ids, query candidates -> scores, tiny points -> class "
                    "probabilities. Streams the input in bounded memory; bad rows are skipped and reported by "
                    "line (or refused with --strict); the output appears only when complete.")
    p.add_argument("target", metavar="RUN_OR_CHECKPOINT",
                   help="a checkpoint file, a run folder, or a run id / unique prefix / folder name")
    p.add_argument("--input", required=True, metavar="FILE", help="the rows to score (.csv or .parquet)")
    p.add_argument("--out", required=True, metavar="FILE", help="where the predictions go (.csv or .parquet)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_const", const="best", dest="which",
                       help="the run's best checkpoint (the default; its last when it kept none)")
    which.add_argument("--last", action="store_const", const="last", dest="which", help="the run's last checkpoint")
    p.add_argument("--k", type=int, default=10, help="recommender: lessons recommended per user (default 10)")
    p.add_argument("--include-seen", action="store_true",
                   help="recommender: lessons already in the history may be recommended (a `seen` column says so)")
    p.add_argument("--device", help="score on this device (default: cpu)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help=f"rows scored at a time (default "
                                                                         f"{DEFAULT_BATCH})")
    p.add_argument("--strict", action="store_true", help="the first bad row is an error (exit 2), nothing written")
    p.add_argument("--runs-dir", metavar="DIR", default=None, help="the runs root to look run ids up in")
    p.set_defaults(handler=cmd_predict, which=None)


# ---- the command -------------------------------------------------------------------------------------------------

def cmd_predict(args) -> int:
    """Exit codes: 0 written, 1 the output could not be written (a full disk), 2 bad input, 128 + the signal's
    number when SIGINT, SIGTERM or SIGHUP stopped it (the partial output removed, nothing written)."""
    from core.cli.common import StopBeforeStart, StopSignals, safe_standard_streams, signal_name
    from core.lab.predict_output import WriteFailed

    # Any stop signal unwinds the command from wherever it is (a StopBeforeStart raised by the handler), so the
    # partial output is removed on the way out; a repeated one while unwinding is ignored.
    with safe_standard_streams(), StopSignals(announce=False) as signals:
        try:
            return _predict(args, signals)
        except StopBeforeStart as exc:
            sys.stderr.write(f"amp-console: {signal_name(exc.signum)}: predict stopped; nothing written to "
                             f"{printable(args.out)}\n")
            return signals.exit_code
        except WriteFailed as exc:
            sys.stderr.write(f"amp-console: error: {exc}\n")
            return 1


def _predict(args, signals) -> int:
    from types import SimpleNamespace

    from core.cli.common import stop_signals_held
    from core.files import check_regular_file, check_utf8_path, check_writable_folder
    from core.lab.predict import load_predictor
    from core.lab.predict_output import AtomicTableWriter, clear_abandoned

    source, out = Path(args.input).expanduser(), Path(args.out).expanduser()
    if args.batch_size < 1:
        raise ConfigError("batch_size", f"{args.batch_size}: score at least 1 row at a time")
    if args.batch_size > MAX_BATCH:  # memory stays bounded (and Parquet's reader takes a C long)
        raise ConfigError("batch_size", f"{args.batch_size}: score at most {MAX_BATCH:,} rows at a time")
    if args.k < 1:
        raise ConfigError("--k", f"{args.k}: ask for at least 1 recommendation")
    check_regular_file(source, "--input", "input file")  # a FIFO or a device is refused, never opened
    if source.suffix.lower() not in OUT_SUFFIXES:
        raise ConfigError("--input", f"{source}: use a .csv or .parquet file")
    if out.suffix.lower() not in OUT_SUFFIXES:
        raise ConfigError("--out", f"{out}: use a .csv or .parquet file name")
    check_utf8_path(out, "--out")
    if out.exists() and not out.is_file():
        from core.files import file_kind

        raise ConfigError("--out", f"{out}: is {file_kind(out.stat().st_mode)}, not a file")
    check_writable_folder(out.parent if str(out.parent) else Path("."), "--out")
    if out.resolve() == source.resolve():
        raise ConfigError("--out", f"{out}: is the input file; write the predictions elsewhere")
    for note in clear_abandoned(out):
        sys.stderr.write(f"note: {note}\n")
    checkpoint, which = resolve_target(args.target, args.which, args.runs_dir)
    predictor = load_predictor(checkpoint, which, device=args.device)
    for note in predictor.notes:
        sys.stderr.write(f"note: {note}\n")
    reader = open_input(source, args.batch_size)
    scorer = SCORERS[predictor.task](predictor, reader, args)
    sys.stderr.write(f"predict: {predictor.task} model at step {predictor.step:,} ({predictor.checkpoint}) on "
                     f"{predictor.device}, {scorer.describe()}\n")
    report = BadRows(reader.unit, args.strict, source=str(source))
    progress = Progress()
    began = time.perf_counter()
    with AtomicTableWriter(out, scorer.schema) as writer:
        for batch, lines, problems in reader:
            report.hold(problems)
            for table in scorer.score(batch, lines, report):
                writer.write(table)
            report.flush()
            progress.update(scorer.scored, report.count)
        for table in scorer.finish(report):
            writer.write(table)
        with stop_signals_held():  # once renamed into place the output stands: a later signal stops nothing
            writer.commit()
            signals.started(SimpleNamespace(stop=lambda: None))
    seconds = time.perf_counter() - began
    report.close()
    progress.done()
    rate = scorer.rows_in / seconds if seconds > 0 else 0.0
    extra = "".join(f"; {note}" for note in scorer.notes())
    print(f"predict: {scorer.scored:,} {scorer.unit} scored, {report.count:,} skipped, {rate:,.0f} rows/s "
          f"({seconds:.1f} s){extra} -> {out}")
    return 0


def resolve_target(target: str, which: str | None, runs_dir: str | None) -> tuple[Path, str]:
    """The checkpoint file (or run folder) and best/last: a file as it is (--best refused, as `evaluate` does);
    a folder or a run id: its best checkpoint, else its last (the Predictor says so), or as --best/--last
    asks (core.cli.evaluate.find_checkpoint resolves run ids)."""
    from core.cli.evaluate import find_checkpoint

    path = Path(target).expanduser()
    if path.is_file():
        if which == "best":
            raise ConfigError("checkpoint", f"{target} is a checkpoint file: --best takes a run (folder or id)")
        return path, "last"
    if path.is_dir() and which is None:
        return path, "best"
    if which is not None:  # asked for: no fallback (find_checkpoint says when the run kept no best)
        return find_checkpoint(target, which == "best", runs_dir), "last"
    try:
        return find_checkpoint(target, True, runs_dir).parent, "best"
    except ConfigError as exc:
        if "no best checkpoint" not in str(exc):
            raise
        return find_checkpoint(target, False, runs_dir).parent, "best"


# ---- reading -----------------------------------------------------------------------------------------------------

class InputReader:
    """Batches of the input's needed columns, with each row's line number (CSV: the file's line where the row
    starts; Parquet: its 1-based row) and the rows the CSV parser had to skip (a wrong number of values)."""

    def __init__(self, path: Path, batch_rows: int):
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        from core.data import formats

        self.path, self.batch_rows = path, batch_rows
        self.parquet = path.suffix.lower() != ".csv"
        self.unit = "row" if self.parquet else "line"
        self.needed: list[str] = []
        self.delimiter = ","
        self._open().close()  # the first open: a FIFO or a device put in the file's place is refused, not read
        if not self.parquet:
            self.delimiter = formats.sniff_delimiter(path, _known_names())  # as training's importer sniffs it
        try:
            if self.parquet:
                self._file = pq.ParquetFile(path)
                self.schema = self._file.schema_arrow
            else:
                with self._csv_source() as (source, separation), pacsv.open_csv(
                        source, read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                        parse_options=pacsv.ParseOptions(**separation, newlines_in_values=True,
                                                         ignore_empty_lines=False,
                                                         invalid_row_handler=lambda row: "skip")) as r:
                    names = r.schema.names
                self.schema = pa.schema([(n, pa.string()) for n in names])
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"{path}: cannot be read as {'Parquet' if self.parquet else 'CSV'}: "
                            f"{_arrow_reason(exc)}") from None
        except UnicodeDecodeError as exc:  # pyarrow decodes the column names itself
            raise DataError(f"{path}: line 1: a column name is not UTF-8 text (byte {exc.object[exc.start]:#04x}): "
                            f"save the file as UTF-8") from None
        self.columns = list(self.schema.names)
        if not self.columns or (len(self.columns) == 1 and not self.columns[0]):
            raise DataError(f"{path}: no header line (the first line names the columns)")
        if not self.parquet and all(formats.is_number(name) for name in self.columns):
            # a file without a header: its first row would be read as the column names and silently lost
            raise DataError(f"{path}: line 1 holds numbers, not column names: add a header line naming the "
                            f"columns")
        self.header_shown = _plausible_header(self.columns)  # else nothing of line 1 is ever printed

    def _open(self):
        """The file, opened only if it is a regular file once open (core.files.open_regular)."""
        from core.files import UnreadableFile, open_regular

        try:
            return open_regular(self.path)
        except FileNotFoundError:
            raise ConfigError("--input", f"{self.path}: no such input file") from None
        except UnreadableFile as exc:
            raise ConfigError("--input", str(exc)) from None

    def _csv_source(self):
        """(stream, ParseOptions arguments) for pyarrow's CSV reader: the file through a RowGuard, so that a
        row over ROW_BYTES or holding a NUL byte costs that row (core.data.csv_guard)."""
        from core.data.csv_guard import guarded_source

        return guarded_source(self.path, self.delimiter, min(ROW_BYTES, BLOCK_BYTES // 2), lambda _: self._open())

    def columns_note(self) -> str:
        """The file's columns for a message, or why they are not shown (line 1 reads as no header)."""
        if self.header_shown:
            return f"the file's columns: {_shown_names(self.columns)}"
        return f"{'its columns name' if self.parquet else 'line 1 names'} none of the columns predict reads, so " \
               f"they are not shown"

    def shown(self, column: str) -> str:
        """How messages name one of the file's columns: its name when line 1 is a header, else its position."""
        from core.data.formats import normalise_name

        if self.header_shown or _is_known(normalise_name(column)):
            return printable(column)
        return f"column {self.columns.index(column) + 1}"

    def find(self, name: str, aliases: tuple = ()) -> str | None:
        """The file's column for `name`: the same name (case, '_', '-' and spaces aside), else one alias."""
        from core.data.formats import normalise_name

        wanted = [normalise_name(name), *aliases]
        for key in wanted:
            found = [c for c in self.columns if normalise_name(c) == key]
            if found:
                return found[0]
        return None

    def require(self, name: str, why: str) -> str:
        from core.data.importers import ALIASES

        column = self.find(name, ALIASES.get(name, ()))
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
            raise DataError(f"{self.path}: column {self.shown(name)!r} holds {t} values, not ids")
        return t

    def use(self, columns: list[str]) -> None:
        self.needed = list(dict.fromkeys(columns))
        for name in self.needed:  # which of two same-named columns is meant cannot be known
            where = [str(i + 1) for i, c in enumerate(self.columns) if c == name]
            if len(where) > 1:
                raise DataError(f"{self.path}: {'line 1: ' if not self.parquet else ''}the column "
                                f"{self.shown(name)!r} appears {len(where)} times (columns {', '.join(where)}): "
                                f"rename all but one")

    def __iter__(self):
        if self.parquet:
            yield from self._parquet_batches()
        else:
            yield from self._csv_batches()

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
                raise DataError(f"{self.path}: cannot be read as Parquet after row {first - 1:,}: "
                                f"{first_line(exc)}") from None
            lines = np.arange(first, first + batch.num_rows, dtype=np.int64)
            first += batch.num_rows
            yield _text_only(batch, lines, [])

    def _csv_batches(self):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pacsv

        from core.data.csv_guard import reason

        skipped: list = []  # (record number, line breaks inside it, why) per record the parser skips

        def invalid(row) -> str:
            text = row.text or ""
            why = reason(text) or f"{row.actual_columns} values, the header has {row.expected_columns} columns"
            skipped.append((int(row.number or 0), text.count("\n"), why))
            return "skip"

        # Every column is read (as bytes, made text per batch: a value that is not UTF-8 costs its row, not the
        # file): a blank line is a record too (so that line numbers count it), told apart by all its values being
        # null; an unquoted empty value is null as well and made "" again, a quoted one ("") stays "". Line
        # breaks inside quoted values are counted in every column, read or not.
        unique = len(set(self.columns)) == len(self.columns)
        options = dict(read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                       convert_options=pacsv.ConvertOptions(
                           column_types={c: pa.binary() for c in self.columns},
                           include_columns=[] if unique else self.needed, strings_can_be_null=True,
                           null_values=[""], quoted_strings_can_be_null=False))
        record = 1  # the last record (header = 1) placed so far: the next batch's rows come after it
        extra_lines = 0  # line breaks inside quoted values of the records placed so far
        try:
            with self._csv_source() as (source, separation):
                reader = pacsv.open_csv(source, parse_options=pacsv.ParseOptions(
                    **separation, newlines_in_values=True, ignore_empty_lines=False, invalid_row_handler=invalid),
                    **options)
                for batch in reader:
                    n = batch.num_rows
                    blank = np.ones(n, dtype=bool)
                    breaks = np.zeros(n, dtype=np.int64)
                    for column in batch.columns:
                        blank &= column.is_null().to_numpy(zero_copy_only=False)
                        breaks += _line_breaks(column)
                    names = batch.schema.names
                    batch = pa.RecordBatch.from_arrays(
                        [pc.fill_null(batch.column(names.index(c)), b"") for c in self.needed], names=self.needed)
                    lines, problems, record, extra_lines = _place_records(n, breaks, skipped, record, extra_lines)
                    if blank.any():  # blank lines: counted, not rows
                        batch, lines = batch.filter(pa.array(~blank)), lines[~blank]
                    yield _text_only(batch, lines, problems)
            _, problems, _, _ = _place_records(0, np.zeros(0, np.int64), skipped, record, extra_lines)
            if problems:  # bad records after the last good one
                yield (pa.RecordBatch.from_pylist([], schema=pa.schema([(c, pa.string()) for c in self.needed])),
                       np.zeros(0, dtype=np.int64), problems)
        except pa.ArrowInvalid as exc:
            raise DataError(f"{self.path}: cannot be read as CSV: {_arrow_reason(exc)}") from None


@functools.cache
def _known_names() -> frozenset[str]:
    """Normalised column names that mark a delimiter's line 1 as a header: every task's input columns and their
    aliases (what training's importer looks for when it sniffs a delimiter)."""
    from core.data.formats import normalise_name
    from core.data.importers import ALIASES

    names = {normalise_name(name) for name in (*ALIASES, "history")}
    return frozenset(names | {a for v in ALIASES.values() for a in v})


def _binary_as_text(batch):
    """`batch` with its dictionary columns (a Parquet categorical) decoded and its binary columns cast to strings
    unchecked (values that are not UTF-8 stay as they are, for _text_only to find)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not any(pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type) or pa.types.is_dictionary(f.type)
               for f in batch.schema):
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
        for i, value in enumerate(column.cast(pa.binary() if pa.types.is_string(column.type) else
                                              pa.large_binary()).to_pylist()):
            if value is None or bad[i]:
                continue
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad[i] = True
                found.append((int(lines[i]), f"{name} is not valid UTF-8 (byte {value[exc.start]:#04x} at "
                                             f"position {exc.start + 1}): save the file as UTF-8"))
    if not bad.any():
        return batch, lines, problems
    return batch.filter(pa.array(~bad)), lines[~bad], sorted(problems + found)


def open_input(path: Path, batch_rows: int) -> InputReader:
    return InputReader(path, batch_rows)


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


def _shown_names(names: list[str]) -> str:
    text = ", ".join(printable(n) for n in names[:12]) + (f" (+{len(names) - 12} more)" if len(names) > 12 else "")
    return text if len(text) <= 160 else text[:157] + "..."


def _shown(value) -> str:
    text = str(value)
    return printable(repr(text if len(text) <= SHOWN else text[:SHOWN] + "..."))


def _is_known(normalised: str) -> bool:
    """Whether a column name (normalise_name'd) is one some task's predict reads, or an alias of one."""
    return normalised in _known_names() or re.fullmatch(r"[xf]\d+", normalised) is not None


def _plausible_header(names: list[str]) -> bool:
    """Whether line 1 (a Parquet file's column names) reads as a header of the columns predict reads: every
    name shaped like a column name and one of them a known column. Only then may a message show it: a file
    the user can read but should not publish (a link to /etc/shadow) has its line 1 printed nowhere."""
    from core.data.formats import looks_like_column_name, normalise_name

    return all(looks_like_column_name(n) for n in names) and any(_is_known(normalise_name(n)) for n in names)


def _arrow_reason(exc: BaseException) -> str:
    """pyarrow's error as a message may show it: without the row it quotes, control characters escaped."""
    return printable(re.sub(r"(Expected \d+ columns, got \d+):.*", r"\1", first_line(exc)))


# ---- values and bad rows ------------------------------------------------------------------------------------------



class Checks:
    """A batch's per-column problems: (column, bad mask, how to describe row i), the first per row wins."""

    def __init__(self, n: int):
        import numpy as np

        self.n = n
        self.items: list = []
        self.bad = np.zeros(n, dtype=bool)

    def add(self, mask, describe) -> None:
        if mask is not None and mask.any():
            self.items.append((mask, describe))
            self.bad |= mask

    def message(self, i: int) -> str:
        for mask, describe in self.items:
            if mask[i]:
                return describe(i)
        return ""


def numbers(values, name: str, checks: Checks, dtype="float32", dates: bool = False):
    """A column as numbers (`dtype`), marking empty and non-numeric (or non-finite) values in `checks`. With
    `dates`, an ISO 8601 date-time is a number too (its seconds since 1970, UTC when it names no zone), as the
    training importer reads a timestamp column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from core.data import formats

    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:  # the common case, numbers only: one cast (a NaN or inf is caught as not finite below)
            out = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
            if values.null_count:  # a Parquet null
                missing = values.is_null().to_numpy(zero_copy_only=False)
                out = np.where(missing, 0.0, out)
                checks.add(missing, lambda i: f"{name} is empty")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # some value is not a number: find which
            empty = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0), True)
            empty = empty.to_numpy(zero_copy_only=False)
            ok = np.array(pc.fill_null(pc.match_substring_regex(values, formats.NUMBER), False).to_numpy(
                zero_copy_only=False))
            cleaned = pc.if_else(pa.array(ok), pc.utf8_trim_whitespace(values), "0")
            out = np.array(pc.cast(cleaned, pa.float64()).to_numpy(zero_copy_only=False))  # writable
            if dates:
                rest = np.flatnonzero(~ok & ~empty)
                seconds, parsed = _date_times(values.take(pa.array(rest)))
                out[rest[parsed]] = seconds[parsed]
                ok[rest[parsed]] = True
            checks.add(empty, lambda i: f"{name} is empty")
            checks.add(~ok & ~empty, lambda i: f"{name} {_shown(values[i].as_py())} is not a number" +
                       (" or a date-time" if dates else ""))
    elif pa.types.is_timestamp(t) or pa.types.is_date(t):
        out = pc.cast(pc.cast(values, pa.timestamp("s")), pa.int64()).to_numpy(zero_copy_only=False)
        out = np.asarray(out, dtype=np.float64)
        checks.add(values.is_null().to_numpy(zero_copy_only=False), lambda i: f"{name} is empty")
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t):
        missing = values.is_null().to_numpy(zero_copy_only=False)
        out = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
        out = np.where(missing, 0.0, out)
        checks.add(missing, lambda i: f"{name} is empty")
    else:
        raise DataError(f"column {name!r} holds {t} values, not numbers")
    with np.errstate(all="ignore"):
        cast = out.astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.floating):
        checks.add(~np.isfinite(cast) & ~checks.bad, lambda i: f"{name} {_shown(values[i].as_py())} is not a "
                                                               f"finite {dtype} number")
    return cast


def _date_times(values):
    """(seconds since 1970, parsed) of strings holding ISO 8601 date-times (UTC when they name no zone): Arrow's
    cast for the whole array, else one value at a time."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(values)
    try:
        stamps = pc.cast(pc.cast(text, pa.timestamp("us")), pa.int64()).to_numpy(zero_copy_only=False)
        return stamps.astype(np.float64) / 1e6, np.ones(len(values), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    seconds, parsed = np.zeros(len(values)), np.zeros(len(values), dtype=bool)
    for i, value in enumerate(text.to_pylist()):
        try:
            when = dt.datetime.fromisoformat(value)
        except (TypeError, ValueError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        seconds[i], parsed[i] = when.timestamp(), True
    return seconds, parsed


def ids(values, name: str, checks: Checks):
    """An id column as it is, marking empty values in `checks`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    missing = values.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        # a null (Parquet) compares as null: filled, or numpy's | meets None
        blank = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0), True)
        missing = missing | blank.to_numpy(zero_copy_only=False)
    checks.add(missing, lambda i: f"{name} is empty")
    return values


def as_text(values, name: str, path):
    """A column of another type (a Parquet number, date...) as strings; DataError for one that has no text form
    (a struct, a list)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise DataError(f"{path}: column {name!r} holds {values.type} values, not text") from None


class BadRows:
    """Bad rows: the first MAX_REPORTED on stderr as '<unit> N: why', then a count; with `strict`, the first
    is a DataError."""

    def __init__(self, unit: str, strict: bool, source: str = ""):
        self.unit, self.strict, self.source = unit, strict, source  # the input file, named by --strict's error
        self.count = 0

    def add(self, entries: list[tuple[int | str, str]]) -> None:
        """(line, why) pairs, in line order."""
        for where, why in entries:
            text = printable(f"{self.unit} {where}: {why}" if isinstance(where, int) else f"{where}: {why}")
            if self.strict:
                where = f"{self.source}: " if self.source else ""
                raise DataError(f"{where}{text} (--strict: nothing written)")
            if self.count < MAX_REPORTED:
                sys.stderr.write(text + "\n")
            self.count += 1

    def hold(self, problems) -> None:
        """The parser's bad records of the coming batch: reported with its bad rows, in line order."""
        self.pending = sorted(problems)

    def flush(self) -> None:
        self.add(self.pending)
        self.pending = []

    pending: list = []

    def add_checks(self, checks: Checks, lines) -> None:
        """The batch's bad rows and held records in line order (messages only for those shown, or the first
        under --strict)."""
        import numpy as np

        rows = np.flatnonzero(checks.bad)
        rows = rows[np.argsort(lines[rows], kind="stable")]
        shown = max(0, MAX_REPORTED - self.count) if not self.strict else 1
        entries = sorted([(int(lines[i]), checks.message(int(i))) for i in rows[:shown]] + self.pending)
        self.pending = []
        self.add(entries[:shown] if self.strict else entries)
        self.count += len(rows) - min(shown, len(rows))

    def close(self) -> None:
        if self.count > MAX_REPORTED:
            sys.stderr.write(f"... and {self.count - MAX_REPORTED:,} more bad {self.unit}s (skipped)\n")


# ---- scorers: a batch of input rows -> output tables ----------------------------------------------------------------

class Scorer:
    unit = "rows"

    def __init__(self, predictor, reader: InputReader, args):
        self.predictor, self.reader, self.args = predictor, reader, args
        self.scored = 0  # output units (reviews, users, candidates, points) scored
        self.rows_in = 0  # input rows read (bad ones included)
        self.line_column = reader.unit  # "line" (CSV) or "row" (Parquet)

    def describe(self) -> str:
        return f"reading {self.reader.path}"

    def notes(self) -> list[str]:
        return []

    def score(self, batch, lines, report: BadRows):
        raise NotImplementedError

    def finish(self, report: BadRows):
        return []

    def _good(self, batch, lines, checks: Checks, report: BadRows):
        """Report the batch's bad rows; the good rows' indices."""
        import numpy as np

        self.rows_in += batch.num_rows
        report.add_checks(checks, lines)
        return np.flatnonzero(~checks.bad)

    def _slices(self, good):
        step = self.args.batch_size
        for start in range(0, len(good), step):
            yield good[start:start + step]


class SentimentScorer(Scorer):
    unit = "reviews"

    def __init__(self, predictor, reader, args):
        import pyarrow as pa

        super().__init__(predictor, reader, args)
        self.text = reader.require("text", "a sentiment model reads reviews from a `text` column")
        reader.use([self.text])
        self.schema = pa.schema([(self.line_column, pa.int64()), ("p_positive", pa.float64()),
                                 ("predicted", pa.string())])

    def score(self, batch, lines, report):
        import numpy as np
        import pyarrow as pa

        text = batch.column(self.text)
        if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
            text = as_text(text, self.text, self.reader.path)
        checks = Checks(batch.num_rows)
        ids(text, self.text, checks)
        good = self._good(batch, lines, checks, report)
        for rows in self._slices(good):
            p = self.predictor.sentiment_array(text.take(pa.array(rows)))
            self.scored += len(rows)
            yield pa.table({self.line_column: pa.array(lines[rows]), "p_positive": pa.array(p),
                            "predicted": pa.array(np.where(p >= 0.5, "positive", "negative"))}, schema=self.schema)


class TinyScorer(Scorer):
    unit = "points"

    def __init__(self, predictor, reader, args):
        import pyarrow as pa

        super().__init__(predictor, reader, args)
        width = predictor.n_features
        for prefix in ("x", "f"):
            found = [reader.find(f"{prefix}{i}") for i in range(1, width + 1)]
            if all(found):
                break
        else:
            from core.data.formats import normalise_name

            rest = [c for c in reader.columns if normalise_name(c) not in ("label", "y", "line", "row", "id")]
            if len(rest) != width:
                raise DataError(f"{reader.path}: the tiny model reads {width} numeric columns (x1..x{width}, "
                                f"f1..f{width}, or exactly {width} columns); {reader.columns_note()}")
            found = rest
        self.features = found
        reader.use(found)
        self.schema = pa.schema([(self.line_column, pa.int64()), ("p0", pa.float32()), ("p1", pa.float32()),
                                 ("predicted", pa.int64())])

    def score(self, batch, lines, report):
        import numpy as np
        import pyarrow as pa

        checks = Checks(batch.num_rows)
        x = np.stack([numbers(batch.column(c), self.reader.shown(c), checks) for c in self.features], axis=1) \
            if batch.num_rows else np.zeros((0, len(self.features)), np.float32)
        good = self._good(batch, lines, checks, report)
        for rows in self._slices(good):
            p = self.predictor.classify(x[rows])
            self.scored += len(rows)
            yield pa.table({self.line_column: pa.array(lines[rows]), "p0": pa.array(p[:, 0]),
                            "p1": pa.array(p[:, 1]), "predicted": pa.array(p.argmax(1).astype(np.int64))},
                           schema=self.schema)


class RankingScorer(Scorer):
    unit = "candidates"

    def __init__(self, predictor, reader, args):
        import pyarrow as pa

        super().__init__(predictor, reader, args)
        why = "a ranking model scores candidates given as query_id, doc_id, f1..fN"
        self.query = reader.require("query_id", why)
        self.doc = reader.require("doc_id", why)
        self.label = reader.find("label")
        width = predictor.n_features
        features = [reader.find(f"f{i}") for i in range(1, width + 1)]
        missing = [f"f{i}" for i, c in enumerate(features, 1) if c is None]
        if missing:
            raise DataError(f"{reader.path}: no column {missing[0]!r} (the ranking model reads {width} features, "
                            f"f1..f{width}); {reader.columns_note()}")
        from core.data.formats import normalise_name

        named = [normalise_name(c) for c in reader.columns]
        more = [c for c, n in zip(reader.columns, named)
                if n.startswith("f") and n[1:].isdigit() and int(n[1:]) > width]
        if more:
            raise DataError(f"{reader.path}: the ranking model reads {width} features (f1..f{width}) but the file "
                            f"also has {_shown_names(more)}: a model trained on other features?")
        self.features = features
        reader.use([self.query, self.doc, *features, *([self.label] if self.label else [])])
        types = {name: reader.id_type(name) for name in (self.query, self.doc)}
        fields = [("query_id", types[self.query]), ("doc_id", types[self.doc]), ("score", pa.float32())]
        self.schema = pa.schema(fields + ([("label", pa.int64())] if self.label else []))

    def score(self, batch, lines, report):
        import numpy as np
        import pyarrow as pa

        checks = Checks(batch.num_rows)
        query, doc = ids(batch.column(self.query), self.query, checks), ids(batch.column(self.doc), self.doc, checks)
        x = np.stack([numbers(batch.column(c), c, checks) for c in self.features], axis=1) if batch.num_rows \
            else np.zeros((0, len(self.features)), np.float32)
        label = None
        if self.label:  # copied when it is a whole number, else left empty (the model does not read it)
            ignored = Checks(batch.num_rows)
            values = numbers(batch.column(self.label), self.label, ignored, dtype="float64")
            # a whole number within int64 (1e30 would wrap to -2**63): others are left empty
            whole = ~ignored.bad & (values == np.round(values)) & (np.abs(values) < 2.0 ** 63)
            label = pa.array(np.where(whole, values, 0).astype(np.int64), mask=~whole)
        good = self._good(batch, lines, checks, report)
        for rows in self._slices(good):
            taken = pa.array(rows)
            columns = {"query_id": query.take(taken), "doc_id": doc.take(taken),
                       "score": pa.array(self.predictor.rank(x[rows]))}
            if label is not None:
                columns["label"] = label.take(taken)
            self.scored += len(rows)
            yield pa.table(columns, schema=self.schema)


class RecommenderScorer(Scorer):
    """Histories (one row per user) are scored a batch at a time; interactions are grouped per user (each
    user's last max_len known lessons by time) and scored at the end."""

    unit = "users"

    def __init__(self, predictor, reader, args):
        import numpy as np
        import pyarrow as pa

        super().__init__(predictor, reader, args)
        self.k, self.exclude_seen = args.k, not args.include_seen
        self.unknown = 0  # lesson ids the model does not know (dropped)
        self.history = reader.find("history", ("histories", "lessons", "items", "sequence"))
        self.user = reader.find("user_id", ("userid", "user", "uid"))
        if self.history is None:
            why = ("a recommender reads a `history` column of lesson ids separated by spaces (one row per user), "
                   "or interactions: user_id, item_id, timestamp")
            if self.user is None and reader.find("item_id") is None:
                reader.require("history", why)
            self.user = reader.require("user_id", why)
            self.item = reader.require("item_id", why)
            self.time = reader.require("timestamp", why)
            reader.use([self.user, self.item, self.time])
            self._codes: dict = {}
            size = 1024
            self._items = np.zeros((size, predictor.max_len), dtype=np.int64)
            self._times = np.full((size, predictor.max_len), -np.inf)
            self._first_line = np.zeros(size, dtype=np.int64)
            self._users: list = []
            self._events = 0
            # every (user, lesson) seen, as user * (n_items + 1) + lesson: a lesson seen before the window is
            # still seen (excluded, as predict's histories, the preview and serve.py exclude it)
            self._seen: list = []
            self._seen_rows = 0
        else:
            reader.use([self.history, *([self.user] if self.user else [])])
        ids_type = pa.string() if predictor.vocabulary.get("item_id") is not None and \
            isinstance(predictor.vocabulary["item_id"], list) else pa.int64()
        if self.user:
            user_type = reader.id_type(self.user)
            first = ("user_id", user_type)
        else:
            first = (self.line_column, pa.int64())
        self.schema = pa.schema([first, ("rank", pa.int32()), ("item_id", ids_type), ("score", pa.float32())]
                                + ([("seen", pa.bool_())] if not self.exclude_seen else []))

    def describe(self) -> str:
        shape = "histories" if self.history else "interactions grouped per user"
        return f"reading {self.reader.path} ({shape}), top {self.k}" + (
            ", seen lessons excluded" if self.exclude_seen else ", seen lessons kept")

    def notes(self) -> list[str]:
        return [f"{self.unknown:,} lesson ids the model does not know were left out"] if self.unknown else []

    def score(self, batch, lines, report):
        if self.history is None:
            self._gather(batch, lines, report)
            return []
        return self._score_histories(batch, lines, report)

    def _score_histories(self, batch, lines, report):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        history = batch.column(self.history)
        checks = Checks(batch.num_rows)
        t = history.type
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            # a Parquet list of lesson ids per user: the ids as they are, as text (the vocabulary's form)
            try:
                words = pc.cast(history, pa.list_(pa.string()))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise DataError(f"{self.reader.path}: column {self.history!r} holds {t} values, not lists of "
                                f"lesson ids") from None
            empty = pc.fill_null(pc.equal(pc.list_value_length(words), 0), True)
            checks.add(empty.to_numpy(zero_copy_only=False), lambda i: f"{self.history} is empty")
            words = pc.if_else(empty, pa.scalar([], pa.list_(pa.string())), words)
        else:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                history = as_text(history, self.history, self.reader.path)
            # ids separated by spaces, or by commas as a list written out ("[12, 7, 40]", "12,7,40"): "12," is
            # lesson 12, not an unknown id that would leave the history short of it
            history = pc.utf8_trim(history, characters=HISTORY_EDGES)
            ids(history, self.history, checks)
            words = pc.split_pattern_regex(pc.fill_null(history, ""), r"[\s,]+")
        user = ids(batch.column(self.user), self.user, checks) if self.user else None
        flat = pc.list_flatten(words)
        offsets = words.offsets.to_numpy().astype(np.int64) - int(words.offsets[0].as_py())
        codes = self.predictor.item_codes(flat) if len(flat) else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(batch.num_rows), np.diff(offsets))
        known = np.bincount(owner, weights=codes > 0, minlength=batch.num_rows) > 0
        nothing = ~known & ~checks.bad

        def unknown_ids(i: int) -> str:
            shown = flat.slice(offsets[i], min(3, offsets[i + 1] - offsets[i])).to_pylist()
            more = "..." if offsets[i + 1] - offsets[i] > 3 else ""
            return f"{self.history} has no lesson the model knows ({', '.join(map(repr, shown))}{more})"

        checks.add(nothing, unknown_ids)
        good = self._good(batch, lines, checks, report)
        self.unknown += int(((codes == 0) & ~checks.bad[owner]).sum()) if len(codes) else 0
        for rows in self._slices(good):
            parts = [codes[offsets[r]:offsets[r + 1]] for r in rows]
            lengths = np.array([len(p) for p in parts], dtype=np.int64)
            flat_codes = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            answer = self.predictor.recommend_codes(flat_codes, np.concatenate([[0], np.cumsum(lengths)]), self.k,
                                                    self.exclude_seen)
            who = user.take(pa.array(rows)) if user is not None else pa.array(lines[rows])
            yield self._table(who, answer)

    def _table(self, who, answer):
        import numpy as np
        import pyarrow as pa

        real = answer.items > 0
        row, rank = np.nonzero(real)
        self.scored += int((answer.known > 0).sum())
        columns = {self.schema.names[0]: who.take(pa.array(row)), "rank": pa.array((rank + 1).astype(np.int32)),
                   "item_id": pa.array(self.predictor.item_ids(answer.items[row, rank]),
                                       type=self.schema.field("item_id").type),
                   "score": pa.array(answer.scores[row, rank])}
        if not self.exclude_seen:
            columns["seen"] = pa.array(answer.seen[row, rank])
        return pa.table(columns, schema=self.schema)

    def _gather(self, batch, lines, report) -> None:
        """Fold a batch of interactions into each user's last max_len known lessons (by time; equal times keep
        the file's order)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        checks = Checks(batch.num_rows)
        user = ids(batch.column(self.user), self.user, checks)
        item = ids(batch.column(self.item), self.item, checks)
        when = numbers(batch.column(self.time), self.time, checks, dtype="float64", dates=True)
        good = self._good(batch, lines, checks, report)
        self._events += len(good)
        if not len(good):
            return
        taken = pa.array(good)
        user, when, lines = user.take(taken), when[good], lines[good]
        if not (pa.types.is_string(user.type) or pa.types.is_large_string(user.type)):
            user = as_text(user, self.user, self.reader.path)
        encoded = pc.dictionary_encode(user)
        table = np.array([self._code(value, int(lines[first])) for value, first in
                          zip(encoded.dictionary.to_pylist(), _first_positions(encoded.indices))], dtype=np.int64)
        code = table[encoded.indices.to_numpy(zero_copy_only=False)]
        items = self.predictor.item_codes(item.take(taken))
        known = items > 0
        self.unknown += int((~known).sum())
        code, when, items = code[known], when[known], items[known]
        if len(code):  # --include-seen marks them seen
            self._remember(code * (self.predictor.n_items + 1) + items)
        if not len(code):
            return
        length = self.predictor.max_len
        users = np.unique(code)
        held = self._items[users] > 0
        old_user = np.repeat(users, held.sum(1))
        all_user = np.concatenate([old_user, code])
        all_time = np.concatenate([self._times[users][held], when])
        all_item = np.concatenate([self._items[users][held], items])
        order = np.lexsort((all_time, all_user))  # stable: the held (earlier) lessons first among equal times
        all_user, all_time, all_item = all_user[order], all_time[order], all_item[order]
        ends = np.searchsorted(all_user, all_user, side="right")
        back = ends - 1 - np.arange(len(all_user))  # 0 = the user's latest
        keep = back < length
        self._items[users], self._times[users] = 0, -np.inf
        self._items[all_user[keep], length - 1 - back[keep]] = all_item[keep]
        self._times[all_user[keep], length - 1 - back[keep]] = all_time[keep]

    def _code(self, value, line: int) -> int:
        import numpy as np

        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self._users)
            self._users.append(value)
            if code >= len(self._items):  # grow by half: users x max_len (+ seen pairs) is this format's memory
                grow = len(self._items) // 2 + 1
                self._items = np.concatenate([self._items, np.zeros((grow, self._items.shape[1]), np.int64)])
                self._times = np.concatenate([self._times, np.full((grow, self._times.shape[1]), -np.inf)])
                self._first_line = np.concatenate([self._first_line, np.zeros(grow, np.int64)])
            self._first_line[code] = line
        return code

    def finish(self, report):
        import numpy as np
        import pyarrow as pa

        if self.history is not None:
            return
        count = len(self._users)
        users = pa.array(self._users, type=pa.string())
        if self.schema.field(0).type != pa.string():
            users = users.cast(self.schema.field(0).type)
        empty = np.flatnonzero((self._items[:count] == 0).all(1))
        report.add([(int(self._first_line[u]), f"user {_shown(self._users[u])} (first seen here): none of its "
                                               f"lessons is known to the model") for u in empty])
        step = max(1, self.args.batch_size)
        length = self.predictor.max_len
        seen = self._seen_pairs()
        width = self.predictor.n_items + 1
        seen_user, seen_item = seen // width, seen % width
        for start in range(0, count, step):
            end = min(count, start + step)
            rows = end - start
            # each user's lessons seen before its window first (any order), then the window in time order: the
            # model reads the last max_len known ones, every one is excluded
            lo, hi = np.searchsorted(seen_user, [start, end])
            owner, item = seen_user[lo:hi] - start, seen_item[lo:hi]
            full = (self._items[start:end] > 0).all(1)  # a window not full holds all the user's lessons already:
            owner, item = owner[full[owner]], item[full[owner]]  # nothing before it (would be read as history)
            extra = np.bincount(owner, minlength=rows).astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(extra + length)])
            codes = np.zeros(int(offsets[-1]), dtype=np.int64)
            codes[offsets[owner] + np.arange(len(owner)) - (np.cumsum(extra) - extra)[owner]] = item
            window = offsets[:-1, None] + extra[:, None] + np.arange(length)[None, :]
            codes[window.reshape(-1)] = self._items[start:end].reshape(-1)
            answer = self.predictor.recommend_codes(codes, offsets, self.k, self.exclude_seen)
            yield self._table(users.slice(start, rows), answer)

    def _remember(self, keys) -> None:
        import numpy as np

        self._seen.append(keys)
        self._seen_rows += len(keys)
        if self._seen_rows > 4 * (1 << 20):  # folded to the distinct pairs now and then: memory ~ distinct pairs
            self._seen = [np.unique(np.concatenate(self._seen))]
            self._seen_rows = len(self._seen[0])

    def _seen_pairs(self):
        import numpy as np

        return np.unique(np.concatenate(self._seen)) if self._seen else np.zeros(0, dtype=np.int64)


def _first_positions(indices):
    """The first position of each dictionary code in `indices` (codes 0..n-1, each present)."""
    import numpy as np

    values = indices.to_numpy(zero_copy_only=False)
    first = np.full(int(values.max()) + 1 if len(values) else 0, len(values), dtype=np.int64)
    np.minimum.at(first, values, np.arange(len(values)))
    return first


SCORERS = {"sentiment": SentimentScorer, "recommender": RecommenderScorer, "ranking": RankingScorer,
           "tiny": TinyScorer}


# ---- progress ----------------------------------------------------------------------------------------

class Progress:
    """On a terminal one line rewritten in place; otherwise a line every `every` seconds (log-friendly)."""

    def __init__(self, every: float | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.every = every if every is not None else (0.5 if self.live else PROGRESS_SECONDS)
        self.began = self.last = time.perf_counter()
        self.shown = False

    def update(self, scored: int, skipped: int) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        rate = scored / max(now - self.began, 1e-9)
        text = f"predict: {scored:,} scored, {skipped:,} skipped, {rate:,.0f}/s"
        self.stream.write(f"\r{text}\033[K" if self.live else text + "\n")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.live and self.shown:
            self.stream.write("\n")
            self.stream.flush()
