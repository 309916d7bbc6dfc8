"""A run that lives on its own, followed through its folder: one started on a host over ssh, or any run attached by its
folder here or HOST:PATH. Events come from core.remote's follower on a BackgroundJob thread; pause, resume and stop
go through the folder's control channel on short jobs (the GUI thread never calls ssh). shutdown() only stops
following.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal, Slot

from app.run.handle import RunHandle
from app.run.jobs import BackgroundJob, JobRunner
from core.engine.events import (
    CheckpointSaved,
    ControlAcknowledged,
    RunEnded,
    RunPaused,
    RunResumed,
    RunStarted,
    event_or_none,
)
from core.engine.folder_control import send_control

CONTROL_SECONDS = 30.0  # how long a control request waits for the run's acknowledgement and outcome


def on_host(event, dest: str):
    """`event` with its checkpoint path on the host `dest` as HOST:PATH (as `remote fetch` and Attach take it)."""
    if isinstance(event, CheckpointSaved):
        return replace(event, path=f"{dest}:{event.path}")
    if isinstance(event, RunEnded) and event.checkpoint and not event.checkpoint.startswith(f"{dest}:"):
        return replace(event, checkpoint=f"{dest}:{event.checkpoint}")
    return event


@dataclass(frozen=True)
class _Found:
    """The worker knows where the run is: `target` to show and attach to, `folder` for the control channel."""

    target: str
    folder: str
    where: str  # the host's name, or "this machine"


class RemoteRun(RunHandle):
    """A followed run. `host`: a core.remote Host (None: a folder on this machine). `attached(target)` once the run's
    HOST:FOLDER (or folder) is known."""

    attached = Signal(str)
    detached = True

    def __init__(self, parent: QObject | None = None, host=None, processes: int = 1):
        super().__init__(parent)
        self.host = host
        self.processes = processes
        self.target = ""  # HOST:FOLDER or a local folder, once known
        self.folder = ""  # the run folder, as the control channel takes it
        self.where = host.dest if host is not None else "this machine"
        self.status = ""  # how following ended: ended, gone, stopped (see core.remote.client)
        self._starting = False  # start(): the run may fail to start (setupFailed) until it holds its folder
        self._follower = None
        self._lock = threading.Lock()  # _follower and _closing, shared with the worker
        self._closing = False
        self._job = BackgroundJob("followThread", self)
        self._job.progress.connect(self._on_progress)
        self._job.succeeded.connect(self._on_followed)
        self._job.failed.connect(self._on_failed)
        self._job.runningChanged.connect(lambda running: running or self._finish_if_done())
        self._controls = JobRunner(self)
        self._controls.busyChanged.connect(lambda busy: busy or self._finish_if_done())
        self._stop_pending = False  # Stop pressed before the run's folder was known
        self._started = False  # a RunStarted came
        self._ended = False  # a RunEnded came
        self._finished = False

    def start(self, config, resume_from: str | None = None) -> None:
        """Start `config` on the host (paths in it are the host's), then follow it from its start."""
        host, nproc = self.host, (self.processes if self.processes > 1 else None)
        self._starting = True

        def work(progress, control):
            from core.remote.client import follow_remote, start_remote_run

            run = start_remote_run(host, config, resume=resume_from, nproc=nproc, on_progress=progress)
            progress(_Found(run.target, run.folder, host.dest))
            return self._follow(follow_remote(host, run.folder), progress)

        self._job.start(work)

    def attach(self, target: str) -> None:
        """Follow the run `target` names (a folder here, a run's name under the runs root, or HOST:PATH) from its start."""
        host = self.host

        def work(progress, control):
            from core.remote.client import RemoteFollower, follow_run

            follower = follow_run(target, host=host)
            if isinstance(follower, RemoteFollower):
                self.host = follower.host
                progress(_Found(target, follower.folder, follower.host.dest))
            else:
                progress(_Found(follower.folder, follower.folder, "this machine"))
            return self._follow(follower, progress)

        self._job.start(work)

    def _follow(self, follower, progress) -> tuple[str, str]:
        """On the worker: every line as an engine event, FollowNotes as they come; (status, note) at the end."""
        from core.remote.client import FollowNote

        with self._lock:
            if self._closing:
                return "stopped", ""
            self._follower = follower
        for item in follower:
            if isinstance(item, FollowNote):
                progress(item)
                continue
            event = event_or_none(item.record)
            if event is not None:
                progress(event)
        return follower.status, follower.note

    @Slot(object)
    def _on_progress(self, item) -> None:
        if isinstance(item, _Found):
            self.target, self.folder, self.where = item.target, item.folder, item.where
            self._starting = False
            self.attached.emit(item.target)
            if self.host is not None:
                self.notice.emit(
                    f"Following {item.target}: the run goes on on {item.where} if this window closes "
                    f"(File → Attach to run… to watch it again).",
                    "log",
                )
            else:
                self.notice.emit(f"Following the run in {item.folder}.", "log")
            if self._stop_pending:
                self._stop_pending = False
                self._control("stop")
            return
        if isinstance(item, str):  # how the start on the host goes
            self.notice.emit(item[:1].upper() + item[1:] + "…", "")
            return
        from core.remote.client import FollowNote  # imported by the worker already (core.remote loads torch)

        if isinstance(item, FollowNote):  # the connection, lost or back
            self.notice.emit(item.text, "" if item.connected else "status-warn")
            return
        if self.host is not None:
            item = on_host(item, self.host.dest)
        self._track(item)
        match item:
            case RunStarted():
                self._started = True
                self._ended = False
            case RunPaused():
                self._paused = True
            case RunResumed():
                self._paused = False
            case ControlAcknowledged(verb="stop", accepted=True):
                self._stop_requested = True
            case RunEnded():
                self._ended = True
                self._paused = False
        self.event.emit(item)
        if isinstance(item, RunStarted) and self.host is not None:  # after the window's own "Running …"
            self.notice.emit(
                f"Running {item.task} on {self.where} ({item.device}) in {item.precision}; it goes on "
                f"there if this window closes.",
                "",
            )

    @Slot(object)
    def _on_followed(self, result) -> None:
        status, note = result
        self.status = status
        if status == "gone" and not self._ended:  # killed, or it never wrote its end: a failed run
            self._ended = True
            self.event.emit(
                self._failed_end(f"the run's process on {self.where} went away without a word ({note or 'killed?'})")
            )

    @Slot(str, str, str)
    def _on_failed(self, message: str, field: str, details: str) -> None:
        if self._starting and not self._started:  # the run did not start on the host: as a local setup error
            self.setupFailed.emit(message, field, details)
            return
        where = f"{self.target}: " if self.target else ""
        self.notice.emit(f"Stopped following {where}{message}", "status-error")

    def _finish_if_done(self) -> None:
        """finished() once the follower and every control request are over (no QThread outlives this)."""
        if self._finished or self._job.running or self._controls.busy:
            return
        self._finished = True
        self.finished.emit()

    @property
    def running(self) -> bool:
        return not self._finished

    @property
    def can_pause(self) -> bool:
        return self.running and self.processes == 1 and not self._ended

    @property
    def stopping(self) -> bool:
        return (self._stop_requested or self._stop_pending) and not self._ended

    def pause(self) -> None:
        if not self.folder:
            self.notice.emit("The run has not started yet: pause it once it trains.", "status-warn")
        elif self.can_pause and not self._paused and not self.stopping:
            self._paused = True
            self._control("pause")

    def resume(self) -> None:
        if self.folder and self._paused and not self._ended:
            self._paused = False
            self._control("resume")

    def stop(self) -> None:
        if self.stopping or self._ended or not self.running:
            return
        self._paused = False
        if not self.folder:
            self._stop_pending = True  # sent once the run holds its folder
            return
        self._stop_requested = True
        self._control("stop")

    def _control(self, verb: str) -> None:
        host, folder = self.host, self.folder

        def request():
            if host is not None:
                from core.remote.client import control_remote

                return control_remote(host, folder, verb, timeout=CONTROL_SECONDS)

            return send_control(folder, verb, timeout=CONTROL_SECONDS)

        self._controls.submit(
            request,
            lambda result: self._on_control(verb, result),
            lambda message, _details: self._on_control_failed(verb, message),
        )

    def _on_control(self, verb: str, result) -> None:
        ack = result.acknowledged
        if ack is not None and not ack.accepted:
            self._undo(verb)
            self.notice.emit(result.message, "status-warn")
        else:
            self.notice.emit(result.message, "log")

    def _on_control_failed(self, verb: str, message: str) -> None:
        self._undo(verb)
        self.notice.emit(f"Could not {verb} the run: {message}", "status-error")

    def _undo(self, verb: str) -> None:
        """A request that was refused or got no answer: the buttons show the run as it is."""
        if verb == "stop":
            self._stop_requested = False
        else:
            self._paused = verb == "resume"

    def shutdown(self) -> None:
        """Stop following (the run goes on where it is) and join the follower and control requests."""
        with self._lock:
            self._closing = True
            follower = self._follower
        if follower is not None:
            follower.close()
        if not self._ended and not self._finished:
            self.notice.emit(
                f"The window let go of the run; it goes on on {self.where}: File → Attach to run… to "
                f"watch it again ({self.target or 'its folder there'}).",
                "status-warn",
            )
        self._job.shutdown()
        self._controls.shutdown()
        self._finish_if_done()
