"""`amp-console train`: one flag per RunConfig field, --config, --resume, a progress bar, a JSON summary."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading


from core.engine import checkpoints
from core.config import FIELD_SPECS, RunConfig, tomllib
from core.engine.control import RunControl
from core.errors import AmpConsoleError, ConfigError
from core.engine.events import EvalMetrics, Event, RunEnded, RunStarted, StepMetrics, event_to_dict

_TYPES = {"lr": float, "momentum": float, "weight_decay": float, "grad_clip": float}


def register(sub) -> None:
    p = sub.add_parser("train", help="train a task headless (progress on stderr, summary on stdout)")
    for name, spec in FIELD_SPECS.items():
        kind = _TYPES.get(name, int if spec.minimum is not None else str)
        flags = ["--" + name.replace("_", "-")]
        if name == "out_dir":
            flags.insert(0, "--out")
        p.add_argument(*flags, dest=name, type=kind, default=None, choices=spec.choices, help=spec.help)
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", dest="task_options",
                   help="task option, e.g. -o hidden=32 (repeatable; see `amp-console tasks`)")
    p.add_argument("--config", metavar="FILE.toml", help="read settings from a TOML file (flags override it)")
    p.add_argument("--resume", metavar="CKPT", help="continue from a checkpoint (its config, flags override it)")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object summarising the run")
    p.add_argument("--events", action="store_true",
                   help="print every event as one JSON line on stdout as it happens (for other programs)")
    p.add_argument("--control-stdin", action="store_true",
                   help="read 'pause', 'resume' and 'stop' lines from stdin (for programs driving this run)")
    p.add_argument("--config-stdin", action="store_true",
                   help="load the engine, print {\"ready\": true} (with --events), then read the settings as one "
                        "JSON line on stdin: {\"config\": {...}, \"resume\": null}; lets a program start the "
                        "process ahead of time so a run begins at once")
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="run N processes on this machine with DDP (launches torchrun --standalone)")
    p.set_defaults(handler=cmd_train)


def parse_option(text: str) -> tuple[str, object]:
    """'hidden=32' -> ('hidden', 32); values are read as TOML literals, else kept as strings."""
    if "=" not in text:
        raise ConfigError("task_options", f"{text!r} is not KEY=VALUE")
    key, raw = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip(), value


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Task defaults < --config file < --resume checkpoint's config < explicit flags."""
    values: dict = {}
    if args.resume:
        values = dict(checkpoints.load_checkpoint(args.resume)["config"])
    elif args.config:
        values = RunConfig.load_toml(args.config).to_dict()
    task = args.task or values.get("task", "tiny")
    if not values or values.get("task") != task:
        values = RunConfig.for_task(task).to_dict() | ({k: v for k, v in values.items() if k != "task"})
    for name in FIELD_SPECS:
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    if args.task_options:
        values["task_options"] = {**values.get("task_options", {}), **dict(map(parse_option, args.task_options))}
    return RunConfig.from_dict(values).validate()


