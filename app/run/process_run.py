"""A run in a child process (QProcess): `python -m core.cli train --events --config-stdin` (settings as a JSON line,
so it can start ahead of time) or `--nproc N --config FILE` (torchrun). It keeps the trainer off the window's GIL, and a
crash ends the run, not the window. A timer reads what its metrics.jsonl gained (core.engine.follow); pause, resume
and stop are requests in its run folder (core.engine.folder_control). Its stdin closing (the window gone) stops it; it
runs in its own session, interrupted then killed if it does not stop in time."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections import deque
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer

from app.run.handle import RunHandle
from app.run.jobs import JobRunner
from core.config import train_command
from core.engine.events import RunEnded, RunStarted, event_or_none
from core.engine.folder_control import write_request
from core.engine.follow import MetricsFollower
from core.process import STOP_GRACE_SECONDS, StopEscalation, child_environment, signal_name

STDERR_LINES = 40
FOLLOW_MS = 50  # metrics.jsonl is read this often (a read of the bytes it gained: well under a millisecond)
POSIX = os.name == "posix" and hasattr(QProcess, "UnixProcessParameters")  # process groups and signals


def launcher_command(config_path: str, processes: int, resume_from: str | None = None) -> list[str]:
    """The command line that trains `config_path` on `processes` local DDP processes (torchrun)."""
    return train_command(config_path, *(["--resume", resume_from] if resume_from else []), nproc=processes)


def spare_command() -> list[str]:
    """A training process started ahead of time: it loads the engine, then waits for its settings on stdin."""
    return train_command()


def describe_signal(number: int, processes: int = 1) -> str:
    """One line for a training process that a signal ended before it could report (no RunEnded)."""
    who = "the training process" if processes == 1 else "the DDP launcher"
    name = signal_name(number)
    if number == getattr(signal, "SIGKILL", 9):
        return (
            f"{who} was killed ({name}) before it could report; the system may have run out of memory "
            "(try a smaller batch size). The last checkpoint on disk is kept."
        )
    return f"{who} crashed ({name}) before it could report. The last checkpoint on disk is kept."


class ProcessRun(RunHandle):
    """One training (or launcher) process, a RunHandle. `processes` > 1: torchrun with that many DDP processes."""

    def __init__(self, parent: QObject | None = None, processes: int = 1):
        super().__init__(parent)
        self.process = QProcess(self)
        self.process.setObjectName("launcherProcess")
        self.process.readyReadStandardOutput.connect(self._read_stdout)
        self.process.readyReadStandardError.connect(self._read_stderr)
        self.process.finished.connect(self._on_finished)
        self.process.errorOccurred.connect(self._on_error)
        self._stdout_buffer = b""
        self._stderr_buffer = b""
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self.ended_status: str | None = None
        self.setup_error: tuple[str, str] | None = None  # (message, field) from the child's setup_error line
        self.setup_details = ""
        self._started = False  # RunStarted seen: a later death is a failed run, not a setup error
        self._follower: MetricsFollower | None = None  # the run's metrics.jsonl, once the child said where
        self._follow = QTimer(self, interval=FOLLOW_MS, timeout=self._read_events)
        self._asked: list[str] = []  # pause/resume/stop asked for before the run's folder was known
        self._requests = JobRunner(self)
        self.processes = processes
        self.spare = False  # started by prestart() and not yet given a run
        self.warm = False  # a spare has loaded the engine
        self._done = False
        self._folder: tempfile.TemporaryDirectory | None = None  # the torchrun config file's
        self._escalate = QTimer(self, singleShot=True, timeout=self._escalate_stop)
        self._stopping: StopEscalation | None = None

    @property
    def running(self) -> bool:
        return self.process.state() != QProcess.ProcessState.NotRunning

    @property
    def can_pause(self) -> bool:
        """One process pauses between steps; DDP ranks can't pause together (their all-reduce would time out)."""
        return self.processes == 1

    def prestart(self) -> None:
        """Start a one-process run ahead of time: it imports torch and the engine, then waits for `start()`."""
        self.spare = True
        self._launch(spare_command())

    def discard(self, timeout_ms: int = 5000) -> None:
        """End an unused spare (it holds no run and no files: killing it loses nothing)."""
        if self.running:
            self.process.kill()
            self.process.waitForFinished(timeout_ms)

    def start(self, config, resume_from: str | None = None) -> None:
        """Train `config`: one process gets its settings on stdin (prestarted or not); torchrun runs get a TOML file."""
        processes = self.processes
        if processes == 1:
            if not self.spare:
                self._launch(spare_command())
            self.spare = False
            line = json.dumps({"config": config.to_dict(), "resume": resume_from}) + "\n"
            self.process.write(line.encode())
            return
        if self.spare:
            raise ValueError("a prestarted process trains one process")
        self._folder = tempfile.TemporaryDirectory(prefix="amp-console-run-")
        path = Path(self._folder.name) / "run.toml"
        config.save_toml(path)
        self._launch(launcher_command(str(path), processes, resume_from))

    def _launch(self, command: list[str]) -> None:
        program, *arguments = command
        env = QProcessEnvironment()
        for key, value in {**child_environment(), "PYTHONUNBUFFERED": "1"}.items():
            env.insert(key, value)
        self.process.setProcessEnvironment(env)
        self.process.setWorkingDirectory(os.getcwd())  # relative out_dir / data: as in a thread run
        if POSIX:
            params = QProcess.UnixProcessParameters()
            params.flags = QProcess.UnixProcessFlag.CreateNewSession  # its own process group, for the fallback
            self.process.setUnixProcessParameters(params)
        self.process.start(program, arguments)

    def pause(self) -> None:
        if self.running and self.can_pause and not self._stop_requested and not self._paused:
            self._paused = True
            self._request("pause")

    def resume(self) -> None:
        if self.running and self._paused:
            self._paused = False
            self._request("resume")

    def _request(self, verb: str) -> None:
        """A request in the run folder, written on a job (a file write is no work for the GUI thread)."""
        if self._follower is None:
            self._asked.append(verb)
            return
        folder = self._follower.folder
        self._requests.submit(
            lambda: write_request(folder, verb),
            lambda _request: None,
            lambda message, _details: self.notice.emit(f"Could not {verb} the run: {message}", "status-error"),
        )

    def stop(self) -> None:
        """Ask the run to stop after its step; past the grace its process group is interrupted, then killed."""
        if not self.running or self._stop_requested:
            return
        self._stop_requested = True
        self._paused = False  # a paused run wakes up to stop
        self._request("stop")
        self._stopping = StopEscalation(self.process.processId(), STOP_GRACE_SECONDS)
        self._escalate.start(int(self._stopping.due_in() * 1000))

    def shutdown(self) -> None:
        """Stop and block until the launcher has exited (the window is closing), escalating as stop() does."""
        if self.running:
            self.stop()
            self.process.closeWriteChannel()  # the window's end: it stops a run that has not said where it is yet
            stopping = self._stopping
            while stopping is not None and not self.process.waitForFinished(int(stopping.due_in() * 1000) + 100):
                stopping.poll()
                if stopping.killed:
                    self.process.waitForFinished(5000)
                    break
        self._read_stdout()
        if not self._done:
            self._on_finished(self.process.exitCode(), self.process.exitStatus())

    def _escalate_stop(self) -> None:
        if self.running and self._stopping is not None:
            self._stopping.poll()
            if not self._stopping.killed:
                self._escalate.start(int(self._stopping.due_in() * 1000))

    def _read_stdout(self) -> None:
        """The child's JSON lines: ready (a spare has loaded the engine), a setup error, where its events start."""
        self._stdout_buffer += bytes(self.process.readAllStandardOutput())
        *lines, self._stdout_buffer = self._stdout_buffer.split(b"\n")
        for raw in lines:
            try:
                data = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(data, dict):
                continue
            if data.get("ready") is True:
                self.warm = True
            elif "setup_error" in data:  # bad input found before the run started (the child exits 2)
                self.setup_error = (str(data["setup_error"]), str(data.get("field") or ""))
                self.setup_details = str(data.get("details") or "")  # the traceback of the user's code that raised
            elif self._follower is None and (follower := MetricsFollower.of_run_start(data)) is not None:
                self._follower = follower
                self._follow.start()
                asked, self._asked = self._asked, []
                for verb in asked:
                    self._request(verb)
                self._read_events()

    def _read_events(self) -> None:
        """The events metrics.jsonl gained since the last read, from the run's RunStarted on."""
        if self._follower is None:
            return
        for line in self._follower.read():
            event = event_or_none(line.record)
            if event is None or not (self._started or isinstance(event, RunStarted)):
                continue
            self._started = True
            self._track(event)
            if isinstance(event, RunEnded):
                self.ended_status = event.status
            self.event.emit(event)

    def _read_stderr(self) -> None:
        self._stderr_buffer += bytes(self.process.readAllStandardError())
        *lines, self._stderr_buffer = self._stderr_buffer.split(b"\n")
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip()
            if text.strip() and not set(text.strip()) <= {"*"}:
                self.stderr_tail.append(text)

    def _on_error(self, error) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self.stderr_tail.append(f"could not start {self.process.program()}: {self.process.errorString()}")
            self._on_finished(-1, QProcess.ExitStatus.CrashExit)

    def _on_finished(self, exit_code: int, exit_status=None) -> None:
        if self._done:
            return
        self._done = True
        self._escalate.stop()
        self._follow.stop()
        self._read_stdout()
        self._read_events()  # what the run wrote before it exited
        if self._follower is not None:
            self._follower.close()
        self._read_stderr()
        self._requests.shutdown()
        crashed = exit_status == QProcess.ExitStatus.CrashExit and exit_code > 0  # exit_code: the signal
        # After its RunEnded the run's outcome is known: a crash while the process tears down changes nothing.
        # Exit 129/130/143 (128 + SIGHUP/SIGINT/SIGTERM) is a run stopped by a signal, with its checkpoint.
        if self.ended_status is None and (crashed or exit_code not in (0, 129, 130, 143)):
            field = ""
            if crashed and self._stopping is not None and self._stopping.interrupted:
                message = (
                    f"the run did not stop within {self._stopping.grace:g} s of Stop and was "
                    f"ended ({signal_name(exit_code)}). The last checkpoint on disk is kept."
                )
            elif crashed:
                message = describe_signal(exit_code, self.processes)
            elif self.setup_error is not None:
                message, field = self.setup_error
            elif self.stderr_tail:
                message = self.stderr_tail[-1]
            else:
                message = f"the training process exited with code {exit_code} without reporting why"
            details = (
                self.setup_details if self.setup_error is not None and not crashed else "\n".join(self.stderr_tail)
            )
            if self._started:  # it died mid-run: a failed run, not a setup error
                self.ended_status = "failed"
                self.event.emit(self._failed_end(message, details))
            else:
                self.setupFailed.emit(message, field, details)
        if self._folder is not None:
            self._folder.cleanup()
        self.finished.emit()
