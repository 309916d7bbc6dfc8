"""`amp-console devices | tasks | train | bench | ...` (also `python -m core.cli`): parse and dispatch.

Exit codes: 0 completed, 1 the run failed, 2 bad input (one line on stderr), 128 + the signal's number when a signal
stopped the run after its checkpoint (130 also for a `stop` control line). Each command module has
`register(subparsers)`; a command named on the command line imports only its own module (COMMANDS).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from core.cli import format as fmt
from core.cli.common import (
    OneLineParser,
    add_task_file_flag,
    describe_config_error,
    fail_bad_input,
    load_recorded_task,
    load_task_argument,
)
from core.errors import AmpConsoleError, ConfigError

# The command modules (core.cli.<name>) in --help's order, and the commands each registers.
COMMANDS = {
    "train": ("train",),
    "lab": ("bench", "inspect"),
    "data": ("data",),
    "runs": ("runs",),
    "tune_summary": ("summary",),
    "tune_lr": ("lr-find",),
    "tune_sweep": ("sweep",),
    "tune_batch": ("fit-batch",),
    "evaluate": ("evaluate",),
    "predict": ("predict",),
    "export": ("export",),
    "remote": ("watch", "control", "remote", "agent"),
    "slurm": ("slurm",),
    "queue": ("queue",),
}
# The commands on a run (or a sweep) that load the task file it recorded, asking first (--yes: don't), and the
# argument that names it.
RECORDED_TASK = {"evaluate": "target", "export": "target", "predict": "target", "train": "resume", "sweep": "resume"}
RECORDED_TASK |= dict.fromkeys(("lr-find", "fit-batch", "bench", "inspect", "summary"), "from_run")  # --from RUN


def command_modules(command: str | None = None) -> list:
    """The command modules, imported: every one, or only the one that registers `command` when it is known."""
    names = [n for n, commands in COMMANDS.items() if command in commands] or list(COMMANDS)
    return [importlib.import_module(f"core.cli.{name}") for name in names]


def cmd_devices(args: argparse.Namespace) -> int:
    from core.devices import list_devices

    devices = list_devices(free_memory=True)  # a short-lived process: the contexts go when it exits
    if args.json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
        return 0
    print_devices(devices)
    return 0


def device_notes(d) -> str:
    """The short facts of one device: CPU cores and bf16 support, GPU compute capability and free memory."""
    if d.type == "cpu":
        cores, threads = d.details.get("cores"), d.details.get("threads")
        parts = [
            f"{cores} cores / {threads} threads" if cores else f"{threads} threads",
            f"torch uses {d.details.get('torch_threads')}",
            d.details.get("bf16_speed", ""),
        ]
    else:
        parts = [
            f"compute capability {d.capability}" if d.capability else "",
            f"{d.details['multiprocessors']} SMs" if d.details.get("multiprocessors") else "",
            f"{fmt.size(d.memory_free)} free" if d.memory_free is not None else "",
        ]
    return "; ".join(p for p in parts if p)


def print_devices(devices) -> None:
    """One row per device (id, name, memory, precisions, short notes); why a mode is missing goes below."""
    table = fmt.table("Devices")
    table.add_column("id", no_wrap=True)
    table.add_column("name", ratio=2, overflow="fold")
    table.add_column("memory", justify="right", no_wrap=True)
    table.add_column("precisions", no_wrap=True)
    table.add_column("notes", ratio=3, overflow="fold")
    for d in devices:
        table.add_row(d.id, d.name, fmt.size(d.memory_total), ", ".join(d.precisions), device_notes(d))
    console = fmt.console()
    console.print(table)
    for d in devices:
        for mode, why in d.unsupported.items():
            console.print(f"{d.id}: no {mode}: {why}")


def _task_json(info, **extra) -> dict:
    """A task's `tasks --json` object: its name, description, metric, options and defaults (and `extra`)."""
    options = [
        {
            **{key: getattr(o, key) for key in ("name", "default", "help", "minimum", "maximum")},
            "choices": list(o.choices) if o.choices else None,
        }
        for o in info.options
    ]
    head = {key: getattr(info, key) for key in ("name", "description", "primary_metric")}
    return {**head, "options": options, "defaults": dict(info.defaults), **extra}


