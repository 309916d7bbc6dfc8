"""A host's runs in this machine's history: list them (`agent runs`) and fetch one run's small files and best checkpoint
into `<runs root>/.hosts/<host>/<run name>/`, where every local tool reads it as any run folder. Files whose size and
sha256 match are not sent again.

The host's answer is checked as untrusted input: records bounded and validated, names plain relative paths, every write
inside the copy's folder through a temp file renamed once its sha256 matches.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import cast

from core.engine.run_record import record_problem
from core.files import RECORD_LIMIT, UnreadableFile, atomic_open, file_kind, is_inside, parse_json, shown_path
from core.remote import ssh
from core.remote.agent import RUN_FILES, sha256_of
from core.remote.ssh import Host, RemoteError
from core.text import printable, size

CACHE_FOLDER = ".hosts"  # under the local runs root: the copies of hosts' runs (the local history skips it)
SILENCE_SECONDS = 60.0  # an answer that sends nothing for this long is given up
CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_NAME = 255


@dataclass(frozen=True)
class HostRuns:
    dest: str
    root: str  # the host's runs root
    runs: list[dict]  # read_run's records, checked, named HOST:NAME, "folder" the local copy's (see listed_run)


@dataclass(frozen=True)
class FetchedRun:
    dest: str
    remote_folder: str  # on the host
    folder: Path  # the local copy
    checkpoint: Path | None  # the fetched checkpoint in it (None when asked without one)
    sent: list[str] = field(default_factory=list)  # the files transferred
    kept: list[str] = field(default_factory=list)  # those the copy held already (same size and sha256)
    bytes_sent: int = 0


# ----------------------------------------------------------------------------------------------- names
def _plain(part: str) -> bool:
    """A plain file or folder name: not empty, not hidden (nor `.` or `..`), no separator or control character."""
    return (
        0 < len(part) <= MAX_NAME
        and not part.startswith(".")
        and not any(c in part for c in "/\\:\0")
        and printable(part) == part
    )


def host_folder(dest: str) -> str:
    """The folder a host's copies go under: its destination, any but letters, digits and `@._-` as `_`, never hidden."""
    name = re.sub(r"[^A-Za-z0-9@._-]", "_", dest)[:MAX_NAME]
    return name if _plain(name) else "_" + name


def name_problem(name) -> str | None:
    """Why a host's run `name` can't name a folder under the copies; None for one or two plain parts ("sweep/trial")."""
    if not isinstance(name, str) or not name:
        return f"the run name {printable(repr(name))} is not text"
    shown = printable(repr(name if len(name) <= 80 else name[:77] + "..."))
    if name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return f"the run name {shown} is an absolute path, not a folder under the host's runs root"
    parts = name.split("/")
    if ".." in parts:
        return f"the run name {shown} holds '..', not a folder under the host's runs root"
    if len(parts) > 2 or not all(_plain(part) for part in parts):
        return f"the run name {shown} is not a folder under the host's runs root (one or two plain names)"
    return None


def file_problem(name) -> str | None:
    """Why a file the host offers can't be in the copy (not one of RUN_FILES or a plain `*.pt` name); else None."""
    if not isinstance(name, str) or not name:
        return f"the file name {printable(repr(name))} is not text"
    shown = printable(repr(name if len(name) <= 80 else name[:77] + "..."))
    if "/" in name or "\\" in name:
        kind = "an absolute path" if name.startswith(("/", "\\")) else "a path"
        return f"the file name {shown} is {kind}, not a file of the run folder"
    if name not in RUN_FILES and not (name.endswith(".pt") and _plain(name)):
        return f"the file name {shown} is not one of a run's files (run.json, metrics.jsonl, a .pt checkpoint...)"
    return None


def copies_root(local_root: str | os.PathLike, dest: str) -> Path:
    """`<local runs root>/.hosts/<host>`: where a host's runs are copied."""
    return Path(os.path.abspath(local_root)) / CACHE_FOLDER / host_folder(dest)


def copy_folder(local_root: str | os.PathLike, dest: str, name: str) -> Path:
    """The folder a host's run `name` is copied to (not created); RemoteError for a name that can't be one."""
    problem = name_problem(name)
    if problem:
        raise RemoteError(f"{dest}: refused the host's answer: {problem}")
    return copies_root(local_root, dest).joinpath(*name.split("/"))


