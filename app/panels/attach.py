"""Runs that live on their own, started on a host or attached (a run folder or HOST:PATH), followed by a
RemoteRun into the same plots and log as a local run; closing the window lets go of them.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QDialog, QFileDialog, QLabel, QPushButton

from app.panels.editors import hbox
from app.panels.hosts import dialog_layout
from app.run.remote_run import RemoteRun


class AttachDialog(QDialog):
    """Which run to follow: a run folder here, or HOST:PATH (the recent ones offered). `targetChosen(text)`."""

    targetChosen = Signal(str)

    def __init__(self, recent: list[str], parent=None):
        super().__init__(parent, objectName="attachDialog")
        self.targetCombo = QComboBox(objectName="attachTargetCombo", editable=True)
        self.targetCombo.addItems(recent)
        self.targetCombo.lineEdit().setPlaceholderText("HOST:PATH, or a run folder on this machine")
        browse = QPushButton("Folder…", objectName="attachBrowseButton", clicked=self._browse)
        row = hbox((self.targetCombo, 1), browse)
        hint = (
            "The run is shown from its start, then live. Pause, Resume and Stop act on it wherever it "
            "runs; closing the window lets go of it and it goes on."
        )
        dialog_layout(self, "Attach to run", "attachOkButton", 560, QLabel("Run:"), row, hint)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Run folder", self.targetCombo.currentText())
        if folder:
            self.targetCombo.setEditText(folder)

    def accept(self) -> None:
        text = self.targetCombo.currentText().strip()
        if not text:
            return
        self.targetChosen.emit(text)
        super().accept()


class RemoteActions:
    """The window's remote side. `window` is the MainWindow (its controller, panels and settings)."""

    def __init__(self, window):
        self.window = window
        self.attachAction = QAction("&Attach to run…", window, shortcut="Ctrl+Shift+A", triggered=self.show_attach)
        self.attachAction.setToolTip("Watch and steer a run started elsewhere: a run folder here, or HOST:PATH")
        hosts = window.devicesPanel.hosts
        hosts.savedChanged.connect(window.window_settings.set_hosts)
        window.controller.notice.connect(self._on_notice)

    def add_to_menu(self, menu) -> None:
        menu.addAction(self.attachAction)

    def load_hosts(self) -> None:
        """The hosts saved at the last launch, listed and asked for their devices again (off the GUI thread)."""
        self.window.devicesPanel.hosts.load(self.window.window_settings.hosts())

    def update_enabled(self, running: bool) -> None:
        self.attachAction.setEnabled(self.window.engine_ready and not running)

    def shutdown(self) -> None:
        self.window.devicesPanel.hosts.shutdown()

    def start_run(self, resume_from: str | None = None) -> bool:
        """Start the form's run on the selected host's device; its output folder and data are paths there."""
        window = self.window
        dest = window.devicesPanel.current_host()
        if resume_from:
            window.show_message(
                f"A checkpoint on this machine can't be resumed on {dest}: choose one of this "
                "machine's devices, or resume it there with `amp-console remote start "
                "--resume`.",
                "status-warn",
            )
            return False
        config = window.setupPanel.config()
        window.save_settings()
        host = window.devicesPanel.hosts.host(dest)
        # its device is not this machine's: the tools here stay free
        return self._follow(
            f"{dest}:{config.device}",
            f"Starting the run on {dest}…",
            lambda: window.controller.start(config, processes=window.setupPanel.processes(), host=host),
        )

    def show_attach(self) -> AttachDialog | None:
        if not self.window.engine_ready or self.window.controller.running:
            return None
        dialog = AttachDialog(self.window.window_settings.recent_runs(), self.window)
        dialog.targetChosen.connect(self.attach)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()
        return dialog

    def attach(self, target: str) -> bool:
        """Follow `target` (a run folder here or HOST:PATH) into the plots, from its start."""
        from core.remote.ssh import RemoteError, parse_target

        window = self.window
        if window.controller.running:
            window.show_message(
                "A run is in progress; stop it or let it end before attaching to another.", "status-warn"
            )
            return False
        remote = parse_target(target) if not os.path.exists(target) else None
        try:
            host = window.devicesPanel.hosts.host(remote[0]) if remote else None
        except RemoteError as exc:
            window.show_error(str(exc))
            return False
        return self._follow(target, f"Attaching to {target}…", lambda: window.controller.attach(target, host=host))

    def _follow(self, device: str, message: str, start) -> bool:
        """Clear the plots and start following a run that lives on its own; remember it once it is known."""
        window = self.window
        window.plotsPanel.clear()
        window._history = window._resuming = None
        window._run_device = device
        window.show_message(message)
        start()
        run = window.controller.run
        if isinstance(run, RemoteRun):
            run.attached.connect(window.window_settings.add_recent_run)
        window._update_buttons()
        return True

    def _on_notice(self, text: str, role: str) -> None:
        level = {"status-error": "error", "status-warn": "warning"}.get(role, "info")
        self.window.logPanel.log(text, level)
        if role != "log":
            self.window.show_message(text, role)
