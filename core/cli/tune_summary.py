"""`amp-console summary`: per layer, parameters and their training bytes; per precision mode, one training step's
memory. With --json the last stdout line is ModelSummary.to_dict(). No torch at import time.
"""

from __future__ import annotations

import argparse
import json

from core.cli import format as fmt
from core.cli.lab import _common, add_precisions_flag, config_from_lab_args, parse_modes
from core.config import FIELD_SPECS
from core.errors import ConfigError

DEFAULT_PRECISIONS = "fp32,bf16,fp16"
OPTIMIZER_STATE_TEXT = {
    "adam": "Adam: two float32 moments per parameter + a step counter per tensor",
    "adamw": "AdamW: two float32 moments per parameter + a step counter per tensor",
    "sgd": "SGD: one float32 momentum buffer per parameter (none without momentum)",
}


def register(sub) -> None:
    summary = sub.add_parser(
        "summary",
        help="per-layer parameters and training memory, activations per precision mode",
        description="Build the task's model and list, per layer, its parameters, whether they train, and the "
        "bytes of their weights, gradients and optimizer state; then run one forward + backward "
        "per precision mode and report the activation memory (tensors saved for backward; on CUDA/XPU "
        "also the allocator's peak) and each mode's total side by side.",
    )
    _common(summary)
    add_precisions_flag(summary, DEFAULT_PRECISIONS)
    summary.add_argument(
        "--depth",
        type=int,
        default=2,
        help="layers shown down to this depth (default 2; 0 = the model only); a row includes the children left out",
    )
    summary.add_argument(
        "--optimizer",
        choices=FIELD_SPECS["optimizer"].choices,
        help="optimizer whose state is counted (default: the task's)",
    )
    summary.set_defaults(handler=cmd_summary)


def cmd_summary(args: argparse.Namespace) -> int:
    from core.lab.model_summary import summarize

    if args.depth < 0:
        raise ConfigError("--depth", f"{args.depth} must be 0 or more")
    config = config_from_lab_args(args, precision="fp32")
    result = summarize(config, parse_modes(args.precisions), batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print_summary(result, args.depth)
    return 0 if result.measured_modes() else 1


def print_summary(result, depth: int = 2) -> None:
    """The per-layer table, the per-mode totals side by side, then what the figures mean."""
    console = fmt.console()
    console.print(layer_table(result, depth))
    frozen = f", {fmt.exact(result.frozen_parameters)} frozen" if result.frozen_parameters else ""
    console.print(
        f"parameters: {fmt.exact(result.parameters)} ({fmt.exact(result.trainable_parameters)} "
        f"trainable{frozen}) = sum(p.numel()), each shared parameter counted once"
    )
    for row in result.rows:
        if row.shared:
            console.print(f"shared with an earlier layer (counted there): {', '.join(row.shared)}")
    console.print(totals_table(result))
    base = result.mode("fp32")
    for m in result.modes:
        if m.status != "ok" or m.mode == "fp32" or m.activation_ratio is None:
            continue
        total = f", step total {m.total_ratio:.2f}× fp32" if m.total_ratio is not None else ""
        console.print(f"{m.mode} activations {m.activation_ratio:.2f}× fp32{total}")
    for m in result.modes:
        if m.status != "ok":
            console.print(f"{m.mode} {m.status}: {m.reason}")
    console.print(
        "weights and gradients are float32 in every mode (autocast changes only what ops compute in); "
        f"optimizer state: {OPTIMIZER_STATE_TEXT.get(result.optimizer, result.optimizer)}"
    )
    console.print(
        f"layer activations: act {(result.measured_modes() or ['-'])[0]} in bytes, other modes as a ratio of "
        "them; (+N): N modules below the row, counted in it"
    )
    console.print(
        f"activations: {result.activation_source}, one batch of {result.batch_size} in train mode "
        f"(weights and the batch itself left out; autocast's weight copies included)"
    )
    if base is not None and base.allocator_peak_bytes is not None:
        console.print(
            "allocator peak: max_memory_allocated during the step above what was allocated before it "
            "(adds gradients and temporaries)"
        )


def layer_table(result, depth: int):
    """Rows down to `depth`; a folded row's name ends in (+N), N modules below it counted in its figures. Activations:
    fp32's bytes, then each other mode as a ratio of them."""
    modes = result.measured_modes()
    first = modes[0] if modes else None
    table = fmt.table(
        f"{result.task} on {result.device} ({result.device_name}): {result.optimizer}, batch {result.batch_size}",
        collapse_padding=True,
    )
    table.add_column("layer", no_wrap=True, overflow="ellipsis")
    table.add_column("type", no_wrap=True, max_width=11, overflow="ellipsis")
    for column in ("params", "train", "weights", "grads", "optim"):
        table.add_column(column, justify="left" if column == "train" else "right", no_wrap=True)
    for column in ([f"act {first}"] if first else []) + modes[1:]:  # the first mode's bytes, then the ratios
        table.add_column(column, justify="right", no_wrap=True)
    for row in result.rows_to_depth(depth):
        name = " " * row.depth + row.name
        if row.depth == depth and row.descendants:
            name += f" (+{row.descendants})"
        t = row.total
        act = t.activation_bytes
        base = act.get(first) if first else None
        ratios = [
            fmt.number(act.get(mode) / base, ".2f", "×") if base and act.get(mode) is not None else "-"
            for mode in modes[1:]
        ]
        table.add_row(
            name,
            row.type,
            fmt.count(t.parameters) if t.parameters else "-",
            row.trainable,
            fmt.size(t.param_bytes),
            fmt.size(t.grad_bytes),
            fmt.size(t.optimizer_bytes),
            *([fmt.size(base)] if first else []),
            *ratios,
            style="dim" if row.trainable == "no" else None,
        )
    return table


def totals_table(result):
    """One column per requested mode: weights, gradients, optimizer state, activations, total (and ratios)."""
    table = fmt.table("one training step, per precision mode")
    table.add_column("", no_wrap=True)
    for m in result.modes:
        table.add_column(f"{m.mode} ({m.compute_dtype})" if m.compute_dtype else m.mode, justify="right", no_wrap=True)

    def cells(get) -> list[str]:
        return [get(m) if m.status == "ok" else m.status for m in result.modes]

    table.add_row("weights", *cells(lambda m: fmt.size(m.param_bytes)))
    table.add_row("gradients", *cells(lambda m: fmt.size(m.grad_bytes)))
    table.add_row("optimizer state", *cells(lambda m: fmt.size(m.optimizer_bytes)))
    table.add_row("activations", *cells(lambda m: fmt.size(m.activation_bytes)))
    table.add_row("  vs fp32", *cells(lambda m: fmt.number(m.activation_ratio, ".2f", "×")))
    if any(m.allocator_peak_bytes is not None for m in result.modes):
        table.add_row("allocator peak", *cells(lambda m: fmt.size(m.allocator_peak_bytes)))
    table.add_row("total", *cells(lambda m: fmt.size(m.total_bytes)), style="bold")
    table.add_row("  vs fp32", *cells(lambda m: fmt.number(m.total_ratio, ".2f", "×")))
    return table
