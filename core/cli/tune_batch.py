"""`amp-console fit-batch`: the largest batch that fits on the device per precision mode (core.lab.batch_finder), and
the `train` command for the fastest mode. Progress on stderr; exit 1 when no mode found a batch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from core.cli import format as fmt
from core.cli.common import naming_task_file
from core.cli.lab import (
    ProgressLines,
    _common,
    add_precisions_flag,
    config_from_lab_args,
    flag_error,
    numbered,
    parse_modes,
)
from core.errors import ConfigError
from core.lab.batch_finder import DEFAULT_MARGIN, DEFAULT_STEPS, DEFAULT_TOLERANCE, MAX_BATCH_CAP

_CHECKED = ("margin", "steps", "tolerance", "start", "max_batch")  # the settings check_settings names


def register(sub) -> None:
    p = sub.add_parser(
        "fit-batch",
        help="find the largest batch that fits on the device, per precision mode",
        description="For each precision mode the device supports, find the largest batch that trains AND "
        "evaluates within (1 - margin) of the device's memory: double from the start batch while it "
        "fits, then bisect. Each trial runs a few optimizer steps and one evaluation pass at that "
        "batch on a fresh model (nothing is saved); an out-of-memory trial is caught and its memory "
        "released. On the CPU the figures are an estimate (the process's RSS growth against the "
        "available RAM), and a trial predicted to pass the budget is not run. Exit 0 with a batch, "
        "1 when none fits, 2 for bad input.",
    )
    _common(p)
    add_precisions_flag(p)
    p.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help=f"headroom kept below the device's limit, a fraction (default {DEFAULT_MARGIN:g}: a batch "
        f"fits when its peak is at most 90%% of the limit)",
    )
    p.add_argument("--start", type=int, help="first batch tried (default: --batch-size, else the task's batch size)")
    p.add_argument(
        "--max-batch", type=int, help=f"largest batch tried (default: the training rows, at most {MAX_BATCH_CAP:,})"
    )
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"optimizer steps per trial, before its evaluation pass (default {DEFAULT_STEPS}; the first "
        f"is warm-up, the others are timed)",
    )
    p.add_argument(
        "--tolerance",
        "--precision-of-search",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"stop bisecting when the answer is within this fraction of the largest batch, or 1 sample "
        f"(default {DEFAULT_TOLERANCE:g}; 0 = exact)",
    )
    p.add_argument(
        "--eval-rows",
        type=int,
        metavar="N",
        help="rows of the validation split each trial evaluates (default: all of them, as training does)",
    )
    p.add_argument(
        "--limit",
        metavar="SIZE",
        help="use this memory limit instead of the device's, e.g. 8GiB (plan for a smaller device)",
    )
    p.set_defaults(handler=cmd_fit_batch)


# k, m, g, t (and kib...): powers of 1024; kb, mb...: powers of 1000
_UNITS = {"": 1, "b": 1} | {
    prefix + suffix: 10 ** (3 * power) if suffix == "b" else 2 ** (10 * power)
    for power, prefix in enumerate("kmgt", start=1)
    for suffix in ("", "b", "ib")
}


def parse_size(text: str) -> int:
    """'8GiB' -> 8589934592, '512 MB' -> 512000000, '1e9' -> 1000000000; ConfigError('--limit') otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if not match or match.group(2) not in _UNITS:
        raise ConfigError("--limit", f"{text!r} is not a size; write e.g. 8GiB, 512MiB or 2e9 (bytes)")
    value = int(float(match.group(1)) * _UNITS[match.group(2)])
    if value < 1:
        raise ConfigError("--limit", f"{text!r} must be above 0 bytes")
    return value


