"""`amp-console train`: one flag per RunConfig field, --config, --resume, a progress bar, a JSON summary."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from typing import TYPE_CHECKING

from core.cli import format as fmt
from core.cli.common import (
    StopBeforeStart,
    StopSignals,
    add_option_flag,
    add_runs_dir_flag,
    end_with_parent,
    safe_standard_streams,
    seconds,
    stop_at_end_of_input,
)
from core.cli.nodes import add_node_flags, node_plan, wants_launcher
from core.config import FIELD_SPECS, RunConfig, delimiter_value, parse_columns, read_config_file, tomllib, train_command
from core.engine.events import EvalMetrics, Event, RunEnded, RunResumed, RunStarted, StepMetrics
from core.engine.follow import run_start
from core.errors import AmpConsoleError, ConfigError, UserCodeError
from core.files import check_regular_file, check_utf8_path, check_writable_folder
from core.process import signal_name
from core.text import elapsed, number

if TYPE_CHECKING:  # the engine (torch) loads when a command runs, so `--help` stays fast (events are torch-free)
    from core.engine.prepare import PreparedRun

_FLOATS = {f.name for f in dataclasses.fields(RunConfig) if f.type in (float, "float")}  # lr, checkpoint_minutes...
_SWITCHES = {f.name for f in dataclasses.fields(RunConfig) if f.type in (bool, "bool")}  # --tensorboard / --no-...
FLAG_ALIASES = {"out_dir": "--out", "time_limit_minutes": "--time-limit"}  # shorter flags besides --out-dir...


def add_field_flag(parser, name: str) -> None:
    """The flag of RunConfig field `name` (its FieldSpec's help, choices and type; --x / --no-x for a switch)."""
    spec = FIELD_SPECS[name]
    flags = [*([FLAG_ALIASES[name]] if name in FLAG_ALIASES else []), "--" + name.replace("_", "-")]
    help_text = spec.help.replace("%", "%%")
    if name in _SWITCHES:
        parser.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, help=help_text)
        return
    kind = float if name in _FLOATS else int if spec.minimum is not None else str
    metavar = "PATH" if name in ("val_data", "test_data", "query_file") else None
    parser.add_argument(*flags, dest=name, type=kind, choices=spec.choices, metavar=metavar, help=help_text)


def add_setting_flags(parser) -> None:
    """A flag per RunConfig field (the data flags after --data) and -o: the settings `train` and `queue add` take."""
    for name in FIELD_SPECS:
        if name not in DATA_FLAG_FIELDS:
            add_field_flag(parser, name)
        if name == "data":
            add_data_flags(parser)
    add_option_flag(parser)


def register(sub) -> None:
    p = sub.add_parser("train", help="train a task headless (progress on stderr, summary on stdout)")
    add_setting_flags(p)
    p.add_argument("--config", metavar="FILE.toml", help="read settings from a TOML file (flags override it)")
    add_runs_dir_flag(p, "the runs root: without --out the run goes in a new folder under it")
    p.add_argument("--resume", metavar="CKPT", help="continue from a checkpoint (its config, flags override it)")
    p.add_argument("--note", help="the run's note (note.txt and its start notes), e.g. what a re-run changed")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object summarising the run")
    p.add_argument(
        "--events",
        action="store_true",
        help='for a program driving this run: once it starts, print {"folder": F, "offset": N} on stdout (its '
        "events are F/metrics.jsonl from byte N on), and a setup error as one JSON line",
    )
    p.add_argument(
        "--end-with-parent",
        type=int,
        metavar="PID",
        help="stop with a checkpoint when process PID (the program that started this run) ends, however it ends "
        "(as when stdin closes)",
    )
    p.add_argument(
        "--config-stdin",
        action="store_true",
        help='load the engine, print {"ready": true} (with --events), then read the settings as one '
        'JSON line on stdin: {"config": {...}, "resume": null}; lets a program start the '
        "process ahead of time so a run begins at once",
    )
    p.add_argument(
        "--progress-every",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="when stderr is not a terminal (nohup, a log file, a batch job): one progress line this "
        "often, besides the first and the last (default 30)",
    )
    add_node_flags(p)  # --nproc, and --nnodes ... for several machines (core.cli.nodes)
    p.set_defaults(handler=cmd_train)


