"""Where `predict` writes: a CSV or Parquet file that appears only when complete, through a partial file beside
--out (core.files.PartialFile) renamed over it on commit and removed otherwise; a killed writer's partial file is
removed by the next predict to the same --out. A write error (a full disk) is one WriteFailed line naming --out.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from core.errors import AmpConsoleError, DataError
from core.files import PartialFile, remove_abandoned_partials, shown_path
from core.text import first_line

OUT_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
JSON_SUFFIXES = (".jsonl", ".ndjson")  # an input only


class WriteFailed(AmpConsoleError):
    """The predictions could not be written (the disk, not the input): one line naming the file."""


def write_failure(out: Path, exc: OSError) -> WriteFailed:
    """The one line for `exc`, in the OS's words (pyarrow's own strerror quotes its call)."""
    reason = os.strerror(exc.errno) if exc.errno else first_line(exc)
    return WriteFailed(f"{shown_path(out)}: could not write the predictions: {reason}; nothing was written")


def clear_abandoned(out: Path) -> list[str]:
    """Notes on the partial files of killed predicts to `out`: removed, or named when they cannot be."""
    removed, kept = remove_abandoned_partials(out)
    notes = [
        f"removed {shown_path(name)}, the partial output of an earlier predict that did not finish" for name in removed
    ]
    notes += [
        f"{shown_path(name)} beside {shown_path(out.name)} is the partial output of an earlier predict "
        f"that did not finish, and could not be removed"
        for name in kept
    ]
    return notes


class AtomicTableWriter:
    """Tables written to `out` (CSV or Parquet by its suffix) as the module doc says. OSError -> WriteFailed."""

    def __init__(self, out: Path, schema):
        self.out, self.schema = Path(out), schema
        self.kind = OUT_SUFFIXES[self.out.suffix.lower()]
        self._writer = None
        self._partial = PartialFile(self.out)

    def __enter__(self):
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        try:
            self._partial.__enter__()
        except OSError as exc:
            raise write_failure(self.out, exc) from None
        try:  # `with` calls no __exit__ when __enter__ fails: the partial file is removed here
            writer = pacsv.CSVWriter if self.kind == "csv" else pq.ParquetWriter
            self._writer = writer(self._partial.path, self.schema)
        except BaseException as exc:
            self.__exit__()
            if isinstance(exc, OSError) and exc.errno:
                raise write_failure(self.out, exc) from None
            if isinstance(exc, (pa.ArrowException, OSError)):
                raise DataError(
                    f"{self.out}: cannot write {self.kind.upper()} with columns {self.schema.names}: {first_line(exc)}"
                ) from None
            raise
        return self

    def write(self, table) -> None:
        if table.num_rows:
            try:
                self._writer.write_table(table)
            except OSError as exc:
                raise write_failure(self.out, exc) from None

    def commit(self) -> None:
        try:
            self._writer.close()
            self._writer = None
            self._partial.commit()
        except OSError as exc:
            raise write_failure(self.out, exc) from None

    def __exit__(self, *exc) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the file is removed anyway (a full disk fails the close too)
                self._writer.close()
            self._writer = None
        self._partial.__exit__()