def cmd_fit_batch(args: argparse.Namespace) -> int:
    from core.lab.batch_finder import check_settings, find_batch_sizes, train_command

    try:
        check_settings(args.margin, args.steps, args.tolerance, args.start, args.max_batch)
    except ConfigError as exc:
        raise flag_error(exc) from None
    if args.eval_rows is not None and args.eval_rows < 0:
        raise ConfigError("--eval-rows", f"{args.eval_rows} must be 0 (no evaluation) or more")
    limit = parse_size(args.limit) if args.limit else None
    modes = parse_modes(args.precisions)
    config = config_from_lab_args(args, precision="fp32")
    start = args.start or config.batch_size
    if args.max_batch is not None and start > args.max_batch:
        raise ConfigError("--start", f"the first batch ({start:,}) is above --max-batch ({args.max_batch:,})")
    sys.stderr.write(
        f"fit-batch: {config.task} in {', '.join(modes)} from batch {start:,}; each trial "
        f"{args.steps:,} steps + an evaluation pass, {args.margin:.0%} headroom; a fresh model, "
        f"nothing is saved\n"
    )
    try:
        result = find_batch_sizes(
            config,
            modes,
            margin=args.margin,
            steps=args.steps,
            tolerance=args.tolerance,
            start=start,
            max_batch=args.max_batch,
            eval_rows=args.eval_rows,
            limit_bytes=limit,
            progress=ProgressLines(numbered("fit-batch")),
        )
    except ConfigError as exc:  # e.g. a start batch above the training rows, found when the data is loaded
        if exc.field not in _CHECKED:
            raise
        raise flag_error(exc) from None
    best = result.best()
    device = args.device if args.device != "auto" else None
    from core.tasks import task_source

    command = train_command(result, best, args.task_options, device) if best else None
    command = naming_task_file(command, task_source(result.task))
    if args.json:
        print(json.dumps({**result.to_dict(), "train_command": command}))
    else:
        print_result(result, command)
    return 0 if any(m.batch for m in result.modes) else 1


def print_result(result, command: str | None) -> None:
    """One table of trials per searched mode, each mode's answer, the comparisons and the command."""
    console = fmt.console()
    estimate = " (estimate)" if result.estimate else ""
    console.print(
        f"{result.task} on {result.device} ({result.device_name}): each trial {result.steps:,} steps + "
        f"evaluation of {result.eval_rows:,} rows; margin {result.margin:.0%}, cap {result.max_batch:,}"
    )
    console.print(f"memory{estimate}: {result.memory_source}")
    lines = []
    for m in result.modes:
        if m.status in ("skipped", "failed") or not m.trials:
            lines.append(f"{m.mode}: {m.status}" + (f" ({m.reason})" if m.reason else ""))
            continue
        table = fmt.table(
            f"{m.mode} (compute {m.compute_dtype}): limit {fmt.size(m.limit_bytes)}, budget {fmt.size(m.budget_bytes)}"
        )
        for column in ("batch", "phase", "peak", "of budget", "result", "samples/s"):
            table.add_column(column, justify="left" if column in ("phase", "result") else "right", no_wrap=True)
        for t in m.trials:
            peak = fmt.size(t.peak_bytes) + (" (pred.)" if t.status == "predicted over" else "")
            share = _share(t.peak_bytes, m.budget_bytes)
            table.add_row(
                fmt.exact(t.batch),
                t.phase,
                peak,
                share,
                t.status,
                fmt.count(t.samples_per_second),
                style="bold" if t.batch == m.batch and t.fits else None if t.fits else "dim",
            )
        console.print(table)
        lines.append(_answer(m))
    for line in lines:
        console.print(line)
    for sentence in result.comparisons:
        console.print(sentence)
    for note in result.notes:
        console.print(f"note: {note}")
    if command:
        console.print(f"use it: {command}", soft_wrap=True)


def _share(peak: int | None, budget: int | None) -> str:
    if not peak or not budget:
        return "-"
    percent = 100 * peak / budget
    return "<1%" if percent < 1 else f"{percent:.0f}%"


def _answer(m) -> str:
    if m.status == "stopped" and m.batch is None:
        return f"{m.mode}: stopped before a batch was found"
    if m.batch is None:
        return f"{m.mode}: not even batch 1 fits within the budget"
    if m.capped:
        more = f" ({m.reason})" if m.reason else " (the --max-batch cap: more would fit)"
    else:
        more = f" (batch {m.first_failure:,} did not)" if m.first_failure else ""
    return (
        f"{m.mode}: largest batch {m.batch:,}{more}, peak {fmt.size(m.peak_bytes)} of the "
        f"{fmt.size(m.budget_bytes)} budget, {fmt.count(m.samples_per_second)} samples/s"
    )