DATA_FLAG_FIELDS = ("val_data", "test_data", "delimiter", "columns", "data_format", "query_file")  # add_data_flags


def add_data_flags(parser) -> None:
    """The data settings besides --data, for every command that reads a run's data (data_flag_values reads them)."""
    for name in ("val_data", "test_data", "data_format", "query_file"):
        add_field_flag(parser, name)
    parser.add_argument(
        "--delimiter",
        type=delimiter_value,
        metavar="TEXT",
        help=FIELD_SPECS["delimiter"].help + " ('\\t' or tab: a tab)",
    )
    parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="KEY=NAME",
        dest="column_pairs",
        help="the file's name NAME for the expected column KEY, e.g. --column user_id=userId "
        "(repeatable; merges into the setting `columns`)",
    )


def data_flag_values(args: argparse.Namespace) -> dict:
    """The data settings add_data_flags' flags set (only those given); `columns` holds the --column pairs."""
    values = {
        name: getattr(args, name)
        for name in ("val_data", "test_data", "delimiter", "data_format", "query_file")
        if getattr(args, name, None) is not None
    }
    pairs = getattr(args, "column_pairs", None) or []
    if pairs:
        values["columns"] = parse_columns(",".join(pairs), field="--column")
    return values


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


def _load_user_task(user: dict) -> None:
    """Load the user task the command line or the config file names (--task FILE.py:Class, --task-file, a
    config's task_file): what the user gave, so its code runs. A resumed run's checkpoint only names its."""
    from core.tasks import add_task, load_config_task, task_source
    from core.tasks.user_tasks import is_reference

    if is_reference(user.get("task") or ""):
        user["task"] = add_task(user["task"]).name
        user["task_file"] = task_source(user["task"])
    elif user.get("task_file") and "task" not in user:
        user["task"] = add_task(user["task_file"]).name
        user["task_file"] = task_source(user["task"])
    else:
        load_config_task(user)


def prepared_run(args: argparse.Namespace, processes: int | None = None) -> PreparedRun:
    """The run from a --config file and the flags over it (core.engine.prepare.prepare_run: task defaults <
    --resume checkpoint < file < flags), its paths checked; `processes`: the run's, for its resume notes."""
    from core.engine.prepare import prepare_run

    runs_dir = getattr(args, "runs_dir", None)
    prepared = prepare_run(*_user_layers(args), resume=args.resume, runs_dir=runs_dir, processes=processes)
    check_paths(prepared.config)
    return prepared


def _user_layers(args: argparse.Namespace) -> tuple[dict, dict]:
    """The --config file's settings and the flags', the user task they name loaded."""
    user = read_config_file(args.config) if args.config else {}
    flags = {
        name: getattr(args, name)
        for name in FIELD_SPECS
        if getattr(args, name, None) is not None and name not in DATA_FLAG_FIELDS
    }
    flags.update(data_flag_values(args))
    if getattr(args, "note", None) is not None:  # train's own flag: the config's note
        flags["note"] = args.note
    if args.task_options:
        flags["task_options"] = dict(map(parse_option, args.task_options))
    merged = {**user, **flags}
    _load_user_task(merged)  # a task file runs here: the user named it
    for key in ("task", "task_file"):
        if key in merged:
            flags[key] = merged[key]
    return user, flags


def check_paths(config: RunConfig) -> None:
    """Refuse paths the run could not use, before it starts: each message names the path and the cause."""
    check_writable_folder(config.out_dir, "out_dir")
    for name in ("data", "val_data", "test_data", "query_file"):
        path = getattr(config, name)
        if path:
            check_utf8_path(path, name)
            what = "data file" if name != "query_file" else "query sizes file"
            check_regular_file(path, name, what, allow_folder=name != "query_file")


BAR_SECONDS = 0.1  # the live line takes a step's figures at most this often


