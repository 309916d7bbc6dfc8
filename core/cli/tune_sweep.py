"""`amp-console sweep`: a small grid or random hyperparameter sweep (core.lab.sweep), headless; each trial a normal run
in the sweep's folder, in this process or N at a time in their own. Exit 0 when every trial completed, 1 when some
failed, 128 + n when a signal stopped it (`sweep --resume FOLDER` goes on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from core.cli import format as fmt
from core.cli.common import (
    StopSignals,
    add_option_flag,
    add_runs_dir_flag,
    did_you_mean,
    naming_task_file,
    safe_standard_streams,
)
from core.config import FIELD_SPECS, RunConfig
from core.errors import ConfigError

SHORTCUTS = ("device", "precision", "max_steps", "epochs", "threads")  # base settings with their own flag


def register(sub) -> None:
    from core.cli.train import add_field_flag

    p = sub.add_parser(
        "sweep",
        help="run a small grid or random hyperparameter sweep; each trial is a run in the history",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train one run per combination of settings, one after another (or N at a time with "
        "--devices), in a sweep folder under the runs root, then print a table sorted by the best "
        "value of the monitored metric.\n"
        "KEY is any setting (lr, batch_size, optimizer, weight_decay, seed...) or an option of the "
        "task (hidden; option.NAME when a setting has the same name). Every trial is checked before "
        "the first starts.",
        epilog="examples:\n"
        "  amp-console sweep --config base.toml --grid lr=1e-3,3e-3 --grid batch_size=64,128\n"
        "  amp-console sweep --task tiny --max-steps 200 --grid hidden=16,64 --grid seed=0,1,2\n"
        "  amp-console sweep --task tiny --random 8 --range lr=1e-4:1e-2:log --range batch_size=32:256 "
        "--seed 1\n"
        "  amp-console sweep --config base.toml --grid lr=1e-3,3e-3 --grid seed=0,1 --devices cuda:0,cuda:1\n"
        "  amp-console sweep --resume ~/.local/share/amp-console/runs/20261201-101500-sweep-tiny\n"
        "Ctrl+C stops the running trial(s) with a checkpoint; --resume continues the sweep (with the same "
        "--devices or others).",
    )
    base = p.add_argument_group("base settings (every trial starts from these)")
    base.add_argument("--config", metavar="FILE.toml", help="settings from a TOML file, as `train --config`")
    base.add_argument("--task", help="task to train (default: the config file's, else tiny)")
    for name in SHORTCUTS:
        add_field_flag(base, name)
    base.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="settings",
        help="any other setting, e.g. --set early_stop_patience=3 (repeatable)",
    )
    add_option_flag(base, "samples=4096", "task option for every trial")
    what = p.add_argument_group("what to sweep")
    what.add_argument(
        "--grid",
        "-g",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="try each value (repeatable: every combination runs)",
    )
    what.add_argument(
        "--random", type=int, metavar="N", help="instead of a grid: N trials drawn at random from the --range axes"
    )
    what.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="KEY=LOW:HIGH[:log][:int]",
        dest="ranges",
        help="a random axis: uniform (or log-uniform with :log) between LOW and HIGH, "
        "whole numbers for whole-number settings or with :int; or KEY=V1,V2 to "
        "pick among values (repeatable)",
    )
    what.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random draws (default 0; the training seed is the setting 'seed', e.g. --grid seed=0,1)",
    )
    run = p.add_argument_group("running and results")
    run.add_argument(
        "--resume",
        metavar="SWEEP_FOLDER",
        help="continue a sweep: completed and failed trials are kept, a stopped or interrupted one "
        "resumes from its checkpoint, pending ones run; on the devices it last ran on unless "
        "--devices / --parallel say otherwise",
    )
    run.add_argument(
        "--devices",
        metavar="DEV1,DEV2,...",
        help="run trials N at a time, one per listed device (cuda:0,cuda:1; cpu,cpu for two CPU "
        "trials at once), each in its own training process; a device takes the next trial as "
        "soon as its trial ends. CPU threads are shared out: each trial gets at most cores / N "
        "unless the settings set threads (default: one trial at a time, in this process)",
    )
    run.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="N trials at a time, each in its own process: on the --devices dealt round-robin, else "
        "all on the settings' device",
    )
    run.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: run failed trials again too (from scratch, in a fresh folder)",
    )
    run.add_argument("--show", metavar="SWEEP_FOLDER", help="print the result table of a sweep and exit")
    run.add_argument("--dry-run", action="store_true", help="check and list the trials, run nothing")
    add_runs_dir_flag(run, "the runs root the sweep folder goes under")
    run.add_argument(
        "--sort",
        metavar="COLUMN",
        help="sort the table by best (default, in the metric's direction), samples_per_second, "
        "peak_memory_bytes, wall_seconds, steps, index, status or a swept KEY",
    )
    run.add_argument("--json", action="store_true", help="last stdout line: one JSON object (no table)")
    run.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="when stderr is not a terminal: a trial's progress line this often (default 30)",
    )
    p.set_defaults(handler=cmd_sweep)


def base_config(args: argparse.Namespace) -> RunConfig:
    """Task defaults < --config file < --set and the shortcut flags < -o options, validated."""
    from core.cli.train import parse_option
    from core.config import read_config_file

    user = read_config_file(args.config) if args.config else {}
    for text in args.settings:
        key, value = parse_option(text)
        if key not in FIELD_SPECS or key == "task_options":
            hint = did_you_mean(key, FIELD_SPECS)
            raise ConfigError("--set", f"{key!r} is not a setting{hint}; task options go with -o NAME=VALUE")
        if {f.name: f.type for f in dataclasses.fields(RunConfig)}[key] in (str, "str"):
            value = text.split("=", 1)[1].strip()  # text settings (device, monitor, data) stay as typed
        user[key] = value
    user.update({name: getattr(args, name) for name in SHORTCUTS if getattr(args, name) is not None})
    if args.task:
        user["task"] = args.task
    if args.task_options:
        user["task_options"] = {**user.get("task_options", {}), **dict(map(parse_option, args.task_options))}
    task = user.get("task", "tiny")
    values = RunConfig.for_task(task).to_dict() | user if isinstance(task, str) else user
    values["out_dir"] = ""  # each trial gets its folder in the sweep
    try:
        return RunConfig.from_dict(values).validate()
    except ConfigError as exc:
        if exc.field in FIELD_SPECS and exc.field not in SHORTCUTS and exc.field in user and exc.field != "task":
            raise ConfigError("--set", f"{exc.field}: {str(exc).split(': ', 1)[1]}") from None
        raise


def _plan(args: argparse.Namespace):
    from core.lab.sweep import grid_axis, plan_trials, range_axis

    config = base_config(args)
    if args.random is not None:
        if args.grid:
            raise ConfigError("--grid", "give either --grid axes or --random N with --range axes, not both")
        if not args.ranges:
            raise ConfigError("--random", "needs at least one --range KEY=LOW:HIGH[:log] to draw from")
        axes = [range_axis(spec, config.task) for spec in args.ranges]
        trials = plan_trials(config, ranges=axes, samples=args.random, seed=args.seed)
        return config, axes, trials, "random"
    if args.ranges:
        raise ConfigError("--range", "random axes need --random N (the number of trials to draw)")
    axes = [grid_axis(spec, config.task) for spec in args.grid]
    return config, axes, plan_trials(config, grid=axes), "grid"


def _check_resume_args(args: argparse.Namespace, flag: str) -> None:
    given = [
        name
        for name, value in (
            ("--config", args.config),
            ("--task", args.task if not args.resume else None),  # a resume may name the sweep's task file
            ("--grid", args.grid),
            ("--random", args.random),
            ("--range", args.ranges),
            ("--set", args.settings),
            ("--option", args.task_options),
            ("--dry-run", args.dry_run),
        )
        if value
    ]
    given += ["--" + n.replace("_", "-") for n in SHORTCUTS if getattr(args, n) is not None]
    if given:
        raise ConfigError(flag, f"{flag} takes the sweep as it was planned; leave out {', '.join(given)}")


class SweepLines:
    """The sweep's progress on stderr: a line per trial start and end, its progress between (parallel: prefixed)."""

    def __init__(self, every: float = 30.0, stream=None):
        self.every = every
        self.stream = stream
        self.reporters: dict = {}
        self.parallel = False
        self.started = time.perf_counter()

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(text + "\n")
        stream.flush()

    def __call__(self, event) -> None:
        from core.cli.train import ProgressReporter
        from core.lab.sweep import SweepStarted, TrialEnded, TrialEvent, TrialStarted

        match event:
            case SweepStarted():
                done = event.total - len(event.to_run)
                extra = f" ({done} done before)" if done else ""
                self.parallel = bool(event.devices)
                where = f", {len(event.devices)} at a time on {', '.join(event.devices)}" if self.parallel else ""
                self._write(
                    f"sweep: {len(event.to_run)} of {event.total} trials to run{extra}{where} in {event.folder}"
                )
            case TrialStarted():
                how = f"resuming from {event.resume_from}" if event.resume_from else "starting"
                on = f" on {event.device}" if self.parallel and event.device else ""
                self._write(f"sweep [{event.index}/{event.total}] {event.name}: {how}{on}")
                prefixed = _Prefixed(lambda: self.stream or sys.stderr, f"  [{event.index}] ")
                self.reporters[event.index] = ProgressReporter(
                    enabled=True,
                    live=False if self.parallel else None,
                    every=self.every,
                    stream=prefixed if self.parallel else self.stream,
                )
            case TrialEvent():
                reporter = self.reporters.get(event.index)
                if reporter is not None:
                    reporter(event.event)
            case TrialEnded():
                best = event.best or {}
                score = (
                    f", {best.get('name')} {fmt.number(best.get('value'))} at step {fmt.exact(best.get('step'))}"
                    if best.get("value") is not None
                    else ""
                )
                wall = f", {fmt.duration(event.wall_seconds)}" if event.wall_seconds is not None else ""
                message = f" ({event.message})" if event.status != "completed" and event.message else ""
                self._write(f"sweep [{event.index}/{event.total}] {event.name}: {event.status}{score}{wall}{message}")
                self.reporters.pop(event.index, None)