def cmd_tasks(args: argparse.Namespace) -> int:
    """`tasks`: every task (no torch); `tasks NAME`: one task in full, with its size; `tasks new NAME`: a task file."""
    from core.tasks import create_task, get_task_info, task_infos

    if args.name == "new":
        return cmd_tasks_new(args)
    if args.new_name is not None or args.out is not None:
        what = f"'{args.new_name}'" if args.new_name is not None else "--out"
        return fail_bad_input(f"tasks: {what} goes with `tasks new NAME [--out PATH]` only")
    if args.name is not None:
        try:
            info = get_task_info(args.name)
        except ConfigError as exc:  # one line with the known names and a did-you-mean
            return fail_bad_input(f"tasks: {str(exc).split(': ', 1)[1]}")
        parameters = create_task(info.name).parameter_count()  # the default model, on the meta device (torch)
        if args.json:
            print(json.dumps(_task_json(info, parameters=parameters), indent=2))
        else:
            print_task(info, parameters)
        return 0
    infos = list(task_infos().values())
    if args.json:
        print(json.dumps([_task_json(i, source=i.source or None) for i in infos], indent=2))
        return 0
    console = fmt.console()
    for info in infos:
        _print_task(console, info)
    console.print(
        "Set an option with -o NAME=VALUE (train, bench, inspect); "
        "`amp-console tasks NAME` shows one task with its parameter count."
    )
    return 0


def cmd_tasks_new(args: argparse.Namespace) -> int:
    """`tasks new NAME [--out PATH]`: write the commented task file to start from, then say how to train it."""
    import shlex

    from core.tasks.new_task import NAME_RULE, write_task_file

    if args.new_name is None:
        return fail_bad_input(f"tasks new: name the task: amp-console tasks new NAME ({NAME_RULE})")
    if args.json or args.task is not None:
        return fail_bad_input(f"tasks new: {'--json' if args.json else '--task'} does not go with `tasks new`")
    try:
        written = write_task_file(args.new_name, args.out)
    except ConfigError as exc:
        return fail_bad_input(f"tasks new: {str(exc).split(': ', 1)[1]}")
    file = shlex.quote(str(written.path))
    run_folder = written.path.parent / "runs" / written.task_name
    run, export = shlex.quote(str(run_folder)), shlex.quote(str(run_folder / "export"))
    print(
        f"wrote {written.path}: task {written.task_name!r} ({written.class_name}), a classifier of synthetic "
        f"points that trains as it is; its comments say what to change for your model and data."
    )
    print("next:")
    for line in (
        f"amp-console tasks {written.task_name} --task {file}",
        f"amp-console train --task {file} --precision bf16 --out {run}",
        f"amp-console evaluate {run} --task {file}",
        f"amp-console export {run} --task {file} --out {export}",
    ):
        print(f"  {line}")
    return 0


def _print_task(console, info, parameters: int | None = None) -> None:
    """A task's name, what it is (its model's size when `parameters` is known), then its options' table."""
    from rich.padding import Padding
    from rich.text import Text

    lines = [info.description]
    if parameters is not None:
        exact = f" ({fmt.exact(parameters)})" if fmt.count(parameters) != fmt.exact(parameters) else ""
        lines.append(f"model: {fmt.count(parameters)}{exact} trainable parameters with the default options")
    lines.append("training defaults: " + ", ".join(f"{k}={fmt.setting(v)}" for k, v in info.defaults.items()))
    lines.append(f"primary metric: {info.primary_metric}")
    if info.source:
        from core.tasks.user_tasks import source_kind

        lines.append(f"from {info.source} ({source_kind(info.source)}: loading it runs its code)")
    console.print(Text(info.name, style="bold"))
    for line in lines:  # wrapped lines keep the indent
        console.print(Padding(Text(line), (0, 0, 0, 2), expand=False))
    table = fmt.table(None, show_edge=False)
    table.add_column("option", no_wrap=True)
    table.add_column("default", justify="right", no_wrap=True)
    table.add_column("allowed", no_wrap=True)
    table.add_column("what it sets", overflow="fold")
    for o in info.options:
        table.add_row(o.name, fmt.setting(o.default), o.allowed(), o.help)
    console.print(Padding(table, (0, 0, 1, 2), expand=False))


