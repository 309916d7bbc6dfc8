"""`amp-console watch`, `control` and `remote`: follow and steer any run, here or on a host over ssh; and `agent`, the
host side those commands reach (core.remote.agent), not meant to be typed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from core.cli import format as fmt
from core.cli.common import add_option_flag, add_runs_dir_flag, seconds
from core.cli.train import DATA_FLAG_FIELDS, add_data_flags, add_field_flag, data_flag_values
from core.config import FIELD_SPECS
from core.errors import ConfigError
from core.text import printable

START_FLAGS = [n for n in FIELD_SPECS if n not in ("task", "task_file", "data", *DATA_FLAG_FIELDS)]  # + data flags
VENV_SHOWN = "~/.amp-console/venv"  # core.remote.ssh.VENV under the host's home


def _ssh_flags(parser, handler, **defaults) -> None:
    """A remote command's last flags (--remote-command, --ssh-config, --ssh-option, --runs-dir), and its handler."""
    group = parser.add_argument_group("remote runs (HOST:PATH)")
    group.add_argument(
        "--remote-command",
        metavar="CMD",
        help="how the host runs amp-console, e.g. '~/venv/bin/amp-console' (default: "
        "$AMP_CONSOLE_REMOTE_COMMAND, else amp-console)",
    )
    group.add_argument("--ssh-config", metavar="FILE", help="an ssh config file (ssh -F FILE)")
    group.add_argument(
        "--ssh-option", metavar="OPTION", action="append", default=[], help="an ssh option (ssh -o OPTION), repeatable"
    )
    add_runs_dir_flag(parser, "the runs root a run id or name is looked for in")
    parser.set_defaults(handler=handler, **defaults)


def _say(text: str) -> None:
    sys.stderr.write(f"amp-console: {text}\n")
    sys.stderr.flush()


def _remote(target: str) -> tuple[str, str] | None:
    """(HOST, PATH) for a target on a host; None for a run here (a path that exists is never a host's)."""
    from core.remote.ssh import parse_target

    return parse_target(target) if not os.path.exists(target) else None


def host_of(dest: str, args: argparse.Namespace):
    from core.remote.ssh import Host

    options = (["-F", args.ssh_config] if args.ssh_config else []) + [a for o in args.ssh_option for a in ("-o", o)]
    command = (args.remote_command or "").strip()
    return Host(dest, command, tuple(options)) if command else Host(dest, ssh_options=tuple(options))


