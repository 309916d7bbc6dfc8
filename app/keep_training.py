"""A run that keeps training after its window closed: a tray notification and a stderr line naming the run
folder and the pid a SIGTERM stops."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from pathlib import Path

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QMessageBox, QSystemTrayIcon

from core.text import printable

TRAY_MESSAGE_MS = 10_000
HEARTBEAT_MS = 250  # Python runs a signal handler only when the GUI thread runs Python: wake it this often


def watch_command(folder: Path, default_root: Path) -> str:
    """`amp-console watch NAME`, or the folder's path when it is not under the default runs root."""
    under_root = os.path.abspath(folder.parent) == os.path.abspath(default_root)
    return f"amp-console watch {shlex.quote(folder.name if under_root else str(folder))}"


def notice_line(folder: str | os.PathLike, pid: int, default_root: Path) -> str:
    folder = Path(os.path.abspath(folder))
    return printable(
        f"amp-console: the window closed and the run goes on in {folder}; watch it with "
        f"`{watch_command(folder, default_root)}`, stop it (checkpoint first) with `kill -TERM {pid}`"
    )


class KeptRun(QObject):
    """Says a kept run goes on; `stop_run` runs on the GUI thread on SIGTERM; `close()` takes it back."""

    def __init__(self, parent: QObject, stop_run=None):
        super().__init__(parent)
        self.tray: QSystemTrayIcon | None = None
        self._stop_run = stop_run
        self._previous = None  # the SIGTERM handler before ours, while ours is installed
        self._installed = False
        self._heartbeat = QTimer(self, interval=HEARTBEAT_MS, timeout=lambda: None)

    def announce(self, folder: str | os.PathLike, pid: int, icon=None) -> str:
        from core.engine.run_record import runs_root

        line = notice_line(folder, pid, runs_root())
        print(line, file=sys.stderr, flush=True)
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.tray = QSystemTrayIcon(self)
            if icon is not None:
                self.tray.setIcon(icon)
            self.tray.setToolTip(printable(f"AMP Console: training in {Path(folder).name}"))
            self.tray.show()
            self.tray.showMessage(
                "AMP Console: the run goes on",
                printable(
                    f"Training in {Path(folder).name}. It writes its checkpoint at the end; to stop it sooner: "
                    f"kill -TERM {pid}"
                ),
                QSystemTrayIcon.MessageIcon.Information,
                TRAY_MESSAGE_MS,
            )
        if self._stop_run is not None and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
            self._heartbeat.start()
        return line

    def _on_sigterm(self, _signum, _frame) -> None:
        self._restore()  # a second SIGTERM does what it did before
        QTimer.singleShot(0, self._stop_run)

    def _restore(self) -> None:
        self._heartbeat.stop()
        if self._installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)
            self._installed, self._previous = False, None

    def close(self) -> None:
        self._restore()
        if self.tray is not None:
            self.tray.hide()
            self.tray.deleteLater()
            self.tray = None


def ask_close_mid_run(parent) -> str:
    """Ask when the window closes while a run trains: 'stop', 'keep' or 'cancel'."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "AMP Console",
        "A run is still training. Close the window?",
        QMessageBox.StandardButton.NoButton,
        parent,
    )
    box.setObjectName("closeQuestion")
    box.setInformativeText(
        "Stop and close: the run stops after its current step, writes its checkpoint, then the window "
        "closes.\n\nKeep training: the window closes now; the run goes on to its end, writes its checkpoint, "
        "and AMP Console then exits."
    )
    stop = box.addButton("Stop and close", QMessageBox.ButtonRole.AcceptRole)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.ActionRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    stop.setObjectName("stopAndCloseButton")
    keep.setObjectName("keepTrainingButton")
    box.setDefaultButton(stop)
    box.setEscapeButton(cancel)
    box.exec()
    clicked = box.clickedButton()
    box.deleteLater()
    return "stop" if clicked is stop else "keep" if clicked is keep else "cancel"
