"""`amp-console lr-find`: the LR range test (core.lab.lr_finder), headless: rows of the curve around the suggestion,
its reason and the `train` command that uses it (--csv FILE: the whole curve). Progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from core.cli import format as fmt
from core.cli.lab import ProgressLines, _common, add_mode_flags, config_from_lab_args, flag_error
from core.errors import ConfigError
from core.lab.lr_finder import (
    DEFAULT_DIVERGE_FACTOR,
    DEFAULT_END_LR,
    DEFAULT_SMOOTHING,
    DEFAULT_START_LR,
    DEFAULT_STEPS,
    METHODS,
    check_settings,
    find_lr,
)

ROWS_AROUND = 3  # table rows on each side of the suggestion


def register(sub) -> None:
    p = sub.add_parser(
        "lr-find",
        help="LR range test: suggest a learning rate for a task",
        description="Train a fresh copy of the task's model (nothing is saved) while the learning rate grows "
        "exponentially from --start-lr to --end-lr, stop when the loss diverges, and suggest a "
        "learning rate from the smoothed loss curve: 'valley' (the middle of its longest descent, "
        "robust to an early spike and noise) or 'steepest' (where it falls fastest). Exit 0 with a "
        "suggestion, 1 when the curve gives none, 2 for bad input.",
    )
    _common(p)
    add_mode_flags(p, "optimizer to test with (default: the task's)")
    p.add_argument(
        "--start-lr", type=float, default=DEFAULT_START_LR, help=f"first learning rate (default {DEFAULT_START_LR:g})"
    )
    p.add_argument(
        "--end-lr", type=float, default=DEFAULT_END_LR, help=f"last learning rate (default {DEFAULT_END_LR:g})"
    )
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"optimizer steps over the range, spaced evenly in log(lr) (default {DEFAULT_STEPS})",
    )
    p.add_argument(
        "--diverge-factor",
        type=float,
        default=DEFAULT_DIVERGE_FACTOR,
        help=f"stop when the smoothed loss exceeds this many times its best (default {DEFAULT_DIVERGE_FACTOR:g})",
    )
    p.add_argument(
        "--smoothing",
        type=float,
        default=DEFAULT_SMOOTHING,
        help=f"EMA weight of the newest loss, 1 - beta (default {DEFAULT_SMOOTHING:g}; fastai's beta 0.98 is 0.02)",
    )
    p.add_argument(
        "--method", default="valley", choices=METHODS, help="how to pick the suggestion from the curve (default valley)"
    )
    p.add_argument("--csv", metavar="FILE", help="also write the curve (lr, loss, smoothed) to FILE")
    p.set_defaults(handler=cmd_lr_find)


def cmd_lr_find(args: argparse.Namespace) -> int:
    try:
        check_settings(args.start_lr, args.end_lr, args.steps, args.diverge_factor, args.smoothing, args.method)
    except ConfigError as exc:
        raise flag_error(exc) from None
    config = config_from_lab_args(args, precision=args.precision)
    if args.csv:
        _check_csv_path(args.csv)  # before the test, not after it
    from core.devices import device_info, list_devices
    from core.engine.precision import resolve_precision

    devices = list_devices()
    resolve_precision(config.precision, device_info(config.device, devices))  # a mode the device lacks: exit 2 now
    sys.stderr.write(
        f"lr-find: {config.task}, {args.steps:,} steps from lr {args.start_lr:g} to {args.end_lr:g} "
        f"({config.optimizer}, batch {config.batch_size}); a fresh model, nothing is saved\n"
    )
    result = find_lr(
        config,
        start_lr=args.start_lr,
        end_lr=args.end_lr,
        steps=args.steps,
        diverge_factor=args.diverge_factor,
        smoothing=args.smoothing,
        method=args.method,
        progress=ProgressLines(
            lambda update: f"lr-find {update.describe()}",
            live=("step",),
            logged=lambda update: update.step % 10 == 0 or update.step == update.steps,
        ),
        devices=devices,
    )
    if args.csv:
        write_csv(result, args.csv)
    lr = None if result.own_optimizer else result.suggestion.lr  # the task's own: no --lr to pass
    command = train_command(args, config, lr, result.precision)
    if args.json:
        print(json.dumps({**result.to_dict(), "train_command": command}))
    else:
        print_result(result, command, args.csv)
    return 0 if result.suggestion.lr is not None else 1


def _check_csv_path(path: str) -> None:
    from pathlib import Path

    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise ConfigError("--csv", f"{path}: the folder {folder} does not exist")
    if Path(path).is_dir():
        raise ConfigError("--csv", f"{path} is a folder; give a file name")


def write_csv(result, path: str) -> None:
    """lr, loss, smoothed per point (atomically, like every file the console writes)."""
    from pathlib import Path

    from core.files import atomic_write_bytes

    lines = ["lr,loss,smoothed"] + [
        f"{lr!r},{loss!r},{smoothed!r}" for lr, loss, smoothed in zip(result.lrs, result.losses, result.smoothed)
    ]
    try:
        atomic_write_bytes(Path(path), ("\n".join(lines) + "\n").encode("utf-8"))
    except OSError as exc:
        raise ConfigError("--csv", f"could not write {path}: {exc.strerror or exc}") from None


def train_command(args: argparse.Namespace, config, lr: float | None, precision: str) -> str | None:
    """The `amp-console train` command with the settings the test ran with and `lr` (None without a suggestion)."""
    if lr is None:
        return None
    from core.config import train_command as train_command_of
    from core.tasks import task_source

    settings = {
        "task": task_source(config.task) or config.task,
        **({"device": args.device} if args.device != "auto" else {}),
    }
    settings |= {"precision": precision, **({"batch_size": args.batch_size} if args.batch_size is not None else {})}
    settings |= {key: getattr(args, key) for key in ("optimizer", "seed") if getattr(args, key)}
    options = [a for option in args.task_options for a in ("-o", option)]
    return shlex.join(train_command_of({**settings, "lr": f"{lr:.2g}"}, *options, python=False))


def print_result(result, command: str | None, csv_path: str | None) -> None:
    """A few rows of the curve around the suggestion, then the suggestion, its reason and how to use it."""
    console = fmt.console()
    compute = result.autocast_dtype or "float32"
    console.print(
        f"{result.task} on {result.device} ({result.device_name}), {result.precision} (compute {compute}), "
        f"{result.optimizer}, batch {result.batch_size}: {len(result.lrs)} points, lr {result.start_lr:g} to "
        f"{result.end_lr:g}"
    )
    table = fmt.table(None)
    for column in ("lr", "loss", "smoothed", ""):
        table.add_column(column, justify="right" if column else "left", no_wrap=True)
    picks = {s.index: name for name, s in result.suggestions.items() if s.index is not None}
    best = result.lrs.index(result.best_lr) if result.best_lr is not None else None
    shown = _rows_to_show(len(result.lrs), result.suggestion.index, best)
    previous = None
    for i in shown:
        if previous is not None and i > previous + 1:
            table.add_row("…", "", "", "", style="dim")
        marks = ([picks[i]] if i in picks else []) + (["lowest"] if i == best else [])
        table.add_row(
            f"{result.lrs[i]:.2e}",
            fmt.number(result.losses[i], ".4f"),
            fmt.number(result.smoothed[i], ".4f"),
            ", ".join(marks),
            style="bold" if i == result.suggestion.index else None,
        )
        previous = i
    console.print(table)
    console.print(
        f"ended: {result.stopped_early or 'ran the whole range'} "
        f"({result.steps_run:,} steps, {fmt.duration(result.seconds)})"
    )
    for note in result.notes:
        console.print(note)
    for name, pick in result.suggestions.items():
        if name != result.method:
            console.print(f"also: {pick.explanation}")
    console.print(f"suggested: {result.suggestion.explanation}")
    if csv_path:
        console.print(f"curve written to {csv_path}")
    if command:
        console.print(f"use it: {command}", soft_wrap=True)


def _rows_to_show(n: int, index: int | None, best: int | None) -> list[int]:
    """Indices of the table: the first and last points, ROWS_AROUND around the suggestion, and the lowest point."""
    if n == 0:
        return []
    rows = {0, n - 1}
    if index is not None:
        rows.update(range(max(0, index - ROWS_AROUND), min(n, index + ROWS_AROUND + 1)))
    if best is not None:
        rows.add(best)
    return sorted(rows)