def register(sub) -> None:
    watch = sub.add_parser(
        "watch",
        help="follow a run's progress, here or on a host over ssh, until it ends",
        description="Shows a run from its start, then live, until it ends, with the usual "
        "summary. RUN: a run folder, a run's id or name under the runs root, or "
        "HOST:PATH on a machine reached with ssh (PATH: a folder, or a run's id "
        "or name under the host's runs root). Exit code 0 when the run completed "
        "or was stopped, 1 when it failed or ended without a word (killed).",
    )
    watch.add_argument("target", metavar="RUN")
    watch.add_argument(
        "--offset",
        type=int,
        default=0,
        metavar="BYTES",
        help="start at this byte of metrics.jsonl instead of its start",
    )
    watch.add_argument(
        "--progress-every",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="off a terminal: one progress line this often (default 10)",
    )
    watch.add_argument("--json", action="store_true", help="last stdout line: the run's JSON summary")
    _ssh_flags(watch, cmd_watch)

    control = sub.add_parser(
        "control",
        help="pause, resume or stop a run through its folder, here or over ssh",
        description="Writes the request into the run folder's control channel and waits "
        "for the run to acknowledge it and do it (see docs/remote.md).",
    )
    control.add_argument("target", metavar="RUN")
    control.add_argument("verb", choices=("pause", "resume", "stop"))
    control.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for the acknowledgement and its outcome (default 30)",
    )
    _ssh_flags(control, cmd_control)

    remote = sub.add_parser("remote", help="a host reached with ssh: its devices; start a run there")
    ops = remote.add_subparsers(dest="op", required=True, metavar="OP")
    devices = ops.add_parser("devices", help="the host's devices and its amp-console version")
    devices.add_argument("host", metavar="HOST")
    devices.add_argument("--json", action="store_true")
    devices.add_argument(
        "--refresh",
        action="store_true",
        help="probe the devices again (the host answers its last probe while its Python, torch, driver and "
        "visible devices are unchanged; free GPU memory is always read now)",
    )
    _ssh_flags(devices, cmd_remote_devices)
    start = ops.add_parser("start", help="start a run detached on the host; prints HOST:FOLDER for watch/control")
    start.add_argument("host", metavar="HOST")
    start.add_argument(
        "--config", metavar="FILE.toml", help="the run's settings (a local file; default: the task's defaults)"
    )
    start.add_argument(
        "--task",
        dest="remote_task",  # not loaded here (main loads an args.task file)
        metavar="FILE.py:CLASS",
        help="the task: a built-in task's name, or a task file here (copied into the run's folder "
        "on the host) or package.module:Class (installed on the host)",
    )
    add_option_flag(start)
    start.add_argument(
        "--data", metavar="PATH", help="the data file (a path on the host, or with --upload a local file copied there)"
    )
    start.add_argument(
        "--upload",
        action="store_true",
        help="copy the local data file(s) to the host first (skipped when it has the same sha256)",
    )
    start.add_argument("--nproc", type=int, metavar="N", help="DDP processes on the host")
    start.add_argument("--watch", action="store_true", help="then watch it (Ctrl+C leaves it running)")
    settings = start.add_argument_group("the run's settings, as train's (over --config; paths: on the host)")
    for name in START_FLAGS:
        add_field_flag(settings, name)
    add_data_flags(settings)
    _ssh_flags(start, cmd_remote_start, offset=0, progress_every=10.0, json=False)

    install = ops.add_parser(
        "install",
        help="install this amp-console into a venv on the host (built here, copied over ssh)",
        description="Builds this amp-console's wheel here, copies it over ssh and installs it with its "
        f"dependencies into {VENV_SHOWN} on the host (python3 -m venv), where the other remote "
        "commands look for amp-console first. Torch is pinned to this machine's version; "
        "--torch-spec picks another (a CUDA build: see docs/remote.md).",
    )
    install.add_argument("host", metavar="HOST")
    install.add_argument(
        "--venv", metavar="DIR", default=VENV_SHOWN, help=f"the venv on the host (default {VENV_SHOWN})"
    )
    install.add_argument("--python", metavar="CMD", default="python3", help="the host's python (default python3)")
    install.add_argument("--torch-spec", metavar="SPEC", help="torch's requirement, e.g. 'torch>=2.6'")
    install.add_argument(
        "--system-site-packages",
        action="store_true",
        help="the venv sees the host python's packages (a torch already there is kept when it meets the spec)",
    )
    _ssh_flags(install, cmd_remote_install)

    runs = ops.add_parser("runs", help="the runs under the host's runs root (as `runs list` there)")
    runs.add_argument("host", metavar="HOST")
    runs.add_argument("--json", action="store_true", help="print a JSON list of the runs' records")
    _ssh_flags(runs, cmd_remote_runs)
    fetch = ops.add_parser(
        "fetch",
        help="copy a host's run (its files and best checkpoint) under the runs root",
        description="Copies run.json, metrics.jsonl, note.txt, evaluation.json and the best "
        "checkpoint (else the last) of a run on a host into <runs root>/.hosts/"
        "HOST/RUN/ here, for evaluate, export, predict and the window's preview; "
        "files already there with the same sha256 are not sent again. Prints the "
        "local folder; progress on stderr.",
    )
    fetch.add_argument(
        "target", metavar="HOST:RUN", help="RUN: a folder on the host, or a run's name or id under the host's runs root"
    )
    fetch.add_argument("--no-checkpoint", action="store_true", help="only the run's small files")
    _ssh_flags(fetch, cmd_remote_fetch)

    agent = sub.add_parser("agent", help=argparse.SUPPRESS)
    agent.add_argument("--client-version")
    agent.add_argument("--runs-dir")
    agent_ops = agent.add_subparsers(dest="op", required=True)
    agent_ops.add_parser("info").add_argument("--refresh", action="store_true")
    agent_ops.add_parser("start")
    follow = agent_ops.add_parser("follow")
    follow.add_argument("folder")
    follow.add_argument("--offset", type=int, default=0)
    ctl = agent_ops.add_parser("control")
    ctl.add_argument("folder")
    ctl.add_argument("verb", choices=("pause", "resume", "stop"))
    ctl.add_argument("--timeout", type=float, default=30.0)
    put = agent_ops.add_parser("put")
    put.add_argument("--sha256", required=True)
    put.add_argument("--size", type=int, required=True)
    put.add_argument("--name", required=True)
    put.add_argument("--check", action="store_true")
    agent_ops.add_parser("runs")
    send = agent_ops.add_parser("fetch")
    send.add_argument("folder")
    send.add_argument("--checkpoint", action="store_true")
    agent.set_defaults(handler=cmd_agent)


