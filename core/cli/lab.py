"""`amp-console bench` (precision sweep) and `amp-console inspect` (dtype inspector), headless. Tables go to stdout (see
core.cli.format), progress to stderr; with --json the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from core.cli import format as fmt
from core.cli.common import add_option_flag, flag_name
from core.config import COMPILE_MODES, FIELD_SPECS, RunConfig
from core.errors import ConfigError
from core.precision_modes import FP8_RECIPES, PRECISION_MODES


def register(sub) -> None:
    bench = sub.add_parser(
        "bench",
        help="time every precision mode on a task and compare it to fp32",
        description="Train the task for a few windows of steps in each precision mode (same seed and data), "
        "report the median step time, throughput, peak memory and loss against fp32, and "
        "recommend a mode. Progress goes to stderr, the table to stdout.",
    )
    _common(bench)
    add_precisions_flag(bench)
    bench.add_argument(
        "--optimizers",
        default="",
        help="comma-separated optimizers, a row each per mode, e.g. adamw,adamw8bit (default: the task's own)",
    )
    bench.add_argument("--steps", type=int, default=20, help="optimizer steps per timed window (default 20)")
    bench.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed windows per mode, after one warm-up window; the median is reported (default 3)",
    )
    bench.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="CPU threads torch uses inside an op (default 0: the engine's automatic choice); the "
        "count used is printed with the results",
    )
    bench.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        help="each mode in a fresh process (default: on the CPU, where memory is the peak RSS)",
    )
    bench.add_argument(
        "--compile",
        choices=("off", "on", "both"),
        default="off",
        dest="compile_rows",
        help="measure each mode with torch.compile off, on, or both (a row each; default off); "
        "compile time is reported apart from the timed windows",
    )
    bench.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="torch.compile mode of the compiled rows (default: default)",
    )
    bench.add_argument(
        "--activation-checkpointing",
        choices=("off", "on", "both"),
        default="off",
        dest="checkpointing_rows",
        help="measure each mode with activation checkpointing off, on, or both (default off)",
    )
    bench.set_defaults(handler=cmd_bench)
    inspect = sub.add_parser(
        "inspect",
        help="one training step: which module ran in which dtype, and why",
        description="Run one forward + backward pass of the task with hooks on every module and list the dtypes "
        "of inputs, outputs, parameters and gradients, the ops each module ran, and why autocast "
        "left an op in float32.",
    )
    _common(inspect)
    add_mode_flags(inspect)
    inspect.set_defaults(handler=cmd_inspect)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", help="task to measure (default tiny, or --from's; see `amp-console tasks`)")
    parser.add_argument(
        "--from",
        dest="from_run",
        metavar="RUN",
        help="a run (folder, checkpoint or id) whose task, options, batch size and optimizer to start from; its task "
        "file is loaded as `evaluate` does (asked first, --yes)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda:N, mps or xpu:N (default auto)")
    parser.add_argument("--batch-size", type=int, help="samples per step (default: the task's)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and data (default 0)")
    add_option_flag(parser, "hidden=256")
    parser.add_argument("--json", action="store_true", help="last stdout line: one JSON object")


def add_mode_flags(parser: argparse.ArgumentParser, optimizer_help: str | None = None) -> None:
    """--precision (default auto) and, with `optimizer_help`, --optimizer (default: the task's), as RunConfig has them."""
    modes = FIELD_SPECS["precision"].choices or ()
    parser.add_argument("--precision", default="auto", choices=modes, help=f"{', '.join(modes)} (default auto)")
    if optimizer_help:
        parser.add_argument("--optimizer", choices=FIELD_SPECS["optimizer"].choices, help=optimizer_help)


def config_from_lab_args(args: argparse.Namespace, precision: str = "auto") -> RunConfig:
    """A validated RunConfig: the task's defaults (or --from's task, options, batch size, optimizer), the flags over."""
    from core.cli.train import parse_option

    run = recorded_config(args.from_run) if getattr(args, "from_run", None) else {}
    values = {
        "device": args.device,
        "precision": precision,
        "seed": args.seed,
        "task_options": {**(run.get("task_options") or {}), **dict(map(parse_option, args.task_options))},
        **{k: run[k] for k in ("batch_size", "optimizer") if k in run},
    }
    given = ("batch_size", "threads", "fp8_recipe", "optimizer")  # the flags of the commands that have them
    values |= {name: getattr(args, name) for name in given if getattr(args, name, None) is not None}
    return RunConfig.for_task(args.task or run.get("task") or "tiny", **values).validate()


def recorded_config(where: str) -> dict:
    """The settings the run `where` names trained with (run.json's config), read as data."""
    from core.cli.runs import run_folder
    from core.engine.run_record import load_record

    config = (load_record(run_folder(where)) or {}).get("config")
    if not isinstance(config, dict):
        raise ConfigError("--from", f"{where}: its run.json records no settings")
    return config


class ProgressLines:
    """A lab command's progress on stderr (fmt.LiveLine): `text(update)` and the time so far; on a terminal the
    updates of the `live` phases rewrite one line, and in a log only those `logged(update)` accepts get a line."""

    def __init__(self, text, live=(), logged=lambda update: True, stream=None):
        self.text, self.live_phases, self.logged = text, live, logged
        self.line, self.started = fmt.LiveLine(stream), time.perf_counter()

    def __call__(self, update) -> None:
        passing = update.phase in self.live_phases
        text = f"{self.text(update)} ({fmt.duration(time.perf_counter() - self.started)})"
        self.line(text, keep=not passing or (not self.line.live and self.logged(update)))


def numbered(command: str):
    """`command [i/n] what the update says`: the text of a per-mode update."""
    return lambda update: f"{command} [{update.index + 1}/{update.total}] {update.describe()}"


def flag_error(exc: ConfigError, flag: str | None = None) -> ConfigError:
    """`exc` again, naming the command line's `flag` (default: the setting's own, --start-lr) instead of the setting."""
    return ConfigError(flag or flag_name(exc.field), str(exc).split(": ", 1)[1])


def add_precisions_flag(parser, default: str = ",".join(PRECISION_MODES)) -> None:
    """--precisions, read by parse_modes."""
    shown = "all" if default == ",".join(PRECISION_MODES) else default
    parser.add_argument(
        "--precisions", default=default, help=f"comma-separated modes (default {shown}; fp32 is always measured: it "
        "is the reference; modes the device cannot run are listed as skipped)",
    )  # fmt: skip
    parser.add_argument(
        "--fp8-recipe", choices=FP8_RECIPES, help="torchao float8 recipe of the fp8 rows (default tensorwise)"
    )


def parse_modes(text: str) -> list[str]:
    """--precisions: fp32 first (every ratio is against it), then the others asked; unknown names are refused."""
    from core.lab.precision_sweep import requested_modes

    try:
        return requested_modes([m.strip() for m in text.split(",") if m.strip()])
    except ConfigError as exc:
        raise flag_error(exc, "--precisions") from None


def _bench_text(update) -> str:
    threads = update.threads if update.phase == "setup" else None
    return numbered("bench")(update) + (f", {threads} CPU thread{'s' if threads != 1 else ''}" if threads else "")


def cmd_bench(args: argparse.Namespace) -> int:
    from core.lab.precision_sweep import run_sweep

    for flag, value in (("--steps", args.steps), ("--repeats", args.repeats)):
        if value < 1:
            raise ConfigError(flag, f"{value} must be at least 1")
    if not 0 <= args.threads <= 1024:
        raise ConfigError("--threads", f"{args.threads} is out of range: must be between 0 (automatic) and 1,024")
    config = config_from_lab_args(args, precision="fp32").replace(compile_mode=args.compile_mode)
    modes = parse_modes(args.precisions)
    optimizers = [o.strip() for o in args.optimizers.split(",") if o.strip()]
    for name in optimizers:
        try:
            config.replace(optimizer=name).validate()
        except ConfigError as exc:
            raise flag_error(exc, "--optimizers") from None
    choices = {"off": [False], "on": [True], "both": [False, True]}
    compiles, checkpoints = choices[args.compile_rows], choices[args.checkpointing_rows]
    extra = "".join(
        f"; {name} {setting}"
        for name, setting in (("compile", args.compile_rows), ("activation checkpointing", args.checkpointing_rows))
        if setting != "off"
    )
    sys.stderr.write(
        f"bench: {config.task} in {', '.join(modes)}{extra}; per mode 1 warm-up + {args.repeats} timed "
        f"windows of {args.steps:,} steps\n"
    )
    result = run_sweep(
        config,
        modes,
        steps=args.steps,
        repeats=args.repeats,
        isolate=args.isolate,
        progress=ProgressLines(_bench_text, live=("setup", "window")),
        compile_options=compiles,
        checkpointing_options=checkpoints,
        optimizer_options=optimizers,
    )
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print_sweep(result)
    return 0 if any(r.status == "ok" for r in result.rows) else 1


def print_sweep(result) -> None:
    """The sweep as a table that fits the terminal, then the notes, skipped modes and the recommendation."""
    from core.lab.precision_results import noise_note

    tokens = any(r.tokens_per_second for r in result.rows)
    threads = f", {result.threads} CPU thread{'s' if result.threads != 1 else ''}" if result.threads else ""
    title = (
        f"{result.task} on {result.device} ({result.device_name}), batch {result.batch_size}{threads}: "
        f"median of {result.repeats} x {result.steps:,} steps after {result.warmup_steps:,} warm-up"
    )
    table = fmt.table(title)
    columns = (
        ["mode", "compute", "ms/step", "samples/s"]
        + (["tokens/s"] if tokens else [])
        + ["peak mem", "speed", "mem", "loss", "Δ loss"]
    )
    for column in columns:
        if column == "mode":  # "bf16 + compile + act. ckpt" wraps rather than squeezing the figures
            table.add_column(column, justify="left", no_wrap=False, max_width=15)
        else:
            table.add_column(column, justify="left" if column == "compute" else "right", no_wrap=True)
    notes = []
    for r in result.rows:
        if r.status != "ok":  # the reason goes below the table: it is a sentence, not a cell
            table.add_row(r.label, r.status, *["-"] * (len(columns) - 2), style="dim")
            notes.append(f"{r.label} {r.status}: {r.reason}")
            continue
        remarks = (  # sentences below the table: columns would squeeze the ratios
            f"compiled in {r.compile_seconds:.1f} s, before the timed windows" if r.compile_seconds is not None else "",
            r.reason,  # measured, with a remark: a compile that fell back to eager, float8 layers, 8-bit state
            r.why,  # speed, memory, loss drift, growing memory, why (not) recommended
            f"{r.skipped_steps:,} steps skipped (fp16 overflow)" if r.skipped_steps else "",
            noise_note(r),  # something else shared the device: the ratios are rough
        )
        notes += [f"{r.label}: {remark}" for remark in remarks if remark]
        cells = [r.label, r.compute_dtype, fmt.number(r.step_ms, ".2f"), fmt.count(r.samples_per_second)]
        cells += [fmt.count(r.tokens_per_second)] if tokens else []
        cells += [
            fmt.size(r.peak_memory_bytes),
            fmt.number(r.speedup, ".2f", "x"),
            fmt.number(r.memory_ratio, ".2f", "x"),
            fmt.number(r.loss, ".4f"),
            fmt.number(r.loss_delta, "+.4f"),
        ]
        best = r.label == result.recommended_label if result.recommended_label else r.mode == result.recommended
        table.add_row(*cells, style="bold" if best else None)
    console = fmt.console()
    console.print(table)
    for note in notes:
        console.print(note)
    console.print(f"speed and mem are against {result.reference}; memory: {result.memory_source}")
    console.print(f"recommended: {result.recommendation}")


def cmd_inspect(args: argparse.Namespace) -> int:
    from core.lab.dtype_inspector import inspect_dtypes

    result = inspect_dtypes(config_from_lab_args(args, precision=args.precision), batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print_inspection(result)
    return 0


_SHORT_DTYPES = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
}


# The table's short forms of the long reasons (WHY_TEXT keys); the lines under the table use the long ones.
_SHORT_WHY = {
    "no lower-precision path": "no low path",
    "input float32": "input f32",
    "mixed inputs": "mixed",
    "cast to float32": "cast",
    "inside a float32 op": "in f32 op",
}


def _dtypes(names: list[str]) -> str:
    unique = list(dict.fromkeys(_SHORT_DTYPES.get(n, n) for n in names))
    return ",".join(unique) or "-"


def print_inspection(result) -> None:
    """Per-module dtypes as an indented table, then the ops each module ran (long: as lines), then the reasons."""
    from rich.padding import Padding
    from rich.text import Text

    compute = result.autocast_dtype or "no autocast"
    table = fmt.table(f"{result.task}: {result.precision} on {result.device}, autocast computes in {compute}")
    table.add_column("module", no_wrap=True, max_width=30, overflow="ellipsis")
    table.add_column("type", no_wrap=True, max_width=14, overflow="ellipsis")
    table.add_column("in → out", no_wrap=True)
    table.add_column("param", no_wrap=True)
    table.add_column("grad", no_wrap=True)
    table.add_column("why f32", overflow="fold")
    for r in result.rows:
        why = ", ".join(dict.fromkeys(_SHORT_WHY.get(w, w) for w in r.why.values()))
        table.add_row(
            "  " * r.depth + r.name,
            r.type,
            f"{_dtypes(r.input_dtypes)} → {_dtypes(r.output_dtypes)}",
            _dtypes(r.param_dtypes),
            _dtypes(r.grad_dtypes),
            why,
            style="yellow" if r.kept_fp32 or r.fp32_ops else None,
        )
    console = fmt.console()
    console.print(table)
    console.print(
        "f32 = float32, bf16 = bfloat16, f16 = float16, i64 = int64; param/grad: the module's own "
        "parameters and their gradients"
    )
    console.print("ops each module ran (the dtype each produced; why float32 in brackets):")
    for r in result.rows:
        ops = [
            f"{name} {_SHORT_DTYPES.get(dtype, dtype)}"
            + (f" [{r.why[name]}]" if name in r.why and dtype == "float32" else "")
            for name, dtype in r.ops.items()
        ]
        if ops:
            casts = f" (+{r.casts} casts)" if r.casts else ""
            console.print(Padding(Text(f"{r.name}: {', '.join(ops)}{casts}"), (0, 0, 0, 2), expand=False))
    kept = result.kept_fp32()
    console.print(
        f"loss dtype: {_SHORT_DTYPES.get(result.loss_dtype, result.loss_dtype)}; "
        f"kept in float32 by autocast: {', '.join(kept) or 'nothing'}"
    )
    reasons = result.reasons()
    if reasons:
        console.print(f"why float32 (per PyTorch's autocast op reference, {result.device_type} lists):")
        for reason, text in reasons.items():
            console.print(Padding(Text(f"{reason}: {text}"), (0, 0, 0, 2), expand=False))
