"""The run queue: settings waiting to train one after another, in <runs root>/.queue.json (written atomically under a
short edit lock); each entry a RunConfig dict, a state (STATES), its run folder and its result (the best metric, or
why it failed or stopped). QueueRunner holds .queue.lock for its life. A local entry trains as train_command's child
(logging to .queue/<id>.log; a killed runner's resumes from its checkpoint); one with a `host` trains there through
`on_host` (core.cli.queue.train_on_host), followed as `watch HOST:PATH` does and again after a kill. No torch here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import threading
import time
from pathlib import Path

from core.config import RunConfig, train_command
from core.engine.control import RunControl
from core.engine.folder_control import ControlError, write_request
from core.engine.run_folder import CHECKPOINT_FILE, is_in_use
from core.engine.run_record import load_record, new_id, now_iso, runs_root
from core.errors import AmpConsoleError, ConfigError
from core.files import UnreadableFile, atomic_write_bytes, log_tail, read_json_record, try_lock
from core.process import STOP_GRACE_SECONDS, StopEscalation, child_environment
from core.text import first_line

QUEUE_FILE, RUNNER_LOCK, EDIT_LOCK, ENTRY_FOLDER = ".queue.json", ".queue.lock", ".queue.edit.lock", ".queue"
STATES = ("pending", "running", "done", "failed", "stopped")
EDIT_WAIT = 30.0  # seconds an edit waits for another's lock
KILLED = "the console was killed before the run's first checkpoint"


class QueueError(AmpConsoleError):
    """A queue that cannot be read or changed as asked (one line)."""


def queue_root(root=None) -> Path:
    return runs_root(root)


def read_queue(root=None) -> dict:
    """{"paused": bool, "device": str, "entries": [...]}; an empty queue when there is no file."""
    path = queue_root(root) / QUEUE_FILE
    try:
        data = read_json_record(path)
    except FileNotFoundError:
        return {"paused": False, "device": "", "entries": []}
    except (OSError, UnreadableFile) as exc:
        raise QueueError(f"{path}: {exc}") from None
    if not isinstance(data.get("entries"), list):
        raise QueueError(f"{path}: no list of entries")
    return data


@contextlib.contextmanager
def editing(root=None):
    """The queue to change in place, written back atomically when the block ends, under the edit lock (held for a
    read-modify-write only: milliseconds; QueueError after EDIT_WAIT s)."""
    root = queue_root(root)
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + EDIT_WAIT
    while (fd := try_lock(root / EDIT_LOCK)) is None:
        if time.monotonic() > deadline:
            raise QueueError(f"{root / QUEUE_FILE}: another process has been changing the queue for {EDIT_WAIT:g} s")
        time.sleep(0.02)
    try:
        data = read_queue(root)
        yield data
        atomic_write_bytes(root / QUEUE_FILE, (json.dumps(data, indent=1) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def add_entries(root, configs: list[tuple[str, RunConfig]], host=None) -> list[dict]:
    """Append one pending entry per (name, config); file paths are made absolute (the run's folder is not ours).
    `host` (a core.remote.ssh.Host): the entries train there; their paths are the host's, checked there."""
    added = []
    for name, config in configs:
        problems = {
            k: v for k, v in config.errors().items() if host is None or not v.endswith("no such file or folder")
        }
        if problems:  # a host's data paths are checked there
            raise ConfigError(*next(iter(problems.items())))
        for key in ("data", "val_data", "test_data", "query_file", "task_file") if host is None else ():
            if getattr(config, key):
                config = config.replace(**{key: os.path.abspath(os.path.expanduser(getattr(config, key)))})
        added.append(
            {"id": new_id(), "name": name, "state": "pending", "config": config.to_dict(), "folder": ""}
            | {"result": "", "added": now_iso()}
            | ({"host": dataclasses.asdict(host)} if host is not None else {})
        )
    with editing(root) as data:
        data["entries"] += added
    return added


def find_entry(data: dict, key: str) -> dict:
    """The entry whose id is `key` or starts with it, or the N-th (1-based) entry for a number."""
    entries = data["entries"]
    if key.isdigit() and 1 <= int(key) <= len(entries):
        return entries[int(key) - 1]
    found = [e for e in entries if e["id"].startswith(key)]
    if len(found) != 1:
        raise QueueError(f"{key!r}: {'no' if not found else 'more than one'} queue entry has that id or number")
    return found[0]


def remove_entry(root, key: str) -> dict:
    with editing(root) as data:
        entry = find_entry(data, key)
        if entry["state"] == "running":
            raise QueueError(f"{entry['name']} is running: stop it first")
        data["entries"].remove(entry)
    return entry


def move_entry(root, key: str, to: int) -> dict:
    """Move a pending entry to position `to` (1-based, clamped)."""
    with editing(root) as data:
        entry = find_entry(data, key)
        if entry["state"] != "pending":
            raise QueueError(f"{entry['name']} is {entry['state']}: only a pending entry moves")
        data["entries"].remove(entry)
        data["entries"].insert(max(0, min(to - 1, len(data["entries"]))), entry)
    return entry


def retry_entry(root, key: str) -> dict:
    """A failed or stopped entry, pending again: it resumes from its run's checkpoint when it has one."""
    with editing(root) as data:
        entry = find_entry(data, key)
        if entry["state"] not in ("failed", "stopped"):
            raise QueueError(f"{entry['name']} is {entry['state']}: only a failed or stopped entry is retried")
        entry.update(state="pending", result="")
    return entry


def set_paused(root, paused: bool) -> None:
    with editing(root) as data:
        data["paused"] = paused


def outcome(record: dict | None, fallback: str) -> tuple[str, str]:
    """(state, result) of a finished entry from its run.json: the best (else final) metric, or the run's reason."""
    record = record or {}
    status = record.get("status")
    if status == "completed":
        best, metrics = record.get("best") or {}, record.get("metrics") or {}
        name, value = (
            (best["name"], best["value"]) if best.get("value") is not None else next(iter(metrics.items()), ("", None))
        )
        return "done", f"{name} {value:.4g}" if isinstance(value, (int, float)) else "completed"
    if status in ("stopped", "failed"):
        return status, first_line(record.get("message") or status)
    return "failed", fallback


class QueueRunner:
    """Trains the queue's pending entries one after another until none is left, the queue is paused, or
    `control` stops it (the running entry then stops with its checkpoint). `emit(data)` gets the queue after
    each change. `device`: every entry trains there (else its own setting). `on_host(entry, control, started, root)`
    trains an entry with a host there and returns its (state, result) (core.cli.queue.train_on_host)."""

    def __init__(self, root=None, device: str = "", emit=None, control: RunControl | None = None, on_host=None):
        self.root, self.on_host = queue_root(root), on_host
        self.device, self.emit, self.control = device, emit or (lambda _data: None), control or RunControl()

    def _change(self, entry_id: str, **values) -> None:
        with editing(self.root) as data:
            for entry in data["entries"]:
                if entry["id"] == entry_id:
                    entry.update(values)
        self.emit(data)

    def run(self) -> str:
        """'finished', 'paused' or 'stopped'. QueueError when another runner holds the queue."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = try_lock(self.root / RUNNER_LOCK)
        if lock is None:
            raise QueueError(f"{self.root}: another console is running this queue")
        try:
            self._recover()
            paused = False
            while not self.control.stop_requested:
                with editing(self.root) as data:
                    waiting = [e for e in data["entries"] if e["state"] in ("running", "pending")]
                    if (paused := bool(data.get("paused"))) or not waiting:
                        break
                    entry = waiting[0]  # a recovered 'running' entry comes before the pending ones
                    resume = bool(entry["folder"]) and (Path(entry["folder"]) / CHECKPOINT_FILE).is_file()
                    if entry.get("host") and entry["state"] == "pending":  # retried: resumed there if it can be
                        entry.update(folder="", retried=entry["folder"])
                    entry.update(state="running", started=now_iso())
                self.emit(data)
                self._train_remote(entry) if entry.get("host") else self._train(entry, resume)
            return "stopped" if self.control.stop_requested else "paused" if paused else "finished"
        finally:
            os.close(lock)

    def _recover(self) -> None:
        """An entry left 'running' by a killed runner: wait for its run to stop itself (it ended with its parent),
        then resume it from its checkpoint, or record how it ended."""
        for entry in read_queue(self.root)["entries"]:
            if entry["state"] != "running" or entry.get("host"):  # a host's run goes on: followed again
                continue
            folder = Path(entry["folder"]) if entry["folder"] else None
            while folder is not None and is_in_use(folder) and not self.control.stop_requested:
                time.sleep(0.2)
            record = load_record(folder) if folder else None
            if record and record.get("status") in ("completed", "failed"):  # it ended before the kill
                self._change(entry["id"], **dict(zip(("state", "result"), outcome(record, ""))))
            elif folder is None or not (folder / CHECKPOINT_FILE).is_file():
                self._change(entry["id"], state="failed", result=KILLED)

    def command(self, entry: dict, resume: bool) -> list[str]:
        """The training process of an entry: `train` with its settings as the CLI runs it, events on stdout."""
        resumed = ["--resume", str(Path(entry["folder"]) / CHECKPOINT_FILE), "--out", entry["folder"]] if resume else []
        device = ["--device", self.device] if self.device else []
        return train_command(RunConfig.from_dict(entry["config"]), *device, *resumed, runs_dir=str(self.root))

    def _train(self, entry: dict, resume: bool) -> None:
        files = self.root / ENTRY_FOLDER
        files.mkdir(exist_ok=True)
        log_path = files / f"{entry['id']}.log"
        lines: list[dict] = []
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    self.command(entry, resume), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                    text=True, env=child_environment(), start_new_session=os.name == "posix",
                )  # fmt: skip
        except OSError as exc:
            return self._change(entry["id"], state="failed", result=f"could not start a training process: {exc}")
        reader = threading.Thread(target=_json_lines, args=(proc.stdout, lines), daemon=True)
        reader.start()
        folder, stopping = entry["folder"], None
        while proc.poll() is None or reader.is_alive():
            reader.join(0.2)
            said = next((line["folder"] for line in lines if "folder" in line), "")
            if said and not folder:
                folder = said
                self._change(entry["id"], folder=folder)
            if self.control.stop_requested and proc.poll() is None:
                if stopping is None and folder:
                    with contextlib.suppress(ControlError, OSError):
                        write_request(folder, "stop")
                    stopping = StopEscalation(proc.pid, STOP_GRACE_SECONDS)
                elif stopping is not None:
                    stopping.poll()
        for stream in (proc.stdin, proc.stdout):
            stream.close()  # type: ignore[union-attr]
        setup = next((line["setup_error"] for line in lines if "setup_error" in line), "")
        reason = setup or log_tail(log_path) or f"the training process ended with exit code {proc.returncode}"
        state, result = outcome(load_record(folder) if folder else None, reason)
        self._change(entry["id"], state=state, result=result, ended=now_iso())

    def _train_remote(self, entry: dict) -> None:
        """The entry's run on its host, through `on_host` (core.cli.queue.train_on_host: the layer that reaches hosts)."""

        def started(target: str) -> None:
            entry["folder"] = target
            self._change(entry["id"], folder=target)

        if self.on_host is None:
            state, result = "failed", "this console does not reach hosts"
        else:
            state, result = self.on_host(entry, self.control, started, self.root)
        self._change(entry["id"], state=state, result=result, ended=now_iso())


def _json_lines(stream, found: list) -> None:
    """The JSON objects a training process prints (`--events`: where its run is, or its setup error)."""
    for line in stream:
        with contextlib.suppress(ValueError):
            if line.startswith("{") and isinstance(value := json.loads(line), dict):
                found.append(value)