class ProgressReporter:
    """Progress on stderr (fmt.LiveLine): on a terminal one line rewritten as steps come; otherwise (nohup, a log file,
    a batch scheduler) a line at the first log, then every `every` seconds, and at the end. Silent unless `enabled`."""

    def __init__(self, enabled: bool, live: bool | None = None, every: float = 30.0, stream=None):
        self.enabled, self.every, self.line = enabled, every, fmt.LiveLine(stream, live)
        self.metrics: dict = {}
        self.total = self.start_step = 0
        self.paused_seconds = 0.0
        self._last_line: float | None = None
        self._last_step: StepMetrics | None = None

    def __call__(self, event: Event) -> None:
        if not self.enabled:
            return
        if type(event) is StepMetrics:  # the event of every logged step: its own short path
            self._last_step, now = event, time.monotonic()
            if self.line.live and (now - self._drawn_at >= BAR_SECONDS or event.step >= self.total):
                self._drawn_at = now
                self.line(self.format_line(event))
            elif not self.line.live and event.step < self.total and now - (self._last_line or -1e9) >= self.every:
                self._line(event)  # the last step's line waits for RunEnded: it carries the final evaluation
            return
        if isinstance(event, RunStarted):
            self.total, self.start_step = event.total_steps, event.start_step
        elif isinstance(event, EvalMetrics) and event.split == "val":
            self.metrics = event.metrics
        elif isinstance(event, RunResumed):
            self.paused_seconds += event.paused_seconds
        elif isinstance(event, RunEnded) and self._last_step is not None:
            if self.line.live or self._last_step.step != self._printed_step:
                self._line(self._last_step)

    _printed_step = None
    _drawn_at = float("-inf")  # when the live line was last rewritten

    def format_line(self, event) -> str:
        """`step 1,200/5,000 (24%) epoch 2 loss 0.4132 val_accuracy 0.9100 | 3,412 samples/s | elapsed 1m12s,
        ETA 3m48s`; the ETA leaves paused time out."""
        total = max(self.total, 1)
        text = (
            f"step {event.step:,}/{self.total:,} ({100 * event.step // total}%) epoch {event.epoch} "
            f"loss {event.loss:.4f}"
        )
        text += "".join(f" val_{name} {value:.4f}" for name, value in self.metrics.items())
        text += f" | {event.samples_per_second:,.0f} samples/s | elapsed {elapsed(event.elapsed_seconds)}"
        active = max(event.elapsed_seconds - self.paused_seconds, 0.0)
        done = event.step - self.start_step
        if done > 0 and event.step < self.total:
            text += f", ETA {elapsed(active / done * (self.total - event.step))}"
        return text

    def _line(self, event) -> None:
        self._last_line, self._printed_step = time.monotonic(), event.step
        self.line(self.format_line(event), keep=True)


SUMMARY_FIELDS = (
    "status final_loss metrics test_metrics checkpoint samples_per_second skipped_steps message best_test_metrics "
    "best_step checkpoint_advice"
).split()  # RunEnded's fields in the JSON summary, besides its steps and epochs


def summary_json(ended: RunEnded, started: RunStarted | None) -> dict:
    return {
        "steps": ended.step,
        "epochs": ended.epoch,
        **{name: getattr(ended, name) for name in SUMMARY_FIELDS},
        **{name: getattr(started, name, None) for name in ("device", "precision", "autocast_dtype")},
    }


def references(name: str, baseline: dict, ceiling: dict, on: str) -> str:
    """'   (on val: baseline 0.1234, planted ceiling 0.5678)' for a metric the task measures references of, else ''."""
    refs = [f"baseline {baseline[name]:.4f}"] if name in baseline else []
    refs += [f"planted ceiling {ceiling[name]:.4f}"] if name in ceiling else []
    return f"   ({on}{', '.join(refs)})" if refs else ""


def print_summary(ended: RunEnded, started: RunStarted | None, stream) -> None:
    where = f" on {started.device} ({started.device_name}), {started.precision}" if started else ""
    print(f"run {ended.status}{where}: {ended.message}", file=stream)
    if ended.final_loss is not None:
        print(f"  final training loss {number(ended.final_loss)}", file=stream)
    ceiling = started.ceiling if started else {}
    baseline = started.baseline if started else {}
    for split, metrics in (("val", ended.metrics), ("test", ended.test_metrics)):
        on = "" if split == "val" else "on val: "  # the task measures its references on the val split
        for name, value in metrics.items():
            print(f"  {split:<4} {name:<20} {value:.4f}{references(name, baseline, ceiling, on)}", file=stream)
    if ended.best_test_metrics and ended.best_step != ended.step:  # the test lines above are the last weights'
        last = ended.test_metrics
        best = ", ".join(
            f"{name} {value:.4f}" + (f" (last {last[name]:.4f})" if name in last else "")
            for name, value in ended.best_test_metrics.items()
        )
        print(f"  test of the best checkpoint (step {ended.best_step:,}): {best}", file=stream)
    if ended.checkpoint_advice:
        print(f"  {ended.checkpoint_advice}", file=stream)
    if ended.samples_per_second:
        print(f"  throughput {ended.samples_per_second:,.0f} samples/s", file=stream)
    if ended.skipped_steps:
        print(f"  fp16 overflow: {ended.skipped_steps:,} steps skipped by GradScaler", file=stream)
    if ended.checkpoint:
        print(f"  checkpoint {ended.checkpoint}", file=stream)
    for fix in ended.fixes:  # a divergence's re-runs, each a command to paste
        print(f"  re-run with {fix['label']}: {fix_command(fix, started.config if started else None)}", file=stream)