class _Prefixed:
    """A stream that starts every line with `prefix` (a parallel trial's progress lines)."""

    def __init__(self, stream, prefix: str):
        self._stream, self.prefix = stream, prefix

    def write(self, text: str) -> int:
        stream = self._stream()
        lines = text.split("\n")
        stream.write("\n".join(self.prefix + line if line else line for line in lines))
        return len(text)

    def flush(self) -> None:
        self._stream().flush()


def device_slots(args: argparse.Namespace, base_device: str, last: list | None = None) -> list[str] | None:
    """The device of each parallel slot from --devices / --parallel, else (a resume) the slots the sweep last ran on;
    None: one trial at a time, in-process. A listed accelerator that is not here is refused."""
    from core.lab.sweep.parallel import device_slots as deal
    from core.lab.sweep.parallel import parse_devices

    given = args.devices is not None or args.parallel is not None
    if not given:
        if not last:
            return None
        slots = [str(d) for d in last]
        named = [d for d in slots if d != "auto"]  # --parallel N on an 'auto' setting runs N on 'auto'
        if named:
            parse_devices(named, "--devices (the sweep's last devices; give --devices to change them)")
    else:
        if args.devices is not None:
            devices = parse_devices(args.devices)
        else:  # the settings' device ('cuda' is cuda:0; 'auto' stays for each trial to resolve)
            devices = ["auto"] if base_device.strip().lower() == "auto" else parse_devices([base_device], "device")
        slots = deal(devices, args.parallel)
    wanted = sorted({d for d in slots if d not in ("cpu", "auto")})
    if wanted:  # only then load torch to look
        from core.devices import list_devices

        here = [d.id for d in list_devices()]
        missing = [d for d in wanted if d not in here]
        if missing:
            last_ran = "" if given else "; the sweep last ran on them: give --devices to choose others"
            are = "is" if len(missing) == 1 else "are"
            raise ConfigError(
                "--devices", f"{', '.join(missing)} {are} not available here (available: {', '.join(here)}){last_ran}"
            )
    return slots


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.show:
        _check_resume_args(args, "--show")
        if args.devices is not None or args.parallel is not None:
            raise ConfigError("--show", "prints the table; leave out --devices and --parallel")
        return _print_results(Path(args.show), args, status=None)
    if args.resume:
        _check_resume_args(args, "--resume")
        folder = Path(args.resume)
        from core.lab.sweep import load_sweep

        data = load_sweep(folder)  # not a sweep: one line, exit 2
        last = data.get("devices") if isinstance(data.get("devices"), list) else None
        slots = device_slots(args, str((data.get("base_config") or {}).get("device") or "auto"), last)
    else:
        if args.retry_failed:
            raise ConfigError("--retry-failed", "goes with --resume SWEEP_FOLDER (a new sweep has no failed trials)")
        if args.progress_every <= 0:
            raise ConfigError("--progress-every", f"{args.progress_every} must be above 0 seconds")
        config, axes, trials, method = _plan(args)
        slots = device_slots(args, config.device)
        from core.engine.run_record import runs_root
        from core.files import check_regular_file, check_utf8_path, check_writable_folder

        check_writable_folder(runs_root(args.runs_dir), "--runs-dir")
        if config.data:
            check_utf8_path(config.data, "data")
            check_regular_file(config.data, "data", "data file", allow_folder=True)
        if args.dry_run:
            return _print_plan(config, trials, args)
        from core.lab.sweep import create_sweep

        folder = create_sweep(
            config, trials, axes, method=method, samples=args.random or 0, seed=args.seed, root=args.runs_dir
        )
    return _run(folder, args, slots)


