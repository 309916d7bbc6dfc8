"""`amp-console data generate --task T --rows N --out FILE.csv|.parquet`: write a task's synthetic data in the
file format users supply, so they can see (and re-import with `--data`) exactly what the tasks read."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from core.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

# The formats core.data.importers reads, repeated so `--help` imports no pyarrow (tests/test_cli_startup.py).
OUTPUT_SUFFIXES = (".csv", ".parquet", ".pq")


def register(sub) -> None:
    from core.cli.common import OneLineParser
    from core.tasks import task_infos

    generated = tuple(name for name, info in task_infos().items() if info.synthetic_file)  # read without torch
    data = sub.add_parser("data", help="synthetic data files in each task's format")
    commands = data.add_subparsers(dest="data_command", required=True, parser_class=OneLineParser)
    gen = commands.add_parser("generate", help="write a task's synthetic data as CSV or Parquet")
    gen.add_argument("--task", required=True, choices=generated, help="whose data format to write")
    gen.add_argument("--rows", required=True, type=int, help="rows: interactions, (query, doc) pairs or reviews")
    gen.add_argument("--out", required=True, metavar="FILE", help="output file: .csv, or .parquet (.pq)")
    gen.add_argument("--seed", type=int, default=0, help="seed of the planted structure and the draws")
    gen.set_defaults(handler=cmd_generate)


def synthetic_table(task: str, rows: int, seed: int) -> pa.Table:
    """`rows` rows of `task`'s synthetic data (default task options) as a table in its file format."""
    from core.tasks import create_task

    return create_task(task).synthetic_table(rows, seed)


def cmd_generate(args: argparse.Namespace) -> int:
    if args.rows < 1:
        raise ConfigError("--rows", f"{args.rows} must be at least 1")
    if not args.out.lower().endswith(OUTPUT_SUFFIXES):
        raise ConfigError("--out", f"{args.out}: use a .csv or .parquet file name")
    from core.data.importers import write_table

    started = time.perf_counter()
    table = synthetic_table(args.task, args.rows, args.seed)
    path = write_table(table, args.out)
    seconds = time.perf_counter() - started
    print(
        f"wrote {table.num_rows:,} {args.task} rows ({', '.join(table.column_names[:6])}"
        f"{', ...' if table.num_columns > 6 else ''}) to {path} in {seconds:.1f} s",
        file=sys.stderr,
    )
    return 0