def print_task(info, parameters: int) -> None:
    console = fmt.console()
    _print_task(console, info, parameters)
    if info.options:
        o = info.options[0]
        task = info.source or info.name  # a user task is named by its reference
        console.print(f"Example: amp-console train --task {task} -o {o.name}={o.default}", highlight=False)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; `command`: of that one only (and devices, tasks) when it is known."""
    parser = OneLineParser(
        prog="amp-console",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="AMP Console: mixed-precision training with PyTorch, headless.\n"
        "Run `amp-console` with no command to open the window.",
        epilog="first steps:\n"
        "  amp-console devices                       what this machine can run\n"
        "  amp-console tasks recommender             a task's options, defaults and ranges\n"
        "  amp-console tasks new my_task             a task file of your own to start from\n"
        "  amp-console bench --task tiny             time fp32/tf32/fp16/bf16 and get a recommendation\n"
        "  amp-console train --task tiny --precision bf16\n"
        "`amp-console COMMAND --help` explains each command.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    devices = sub.add_parser("devices", help="list devices and the precision modes each supports")
    devices.add_argument("--json", action="store_true", help="print a JSON list")
    devices.set_defaults(handler=cmd_devices)
    tasks = sub.add_parser(
        "tasks",
        help="list the tasks (models + data) you can train and their options; "
        "`tasks new NAME` writes a task file of your own to start from",
        usage="amp-console tasks [NAME] [--json] [--task FILE.py:CLASS]\n"
        "       amp-console tasks new NAME [--out PATH]",
        description="Without NAME: every task with its options, defaults and ranges. "
        "With NAME: that task in full, with its model's parameter count. "
        "`tasks new NAME`: write NAME.py (or --out PATH), a commented task file "
        "that trains as it is, to change into your own model and data "
        "(docs/tasks.md); it never overwrites a file. (`new` is the command "
        "here, never a task's name.)",
    )
    tasks.add_argument("name", nargs="?", metavar="NAME", help="one task to describe (e.g. recommender), or new")
    tasks.add_argument("new_name", nargs="?", metavar="NEW_NAME", help=argparse.SUPPRESS)
    tasks.add_argument("--json", action="store_true", help="print JSON (a list, or one object for NAME)")
    tasks.add_argument(
        "--out",
        metavar="PATH",
        help="with `tasks new NAME`: the file to write (default ./NAME.py; a folder: NAME.py in it)",
    )
    add_task_file_flag(tasks)
    tasks.set_defaults(handler=cmd_tasks)
    for module in command_modules(command):
        module.register(sub)
    for name in RECORDED_TASK.keys() & sub.choices.keys():
        sub.choices[name].add_argument(
            "--yes",
            "-y",
            action="store_true",
            help="load the task file the run recorded without asking (loading a task runs its code)",
        )
    # a hidden command (help=SUPPRESS) stays out of --help's list (argparse would print it as ==SUPPRESS==)
    sub._choices_actions = [a for a in sub._choices_actions if a.help != argparse.SUPPRESS]
    return parser


def _load_recorded_task(args) -> None:
    """A command on a run given no --task (nor --config, --task-file): the task file the run recorded, asked for."""
    where = getattr(args, RECORDED_TASK.get(args.command, ""), None)
    if not where or any(getattr(args, n, None) for n in ("task", "config", "task_file")):
        return
    path = Path(where).expanduser()
    if RECORDED_TASK[args.command] == "from_run":
        from core.cli.runs import run_folder

        path = run_folder(where)
    elif not path.exists() and RECORDED_TASK[args.command] == "target":  # a run id under the runs root
        from core.cli.runs import RunNotFound, find_run
        from core.engine.run_record import runs_root

        try:
            path = Path(find_run(runs_root(args.runs_dir), where)["folder"])
        except RunNotFound:
            return  # the command says what is wrong with it
    reference = load_recorded_task(path, args.yes)
    if reference and args.command == "train":  # torchrun's workers are given it as the user gave it
        args.argv += ["--task", reference]


def main(argv: list[str] | None = None) -> int:
    """Parse and run one command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    args.argv = argv
    try:
        load_task_argument(args)  # --task FILE.py:Class: the user's task, loaded because they named it
        _load_recorded_task(args)
        return args.handler(args)
    except ConfigError as exc:
        return fail_bad_input(describe_config_error(exc))
    except AmpConsoleError as exc:
        return fail_bad_input(str(exc))
    except KeyboardInterrupt:  # Ctrl+C before a command installed its own stop handlers
        sys.stderr.write("amp-console: interrupted\n")
        return 130