def _run(folder: Path, args: argparse.Namespace, slots: list[str] | None = None) -> int:
    from core.engine.control import RunControl
    from core.lab.sweep import run_sweep

    with safe_standard_streams(), StopSignals() as signals:
        control = RunControl()
        signals.started(control)  # from now on a signal stops the running trial with a checkpoint
        result = run_sweep(
            folder,
            progress=SweepLines(args.progress_every),
            control=control,
            retry_failed=args.retry_failed,
            devices=slots,
        )
        code = _print_results(folder, args, status=result.status)
        return signals.exit_code if result.status == "stopped" else code


def _print_plan(config: RunConfig, trials, args: argparse.Namespace) -> int:
    rows = [{"index": t.index, "trial": t.name, "params": t.params} for t in trials]
    if args.json:
        print(json.dumps({"task": config.task, "trials": rows}, default=str))
        return 0
    table = fmt.table(f"{len(trials)} trials of {config.task} (dry run: nothing runs)")
    keys = list(trials[0].params) if trials else []
    for key in ("#", *keys):
        table.add_column(key, justify="right", no_wrap=True)
    for t in trials:
        table.add_row(str(t.index), *(_value_text(t.params.get(k)) for k in keys))
    fmt.console().print(table)
    return 0


def _value_text(value) -> str:
    from core.lab.sweep import short_value

    return "-" if value is None else short_value(value)


