"""A trained model's predictions for a whole file (`amp-console predict`): the Predictor scores, the task's file
scorer (core.tasks.serving.FileScorer) reads its columns. `check_request` refuses bad settings and paths before a
model is loaded; `FilePrediction(predictor, request).run()` streams the input (core.runs.file_input) through the
scorer into the output (core.runs.predict_output), reporting bad rows by line on stderr (or, with `strict`, raising a
one-line DataError). No torch, numpy or pyarrow at import.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError, DataError
from core.runs.predict_output import JSON_SUFFIXES, OUT_SUFFIXES
from core.text import LiveLine, printable

MAX_REPORTED = 20  # bad rows shown one by one; the rest are counted
DEFAULT_BATCH = 4096
MAX_BATCH = 1 << 24
PROGRESS_SECONDS = 5.0  # off a terminal: a progress line this often


@dataclass(frozen=True)
class PredictRequest:
    """What to score and where to write it; `task_options`: the values of the options the tasks' file scorers
    declare (core.tasks.predict_options: the recommender's k...), by name."""

    source: Path
    out: Path
    batch_size: int = DEFAULT_BATCH
    task_options: dict = field(default_factory=dict)
    strict: bool = False


def check_request(request: PredictRequest) -> list[str]:
    """ConfigError for a bad setting or path (named as the command's option); the notes to show (a partial
    output of an earlier predict that did not finish, removed)."""
    from core.files import check_regular_file, check_utf8_path, check_writable_folder, file_kind
    from core.runs.predict_output import clear_abandoned
    from core.tasks import predict_options

    source, out = request.source, request.out
    if request.batch_size < 1:
        raise ConfigError("batch_size", f"{request.batch_size}: score at least 1 row at a time")
    if request.batch_size > MAX_BATCH:  # memory stays bounded (and Parquet's reader takes a C long)
        raise ConfigError("batch_size", f"{request.batch_size}: score at most {MAX_BATCH:,} rows at a time")
    for option in predict_options():
        if option.dest in request.task_options:
            option.check(request.task_options[option.dest])
    check_regular_file(source, "--input", "input file")  # a FIFO or a device is refused, never opened
    if source.suffix.lower() not in (*OUT_SUFFIXES, *JSON_SUFFIXES):
        raise ConfigError("--input", f"{source}: use a .csv, .parquet or .jsonl file")
    if out.suffix.lower() not in OUT_SUFFIXES:
        raise ConfigError("--out", f"{out}: use a .csv or .parquet file name")
    check_utf8_path(out, "--out")
    if out.exists() and not out.is_file():
        raise ConfigError("--out", f"{out}: is {file_kind(out.stat().st_mode)}, not a file")
    check_writable_folder(out.parent, "--out")
    if out.resolve() == source.resolve():
        raise ConfigError("--out", f"{out}: is the input file; write the predictions elsewhere")
    return list(clear_abandoned(out))


@dataclass(frozen=True)
class PredictSummary:
    scored: int  # output units (reviews, users, candidates, points)
    unit: str
    skipped: int  # bad rows
    rows_per_second: float  # input rows read
    seconds: float
    notes: tuple[str, ...]  # the scorer's (lesson ids the model does not know...)


class FilePrediction:
    """One file scored by one predictor: the input opened and the task's scorer built on construction (a file
    of another task's format is a DataError here), `run` writes the output."""

    def __init__(self, predictor, request: PredictRequest):
        from core.runs.file_input import InputReader

        serving = predictor.task_object.serving_class()
        scorer = serving.file_scorer if serving is not None else None
        if scorer is None:
            from core.tasks.serving import not_served

            raise ConfigError("checkpoint", not_served(predictor.task))
        self.predictor, self.request = predictor, request
        self.reader = InputReader(request.source, request.batch_size)
        self.scorer = scorer(predictor, self.reader, request)

    def describe(self) -> str:
        """The model and what is read, for the line shown before scoring."""
        p = self.predictor
        return f"{p.task} model at step {p.step:,} ({p.checkpoint}) on {p.device}, {self.scorer.describe()}"

    def run(self, committing=contextlib.nullcontext, progress: Progress | None = None) -> PredictSummary:
        """Score the whole file into the output; `committing()` is entered around the rename into place."""
        from core.runs.predict_output import AtomicTableWriter

        scorer, request = self.scorer, self.request
        report = BadRows(self.reader.unit, request.strict, source=str(request.source))
        progress = progress or Progress()
        began = time.perf_counter()
        with AtomicTableWriter(request.out, scorer.schema) as writer:
            for batch, lines, problems in self.reader:
                report.hold(problems)
                for table in scorer.score(batch, lines, report):
                    writer.write(table)
                report.flush()
                progress.update(scorer.scored, report.count)
            for table in scorer.finish(report):
                writer.write(table)
            with committing():
                writer.commit()
        seconds = time.perf_counter() - began
        report.close()
        progress.done()
        rate = scorer.rows_in / seconds if seconds > 0 else 0.0
        return PredictSummary(scorer.scored, scorer.unit, report.count, rate, seconds, tuple(scorer.notes()))


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

    def add_checks(self, checks, lines) -> None:
        """The batch's bad rows (core.data.row_checks.Checks) and held records in line order (messages only for
        those shown, or the first under --strict)."""
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


class Progress:
    """A core.text.LiveLine: on a terminal rewritten in place; otherwise a line every `every` seconds."""

    def __init__(self, every: float | None = None, stream=None):
        self.line = LiveLine(stream)
        self.every = every if every is not None else (0.5 if self.line.live else PROGRESS_SECONDS)
        self.began = self.last = time.perf_counter()

    def update(self, scored: int, skipped: int) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last, rate = now, scored / max(now - self.began, 1e-9)
            self.line(f"predict: {scored:,} scored, {skipped:,} skipped, {rate:,.0f}/s", keep=not self.line.live)

    def done(self) -> None:
        self.line.close()
