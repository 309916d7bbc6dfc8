"""A multi-process (DDP) run: `python -m core.cli train --nproc N --events` as a QProcess.

The launcher runs torchrun; rank 0 prints every event as one JSON line on stdout, which is read here on the
GUI thread (a few lines a second: no thread needed) and rebuilt with core.events.event_from_dict, so the
window's plots get the same event objects as from the in-process worker.

Stop writes 'stop' to the run's stdin (`--control-stdin`): rank 0 stops after its step, every rank follows
and rank 0 writes the checkpoint. (A SIGINT to the launcher alone is not forwarded to torchrun when there
is no terminal, so it would not stop anything.) The run lives in its own session, so if it does not end in
time the whole process group is interrupted, then killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from collections import deque
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
STDERR_LINES = 40


def launcher_command(config_path: str, processes: int, resume_from: str | None = None) -> list[str]:
    """The command line (program first) that trains `config_path` on `processes` local processes."""
    command = [sys.executable, "-m", "core.cli", "train", "--nproc", str(processes), "--events", "--json",
               "--control-stdin", "--config", config_path]
    if resume_from:
        command += ["--resume", resume_from]
    return command


class ProcessRun(QObject):
    """One launcher process. `event(obj)` per JSON event line; `failed(message, details)` when it exits
    non-zero without having reported its own failure; `finished()` once it has exited."""

    event = Signal(object)
    failed = Signal(str, str)
    finished = Signal()

    def __init__(self, parent: QObject | None = None):
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
        self.stop_requested = False
        self._done = False
        self._folder = tempfile.TemporaryDirectory(prefix="amp-console-run-")
        self._escalate = QTimer(self, singleShot=True)
        self._escalate.timeout.connect(self._interrupt_group)

    @property
    def running(self) -> bool:
        return self.process.state() != QProcess.ProcessState.NotRunning

    def start(self, config, processes: int, resume_from: str | None = None) -> None:
        path = Path(self._folder.name) / "run.toml"
        config.save_toml(path)
        program, *arguments = launcher_command(str(path), processes, resume_from)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONPATH", os.pathsep.join(p for p in (PACKAGE_ROOT, env.value("PYTHONPATH", "")) if p))
        env.insert("PYTHONUNBUFFERED", "1")
        self.process.setProcessEnvironment(env)
        self.process.setWorkingDirectory(PACKAGE_ROOT)
        params = QProcess.UnixProcessParameters()
        params.flags = QProcess.UnixProcessFlag.CreateNewSession  # its own process group, for the fallback
        self.process.setUnixProcessParameters(params)
        self.process.start(program, arguments)

    def stop(self, grace_ms: int = 20_000) -> None:
        """Ask rank 0 to stop after its step (checkpoint written); interrupt the group if it takes too long."""
        if not self.running or self.stop_requested:
            return
        self.stop_requested = True
        self.process.write(b"stop\n")
        self._escalate.start(grace_ms)

    def shutdown(self, timeout_ms: int = 30_000) -> None:
        """Stop and block until the launcher has exited (the window is closing)."""
        if self.running:
            self.stop()
            if not self.process.waitForFinished(timeout_ms):
                self._interrupt_group()
                if not self.process.waitForFinished(10_000):
                    self._signal_group(signal.SIGKILL)
                    self.process.waitForFinished(5000)
        self._read_stdout()
        if not self._done:
            self._on_finished(self.process.exitCode(), self.process.exitStatus())

    def _interrupt_group(self) -> None:
        self._signal_group(signal.SIGINT)  # every rank and torchrun: ranks stop gracefully on SIGINT

    def _signal_group(self, sig: int) -> None:
        pid = self.process.processId()
        if pid > 0:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _read_stdout(self) -> None:
        self._stdout_buffer += bytes(self.process.readAllStandardOutput())
        *lines, self._stdout_buffer = self._stdout_buffer.split(b"\n")
        if not lines:
            return
        from core.events import event_from_dict

        for raw in lines:
            line = raw.strip()
            if not line.startswith(b"{"):
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "event" not in data:  # the --json summary line
                continue
            event = event_from_dict(data)
            if type(event).__name__ == "RunEnded":
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

    def _on_finished(self, exit_code: int, _exit_status=None) -> None:
        if self._done:
            return
        self._done = True
        self._escalate.stop()
        self._read_stdout()
        self._read_stderr()
        if exit_code not in (0, 130) and self.ended_status != "failed":
            last = self.stderr_tail[-1] if self.stderr_tail else f"the launcher exited with code {exit_code}"
            self.failed.emit(last, "\n".join(self.stderr_tail))
        self._folder.cleanup()
        self.finished.emit()