class ProgressReporter:
    """A rich progress bar with ETA on stderr when it is a terminal; silent otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.progress = None
        self.task_id = None
        self.metrics: dict = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._start(event)
        elif isinstance(event, StepMetrics) and self.progress is not None:
            self.progress.update(self.task_id, completed=event.step,
                                 info=f"loss {event.loss:.4f}  {event.samples_per_second:,.0f} samples/s")
        elif isinstance(event, EvalMetrics):
            self.metrics = event.metrics
        elif isinstance(event, RunEnded) and self.progress is not None:
            self.progress.stop()

    def _start(self, event: RunStarted) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn(f"{event.task} {event.precision}"), BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                                 console=Console(stderr=True), transient=False)
        self.task_id = self.progress.add_task("train", total=event.total_steps, completed=event.start_step, info="")
        self.progress.start()


def summary_json(ended: RunEnded, started: RunStarted | None) -> dict:
    return {
        "status": ended.status, "steps": ended.step, "epochs": ended.epoch, "final_loss": ended.final_loss,
        "metrics": ended.metrics, "test_metrics": ended.test_metrics, "device": started.device if started else None,
        "precision": started.precision if started else None,
        "autocast_dtype": started.autocast_dtype if started else None, "checkpoint": ended.checkpoint,
        "samples_per_second": ended.samples_per_second, "skipped_steps": ended.skipped_steps,
        "message": ended.message,
    }


def print_summary(ended: RunEnded, started: RunStarted | None, stream) -> None:
    where = f" on {started.device} ({started.device_name}), {started.precision}" if started else ""
    print(f"run {ended.status}{where}: {ended.message}", file=stream)
    if ended.final_loss is not None:
        print(f"  final training loss {ended.final_loss:.4f}", file=stream)
    ceiling = started.ceiling if started else {}
    baseline = started.baseline if started else {}
    for split, metrics in (("val", ended.metrics), ("test", ended.test_metrics)):
        for name, value in metrics.items():
            refs = [f"baseline {baseline[name]:.4f}"] if name in baseline else []
            refs += [f"planted ceiling {ceiling[name]:.4f}"] if name in ceiling else []
            print(f"  {split:<4} {name:<20} {value:.4f}" + (f"   ({', '.join(refs)})" if refs else ""), file=stream)
    if ended.samples_per_second:
        print(f"  throughput {ended.samples_per_second:,.0f} samples/s", file=stream)
    if ended.skipped_steps:
        print(f"  fp16 overflow: {ended.skipped_steps} steps skipped by GradScaler", file=stream)
    if ended.checkpoint:
        print(f"  checkpoint {ended.checkpoint}", file=stream)


def follow_control_lines(stream, control: RunControl) -> threading.Thread:
    """Apply 'pause' / 'resume' / 'stop' lines from `stream` on a daemon thread; end of input means stop."""

    def follow() -> None:
        actions = {"pause": control.pause, "resume": control.resume, "stop": control.stop}
        for line in stream:
            action = actions.get(line.strip().lower())
            if action is not None:
                action()
        control.stop()  # the driving program went away: stop with a checkpoint rather than run on unattended

    thread = threading.Thread(target=follow, name="control-stdin", daemon=True)
    thread.start()
    return thread


def cmd_train(args: argparse.Namespace) -> int:
    try:
        return _train(args)
    except AmpConsoleError as exc:
        if args.events:  # a program driving this run gets the field to mark, not just the stderr line
            print(json.dumps({"setup_error": str(exc), "field": getattr(exc, "field", "")}), flush=True)
        raise


def warm_up_engine() -> None:
    """Import what the first run would (torch builds its optimizers' machinery on first use, ~1 s)."""
    import torch

    from core.engine import trainer  # noqa: F401  (the engine and its tasks)

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def read_config_line(stream) -> tuple[RunConfig | None, str | None]:
    """The settings a driving program sends on `stream` (--config-stdin); (None, None) if it closed first."""
    line = stream.readline()
    if not line.strip():
        return None, None
    try:
        data = json.loads(line)
        values, resume = data["config"], data.get("resume")
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("config", f"the settings line on stdin is not {{\"config\": {{...}}}} JSON ({exc})")
    if not isinstance(values, dict) or not (resume is None or isinstance(resume, str)):
        raise ConfigError("config", "the settings line on stdin needs a \"config\" object and a \"resume\" path")
    return RunConfig.from_dict(values, source="stdin").validate(), resume


def _train(args: argparse.Namespace) -> int:
    from core.cli.common import install_sigint_stop
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    if args.config_stdin:
        if args.nproc is not None or os.environ.get("WORLD_SIZE"):
            raise ConfigError("config", "--config-stdin starts one process; it cannot be combined with --nproc")
        warm_up_engine()
        if args.events:
            print(json.dumps({"ready": True}), flush=True)
        config, args.resume = read_config_line(sys.stdin)
        if config is None:  # the driving program went away before starting a run
            return 0
    else:
        config = config_from_args(args)
    if args.nproc is not None and not os.environ.get("WORLD_SIZE"):
        from core.cli.torchrun import launch_torchrun

        return launch_torchrun(args.nproc, args.argv, config, resume_from=args.resume)
    dist_ctx = DistContext.from_env()
    if not dist_ctx.is_main:  # rank 0 alone reports; the others train quietly
        args.json = args.events = False
    control = RunControl()
    reporter = ProgressReporter(enabled=sys.stderr.isatty() and dist_ctx.is_main and not args.events)
    seen: dict = {}

    def sink(event: Event) -> None:
        if isinstance(event, RunStarted):
            seen["started"] = event
            for note in event.notes:
                sys.stderr.write(f"amp-console: {note}\n")
        if args.events:
            print(json.dumps(event_to_dict(event), default=str), flush=True)
        reporter(event)

    install_sigint_stop(control, distributed=dist_ctx.enabled)
    if args.control_stdin and dist_ctx.is_main:
        follow_control_lines(sys.stdin, control)
    ended = Trainer(config, sink=sink, control=control, resume_from=args.resume, dist_ctx=dist_ctx).run()
    if dist_ctx.is_main:
        print_summary(ended, seen.get("started"), sys.stderr if (args.json or args.events) else sys.stdout)
        if ended.status == "failed" and ended.details:
            sys.stderr.write(f"run failed: {ended.message}\n")
        if args.json:
            print(json.dumps(summary_json(ended, seen.get("started"))), flush=True)
    if dist_ctx.enabled:  # torchrun treats any non-zero exit as a crash; the launcher reads the status instead
        return 1 if ended.status == "failed" else 0
    return {"completed": 0, "failed": 1}.get(ended.status, 130)
