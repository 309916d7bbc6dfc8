"""Headless commands: `amp-console devices | tasks | train ...` (also `python -m core.cli`).

Exit codes: 0 completed, 1 the run failed, 2 bad input (one line on stderr naming what is wrong),
130 stopped by Ctrl+C (after writing a checkpoint).
"""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys

from .config import FIELD_SPECS
from .errors import AmpConsoleError, ConfigError

# Modules that add subcommands: each has `register(subparsers)`; the parser calls `args.handler(args)`.
COMMAND_MODULES = ("core.cli_train", "core.cli_lab", "core.data.cli")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def fail_bad_input(message: str) -> int:
    sys.stderr.write(f"amp-console: error: {message}\n")
    return 2


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def describe_config_error(exc: ConfigError) -> str:
    """'--lr: 20 is out of range...' for fields that are flags, else the message as it is."""
    field = exc.field.split(".")[0]
    if field in FIELD_SPECS:
        return f"{flag_name(field)}: {str(exc).split(': ', 1)[1]}"
    return str(exc)


def cmd_devices(args: argparse.Namespace) -> int:
    from .devices import list_devices

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
    from .tasks import TASKS

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
        importlib.import_module(module).register(sub)
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


def install_sigint_stop(control, distributed: bool = False) -> None:
    """First Ctrl+C asks the run to stop gracefully (with a checkpoint); a second one aborts.

    Under torchrun every signal only asks to stop: torchrun repeats SIGINT/SIGTERM to its workers and
    kills them itself if they take too long, so escalating here would lose the final checkpoint.
    """
    if distributed:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: control.stop())
        return

    def handler(signum, frame):
        sys.stderr.write("\nstopping after this step (Ctrl+C again to abort)...\n")
        control.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":
    sys.exit(main())
