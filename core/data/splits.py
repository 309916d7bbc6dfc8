"""Where a task's train / validation / test splits come from: given files, a folder convention, a `split`
column, or the task's own split of one file (docs/data.md, "Given splits").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.data import importers
from core.data.importers import Column, ReadOptions, read_table
from core.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")
# file stems and `split` column values -> split
SPLIT_WORDS = {
    word: split
    for split, words in (("train", "train training"), ("val", "val vali valid validation dev"), ("test", "test"))
    for word in words.split()
}
SPLIT_COLUMN = "split"
CARVED_FRACTION = 0.1  # of the training data, for validation when no validation split is given


@dataclass(frozen=True)
class DataSource:
    """The data settings of a run: what a task reads and how. Empty `data`: the task's synthetic data."""

    data: str = ""
    val_data: str = ""
    test_data: str = ""
    options: ReadOptions = field(default_factory=ReadOptions)

    @classmethod
    def from_config(cls, cfg) -> DataSource:
        """The data settings of RunConfig `cfg`."""
        options = ReadOptions(cfg.delimiter, dict(cfg.columns), cfg.data_format, cfg.query_file)
        return cls(cfg.data, cfg.val_data, cfg.test_data, options)

    def for_path(self, data_path: str) -> DataSource:
        """This source for `data_path`: unchanged for its own data; another file keeps only the read options."""
        return self if data_path == self.data else DataSource(data_path, options=replace(self.options, query_file=""))


def folder_splits(folder: str | Path) -> dict[str, Path] | None:
    """{"train": file, "val": file?, "test": file?} when `folder` follows the convention, else None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found: dict[str, list[Path]] = {}
    others = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.suffix.lower() not in importers.READ_SUFFIXES:
            continue
        split = SPLIT_WORDS.get(path.stem.lower())
        if split is None:
            others.append(path)
        else:
            found.setdefault(split, []).append(path)
    if "train" not in found or not ({"val", "test"} & set(found)):
        return None
    for split, paths in found.items():
        if len(paths) > 1:
            raise DataError(f"{folder}: {', '.join(p.name for p in paths)} are all {split} files; keep one")
    if others:
        raise DataError(
            f"{folder}: holds train/validation/test files and also {', '.join(p.name for p in others)}; "
            f"move the other files out (or give the splits with --data, --val-data, --test-data)"
        )
    return {split: paths[0] for split, paths in found.items()}


def given_files(source: DataSource) -> tuple[dict[str, str], str] | None:
    """The files of each given split and how they were found, or None for one data set."""
    if source.val_data or source.test_data:
        if not source.data:
            raise ConfigError("data", "val_data / test_data are given but data (the training data) is empty")
        if folder_splits(source.data) is not None:
            raise ConfigError(
                "data",
                f"{source.data} holds train/validation/test files already: give its "
                f"training file as data, or leave val_data and test_data empty",
            )
        given = {"train": source.data, "val": source.val_data, "test": source.test_data}
        return {split: path for split, path in given.items() if path}, "the given files"
    if source.data:
        convention = folder_splits(source.data)
        if convention is not None:
            names = ", ".join(convention[name].name for name in SPLITS if name in convention)
            return {k: str(v) for k, v in convention.items()}, f"the files of folder {source.data} ({names})"
    return None


@dataclass
class SplitTables:
    """One table per split ("train", "val"?, "test"?, else "all"); `origins` says where each came from."""

    tables: dict[str, pa.Table]
    origins: dict[str, str]
    notes: list[str]

    @property
    def given(self) -> bool:
        return "all" not in self.tables


def read_splits(
    source: DataSource,
    columns: list[Column],
    prefix_columns: str | None = None,
    carved: str = f"{CARVED_FRACTION:.0%} of the training data",
) -> SplitTables:
    """Read `source` as given splits (files, folder convention or a `split` column), or as one table."""
    given = given_files(source)
    if given is not None:
        files, how = given
        notes: list[str] = []
        others = replace(source.options, query_file="")  # the query file gives the training data's queries
        tables = {
            split: read_table(path, columns, prefix_columns, source.options if split == "train" else others, notes)
            for split, path in files.items()
        }
        return SplitTables(tables, dict(files), notes + [_given_note(tables, how, carved)])
    wanted = list(columns)
    if _names_split_column(source):  # asked for only then: a header-less file's columns are taken by position
        wanted.append(Column(SPLIT_COLUMN, "label", required=False, choices=tuple(SPLIT_WORDS)))
    notes = []
    table = read_table(source.data, wanted, prefix_columns, source.options, notes)
    if SPLIT_COLUMN not in table.column_names:
        return SplitTables({"all": table}, {"all": source.data}, notes)
    marks = table.column(SPLIT_COLUMN)  # lower-cased and checked by the importer (a bad value names its line)
    table = table.drop_columns([SPLIT_COLUMN])
    tables = {}
    for name in SPLITS:
        words = pa.array([word for word, split in SPLIT_WORDS.items() if split == name])
        rows = table.filter(pc.is_in(marks, value_set=words))
        if rows.num_rows:
            tables[name] = rows
    if "train" not in tables:
        raise DataError(f"{source.data}: column {SPLIT_COLUMN!r} marks no row 'train': the training rows are needed")
    origins = {name: f"{source.data} ({SPLIT_COLUMN} {name})" for name in tables}
    return SplitTables(
        tables, origins, notes + [_given_note(tables, f"the {SPLIT_COLUMN!r} column of {source.data}", carved)]
    )


def _names_split_column(source: DataSource) -> bool:
    """Whether the data's first file names a `split` column on line 1 or in its schema."""
    target = str(source.options.columns.get(SPLIT_COLUMN, SPLIT_COLUMN))
    if target.isdigit():  # mapped by position
        return True
    file = importers.data_files(source.data)[0]
    try:
        if file.suffix.lower() in importers.PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            names = pq.read_schema(file).names
        else:
            with open(file, "rb") as f:
                names = re.split(r"[,;\t|: ]", f.readline(1 << 16).decode("utf-8", "replace"))
    except (OSError, pa.ArrowException):
        return False  # the read itself reports the file's problem
    return target.lower() in {name.strip().strip("\"'{}[] ").lower() for name in names}


def _given_note(tables: dict[str, pa.Table], how: str, carved: str) -> str:
    counts = ", ".join(f"{name} {tables[name].num_rows:,} rows" for name in SPLITS if name in tables)
    note = f"data: given splits from {how}: {counts}"
    if "val" not in tables:
        note += f"; validation is {carved}"
    if "test" not in tables:
        note += "; no test split (no test metrics)"
    return note


def seeded_thirds(n: int, seed: int, salt: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices 0..n-1 split 80 / 10 / 10 into (train, val, test) by a seeded permutation, in its order."""
    perm = np.random.default_rng([seed, salt]).permutation(n)
    return perm[: int(0.8 * n)], perm[int(0.8 * n) : int(0.9 * n)], perm[int(0.9 * n) :]


def carve(n: int, seed: int, salt: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices 0..n-1 split into (kept, carved): CARVED_FRACTION carved out, at least one when n > 1."""
    perm = np.random.default_rng([seed, salt]).permutation(n)
    cut = max(int(round(CARVED_FRACTION * n)), 1) if n > 1 else 0
    return np.sort(perm[cut:]), np.sort(perm[:cut])
