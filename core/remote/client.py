"""Starting, following and steering runs on another machine over ssh (the desktop side of core.remote.agent), for the
CLI and the window alike.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from core.devices import DeviceInfo
from core.engine.events import ControlAcknowledged, event_or_none
from core.engine.folder_control import ControlRequest, ControlResult
from core.engine.follow import FollowLine
from core.errors import ConfigError
from core.files import log_tail
from core.remote import ssh
from core.remote.agent import FILE_FIELDS, LOG_FILE, AgentError, find_run_folder, sha256_of
from core.remote.ssh import Host, RemoteError
from core.text import printable

BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # between reconnections; the last repeats
GIVE_UP_SECONDS = 600.0  # a follower stops trying after this long without a connection
SILENCE_SECONDS = 15.0  # no byte (not even a heartbeat, every 2 s) for this long: the connection is dead


def _agent(host: Host, args: list[str], payload: bytes | None = None, timeout: float = 120.0) -> dict:
    out = ssh.run(host, args, payload=payload, timeout=timeout)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    raise RemoteError(f"{host.dest}: `amp-console agent {args[0]}` gave no answer; is `{host.command}` amp-console?")


@dataclass(frozen=True)
class HostInfo:
    dest: str
    version: str
    devices: list[DeviceInfo]
    runs_root: str  # on the host
    hostname: str


def host_devices(host: Host, timeout: float = 120.0, refresh: bool = False) -> HostInfo:
    """The host's amp-console version, devices (`refresh`: probed again) and runs root; RemoteError (one line) when
    it is unreachable, has no or another amp-console, or answers what parse_info refuses."""
    return parse_info(host.dest, _agent(host, ["info", *(["--refresh"] * refresh)], timeout=timeout))


_SIZE = (int, type(None))  # what a device's fields may hold, by their DeviceInfo annotation
_FIELD_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "str | None": (str, type(None)), "int | None": _SIZE}
_FIELD_TYPES |= {"bool": (bool,), "dict": (dict,), "tuple[str, ...]": (list,)}
_SCALARS = (str, int, float, bool, type(None))


def parse_info(dest: str, data) -> HostInfo:
    """The HostInfo of an `agent info` answer, read as data from an untrusted host: each field of the type it
    has here (sizes whole numbers >= 0; a device's details flat, its precisions and reasons text), text made
    printable; RemoteError naming the first field that is not."""
    fields = {f.name: _FIELD_TYPES[str(f.type)] for f in dataclasses.fields(DeviceInfo)}
    required = [f.name for f in dataclasses.fields(DeviceInfo) if f.default is dataclasses.MISSING is f.default_factory]

    def refuse(where: str, why: str) -> NoReturn:
        raise RemoteError(
            f"{dest}: its `agent info` answer is not understood: {printable(where)[:80]} {why} "
            f"(is the same amp-console version installed there?)"
        )

    def device(i: int, d) -> DeviceInfo:
        if not isinstance(d, dict):
            refuse(f"device {i}", "is not an object")
        values: dict = {}
        for name, value in d.items():
            where = f"device {i}'s {name!r}"
            if name not in fields:
                refuse(where, "is a field this version does not know")
            if not isinstance(value, fields[name]) or (
                fields[name] == _SIZE and (isinstance(value, bool) or (isinstance(value, int) and value < 0))
            ):
                refuse(where, f"is {json.dumps(value)[:40]}")
            if isinstance(value, (list, dict)):
                items = dict(value.items() if isinstance(value, dict) else enumerate(value))
                if not all(isinstance(v, str if name != "details" else _SCALARS) for v in items.values()):
                    refuse(where, "holds values that are not text" if name != "details" else "is not flat")
                items = {printable(k): printable(v) if isinstance(v, str) else v for k, v in items.items()}
                value = tuple(items.values()) if name == "precisions" else items
            values[name] = printable(value) if isinstance(value, str) else value
        if missing := [name for name in required if name not in values]:
            refuse(f"device {i}", f"has no {missing[0]!r}")
        return DeviceInfo(**values)

    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        refuse("the answer", "is not an object with a list of devices")
    devices = [device(i, d) for i, d in enumerate(data["devices"])]
    for key in ("version", "runs_root", "host"):
        if not isinstance(data.get(key), str):
            refuse(repr(key), f"is {json.dumps(data.get(key))[:40]}, not text")
    return HostInfo(dest, printable(data["version"]), devices, printable(data["runs_root"]), printable(data["host"]))


@dataclass(frozen=True)
class RemoteRun:
    host: Host
    folder: str  # the run folder on the host
    pid: int  # the run's process there (the torchrun launcher under --nproc)
    log: str  # its train.log there: setup errors, warnings
    task_file: str = ""  # a user task's reference the run was given there (its copy in the folder), else ""

    @property
    def target(self) -> str:
        return f"{self.host.dest}:{self.folder}"


def upload(host: Host, local: str | os.PathLike, timeout: float = 3600.0) -> str:
    """Copy a local file to the host's uploads folder unless one with the same sha256 is there; its path there."""
    path = Path(local)
    if not path.is_file():
        raise ConfigError(
            "data",
            f"{path}: no such local file to copy to {host.dest} (folders are not copied: "
            f"copy them there and give their path on the host)",
        )
    size = path.stat().st_size
    with open(path, "rb") as f:
        sha = sha256_of(f, size)
    args = ["put", "--sha256", sha, "--size", str(size), "--name", path.name]
    kept = _agent(host, [*args, "--check"]).get("path")
    if kept:
        return str(kept)
    return str(_agent(host, args, payload=path.read_bytes(), timeout=timeout)["path"])


def start_remote_run(
    host: Host,
    config,
    upload_fields: Iterable[str] = (),
    resume: str | None = None,
    nproc: int | None = None,
    runs_dir: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RemoteRun:
    """Start `amp-console train` with `config` (a RunConfig or its dict) detached on the host, once its task file is
    sent and the local files of `upload_fields` copied there; return once the run holds its folder."""
    from core.remote.task_file import task_payload

    say = on_progress or (lambda _text: None)
    values = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    task_file, task_note = task_payload(values["task_file"], host.dest) if values.get("task_file") else (None, "")
    for name in upload_fields:
        if name not in FILE_FIELDS:
            raise ConfigError(name, f"{name} is not a data file setting ({', '.join(FILE_FIELDS)})")
        if values.get(name):
            say(f"copying {values[name]} to {host.dest} (skipped if it is there already)")
            values[name] = upload(host, values[name])
    request = {"config": values, "resume": resume, "nproc": nproc, "runs_dir": runs_dir}
    if task_file is not None:
        request["task_file"] = task_file
    if task_note:
        say(task_note)
    say(f"starting the run on {host.dest}")
    data = _agent(host, ["start"], payload=json.dumps(request).encode("utf-8"), timeout=600.0)
    return RemoteRun(host, str(data["folder"]), int(data["pid"]), str(data["log"]), str(data.get("task_file") or ""))


def control_remote(host: Host, folder: str, verb: str, timeout: float = 30.0) -> ControlResult:
    """`pause`, `resume` or `stop` the run in `folder` on the host, waiting up to `timeout` s for its outcome."""
    data = _agent(host, ["control", folder, verb, "--timeout", str(timeout)], timeout=timeout + 60.0)
    ack = event_or_none(data["acknowledged"]) if data.get("acknowledged") else None
    outcome = event_or_none(data["outcome"]) if data.get("outcome") else None
    request = ControlRequest(Path(folder), int(data.get("seq") or 0), verb, str(data.get("request")))
    return ControlResult(
        request, ack if isinstance(ack, ControlAcknowledged) else None, outcome, printable(str(data.get("message", "")))
    )


# ----------------------------------------------------------------------------------------------- follow
@dataclass(frozen=True)
class FollowNote:
    """The connection's state for the user: lost (and when it is tried again), or back."""

    text: str
    connected: bool


@dataclass(eq=False)
class RemoteFollower:
    """FollowLines of a host's run's metrics.jsonl from byte `offset`, and FollowNotes as the connection drops and is
    retried with back-off; ends with the run or on close(); RemoteError if unreachable for `give_up_after` s."""

    host: Host
    folder: str
    offset: int = 0
    backoff: tuple[float, ...] = BACKOFF_SECONDS
    give_up_after: float = GIVE_UP_SECONDS
    silence: float = SILENCE_SECONDS
    status: str = field(default="running", init=False)
    note: str = field(default="", init=False)
    connections: int = field(default=0, init=False)  # how many times a stream was established
    _closed: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def ssh_pid(self) -> int | None:
        """The current ssh client's process id (None between connections)."""
        process = self._process
        return process.pid if process is not None else None

    def close(self) -> None:
        """End the iteration from any thread (the current connection is closed)."""
        self._closed.set()
        ssh.kill(self._process)

    def __iter__(self) -> Iterator[FollowLine | FollowNote]:
        attempt, lost_since = 0, None
        while not self._closed.is_set():
            args = ["follow", self.folder, "--offset", str(self.offset)]
            process = self._process = ssh.start(self.host, args, stdin=subprocess.DEVNULL, keepalive=True)
            try:
                streamed = yield from self._stream(process)
            finally:
                ssh.kill(self._process)
                stderr = process.stderr.read().decode("utf-8", "replace") if process.stderr else ""
                process.wait()
                for pipe in (process.stdout, process.stderr):
                    if pipe is not None:
                        pipe.close()
                self._process = None
            if self.status != "running" or self._closed.is_set():
                if self._closed.is_set() and self.status == "running":
                    self.status = "stopped"
                return
            code = process.returncode
            if streamed:
                attempt, lost_since = 0, None
            elif code not in (255, None) and code >= 0:  # the host answered: no amp-console, a bad folder...
                raise ssh.failure(self.host, code, stderr)
            elif self.connections == 0:  # never reached: a wrong host, no key, sshd down
                raise ssh.failure(self.host, 255 if code is None or code < 0 else code, stderr)
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > self.give_up_after:
                raise RemoteError(
                    f"{self.host.dest}: no connection for {self.give_up_after:g} s; the run goes on "
                    f"there: watch it again later from byte {self.offset}"
                )
            delay = self.backoff[min(attempt, len(self.backoff) - 1)]
            attempt += 1
            reason = [line for line in stderr.splitlines() if line.strip()]
            why = printable(reason[-1].strip()) if reason else "the connection closed"
            yield FollowNote(f"connection to {self.host.dest} lost ({why}); trying again in {delay:g} s", False)
            if self._closed.wait(delay):
                self.status = "stopped"
                return

    def _stream(self, process: subprocess.Popen) -> Generator[FollowLine | FollowNote, None, bool]:
        """One connection's lines; returns whether the stream came up (its first `#offset`)."""
        lines: queue.Queue = queue.Queue()
        stdout = process.stdout
        assert stdout is not None  # opened with PIPE

        def read() -> None:
            for raw in stdout:
                lines.put(raw)
            lines.put(None)

        threading.Thread(target=read, name="remote-follow", daemon=True).start()
        up = False
        while True:
            try:
                raw = lines.get(timeout=self.silence)
            except queue.Empty:  # not even a heartbeat: the connection is dead without having said so
                ssh.kill(self._process)
                return up
            if raw is None or not raw.endswith(b"\n"):  # the end, or a line cut by a dropped connection
                return up
            if raw.startswith(b"#"):
                word, _, rest = raw[1:].rstrip(b"\n").partition(b" ")
                if word == b"offset":
                    self.offset = int(rest)
                    if not up:
                        up = True
                        self.connections += 1
                        if self.connections > 1:
                            yield FollowNote(
                                f"connection to {self.host.dest} back; following from byte {self.offset}", True
                            )
                elif word == b"end":
                    status, _, note = rest.decode("utf-8", "replace").partition("\t")
                    self.status, self.note = status or "ended", printable(note.strip())
                    return up
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            self.offset += len(raw)
            if isinstance(record, dict):
                yield FollowLine(record, raw.rstrip(b"\n"), self.offset)


def follow_remote(host: Host, folder: str, offset: int = 0, **options) -> RemoteFollower:
    """A RemoteFollower of the run in `folder` on the host from byte `offset` (iterate it; close() ends it)."""
    return RemoteFollower(host, folder, offset, **options)


class LocalFollower:
    """The same interface for a run folder on this machine: iterate for FollowLines, close() from any thread."""

    def __init__(self, folder: str | os.PathLike, offset: int = 0):
        from core.engine.follow import MetricsFollower

        self.follower = MetricsFollower(folder, offset)
        self.folder = str(folder)
        self.note = ""
        self._stop = threading.Event()

    @property
    def status(self) -> str:
        return self.follower.status

    @property
    def offset(self) -> int:
        return self.follower.offset

    def close(self) -> None:
        self._stop.set()

    def __iter__(self) -> Iterator[FollowLine]:
        for line in self.follower.lines(stop=self._stop):
            if line is not None:
                yield line
        if self.follower.status == "gone":
            self.note = log_tail(Path(self.folder) / LOG_FILE)


def follow_run(target: str, offset: int = 0, host: Host | None = None, runs_dir: str | None = None):
    """A follower of `target`: `host:path` over ssh (reached as `host` says), else a run folder or run here."""
    remote = ssh.parse_target(target) if not os.path.exists(target) else None
    if remote is not None:
        dest, path = remote
        reach = Host(dest, host.command, host.ssh_options, host.connect_timeout) if host else Host(dest)
        return RemoteFollower(reach, path, offset)
    try:
        return LocalFollower(find_run_folder(target, runs_dir), offset)
    except AgentError as exc:
        raise RemoteError(str(exc)) from None