def cmd_watch(args: argparse.Namespace) -> int:
    from core.cli.train import ProgressReporter, print_summary, summary_json
    from core.engine.events import ControlAcknowledged, RunEnded, RunPaused, RunResumed, RunStarted, event_or_none
    from core.remote.client import FollowNote, follow_run

    remote = _remote(args.target)
    host = host_of(remote[0], args) if remote else None
    follower = follow_run(args.target, offset=args.offset, host=host, runs_dir=args.runs_dir)
    reporter = ProgressReporter(enabled=True, every=args.progress_every)
    started = ended = None
    try:
        for item in follower:
            if isinstance(item, FollowNote):
                _say(item.text)
                continue
            event = event_or_none(item.record)
            if event is not None:
                reporter(event)
            match event:
                case RunStarted():
                    started, ended = event, None
                case ControlAcknowledged():
                    _say(
                        f"{event.verb} requested (request {event.seq}): acknowledged"
                        + (f", {event.note}" if event.note else "")
                    )
                case RunPaused():
                    _say(f"paused at step {event.step}")
                case RunResumed():
                    _say(f"resumed at step {event.step} after {event.paused_seconds:.1f} s paused")
                case RunEnded():
                    ended = event
    except KeyboardInterrupt:
        follower.close()
        _say(
            f"stopped watching at byte {follower.offset} (the run goes on; `watch --offset {follower.offset}` "
            f"picks up there)"
        )
        return 130
    if ended is None or follower.status != "ended":
        why = f": {follower.note}" if follower.note else ""
        _say(f"the run ended without a word (killed, or it never started){why}")
        return 1
    print_summary(ended, started, sys.stdout)
    if args.json:
        print(json.dumps(summary_json(ended, started)), flush=True)
    return 1 if ended.status == "failed" else 0


def cmd_control(args: argparse.Namespace) -> int:
    from core.remote.client import control_remote

    remote = _remote(args.target)
    if remote is not None:
        result = control_remote(host_of(remote[0], args), remote[1], args.verb, timeout=args.timeout)
    else:
        from core.engine.folder_control import send_control
        from core.remote.agent import find_run_folder

        result = send_control(find_run_folder(args.target, args.runs_dir), args.verb, timeout=args.timeout)
    print(result.message, flush=True)
    return 0


def cmd_remote_devices(args: argparse.Namespace) -> int:
    from core.cli.main import print_devices
    from core.remote.client import host_devices

    info = host_devices(host_of(args.host, args), refresh=args.refresh)
    if args.json:
        where = {"host": info.dest, "version": info.version, "runs_root": info.runs_root}
        print(json.dumps({**where, "devices": [d.to_dict() for d in info.devices]}, indent=2))
        return 0
    print(
        f"{printable(info.dest)} ({printable(info.hostname)}): amp-console {printable(info.version)}, "
        f"runs under {printable(info.runs_root)}"
    )
    print_devices(info.devices)
    return 0


def cmd_remote_start(args: argparse.Namespace) -> int:
    from core.cli.train import parse_option
    from core.config import read_config_file
    from core.remote.client import start_remote_run

    values = read_config_file(args.config) if args.config else {}
    if values.pop("out_dir", None):
        _say(f"{args.config}: its out_dir is a folder here, ignored: the run gets one under the host's runs root")
    values.update({n: getattr(args, n) for n in START_FLAGS if getattr(args, n) is not None} | data_flag_values(args))
    if args.data:
        values["data"] = args.data
    if args.remote_task:
        values.pop("task_file", None)
        values["task"] = args.remote_task
    if args.task_options:
        values["task_options"] = {**values.get("task_options", {}), **dict(map(parse_option, args.task_options))}
    host = host_of(args.host, args)
    config = _config_for_host(values, host.dest, args.config or "the command line", args.upload)
    fields = [name for name in ("data", "val_data", "test_data") if getattr(config, name)] if args.upload else []
    run = start_remote_run(host, config, upload_fields=fields, nproc=args.nproc, on_progress=_say)
    print(run.target, flush=True)
    if not args.watch:
        return 0
    args.target = run.target
    return cmd_watch(args)