def fix_command(fix: dict, config: dict | None = None) -> str:
    """The `amp-console train` command of one of RunEnded.fixes: the run's `config` (RunStarted's) with the fix's
    changes, from its checkpoint, with its note, as the window's re-run; a user task's file named (`--task FILE`)."""
    import shlex

    from core.config import RunConfig

    settings = RunConfig.from_dict({**(config or {}), **fix["changes"]}, source="fix").changes()
    settings = {name: f"{value:g}" if isinstance(value, float) else value for name, value in settings.items()}
    resume = ["--resume", fix["resume"]] if fix.get("resume") else []
    return shlex.join(train_command(settings, *resume, "--note", fix["note"], python=False))


def report_end(ended: RunEnded, started: RunStarted | None, args: argparse.Namespace) -> None:
    """Rank 0's end of the run: its summary, or, for a failed attempt torchrun will restart, one line."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if ended.status == "failed" and attempt < int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0)):
        sys.stderr.write(f"attempt {attempt + 1} failed ({ended.message}); torchrun restarts every process\n")
        return
    print_summary(ended, started, sys.stderr if (args.json or args.events) else sys.stdout)
    if ended.status == "failed" and ended.details:
        sys.stderr.write(f"run failed: {ended.message}\n")
        print_user_frames(ended.details)
    if args.json:
        print(json.dumps(summary_json(ended, started)), flush=True)
    sys.stdout.flush()


def cmd_train(args: argparse.Namespace) -> int:
    from core.cli.slurm import job_signals, requeue_if_warned

    distributed = bool(os.environ.get("WORLD_SIZE"))
    with safe_standard_streams(), StopSignals(distributed=distributed, extra=job_signals()) as signals:
        try:
            if args.end_with_parent is not None:
                end_with_parent(args.end_with_parent)
            code = _train(args, signals)
            return requeue_if_warned(signals.signum, code)
        except AmpConsoleError as exc:
            if distributed:
                from core.cli.elastic import record_failure

                record_failure(str(exc))
            details = getattr(exc, "details", "")  # a UserCodeError's traceback
            if args.events:  # a program driving this run gets the field to mark, not just the stderr line
                print(
                    json.dumps({"setup_error": str(exc), "field": getattr(exc, "field", ""), "details": details}),
                    flush=True,
                )
            if isinstance(exc, UserCodeError):  # the user's code raised: their line and frames; the run failed
                sys.stderr.write(f"amp-console: error: {exc}\n")
                print_user_frames(details)
                return 1
            raise
        except StopBeforeStart as exc:
            sys.stderr.write(
                f"amp-console: {signal_name(exc.signum)} before the run started: stopped, nothing was written\n"
            )
            return requeue_if_warned(signals.signum, signals.exit_code)


def print_user_frames(details: str) -> None:
    """The frames of the user's own code in a traceback, to stderr (the whole one is in the details)."""
    from core.tasks.task_checks import user_frames_text

    frames = user_frames_text(details)
    if frames:
        sys.stderr.write(f"Traceback, your code's frames:\n{frames}\n")


def warm_up_engine() -> None:
    """Import what the first run would (torch builds its optimizers' machinery on first use, ~1 s)."""
    import torch

    from core.engine import trainer  # noqa: F401  (the engine and its tasks)

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def read_config_line(stream) -> tuple[dict | None, str | None]:
    """The settings a driving program sends on `stream` (--config-stdin); (None, None) if it closed first."""
    line = stream.readline()
    if not line.strip():
        return None, None
    try:
        data = json.loads(line)
        values, resume = data["config"], data.get("resume")
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("config", f'the settings line on stdin is not {{"config": {{...}}}} JSON ({exc})') from None
    if not isinstance(values, dict) or not (resume is None or isinstance(resume, str)):
        raise ConfigError("config", 'the settings line on stdin needs a "config" object and a "resume" path')
    from core.tasks import load_config_task

    load_config_task(values)  # the driving program (the window) names the user task it was given
    return values, resume


