"""`amp-console queue add | list | remove | move | retry | pause | resume | start`: the run queue (core.runs.queue) in
<runs root>/.queue.json, the one the window's queue panel shows. `add` takes `train`'s settings (config files,
flags, -o) and, with --grid, a sweep's trials (--host: trained on a host over ssh); `start` trains the pending
entries one after another. No torch here.
"""

from __future__ import annotations

import argparse
import json

from core.cli import format as fmt
from core.cli.common import OneLineParser, StopSignals, add_runs_dir_flag
from core.cli.train import _user_layers, add_setting_flags
from core.config import RunConfig


def register(sub) -> None:
    p = sub.add_parser("queue", help="a queue of runs that train one after another (the window's queue panel)")
    actions = p.add_subparsers(dest="queue_action", required=True, parser_class=OneLineParser, metavar="ACTION")
    add = actions.add_parser("add", help="add runs: one per config file (or the flags' settings), or a grid's trials")
    add.add_argument("configs", nargs="*", metavar="FILE.toml", help="settings files, one entry each")
    add_setting_flags(add)
    add.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a sweep's trials (repeatable)")
    add.add_argument("--name", default="", help="the entry's name (default: the file's, the task's or the trial's)")
    add.add_argument("--host", default="", metavar="HOST", help="train there, over ssh (paths: the host's)")
    add.add_argument("--remote-command", metavar="CMD", help="how HOST runs amp-console (remote start's)")
    add.add_argument("--ssh-config", metavar="FILE", help="an ssh config file (ssh -F FILE)")
    add.add_argument("--ssh-option", metavar="OPTION", action="append", default=[], help="ssh -o OPTION, repeatable")
    listing = actions.add_parser("list", help="the entries with their states, run folders and results")
    listing.add_argument("--json", action="store_true", help="print the queue as JSON")
    remove = actions.add_parser("remove", help="remove an entry that is not running (its run folder stays)")
    move = actions.add_parser("move", help="move a pending entry to POSITION (1 = next)")
    retry = actions.add_parser("retry", help="a failed or stopped entry, pending again (from its checkpoint if any)")
    for each in (remove, move, retry):
        each.add_argument("entry", metavar="ENTRY", help="its number in `queue list`, or its id")
    move.add_argument("position", type=int, metavar="POSITION")
    actions.add_parser("pause", help="start no new entry (the running one goes on)")
    actions.add_parser("resume", help="let `queue start` (or the window) start entries again")
    start = actions.add_parser("start", help="train the pending entries one after another, here")
    start.add_argument("--device", default="", help="train every entry on this device (default: each entry's own)")
    for each in actions.choices.values():
        add_runs_dir_flag(each, "the runs root whose queue this is")
    p.set_defaults(handler=cmd_queue)


def added_configs(args: argparse.Namespace) -> list[tuple[str, RunConfig]]:
    """(name, config) per entry: each file (or none) with the flags over it, over its task's defaults."""
    from pathlib import Path

    entries = []
    for file in args.configs or [None]:
        args.config = file
        user, flags = _user_layers(args)
        merged = {**user, **flags}
        config = RunConfig.for_task(merged.pop("task", RunConfig.task), **merged)
        name = args.name or (Path(file).stem if file else config.task)
        if not args.grid:
            entries.append((name, config))
            continue
        from core.lab.sweep.plan import grid_axis, plan_trials

        trials = plan_trials(config, [grid_axis(spec, config.task) for spec in args.grid])
        entries += [(f"{name} {trial.name}", trial.config) for trial in trials]
    return entries