def _make_folder(local_root: str | os.PathLike, dest: str, name: str) -> Path:
    """copy_folder, made part by part as real folders (never through a link), checked to be inside `.hosts`."""
    base = Path(os.path.abspath(local_root))
    target = copy_folder(base, dest, name)
    base.mkdir(parents=True, exist_ok=True)
    current = base
    for part in target.relative_to(base).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            try:
                current.mkdir()
            except FileExistsError:  # made meanwhile: checked as any other
                mode = os.lstat(current).st_mode
            else:
                continue
        except OSError as exc:
            raise RemoteError(f"cannot make {shown_path(current)}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(mode):
            raise RemoteError(
                f"{shown_path(current)} is a symbolic link: copies of a host's runs are kept in real "
                f"folders under the runs root only (remove the link)"
            )
        if not stat.S_ISDIR(mode):
            raise RemoteError(
                f"{shown_path(current)} is {file_kind(mode)}, not a folder: move it away to fetch {dest}'s runs"
            )
    if not is_inside(base / CACHE_FOLDER, target):
        raise RemoteError(f"{shown_path(target)} is not inside {shown_path(base / CACHE_FOLDER)}: not fetched")
    return target


# ----------------------------------------------------------------------------------------------- the call
class _Call:
    """One agent call whose answer is read as a stream, killed on `stop()` or after `silence` seconds without data."""

    def __init__(self, host: Host, args: list[str], stop: Callable[[], bool] | None, silence: float):
        self.host, self.silence = host, silence
        self.process = ssh.start(host, args)
        assert self.process.stdin and self.process.stdout and self.process.stderr  # all opened with PIPE
        self.stdin, self.stderr = self.process.stdin, self.process.stderr
        self.stdout = cast(io.BufferedReader, self.process.stdout)  # the default bufsize buffers it
        self.stopped = self.silent = False
        self._last = time.monotonic()
        self._done = threading.Event()
        self._stderr: list[bytes] = []
        self._drain = threading.Thread(target=lambda: self._stderr.append(self.stderr.read()), daemon=True)
        self._drain.start()
        threading.Thread(target=self._watch, args=(stop,), daemon=True, name="remote-fetch-watch").start()

    def _watch(self, stop) -> None:
        while not self._done.wait(0.1):
            if stop is not None and stop():
                self.stopped = True
            elif time.monotonic() - self._last > self.silence:
                self.silent = True
            else:
                continue
            ssh.kill(self.process)
            return

    def readline(self, limit: int) -> bytes:
        line = self.stdout.readline(limit)
        self._last = time.monotonic()
        return line

    def read(self, n: int) -> bytes:
        chunk = self.stdout.read1(n)
        self._last = time.monotonic()
        return chunk

    def send(self, data: bytes) -> None:
        """Write `data` to the host's stdin and close it (the host may have gone: that shows when reading)."""
        try:
            if data:
                self.stdin.write(data)
            self.stdin.close()
        except OSError:
            pass

    def problem(self) -> RemoteError | None:
        """Why the answer stopped, once it has: stopped, silent, or the host's one-line failure."""
        if self.stopped:
            return RemoteError(f"{self.host.dest}: stopped")
        if self.silent:
            return RemoteError(f"{self.host.dest}: no answer for {self.silence:g} s; check the host's load and network")
        if (code := self._wait()) != 0:
            return ssh.failure(self.host, code, b"".join(self._stderr).decode("utf-8", "replace"))
        return None

    def _wait(self) -> int:
        try:
            code = self.process.wait(self.silence)
        except subprocess.TimeoutExpired:  # it keeps talking after its answer: what was read was checked
            ssh.kill(self.process)
            code = self.process.wait()
        self._drain.join(5)
        return code

    def close(self) -> None:
        self._done.set()
        self.send(b"")
        self._wait()
        for pipe in (self.stdout, self.stderr):
            pipe.close()


def _answer_lines(call: _Call, what: str):
    """The answer's JSON object lines, bounded: (object, None), or (None, why) for a bad one; a banner is skipped."""
    while True:
        raw = call.readline(RECORD_LIMIT + 1)
        if not raw:
            return
        if not raw.endswith(b"\n") and len(raw) > RECORD_LIMIT:
            while raw and not raw.endswith(b"\n"):  # the rest of the long line
                raw = call.readline(RECORD_LIMIT + 1)
            yield None, f"{what} is more than {size(RECORD_LIMIT)}"
            continue
        if not raw.lstrip().startswith(b"{"):
            continue
        try:
            yield parse_json(raw, what), None
        except UnreadableFile as exc:
            yield None, str(exc)


# ----------------------------------------------------------------------------------------------- runs
def list_host_runs(
    host: Host, local_root: str | os.PathLike, stop: Callable[[], bool] | None = None, silence: float = SILENCE_SECONDS
) -> HostRuns:
    """The host's runs (newest first) as this machine's history rows (listed_run); RemoteError (one line) on failure."""
    call = _Call(host, ["runs"], stop, silence)
    runs: list[dict] = []
    summary = None
    try:
        call.send(b"")
        for value, problem in _answer_lines(call, f"{host.dest}'s record"):
            if isinstance(value, dict) and "run" in value:
                runs.append(listed_run(host.dest, value["run"], local_root, len(runs)))
            elif isinstance(value, dict) and "root" in value:
                summary = value
            else:
                runs.append(_refused(host.dest, local_root, len(runs), problem or "a record that is not a run"))
        if (failed := call.problem()) is not None:
            raise failed
    finally:
        call.close()
    if summary is None:
        raise RemoteError(f"{host.dest}: `amp-console agent runs` gave no answer; is `{host.command}` amp-console?")
    return HostRuns(host.dest, printable(str(summary.get("root"))), runs)


def _refused(dest: str, local_root, index: int, reason: str, name=None) -> dict:
    """The row of a host's record that can't be shown: unreadable, with the one-line reason."""
    shown = printable(name) if isinstance(name, str) and name else f"(run {index + 1})"
    return {
        "version": 0,
        "id": f"{dest}:{index}",
        "status": "unreadable",
        "unreadable": f"refused: {reason}",
        "name": f"{dest}:{shown}",
        "host": dest,
        "note": "",
        "folder": str(copies_root(local_root, dest) / f".refused-{index}"),
    }


def listed_run(dest: str, value, local_root: str | os.PathLike, index: int = 0) -> dict:
    """A host's run record as a history row: checked (a bad one is "unreadable"), named `HOST:NAME`, "folder" the local
    copy's, plus "host", "remote_name", "remote_folder", "remote_checkpoints" and checkpoint paths in the copy."""
    if not isinstance(value, dict):
        return _refused(dest, local_root, index, f"the host's record is {type(value).__name__}, not an object")
    run = {k: v for k, v in value.items() if k != "host_row"}  # what only this side says
    name, folder = run.get("name"), run.get("folder")
    problem = name_problem(name)
    if problem is None and not (isinstance(folder, str) and PurePosixPath(folder).is_absolute()):
        problem = f"the run folder {printable(repr(folder))} is not an absolute path on the host"
    if problem is None:
        problem = record_problem(run)
        if problem is None and not all(isinstance(run.get(k, ""), str) for k in ("unreadable", "note")):
            problem = "unreadable or note is not text"
    if problem or not isinstance(name, str):
        return _refused(dest, local_root, index, problem or "no run name", name)
    copy = copy_folder(local_root, dest, name)
    checkpoints = {}
    for which, entry in (run.get("checkpoints") or {}).items():
        base = PurePosixPath(str(entry.get("path") or "")).name
        if file_problem(base) is None and base.endswith(".pt"):
            checkpoints[which] = dict(entry, path=str(copy / base))
    run.update(
        name=f"{dest}:{name}",
        folder=str(copy),
        host=dest,
        remote_name=name,
        remote_folder=folder,
        checkpoints=checkpoints,
        remote_checkpoints=bool(checkpoints),
    )
    return run


# ----------------------------------------------------------------------------------------------- fetch
def _manifest(dest: str, value) -> tuple[str, list[dict]]:
    """(the run's name, its files) from the host's first line, checked; RemoteError (one line) when refused."""

    def refuse(why: str) -> RemoteError:
        return RemoteError(f"{dest}: refused the host's answer: {why}")

    if not isinstance(value, dict) or not isinstance(value.get("files"), list):
        raise refuse("it names no files")
    name = value.get("name")
    problem = name_problem(name)
    if problem or not isinstance(name, str):
        raise refuse(problem or "no run name")
    files, seen = [], set()
    for entry in value["files"]:
        if not isinstance(entry, dict):
            raise refuse("a file entry is not an object")
        problem = file_problem(entry.get("name"))
        length, digest = entry.get("size"), entry.get("sha256")
        if problem:
            raise refuse(problem)
        if type(length) is not int or length < 0 or not (isinstance(digest, str) and _SHA256.match(digest)):
            raise refuse(f"{printable(entry['name'])} has no size or sha256 of the right kind")
        if entry["name"] in seen:
            raise refuse(f"{printable(entry['name'])} is named twice")
        seen.add(entry["name"])
        files.append({"name": entry["name"], "size": length, "sha256": digest})
    return name, files


def _same(path: Path, entry: dict) -> bool:
    """Whether `path` is a regular file (not a link) of the entry's size and sha256."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size != entry["size"]:
            return False
        with open(path, "rb") as f:
            return sha256_of(f, entry["size"]) == entry["sha256"]
    except OSError:
        return False


def fetch_run(
    host: Host,
    folder: str,
    local_root: str | os.PathLike,
    checkpoint: bool = True,
    on_progress: Callable[[int, int, str], None] | None = None,
    stop: Callable[[], bool] | None = None,
    silence: float = SILENCE_SECONDS,
) -> FetchedRun:
    """Copy the run `folder` (or a run's name or id) on the host, and with `checkpoint` its advised checkpoint, into
    `<local_root>/.hosts/<host>/<its name>/`, sending only what differs and removing checkpoints the host no longer
    names; `on_progress(bytes done, bytes to send, file name)`; `stop()` true ends it (RemoteError)."""
    dest, say = host.dest, on_progress or (lambda done, total, name: None)
    call = _Call(host, ["fetch", folder, *(["--checkpoint"] if checkpoint else [])], stop, silence)
    kept: list[dict] = []
    done = 0
    try:
        value, problem = next(_answer_lines(call, f"{dest}'s answer"), (None, None))
        if value is None:
            failed = call.problem()
            raise failed or RemoteError(
                f"{dest}: refused the host's answer: {problem}"
                if problem
                else f"{dest}: `amp-console agent fetch` gave no answer; is `{host.command}` amp-console?"
            )
        name, files = _manifest(dest, value)
        target = _make_folder(local_root, dest, name)
        wanted: list[dict] = []
        for entry in files:
            (kept if _same(target / entry["name"], entry) else wanted).append(entry)
        call.send((json.dumps({"send": [e["name"] for e in wanted]}) + "\n").encode("utf-8"))
        total = sum(e["size"] for e in wanted)
        say(0, total, wanted[0]["name"] if wanted else "")
        for entry in wanted:
            digest, left = hashlib.sha256(), entry["size"]
            with atomic_open(target / entry["name"]) as out:
                while left > 0:
                    chunk = call.read(min(CHUNK, left))
                    if not chunk:
                        failed = call.problem()
                        raise failed or RemoteError(
                            f"{dest}: {printable(entry['name'])} was cut off at {size(entry['size'] - left)} of "
                            f"{size(entry['size'])} (it changed on the host meanwhile?); fetch it again"
                        )
                    digest.update(chunk)
                    out.write(chunk)
                    left -= len(chunk)
                    done += len(chunk)
                    say(done, total, entry["name"])
                if digest.hexdigest() != entry["sha256"]:
                    raise RemoteError(
                        f"{dest}: {printable(entry['name'])} arrived damaged (another sha256 than the "
                        f"host's); fetch it again"
                    )
        if (failed := call.problem()) is not None:
            raise failed
    finally:
        call.close()
    names = {e["name"] for e in files}
    held = next((e["name"] for e in files if e["name"].endswith(".pt")), None)
    if checkpoint:
        for stale in target.glob("*.pt"):
            if stale.name not in names and stat.S_ISREG(os.lstat(stale).st_mode):
                stale.unlink()
    return FetchedRun(
        dest,
        str(value.get("folder") or folder),
        target,
        target / held if checkpoint and held else None,
        [e["name"] for e in wanted],
        [e["name"] for e in kept],
        done,
    )