def _print_results(folder: Path, args: argparse.Namespace, status: str | None) -> int:
    """The table (or the JSON line), the best trial and what to do next; the exit code."""
    import shlex

    from core.lab.sweep import best_row, load_sweep, sweep_table, train_longer_command

    data = load_sweep(folder)
    rows = sweep_table(folder, args.sort)
    mode = data.get("mode") or "max"
    best = best_row(rows, mode)
    runs_dir = ["--runs-dir", args.runs_dir] if args.runs_dir else []
    show = shlex.join(["amp-console", "runs", "show", best["run_id"], *runs_dir]) if best and best["run_id"] else None
    reference = str((data.get("base_config") or {}).get("task_file") or "")
    longer = naming_task_file(train_longer_command(best), reference) if best else None
    unfinished = [r for r in rows if r["status"] not in ("completed", "failed")]
    resume = shlex.join(["amp-console", "sweep", "--resume", str(folder)]) if unfinished else None
    resume = naming_task_file(resume, reference)
    failed = [r for r in rows if r["status"] == "failed"]
    if args.json:
        print(
            json.dumps(
                {
                    "folder": str(folder),
                    "status": status or data.get("status"),
                    "task": data.get("task"),
                    "metric": data.get("metric"),
                    "mode": mode,
                    "trials": rows,
                    "best": best,
                    "commands": {"show": show, "train_longer": longer, "resume": resume},
                },
                default=str,
            )
        )
    else:
        print_table(data, rows, args.sort)
        console = fmt.console()
        for r in failed:
            console.print(f"{r['trial']}: failed: {r['message'] or 'no message'}", soft_wrap=True)
        if best:
            console.print(
                f"best: {best['trial']} ({data.get('metric')} {fmt.number(best['best'])} at step {best['best_step']})",
                soft_wrap=True,
            )
            if show:
                console.print(f"  open it:         {show}", soft_wrap=True)
            if longer:
                console.print(f"  train it longer: {longer}", soft_wrap=True)
        if resume:
            console.print(f"{len(unfinished)} trial(s) not finished; continue with: {resume}", soft_wrap=True)
    sys.stdout.flush()
    if status is None:
        return 0
    return 1 if failed else 0


def print_table(data: dict, rows: list[dict], sort: str | None = None) -> None:
    metric = data.get("metric") or "best"
    arrow = "↓" if data.get("mode") == "min" else "↑"
    order = f"by {sort}" if sort and sort != "best" else f"by best {metric} ({arrow} better)"
    title = f"sweep {data.get('name')}: {data.get('task')}, {len(rows)} trials, {order}"
    table = fmt.table(title, show_edge=False, padding=(0, 1, 0, 0))
    keys = list(dict.fromkeys(k for r in rows for k in r["params"]))
    for key in ("#", *keys):
        table.add_column(key.removeprefix("option."), justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    # Which device each trial ran on, when that varied (a parallel sweep): an out-of-memory on one GPU shows.
    by_device = bool(data.get("devices")) or len({r.get("device") for r in rows if r.get("device")}) > 1
    if by_device:
        table.add_column("device", no_wrap=True)
    for column in (metric, "at step", "samples/s", "peak mem", "wall"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(
            str(r["index"]),
            *(_value_text(r["params"].get(k)) for k in keys),
            r["status"],
            *([r.get("device") or "-"] if by_device else []),
            fmt.number(r["best"]),
            fmt.exact(r["best_step"]),
            fmt.count(r["samples_per_second"]),
            fmt.size(r["peak_memory_bytes"]),
            fmt.duration(r["wall_seconds"]),
        )
    fmt.console().print(table)
