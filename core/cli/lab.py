"""`amp-console bench` (precision sweep) and `amp-console inspect` (dtype inspector), headless.

Tables go to stdout through rich; with --json the last stdout line is one JSON object and the tables are not
printed. Progress lines go to stderr, only when it is a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.config import RunConfig
from core.errors import ConfigError


def register(sub) -> None:
    """Add the `bench` and `inspect` subcommands to the amp-console parser."""
    bench = sub.add_parser("bench", help="time every precision mode on a task and compare it to fp32")
    _common(bench)
    bench.add_argument("--precisions", default="fp32,tf32,fp16,bf16",
                       help="comma-separated modes to compare (fp32 is always measured: it is the reference)")
    bench.add_argument("--steps", type=int, default=20, help="optimizer steps per timed window (default 20)")
    bench.add_argument("--repeats", type=int, default=3, help="timed windows per mode; the median is reported")
    bench.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                       help="each mode in a fresh process (default: on the CPU, where memory is the peak RSS)")
    bench.set_defaults(handler=cmd_bench)
    inspect = sub.add_parser("inspect", help="one training step: which module ran in which dtype")
    _common(inspect)
    inspect.add_argument("--precision", default="auto", help="fp32, tf32, fp16, bf16 or auto")
    inspect.set_defaults(handler=cmd_inspect)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="tiny", help="task to measure (see `amp-console tasks`)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda:N, mps or xpu:N")
    parser.add_argument("--batch-size", type=int, default=None, help="samples per step (default: the task's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", dest="task_options",
                        help="task option, e.g. -o hidden=256 (repeatable)")
    parser.add_argument("--json", action="store_true", help="last stdout line: one JSON object")


def config_from_lab_args(args: argparse.Namespace, precision: str = "auto") -> RunConfig:
    """A validated RunConfig from the task's defaults and the bench/inspect flags."""
    from core.cli.train import parse_option

    values = {"device": args.device, "precision": precision, "seed": args.seed,
              "task_options": dict(map(parse_option, args.task_options))}
    if args.batch_size is not None:
        values["batch_size"] = args.batch_size
    return RunConfig.for_task(args.task, **values).validate()


def _progress_printer():
    if not sys.stderr.isatty():
        return None

    def show(update) -> None:
        if update.phase == "running":
            sys.stderr.write(f"measuring {update.mode} ({update.index + 1}/{update.total})...\n")

    return show


def format_bytes(value: int | None) -> str:
    """'312 MiB' / '1.2 GiB'; '-' when unknown."""
    if not value:
        return "-"
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def _console():
    from rich.console import Console

    # Piped output would be wrapped at 80 columns, which folds every cell of these wide tables.
    return Console() if sys.stdout.isatty() else Console(width=180)


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def cmd_bench(args: argparse.Namespace) -> int:
    from core.lab.precision_sweep import requested_modes, run_sweep

    if args.steps < 1 or args.repeats < 1:
        raise ConfigError("steps", "--steps and --repeats must be at least 1")
    config = config_from_lab_args(args, precision="fp32")
    modes = [m.strip() for m in args.precisions.split(",") if m.strip()]
    try:
        requested_modes(modes)
    except ConfigError as exc:
        raise ConfigError("--precisions", str(exc).split(": ", 1)[1]) from None
    result = run_sweep(config, modes, steps=args.steps, repeats=args.repeats, isolate=args.isolate,
                       progress=_progress_printer())
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print_sweep(result)
    return 0 if any(r.status == "ok" for r in result.rows) else 1


def print_sweep(result) -> None:
    """The sweep as a rich table, then the recommendation."""
    from rich.table import Table

    tokens = any(r.tokens_per_second for r in result.rows)
    table = Table(title=f"{result.task} on {result.device} ({result.device_name}), batch {result.batch_size}, "
                        f"median of {result.repeats} x {result.steps} steps after {result.warmup_steps} warm-up")
    columns = ["mode", "compute", "step ms", "samples/s"] + (["tokens/s"] if tokens else []) + [
        "peak memory", "speedup", "memory", "loss", "Δloss vs fp32", "note"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("mode", "compute", "note") else "right")
    for r in result.rows:
        if r.status != "ok":  # the reason goes below the table: it is a sentence, not a cell
            table.add_row(r.mode, "-", *["-"] * (len(columns) - 3), r.status, style="dim")
            continue
        notes = [f"{r.skipped_steps} steps skipped (fp16 overflow)"] if r.skipped_steps else []
        if r.step_ms_windows and max(r.step_ms_windows) > 1.5 * min(r.step_ms_windows):
            # Windows this far apart mean something else shared the device: the ratios are rough.
            notes.append(f"noisy: windows {min(r.step_ms_windows):.2f}-{max(r.step_ms_windows):.2f} ms")
        note = "; ".join(notes)
        cells = [r.mode, r.compute_dtype, _num(r.step_ms, ".2f"), _num(r.samples_per_second, ",.0f")]
        cells += [_num(r.tokens_per_second, ",.0f")] if tokens else []
        cells += [format_bytes(r.peak_memory_bytes), _num(r.speedup, ".2f", "x"), _num(r.memory_ratio, ".2f", "x"),
                  _num(r.loss, ".4f"), _num(r.loss_delta, "+.4f"), note]
        table.add_row(*cells, style="bold" if r.mode == result.recommended else None)
    console = _console()
    console.print(table)
    for r in result.rows:
        if r.status != "ok":
            console.print(f"{r.mode} {r.status}: {r.reason}")
    console.print(f"memory: {result.memory_source}")
    console.print(f"recommended: {result.recommendation}")


def cmd_inspect(args: argparse.Namespace) -> int:
    from core.lab.dtype_inspector import inspect_dtypes

    result = inspect_dtypes(config_from_lab_args(args, precision=args.precision), batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print_inspection(result)
    return 0


def print_inspection(result) -> None:
    """Per-module dtypes as an indented rich table; what autocast kept in float32 is highlighted."""
    from rich.table import Table

    compute = result.autocast_dtype or "no autocast"
    table = Table(title=f"{result.task}: {result.precision} on {result.device} ({compute})")
    for column in ("module", "type", "input", "output", "params", "param grads", "output grads", "ops", "kept fp32"):
        table.add_column(column)
    for r in result.rows:
        ops = ", ".join(f"{name}:{dtype}" for name, dtype in r.ops.items())
        if r.casts:
            ops += f" (+{r.casts} casts)"
        table.add_row("  " * r.depth + r.name, r.type, ",".join(r.input_dtypes) or "-",
                      ",".join(r.output_dtypes) or "-", ",".join(r.param_dtypes) or "-",
                      ",".join(r.grad_dtypes) or "-", ",".join(r.output_grad_dtypes) or "-", ops or "-",
                      ", ".join(r.fp32_ops) or ("yes" if r.kept_fp32 else ""),
                      style="yellow" if r.kept_fp32 or r.fp32_ops else None)
    console = _console()
    console.print(table)
    kept = result.kept_fp32()
    console.print(f"loss dtype: {result.loss_dtype}; kept in float32 by autocast: {', '.join(kept) or 'nothing'}")