def cmd_queue(args: argparse.Namespace) -> int:
    from core.runs import queue

    root, action = queue.queue_root(args.runs_dir), args.queue_action
    if action == "add":
        from core.cli.remote import host_of

        added = queue.add_entries(root, added_configs(args), host_of(args.host, args) if args.host else None)
        print(f"added {len(added)} to the queue in {root / queue.QUEUE_FILE}: " + ", ".join(e["name"] for e in added))
    elif action == "list":
        data = queue.read_queue(root)
        if args.json:
            print(json.dumps(data, indent=1))
            return 0
        table = fmt.table(f"Queue in {root}" + (" (paused)" if data.get("paused") else ""))
        for column in ("#", "id", "name", "state", "run folder", "result"):
            table.add_column(column, overflow="fold")
        for number, e in enumerate(data["entries"], start=1):
            table.add_row(str(number), e["id"], e["name"], e["state"], e["folder"], e["result"])
        fmt.console().print(table)
    elif action == "retry":
        print(f"pending again: {queue.retry_entry(root, args.entry)['name']}")
    elif action in ("remove", "move"):
        entry = (
            queue.remove_entry(root, args.entry)
            if action == "remove"
            else queue.move_entry(root, args.entry, args.position)
        )
        print(f"{action}d {entry['name']} ({entry['id']})")
    elif action in ("pause", "resume"):
        queue.set_paused(root, action == "pause")
        print(f"queue {action}d")
    else:
        runner = queue.QueueRunner(root, args.device, emit=_print_changes(), on_host=train_on_host)
        with StopSignals(runner.control, announce=False) as signals:
            signals.started(runner.control)  # Ctrl+C: the running entry stops with its checkpoint
            ended = runner.run()
        states = [e["state"] for e in queue.read_queue(root)["entries"]]
        print(f"queue {ended}: " + ", ".join(f"{states.count(s)} {s}" for s in queue.STATES if s in states))
        return 1 if ended == "stopped" else 0
    return 0


def _print_changes():
    """emit for the runner: one line per entry whose state, folder or result changed."""
    seen: dict = {}

    def emit(data: dict) -> None:
        for e in data["entries"]:
            now = (e["state"], e["folder"], e["result"])
            if seen.get(e["id"]) != now:
                seen[e["id"]] = now
                extra = "  ".join(part for part in (e["folder"], e["result"]) if part)
                print(f"{e['name']}: {e['state']}  {extra}".rstrip(), flush=True)

    return emit


def train_on_host(entry: dict, control, started, root) -> tuple[str, str]:
    """QueueRunner's `on_host`: start the entry's run on its host (unless a killed runner did: its "HOST:PATH" folder
    is followed again from the start), follow it to its end as `watch` does, stop it through its control channel
    when `control` asks; (state, result) from its run.json there, else its last RunEnded event."""
    import contextlib
    import threading

    from core.engine.events import RunEnded, event_or_none
    from core.engine.run_folder import CHECKPOINT_FILE
    from core.errors import AmpConsoleError
    from core.remote.client import control_remote, follow_remote, start_remote_run
    from core.remote.fetch import list_host_runs
    from core.remote.ssh import Host
    from core.runs.queue import outcome
    from core.text import first_line

    host = Host(**{**entry["host"], "ssh_options": tuple(entry["host"].get("ssh_options", ()))})
    try:
        if not entry["folder"]:  # a retried entry resumes in its folder there, from the checkpoint it has
            old = entry.get("retried", "").partition(":")[2]
            there = [r for r in list_host_runs(host, root).runs if r.get("remote_folder") == old] if old else []
            resume = f"{old}/{CHECKPOINT_FILE}" if there and "last" in (there[0].get("checkpoints") or {}) else None
            config = {**entry["config"], "out_dir": old} if resume else entry["config"]
            started(start_remote_run(host, config, resume=resume).target)
        path = entry["folder"].split(":", 1)[1]
        follower, ended, done = follow_remote(host, path), None, threading.Event()

        def stop_when_asked() -> None:
            while not done.wait(0.2):
                if control.stop_requested:
                    with contextlib.suppress(AmpConsoleError, OSError):
                        control_remote(host, path, "stop")
                    return

        threading.Thread(target=stop_when_asked, daemon=True).start()
        try:
            for line in follower:
                event = event_or_none(line.record) if hasattr(line, "record") else None
                ended = event if isinstance(event, RunEnded) else ended
        finally:
            done.set()
    except AmpConsoleError as exc:
        return "failed", first_line(str(exc))
    record = None if ended is None else {"status": ended.status, "message": ended.message, "metrics": ended.metrics}
    with contextlib.suppress(AmpConsoleError, OSError):  # its run.json there names its best metric
        there = [r for r in list_host_runs(host, root).runs if r.get("remote_folder") == path]
        record = there[0] if there and there[0].get("status") in ("completed", "stopped", "failed") else record
    return outcome(
        record, f"the run on {host.dest} ended without a word" + (f": {follower.note}" if follower.note else "")
    )
