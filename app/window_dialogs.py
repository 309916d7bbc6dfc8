"""The main window's dialogs (a part of app.main_window.MainWindow): the run history, the run queue and the Model
preview, each created on first use, and what they ask of the window (settings, a resume, an overlay)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QVBoxLayout

from core.config import RunConfig
from core.errors import ConfigError


def raised(dialog):
    dialog.show()
    dialog.raise_()
    return dialog


class WindowDialogs:
    """MainWindow's dialog methods (a mixin: they use the window's panels and controller)."""

    def show_run_in_history(self, name: str) -> None:
        """Open the run history with the run `name` (as the history lists it, e.g. 'sweep/trial') selected."""
        dialog = self.show_history()
        if dialog is None:
            return
        panel = dialog.panel
        if panel.visible_names() and name in panel.visible_names():
            panel.select_names(name)
        else:  # the list is (re)scanned when the dialog shows: select once the scan is in
            panel.scanned.connect(lambda _rows=None: panel.select_names(name), Qt.ConnectionType.SingleShotConnection)
            if not panel.busy:
                panel.refresh()

    def show_history(self):
        """The run history (every run under the runs folder) as a dialog, created on first use."""
        if not self.engine_ready:
            return None
        if self.historyDialog is None:
            from app.panels.history import HistoryPanel

            self.historyDialog = self._panel_dialog("historyDialog", "Run history", 1100, 480, HistoryPanel)
            panel = self.historyDialog.panel
            panel.remoteRuns.set_hosts(self.devicesPanel.hosts)  # the hosts' runs listed too
            panel.loadSettingsRequested.connect(self._load_run_settings)
            panel.resumeRequested.connect(self._resume_from_history)
            panel.evaluated.connect(self._log_evaluation)
            panel.previewRequested.connect(self.show_preview)
            panel.overlayRequested.connect(self.overlay_runs)
            panel.clearOverlaysRequested.connect(self.plotsPanel.clear_overlays)
            panel.exportRequested.connect(self.file_actions.ask_export)  # Export… on a run: its last or best
            panel.rootChosen.connect(self.set_runs_root)
        return raised(self.historyDialog)

    def _panel_dialog(self, name: str, title: str, width: int, height: int, make_panel) -> QDialog:
        """A dialog holding `make_panel(self.runs_root, dialog)` as `dialog.panel`."""
        dialog = QDialog(self, objectName=name, windowTitle=title)
        dialog.resize(width, height)
        dialog.panel = make_panel(self.runs_root, dialog)
        QVBoxLayout(dialog).addWidget(dialog.panel)
        return dialog

    def overlay_runs(self, runs: list) -> None:
        """The run history's Overlay; one line when the runs trained another task than the one on show (or chosen)."""
        self.plotsPanel.overlay_runs(runs)
        task = self.plotsPanel.run_task or self.setupPanel.taskCombo.currentData() or ""
        if note := self.plotsPanel.other_task_note(task):
            self.show_message(note, "status-warn")
            self.logPanel.log(note)

    def show_queue(self, add: list | None = None):
        """The run queue (app.panels.queue) as a dialog, created on first use; `add`: (name, RunConfig) entries to
        add, [] for the form's settings."""
        if not self.engine_ready:
            return None
        if self.queueDialog is None:
            from app.panels.queue import QueuePanel

            def panel(root, dialog) -> QueuePanel:
                form_config = lambda: self.setupPanel.validate() and self.setupPanel.config()  # noqa: E731
                host = lambda: (dest := self.devicesPanel.current_host()) and self.devicesPanel.hosts.host(dest)  # noqa: E731
                return QueuePanel(root, form_config, dialog, form_host=host)

            self.queueDialog = self._panel_dialog("queueDialog", "Run queue", 900, 360, panel)
            self.queueDialog.panel.historyRequested.connect(self.show_run_in_history)
        if add:
            self.queueDialog.panel.add(add)
        elif add is not None:
            self.queueDialog.panel.add_form()
        return raised(self.queueDialog)

    def show_preview(self, folder: str | None = None):
        """The Model preview (created on first use); `folder` selects that run."""
        if not self.engine_ready:
            return None
        if self.previewDialog is None:
            from app.panels.preview import PreviewDialog

            self.previewDialog = PreviewDialog(self.runs_root, lambda: [d.id for d in self.devicesPanel.devices], self)
        if folder:
            self.previewDialog.select_run(folder)
        raised(self.previewDialog).activateWindow()
        return self.previewDialog

    def runs_root(self) -> Path:
        """Where runs with no output folder go and what the run history lists."""
        from core.engine.run_record import runs_root

        return runs_root(self.window_settings.runs_root() or None)

    def set_runs_root(self, folder: str) -> None:
        self.window_settings.set_runs_root(folder)
        self.show_message(f"Runs root: {self.runs_root()}")
        if self.historyDialog is not None:
            self.historyDialog.panel.refresh()

    def _load_run_settings(self, config: dict) -> None:
        if self.controller.running:
            self.show_message("A run is in progress; its settings stay in the form until it ends.", "status-warn")
            return
        try:
            self.apply_config(RunConfig.from_dict(config, source="run.json"))
        except ConfigError as exc:
            self.show_error(f"Could not load the run's settings: {exc}")
            return
        self.show_message(f"Loaded the settings of the run in {config.get('out_dir', '?')}")
        self.set_settings_name(Path(str(config.get("out_dir") or "")).name)

    def _log_evaluation(self, result: dict) -> None:
        """The history evaluated a checkpoint: logged, and the preview's Evaluation tab rereads the report."""
        from core.runs.evaluation_report import report_folder

        metrics = ", ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())
        self.logPanel.log(
            f"Evaluated {result['checkpoint']} (step {result['step']:,}) on the {result['split']} split: {metrics}"
        )
        tab = self.previewDialog.evaluation if self.previewDialog is not None else None
        if tab is not None and tab.folder == report_folder(result["checkpoint"]) and not tab.job.running:
            tab.set_checkpoint(tab.checkpoint, tab.device)

    def _resume_from_history(self, checkpoint: str) -> None:
        if not self.busy_with_run():
            self.file_actions.resume(checkpoint)
