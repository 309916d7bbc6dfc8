"""The run folder's control channel: pause, resume and stop a run through files, from any process or machine that
can write to its folder. `send_control` writes a request into `<run>/control/`; rank 0's daemon thread
(FolderControl) polls it and calls the run's RunControl, and acknowledges each request in the event stream
(ControlAcknowledged). The file protocol is in docs/remote.md. Torch-free.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import secrets
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.engine.events import ControlAcknowledged, Event, RunEnded, RunPaused, RunResumed, event_or_none
from core.engine.run_folder import METRICS_FILE, is_in_use, lock_holder
from core.errors import AmpConsoleError
from core.files import CAN_LOCK, UnreadableFile, atomic_write_bytes, read_json_record, shown_path

CONTROL_FOLDER = "control"
VERBS = ("pause", "resume", "stop")
POLL_SECONDS = 0.1  # the watcher thread looks for requests this often: an acknowledgement within ~0.15 s
REQUEST_LIMIT = 64 * 1024  # bytes: a request is a few dozen
_REQUEST = re.compile(r"^(\d{1,12})-(pause|resume|stop)-([0-9a-f]{4,32})\.json$")
_ANY = re.compile(r"^(\d{1,12})-")  # every name that holds a seq: requests, done, stale, refused


class ControlError(AmpConsoleError):
    """A control request that could not be made or was not answered; str() is one line."""


@dataclass(frozen=True)
class ControlRequest:
    folder: Path
    seq: int
    verb: str
    name: str  # the request's file name, which its acknowledgement names


def _check_control_folder(path: Path) -> bool:
    """True when `path` is a real folder, False when missing; ControlError for a link or anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ControlError(
            f"{shown_path(path)} is not a folder (a link or a file): control requests are refused there; remove it"
        )
    return True


def write_request(run_folder: str | os.PathLike, verb: str) -> ControlRequest:
    """Write a `verb` request into the run folder's control folder (atomically) and return it."""
    if verb not in VERBS:
        raise ControlError(f"{verb!r} is not a control request: use pause, resume or stop")
    folder = Path(run_folder) / CONTROL_FOLDER
    if not _check_control_folder(folder):
        try:
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise ControlError(
                f"cannot create {shown_path(folder)}: {exc.strerror or exc}; only who may write "
                f"into the run folder can steer the run"
            ) from None
        _check_control_folder(folder)
    seq = 1 + max((int(m.group(1)) for m in map(_ANY.match, os.listdir(folder)) if m), default=0)
    name = f"{seq:06d}-{verb}-{secrets.token_hex(4)}.json"
    holder = lock_holder(Path(run_folder))
    payload = {"seq": seq, "verb": verb, "holder": holder, "by": _who(), "written_at": time.time()}
    try:
        atomic_write_bytes(folder / name, json.dumps(payload).encode("utf-8"))
    except OSError as exc:
        raise ControlError(f"cannot write {shown_path(folder / name)}: {exc.strerror or exc}") from None
    return ControlRequest(Path(run_folder), seq, verb, name)


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = "?"
    return f"{user}@{socket.gethostname()}"


class FolderControl:
    """Rank 0's watcher of `<run>/control/`: applies each new request to `control` (a RunControl), handing its
    ControlAcknowledged to `acknowledge` first. `poll()` does one pass; `start()` runs it on a daemon thread."""

    def __init__(
        self,
        run_folder: str | os.PathLike,
        control,
        acknowledge: Callable[[ControlAcknowledged], None],
        poll_seconds: float = POLL_SECONDS,
    ):
        self.run_folder = Path(run_folder)
        self.folder = self.run_folder / CONTROL_FOLDER
        self.control = control
        self.acknowledge = acknowledge
        self.poll_seconds = poll_seconds
        self.holder = lock_holder(self.run_folder)  # the live run's pid in .run.lock (the launcher's under DDP)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._done: set[str] = set()

    def start(self) -> FolderControl:
        self._thread = threading.Thread(target=self._watch, name="folder-control", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 2.0) -> None:
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._thread = None

    def _watch(self) -> None:
        launcher = CAN_LOCK and self.holder is not None and self.holder != os.getpid()
        while not self._closed.wait(self.poll_seconds):
            try:
                self.poll()
                if launcher and not is_in_use(self.run_folder):  # the launcher holding the folder is gone
                    launcher = False
                    self.control.stop()
            except Exception:
                continue

    def poll(self) -> list[ControlAcknowledged]:
        """Apply the requests written since the last pass, in seq order; their acknowledgements."""
        try:
            if not _check_control_folder(self.folder):
                return []
            names = os.listdir(self.folder)
        except (ControlError, OSError):
            return []
        pending = sorted(
            (int(m.group(1)), name) for name in names if name not in self._done and (m := _REQUEST.match(name))
        )
        acks = []
        for seq, name in pending:
            self._done.add(name)
            ack = self._apply(seq, name)
            if ack is not None:
                acks.append(ack)
        return acks

    def _apply(self, seq: int, name: str) -> ControlAcknowledged | None:
        verb = name.split("-")[1]  # a name _REQUEST matched: <seq>-<verb>-<token>.json
        path = self.folder / name
        try:
            record = read_json_record(path, limit=REQUEST_LIMIT)
        except FileNotFoundError:
            return None
        except UnreadableFile as exc:
            return self._answer(seq, verb, name, False, f"refused: {exc}", ".refused")
        holder = record.get("holder")
        if isinstance(holder, int) and self.holder is not None and holder != self.holder:
            self._rename(path, ".stale")  # written for an earlier run in this folder
            return None
        if record.get("verb") != verb:
            return self._answer(seq, verb, name, False, "refused: the file's verb differs from its name", ".refused")
        control = self.control
        if verb == "stop":
            if control.stop_requested:
                return self._answer(seq, verb, name, True, "already stopping")
            return self._answer(seq, verb, name, True, "stopping after the current step", apply=control.stop)
        if control.stop_requested:
            return self._answer(seq, verb, name, False, "the run is stopping")
        if verb == "pause":
            if control.paused:
                return self._answer(seq, verb, name, False, "already paused")
            return self._answer(seq, verb, name, True, "pausing after the current step", apply=control.pause)
        if not control.paused:
            return self._answer(seq, verb, name, False, "not paused")
        return self._answer(seq, verb, name, True, "resuming", apply=control.resume)

    def _answer(
        self,
        seq: int,
        verb: str,
        name: str,
        accepted: bool,
        note: str,
        suffix: str = ".done",
        apply: Callable[[], None] | None = None,
    ) -> ControlAcknowledged:
        """Acknowledge, mark the file done, then apply: the acknowledgement comes before the event the request
        leads to, and a stop's file is done before the run can end because of it."""
        ack = ControlAcknowledged(seq=seq, verb=verb, request=name, accepted=accepted, note=note)
        self.acknowledge(ack)
        self._rename(self.folder / name, suffix)
        if apply is not None:
            apply()
        return ack

    @staticmethod
    def _rename(path: Path, suffix: str) -> None:
        with contextlib.suppress(OSError):  # the name is remembered as done: it is not applied twice
            os.replace(path, path.with_name(path.name + suffix))