def _train(args: argparse.Namespace, signals: StopSignals) -> int:
    from core.cli import elastic
    from core.engine.control import RunControl

    elastic.tee_stderr()  # a torchrun worker's stderr also goes to <run>/ranks/rank-<R>.log
    restart = plan = None
    launcher = wants_launcher(args) and not os.environ.get("WORLD_SIZE")
    if args.config_stdin:
        if wants_launcher(args) or os.environ.get("WORLD_SIZE"):
            raise ConfigError("config", "--config-stdin starts one process; it cannot be combined with --nproc")
        warm_up_engine()
        signals.check_not_stopped()  # a signal during torch's import may have been swallowed there
        if args.events:
            print(json.dumps({"ready": True}), flush=True)
        values, args.resume = read_config_line(sys.stdin)
        if values is None:  # the driving program went away before starting a run
            return 0
        from core.engine.prepare import prepare_run

        prepared = prepare_run(values, resume=args.resume)
        check_paths(prepared.config)
    else:
        from core.tasks import catalog_classes

        restart = elastic.auto_resume(args)  # a restarted worker or a requeued job: from the run's checkpoint
        plan = node_plan(args) if launcher else None  # a resume's notes count the launched processes
        # the launcher leaves torch to its workers
        with catalog_classes() if launcher and not args.resume else contextlib.nullcontext():
            prepared = prepared_run(args, plan.world_size if plan else None)
    config, notes = prepared.config, prepared.notes
    if restart:
        notes = [*notes, elastic.restart_note(restart, args.resume)]
    if plan is not None:
        from core.cli.torchrun import launch_torchrun

        for note in notes:
            sys.stderr.write(f"amp-console: {note}\n")
        return launch_torchrun(
            plan,
            args.argv + (["--resume", args.resume] if restart else []),
            config,
            resume_from=args.resume,
            signals=signals,
            end_with_parent=args.end_with_parent is not None,
        )
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    dist_ctx = DistContext.from_env()
    if not dist_ctx.is_main:  # rank 0 alone reports; the others train quietly
        args.json = args.events = False
        notes = []
    control = RunControl()
    reporter = ProgressReporter(enabled=dist_ctx.is_main and not args.events, every=args.progress_every)
    seen: dict = {}

    def sink(event: Event) -> None:
        if isinstance(event, RunStarted):
            seen["started"] = event
            for note in event.notes:  # the prepared run's notes come with it (Trainer's notes=)
                sys.stderr.write(f"amp-console: {note}\n")
            signals.started(control)
            if args.events:  # the driving program follows metrics.jsonl from this run's first line
                print(json.dumps(run_start(event.config["out_dir"])), flush=True)
        reporter(event)

    if args.config_stdin or args.end_with_parent is not None:
        stop_at_end_of_input(sys.stdin, control)  # the driving program's end
    if dist_ctx.enabled:  # every rank goes on to the first stop agreement; rank 0 decides
        signals.started(control)
    folder = elastic.claim_for_rank0()  # a multi-node run's folder, once the nodes have met
    restart = restart if dist_ctx.is_main else None  # reported with RunStarted (metrics.jsonl), kept in run.json
    trainer = Trainer(
        config,
        sink=sink,
        control=control,
        resume_from=args.resume,
        resume_state=prepared.state,
        dist_ctx=dist_ctx,
        restart=restart,
        notes=notes,
    )
    try:
        ended = trainer.run()
    finally:
        if folder is not None:
            folder.release()
    if dist_ctx.enabled and ended.status == "failed":
        elastic.record_failure(f"rank {dist_ctx.rank} on node {socket.gethostname()}: {ended.message}")
    if dist_ctx.is_main:
        report_end(ended, seen.get("started"), args)
    if dist_ctx.enabled:  # torchrun treats any non-zero exit as a crash; the launcher reads the status instead
        return 1 if ended.status == "failed" else 0
    return {"completed": 0, "failed": 1}.get(ended.status, signals.exit_code)