def _config_for_host(values: dict, dest: str, source: str, upload: bool):
    """The RunConfig `remote start` sends: the task's defaults under `values`. A user task is named from its source here
    (none of its code runs here); what only the host can check (a user task, data paths there) is left to it."""
    from core.config import RunConfig
    from core.remote.task_file import task_for_host
    from core.tasks import get_task_info
    from core.tasks.user_tasks import canonical_reference, is_reference

    task = values.get("task", RunConfig.task)
    reference = task if is_reference(task) else values.get("task_file", "")
    if reference:
        reference = canonical_reference(reference)
        name, defaults = task_for_host(reference, "" if is_reference(task) else task, dest)
        values = {**defaults, **values, "task": name, "task_file": reference}
    else:
        values = {**get_task_info(task).defaults, **values}
    config = RunConfig.from_dict(values, source=source)
    problems = config.errors()
    if reference:
        problems.pop("task", None)
    if not upload:
        for name in ("data", "val_data", "test_data"):
            if problems.get(name, "").endswith(": no such file or folder"):
                problems.pop(name)
    if problems:
        name, message = next(iter(problems.items()))
        raise ConfigError(name, message)
    return config


def cmd_remote_install(args: argparse.Namespace) -> int:
    from core.remote.install import install

    host = host_of(args.host, args)
    shown = install(host, args.python, args.venv, args.torch_spec, args.system_site_packages, on_progress=_say)
    found = "" if args.venv == VENV_SHOWN else f" --remote-command {args.venv}/bin/amp-console"
    print(
        f"amp-console {shown} installed in {host.dest}:{args.venv}; try `amp-console remote devices {host.dest}{found}`"
    )
    return 0


def cmd_remote_runs(args: argparse.Namespace) -> int:
    from core.cli.runs import print_run_table, runs_dir
    from core.remote.fetch import list_host_runs

    listed = list_host_runs(host_of(args.host, args), runs_dir(args))
    if args.json:
        print(json.dumps(listed.runs, indent=2, default=str))
    elif not listed.runs:
        print(f"no runs in {listed.root} on {printable(listed.dest)}")
    else:
        print_run_table(listed.runs)
    return 0


def cmd_remote_fetch(args: argparse.Namespace) -> int:
    from core.cli.runs import runs_dir
    from core.remote.fetch import fetch_run
    from core.remote.ssh import parse_target

    remote = parse_target(args.target)
    if remote is None or not remote[1]:
        raise ConfigError("target", f"{printable(args.target)}: give HOST:RUN (a run's folder, name or id on the host)")
    line, shown = fmt.LiveLine(), [("", -1)]  # the file and tenth a log's last line showed

    def progress(done: int, total: int, name: str) -> None:
        text = f"amp-console: fetching {name}: {fmt.size(done) if done else '0 B'} of {fmt.size(total)}"
        tenth = (name, 10 * done // total if total else 10)
        line(
            f"{text} ({100 * done // total if total else 100}%)" if line.live else text,
            keep=not line.live and tenth != shown[0],
        )
        shown[0] = tenth

    fetched = fetch_run(
        host_of(remote[0], args), remote[1], runs_dir(args), checkpoint=not args.no_checkpoint, on_progress=progress
    )
    line.close()
    kept = f", {len(fetched.kept)} already here" if fetched.kept else ""
    sent = fmt.size(fetched.bytes_sent) if fetched.bytes_sent else "0 B"
    _say(f"fetched {len(fetched.sent)} file(s) ({sent}){kept}")
    print(fetched.folder, flush=True)
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from core.remote import agent

    agent.check_version(args.client_version)
    if args.op == "info":
        agent.print_json(agent.info(args.refresh))
    elif args.op == "start":
        try:
            request = json.loads(sys.stdin.buffer.read() or b"{}")
        except ValueError as exc:
            raise agent.AgentError(f"the start request is not JSON ({exc})") from None
        if not isinstance(request, dict):
            raise agent.AgentError("the start request is not a JSON object")
        request.setdefault("runs_dir", args.runs_dir)
        agent.print_json(agent.start(request))
    elif args.op == "follow":
        agent.follow(agent.find_run_folder(args.folder, args.runs_dir), args.offset, sys.stdout.buffer)
    elif args.op == "control":
        agent.print_json(agent.control(agent.find_run_folder(args.folder, args.runs_dir), args.verb, args.timeout))
    elif args.op == "runs":
        agent.runs(sys.stdout.buffer, args.runs_dir)
    elif args.op == "fetch":
        folder = agent.find_run_folder(args.folder, args.runs_dir)
        agent.fetch(folder, args.checkpoint, sys.stdin.buffer, sys.stdout.buffer, args.runs_dir)
    elif args.op == "put":
        agent.print_json(agent.put(args.sha256, args.size, args.name, sys.stdin.buffer, args.check, args.runs_dir))
    return 0