# ----------------------------------------------------------------------------------------- requesting side
@dataclass(frozen=True)
class ControlResult:
    """What came of a request: its acknowledgement, and the event it led to (RunPaused, RunResumed, RunEnded)."""

    request: ControlRequest
    acknowledged: ControlAcknowledged | None
    outcome: Event | None
    message: str


_OUTCOMES = {"pause": RunPaused, "resume": RunResumed, "stop": RunEnded}


def send_control(
    run_folder: str | os.PathLike, verb: str, timeout: float = 30.0, on_event: Callable[[Event], None] | None = None
) -> ControlResult:
    """Ask the live run in `run_folder` to pause, resume or stop, and wait up to `timeout` seconds for the
    acknowledgement and what it leads to; ControlError when no live run holds the folder or none came in time.
    `on_event`: every event read meanwhile."""
    from core.engine.follow import MetricsFollower

    folder = Path(run_folder)
    if not folder.is_dir():
        raise ControlError(f"{shown_path(folder)}: no such run folder")
    if not is_in_use(folder):
        raise ControlError(
            f"no live run holds {shown_path(folder)} (it has ended, or has not started): nothing to {verb}"
        )
    follower = MetricsFollower(folder, offset=_size(folder / METRICS_FILE))  # from now: the answer can't be missed
    request = write_request(folder, verb)
    deadline = time.monotonic() + timeout
    ack, outcome = None, None
    for line in follower.lines(deadline=deadline):
        event = event_or_none(line.record) if line is not None else None
        if event is None:
            continue
        if on_event is not None:
            on_event(event)
        if isinstance(event, ControlAcknowledged) and event.request == request.name:
            ack = event
            if not event.accepted:
                break
        elif (ack is not None and isinstance(event, _OUTCOMES[verb])) or isinstance(event, RunEnded):
            outcome = event  # what it led to, or the end of the run before (or instead of) doing what was asked
            break
    return ControlResult(request, ack, outcome, describe_result(request, ack, outcome, folder, timeout))


def describe_result(
    request: ControlRequest, ack: ControlAcknowledged | None, outcome: Event | None, folder: Path, timeout: float
) -> str:
    """One line: `stop requested (request 3): acknowledged; stopped at step 120, checkpoint saved (...)`."""
    head = f"{request.verb} requested (request {request.seq})"
    if ack is None:
        if isinstance(outcome, RunEnded):
            return f"{head}: the run ended ({outcome.status}) at step {outcome.step} before reading it"
        raise ControlError(
            f"{head}: no acknowledgement from the run in {shown_path(folder)} within {timeout:g} s; "
            f"is it alive? (`amp-console watch` shows what it does)"
        )
    if not ack.accepted:
        return f"{head}: acknowledged, nothing done: {ack.note}"
    match outcome:
        case RunPaused():
            return f"{head}: acknowledged; paused at step {outcome.step}"
        case RunResumed():
            return f"{head}: acknowledged; resumed at step {outcome.step} after {outcome.paused_seconds:.1f} s paused"
        case RunEnded():
            saved = f", checkpoint saved ({outcome.checkpoint})" if outcome.checkpoint else ", no checkpoint"
            return f"{head}: acknowledged; {outcome.status} at step {outcome.step}{saved}"
    return f"{head}: acknowledged ({ack.note}); not done within {timeout:g} s (a long step or evaluation?)"


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
