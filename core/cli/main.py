"""`amp-console devices | tasks | train | bench | inspect | data ...` (also `python -m core.cli`).

Exit codes: 0 completed, 1 the run failed, 2 bad input (one line on stderr naming what is wrong),
130 stopped by Ctrl+C (after writing a checkpoint). Each command module has `register(subparsers)`; the
parser calls `args.handler(args)`.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.cli import data as data_commands
from core.cli import lab as lab_commands
from core.cli import train as train_commands
from core.cli.common import OneLineParser, describe_config_error, fail_bad_input
from core.errors import AmpConsoleError, ConfigError

COMMAND_MODULES = (train_commands, lab_commands, data_commands)


def cmd_devices(args: argparse.Namespace) -> int:
    from core.devices import list_devices

    devices = list_devices(free_memory=True)  # a short-lived process: the contexts go when it exits
    if args.json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Devices")
    for column in ("id", "name", "memory", "capability", "precisions", "not supported"):
        table.add_column(column)
    for d in devices:
        memory = f"{d.memory_total / 2**30:.1f} GiB" if d.memory_total else "-"
        extra = d.capability or (d.details.get("bf16_speed", "") if d.type == "cpu" else "")
        unsupported = "\n".join(f"{mode}: {why}" for mode, why in d.unsupported.items())
        table.add_row(d.id, d.name, memory, extra, ", ".join(d.precisions), unsupported)
    Console().print(table)
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from core.tasks import TASKS

    rows = []
    for name, cls in TASKS.items():
        task = cls()
        rows.append({"name": name, "description": cls.description, "parameters": task.parameter_count(),
                     "options": {o.name: o.default for o in cls.options}, "defaults": dict(cls.defaults)})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            options = ", ".join(f"{k}={v}" for k, v in row["options"].items())
            print(f"{row['name']:<12} {row['parameters']:>12,} params  {row['description']}\n{'':<12} options: {options}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="amp-console", description="AMP Console: mixed-precision training, headless.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    devices = sub.add_parser("devices", help="list devices and the precision modes each supports")
    devices.add_argument("--json", action="store_true", help="print a JSON list")
    devices.set_defaults(handler=cmd_devices)
    tasks = sub.add_parser("tasks", help="list the tasks (models + data) you can train")
    tasks.add_argument("--json", action="store_true", help="print a JSON list")
    tasks.set_defaults(handler=cmd_tasks)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse and run one command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.handler(args)
    except ConfigError as exc:
        return fail_bad_input(describe_config_error(exc))
    except AmpConsoleError as exc:
        return fail_bad_input(str(exc))
