"""The main window: composes the panels, menus and the run controller. No training logic lives here."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtWidgets import QMainWindow, QMessageBox

from app.assets import icon
from app.file_actions import FileActions
from app.panels.attach import RemoteActions
from app.run.controller import RunController
from app.run.jobs import GuiThreadGarbageCollector, JobRunner
from app.task_actions import TaskActions
from app.tool_actions import ToolActions
from app.window_dialogs import WindowDialogs
from app.window_layout import build_menus, build_widgets
from app.window_settings import WindowSettings
from core.config import FIELD_SPECS, RunConfig
from core.engine.events import CheckpointSaved, RunEnded, RunPaused, RunStarted, StepMetrics
from core.engine.run_folder import METRICS_FILE
from core.files import read_jsonl

APP_NAME = "AMP Console"
STOPPING_TO_CLOSE = "Stopping the run before closing: finishing the current step and writing a checkpoint…"
CLOSE_TIMEOUT_MS = 60_000  # Stop and close: past this, stop and join (a process run has been killed by then)


class MainWindow(WindowDialogs, QMainWindow):
    """AMP Console's window. `devices` injects a device list (tests); `settings` a QSettings store; `prestart_runs`
    keeps a training process loaded ahead so separate-process runs start at once."""

    engineLoaded = Signal()
    closed = Signal()  # the window has closed for good (also after a run kept training with the window hidden)

    def __init__(
        self, settings: QSettings | None = None, devices: list | None = None, parent=None, prestart_runs: bool = True
    ):
        super().__init__(parent)
        self.prestart_runs = prestart_runs
        self.setWindowTitle(APP_NAME)
        self.setWindowIcon(icon("app"))
        self.settings = settings if settings is not None else QSettings()
        self.window_settings = WindowSettings(self.settings)
        self._injected_devices = devices
        self.engine_ready = False
        self.last_checkpoint: str | None = None
        self._error_message = self._error_details = ""
        self.controller = RunController(self)
        self._pending_step = None
        self._status_timer = QTimer(self, singleShot=True, interval=250, timeout=self._flush_status)
        self.jobs = JobRunner(self)
        self._preload = JobRunner(self)  # what the first estimate or run imports, ahead (load_engine)
        self.engine_preloaded = False
        self._garbage_collector = GuiThreadGarbageCollector(self)  # collects on the GUI thread: see its doc
        self.closed.connect(self._garbage_collector.stop)
        self._history: list | None = None  # a resumed run's earlier metrics, once read
        self._history_token: object = None  # the read whose records are wanted
        self._history_due = False  # the next RunStarted draws them (read off the GUI thread meanwhile)
        self._held: list | None = None  # the plots' events after a resumed RunStarted, until its history is in
        self._resuming: str | None = None  # the checkpoint the run being started resumes
        # A resume refused because its max_steps/epochs were already reached: Start resumes it once raised.
        self.pending_resume: str | None = None
        self.historyDialog = self.queueDialog = self.previewDialog = None  # made on first use (window_dialogs)
        self._run_device = ""  # the device of the training run in progress (tools refuse to share it)
        self.settings_name = ""  # the settings file last opened or saved, shown in the title
        self._run_folder = ""  # the running run's folder (as RunStarted says, once it has)
        self._run_config: dict = {}  # the last run's settings, as RunStarted says
        self._kept_run = None  # app.keep_training.KeptRun, after "Keep training"
        self._close_state: str | None = None  # None, 'asking', 'stopping', 'background' (hidden), 'closed'
        self._user_close = self._close_now = False
        self._close_deadline = QTimer(self, singleShot=True, timeout=self._finish_close)
        build_widgets(self)
        self.file_actions = FileActions(self)
        self.task_actions = TaskActions(self)  # File → Add task…: the user's task files
        self.tools = ToolActions(self)  # compare, inspect, the finders, the summary, the sweep
        self.remote = RemoteActions(self)  # hosts, Start on a host, File → Attach to run…
        build_menus(self)
        self.controller.event.connect(self._on_event)
        self.controller.setupFailed.connect(self._on_setup_failed)
        self.controller.runningChanged.connect(self._on_running_changed)
        self.jobs.busyChanged.connect(lambda _busy: self._update_buttons())
        self.window_settings.restore_geometry(self)
        self._update_buttons()

    def load_engine(self) -> None:
        """Import core (torch) and pyqtgraph, list devices, build the form and plots, restore last settings."""
        if self.engine_ready:
            return
        from core.lab.memory_estimate import preload
        from core.tasks import TASKS
        from core.tasks.user_tasks import keep_files_out

        if self._injected_devices is not None:
            self.devicesPanel.set_provider(lambda: list(self._injected_devices))
        else:
            from core.devices import list_devices

            self.devicesPanel.set_provider(list_devices)
        self.setupPanel.populate(TASKS, FIELD_SPECS)
        self.task_actions.list_remembered()  # from their source: no user code runs at start-up
        self.devicesPanel.refresh()
        self.remote.load_hosts()
        self.plotsPanel.build()
        self.window_settings.restore_run_setup(self)
        self.engine_ready = True
        keep_files_out(self, True)  # a task file's code runs in a child, never here
        self.closed.connect(lambda: keep_files_out(self, False))
        self._garbage_collector.freeze_loaded()  # torch and the engine are imported now
        self._preload.submit(preload, self._preloaded, lambda *_failure: self._preloaded())
        self.setupPanel.changed.connect(self._save_config_soon)
        self.setupPanel.executionChanged.connect(self._save_config_soon)
        self.setupPanel.executionChanged.connect(self._keep_spare_process)
        self._keep_spare_process()
        self.show_message("Ready. Choose a task and press Start.")
        self._update_buttons()
        self.engineLoaded.emit()

    def _preloaded(self, _result=None) -> None:
        """Those modules frozen too: a full collection on the GUI thread would walk them (about 90 ms)."""
        self._garbage_collector.freeze_loaded()
        self.engine_preloaded = True

    def apply_config(self, config) -> None:
        """Show `config` in the form and select its device when it is here."""
        if config.device not in ("auto", "") and config.device in [d.id for d in self.devicesPanel.devices]:
            self.devicesPanel.select(config.device)
        self.setupPanel.set_config(config)

    def _save_config_soon(self) -> None:
        QTimer.singleShot(0, self.save_settings)

    def save_settings(self) -> None:
        self.window_settings.save(self)

    def busy_with_run(self) -> bool:
        """Whether a run, a job or a tool is in progress (the status bar says so)."""
        busy = self.controller.running or self.jobs.busy or bool(self.tools.busy_tools())
        if busy:
            self.show_message("A run or a tool is in progress; stop it first.", "status-warn")
        return busy

    def train_from(self, config, checkpoint: str | None, why: str, note: str = "") -> bool:
        """Train `config`, put into the form, from `checkpoint` (None: from the start), `why` logged; `note` is written
        into the new run as `train --note` does. A sweep trial trained longer, a diverged run's fix."""
        if self.busy_with_run():
            return False
        self.apply_config(config)
        self.logPanel.log(why)
        return self.start_run(resume_from=checkpoint, note=note)

    def train_trial_longer(self, config, checkpoint: str) -> bool:
        return self.train_from(config, checkpoint, f"Training longer from {checkpoint}")

    def rerun_with_fix(self, fix: dict) -> bool:
        """One of a diverged run's RunEnded.fixes (core.engine.amp_health): the run's settings with its changes."""
        config = RunConfig.from_dict({**self._run_config, **fix["changes"]}, source="fix")
        why = f"Re-running with {fix['label']} from {fix['resume'] or 'the start'}"
        return self.train_from(config, fix["resume"], why, fix["note"])

    def train_with_precision(self, mode: str) -> bool:
        """Set the precision picker to `mode` and start a full run with the rest of the form as it is."""
        if self.busy_with_run():
            return False
        self.setupPanel.set_precision(mode)
        self.setupPanel.validate()
        self._update_buttons()
        self.activateWindow()
        return self.start_run()

    def devices_for_run(self) -> list | None:
        return list(self._injected_devices) if self._injected_devices is not None else None

    def start_run(self, resume_from: str | None = None, note: str = "") -> bool:
        """Train the form's settings (from `resume_from`); `note`: the run's (RunConfig.note)."""
        if not self.startButton.isEnabled() and not resume_from:
            return False
        resume_from = resume_from or self.pending_resume
        if self.controller.running or not self.engine_ready or not self.setupPanel.validate():
            return False
        if self.tools.busy_tools():  # a resume bypasses the Start button: the same rule
            self.show_message(
                f"{', '.join(self.tools.busy_tools())} is working on the device; stop it or let it finish first.",
                "status-warn",
            )
            return False
        self.fixesPanel.hide()
        if self.devicesPanel.current_host() is not None:  # a host's device: the run is started there
            return self.remote.start_run(resume_from)
        from core.engine.prepare import prepare_run

        # Named here (the status bar shows it); the run prepares again with its checkpoint, off the GUI thread.
        config = prepare_run(
            {**self.setupPanel.config().to_dict(), "note": note},
            runs_dir=str(self.runs_root()),
            device=self.setupPanel.device(),
        ).config
        self._run_device = config.device
        self.save_settings()
        self.plotsPanel.clear()
        processes = self.setupPanel.processes()
        from core.tasks.user_tasks import installed_tasks

        # A task the user added (a file, a module) never runs its code in the window's process (an installed package's
        # is imported here already): its runs train in a child even if the form chose a thread.
        added = bool(config.task_file) and config.task_file not in installed_tasks().values()
        forced = added and not self.setupPanel.separate_process()
        separate = self.setupPanel.separate_process() or forced
        launching = f" on {processes} processes" if processes > 1 else " in a separate process" if separate else ""
        launching += " (a task file's code runs only outside the window)" if forced and processes == 1 else ""
        # Shown before starting: a run that cannot start reports at once, and its error must stay on screen.
        self.show_message(("Resuming from checkpoint…" if resume_from else "Setting up the run…") + launching)
        self._history = self._held = None
        self._resuming = resume_from or None
        self._history_due = bool(resume_from)
        token = self._history_token = object()
        if resume_from:
            self.jobs.submit(
                lambda: read_jsonl(Path(resume_from).parent / METRICS_FILE),
                lambda records: self._history_read(token, records),
                lambda message, _details: self._history_read(token, [], f"Earlier metrics not shown: {message}"),
            )
        self._run_folder = config.out_dir
        self.controller.start(
            config,
            resume_from=resume_from or None,
            devices=self.devices_for_run(),
            processes=processes,
            separate_process=separate,
        )
        self._update_buttons()
        return True

    def toggle_pause(self) -> None:
        if not self.controller.running or self.controller.stopping:
            return
        if self.controller.paused:
            self.controller.resume()
            self.show_message("Running.")
        else:
            self.controller.pause()
            self.show_message("Pausing after the current step…", "status-warn")
        self._update_buttons()

    def stop_run(self) -> None:
        if not self.controller.running or self.controller.stopping:
            return
        self.controller.stop()
        self.show_message("Stopping… (finishing the current step and writing a checkpoint)", "status-warn")
        self._update_buttons()

    def _update_buttons(self) -> None:
        running = self.controller.running
        stopping = running and self.controller.stopping
        tools = self.tools.busy_tools()
        can_start = (
            self.engine_ready
            and not running
            and not self.jobs.busy
            and self._close_state is None
            and self.setupPanel.is_valid()
            and not tools
        )
        can_pause = running and not stopping and self.controller.can_pause  # DDP ranks can't pause together
        for button, action, enabled in (
            (self.startButton, self.startAction, can_start),
            (self.pauseButton, self.pauseAction, can_pause),
            (self.stopButton, self.stopAction, running and not stopping),
        ):
            button.setEnabled(enabled)
            action.setEnabled(enabled)
        self.startButton.setText("Resume" if self.pending_resume else "Start")
        problems = self.setupPanel.problem_summary() if self.engine_ready and not running else ""
        if tools and not problems:
            problems = f"{', '.join(tools)} is working on the device; stop it or let it finish before starting a run"
        self.startButton.setToolTip(problems or "Start training with these settings (F5)")
        paused = running and self.controller.paused
        self.pauseButton.setText("Resume" if paused else "Pause")
        self.pauseButton.setIcon(icon("start" if paused else "pause"))
        self.stopButton.setText("Stopping…" if stopping else "Stop")
        self.setupPanel.setEnabled(self.engine_ready and not running)
        self.devicesPanel.setEnabled(not running)
        if not running:
            self.devicesPanel.show_remote_run(None)
        self.refreshAction.setEnabled(self.engine_ready and not running)  # a new list would change the run's device
        self.tools.update_enabled(self.engine_ready)
        self.previewAction.setEnabled(self.engine_ready)
        self._update_title()
        self.file_actions.update_enabled(running=running, busy=self.jobs.busy)
        self.task_actions.update_enabled(running)
        self.remote.update_enabled(running)

    def _update_title(self) -> None:
        """The window's title says whether a run is going, so it can be told apart in the task bar."""
        controller = self.controller
        state = controller.running and (
            "stopping" if controller.stopping else "paused" if controller.paused else "training"
        )
        # A short name then the app's, once: Qt appends the application display name to a title not ending in it.
        name = f"{Path(self._run_folder).name} ({state})" if state else self.settings_name
        title = f"{name} — {APP_NAME}" if name else APP_NAME
        if self.windowTitle() != title:
            self.setWindowTitle(title)

    def set_settings_name(self, name: str) -> None:
        """The settings in the form came from (or were saved as) `name`: a file's stem, a preset, a run."""
        self.settings_name = name
        self._update_title()

    def _history_read(self, token: object, records: list, problem: str = "") -> None:
        """A resumed run's earlier metrics are in (an unreadable history costs the earlier curve, never the run)."""
        if token is not self._history_token:  # another run started since
            return
        if problem:
            self.logPanel.log(problem)
        self._history = records
        self._draw_history()

    def _draw_history(self) -> None:
        """After the resumed run's RunStarted, its history as the curves' start, then the events held meanwhile."""
        if self._held is None or self._history is None:
            return
        held, self._held = self._held, None
        self.plotsPanel.show_history(self._history)
        self.samplesPanel.show_history(self._history)
        for event in held:
            self.plotsPanel.handle_event(event)

    def _on_event(self, event) -> None:
        if self._held is not None:
            self._held.append(event)
        else:
            self.plotsPanel.handle_event(event)
        self.samplesPanel.handle_event(event)  # before a resumed run's earlier samples are shown
        if isinstance(event, RunStarted):
            self._run_config = event.config
            self._run_folder = str(event.config.get("out_dir") or self._run_folder)  # a clash picks a sibling
            self.statusBarWidget.host = getattr(getattr(self.controller.run, "host", None), "dest", "")  # a host's run
            self.devicesPanel.show_remote_run(self.statusBarWidget.host, event.device)  # it looks remote
            self._update_title()
            if self._history_due:
                self._history_due = False
                self._held = [] if event.start_step > 0 else None
                self._draw_history()
        self.logPanel.handle_event(event)
        if isinstance(event, RunStarted) and self.plotsPanel.overlay_note():
            self.logPanel.log(self.plotsPanel.overlay_note())  # why other runs' curves are under this one
            if note := self.plotsPanel.other_task_note(event.task):
                self.logPanel.log(note)
        if isinstance(event, StepMetrics):
            if event.nonfinite_source:  # rare, and the next report would overwrite where the inf came from
                self.statusBarWidget.handle_event(event)
            # Step reports can come hundreds of times a second; the status bar shows the latest at 4 Hz.
            self._pending_step = event
            if not self._status_timer.isActive():
                self._status_timer.start()
            return
        self._flush_status()
        self.statusBarWidget.handle_event(event)
        match event:
            case RunStarted() if not self.controller.paused:
                self.pending_resume = None
                self._update_buttons()
                self.show_message(f"Running {event.task} on {event.device} in {event.precision}.")
            # the latest state; best-metric copies are logged, not exported by default
            case CheckpointSaved(kind="last"):
                self.last_checkpoint = event.path
            case RunPaused() if self.controller.paused:
                self.show_message(
                    f"Paused at step {event.step:,}: the run waits between steps. Press Resume to continue.",
                    "status-warn",
                )
            case RunEnded():
                self._on_run_ended(event)

    def _on_run_ended(self, event: RunEnded) -> None:
        if event.checkpoint:
            self.last_checkpoint = event.checkpoint
        self.fixesPanel.show_fixes(event)  # a divergence's re-runs, one button each
        if event.status == "failed":
            self.show_error(f"Run failed: {event.message}", event.details, log=False)  # the log pane logs RunEnded
        else:
            where = f" Checkpoint: {event.checkpoint}" if event.checkpoint else ""
            text = event.message[:1].upper() + event.message[1:]
            self.show_message(f"{text}.{where}", "status-ok")

    def _flush_status(self) -> None:
        if self._pending_step is not None:
            self.statusBarWidget.handle_event(self._pending_step)
            self._pending_step = None

    def _on_device_selected(self, info) -> None:
        self.setupPanel.set_device(info)
        if info.type == "cuda":  # the selected device's machine: this one or a host
            devices = self.devicesPanel.host_devices(self.devicesPanel.current_host())
            self.setupPanel.set_process_limit(sum(1 for d in devices if d.type == "cuda"))
        else:
            self.setupPanel.set_process_limit(os.cpu_count() or 1)
        self.statusBarWidget.set_device(info, self.devicesPanel.current_host())

    def _on_setup_failed(self, message: str, field: str, details: str) -> None:
        if self._resuming and field in ("max_steps", "epochs"):  # e.g. File -> Resume of a completed run
            self.pending_resume = self._resuming
            message += f" (raise it, then Resume continues from {self._resuming})"
        else:
            self.pending_resume = None
        self._update_buttons()
        self.show_error(f"Could not start: {message}", details)
        self.setupPanel.mark_engine_error(field, message.split(": ", 1)[-1] if field else message)

    def _on_running_changed(self, running: bool) -> None:
        self._update_buttons()
        if not running and self._close_state in ("stopping", "background"):
            QTimer.singleShot(0, self._finish_close)  # after the run's last events have been shown
        elif not running:
            self._keep_spare_process()

    def _keep_spare_process(self) -> None:
        """One training process kept loaded for the next run while separate one-process runs are chosen."""
        wanted = (
            self.prestart_runs
            and self.engine_ready
            and self.setupPanel.processes() == 1
            and self.setupPanel.separate_process()
        )
        if not wanted:
            self.controller.discard_spare()
        elif not self.controller.running:
            self.controller.prepare_spare()

    def show_message(self, text: str, role: str = "") -> None:
        self.statusBarWidget.show_message(text, role)

    def show_error(self, message: str, details: str = "", log: bool = True) -> None:
        """An engine error: red status line, a log entry (unless logged already), and its details one click away."""
        self._error_details = details
        self._error_message = message
        self.statusBarWidget.show_message(message, "status-error", details=bool(details))
        if log:
            self.logPanel.log(message, "error")

    def show_error_details(self) -> None:
        box = self.findChild(QMessageBox, "errorDetails")
        if box is None:  # one box: a second click shows the same one, not a pile of them
            box = QMessageBox(
                QMessageBox.Icon.Critical, "AMP Console: error", "", QMessageBox.StandardButton.Close, self
            )
            box.setObjectName("errorDetails")
        box.setText(self._error_message)
        box.setDetailedText(self._error_details)
        box.open()
        box.raise_()

    def request_close(self) -> bool:
        """A close the user asked for: while a run trains it asks first (a programmatic close() stops and joins)."""
        self._user_close = True
        try:
            return self.close()
        finally:
            self._user_close = False

    def ask_close_mid_run(self) -> str:
        """The question when the user closes the window while a run trains: 'stop', 'keep' or 'cancel'."""
        from app.keep_training import ask_close_mid_run

        return ask_close_mid_run(self)

    def closeEvent(self, event) -> None:
        interactive = (event.spontaneous() or self._user_close) and not self._close_now
        if interactive and self._close_state is not None:
            event.ignore()  # already asking or stopping: one question, one stop
            if self._close_state == "stopping":
                self.show_message(STOPPING_TO_CLOSE, "status-warn")
            return
        if interactive and self.controller.running and not self.controller.detached:  # a detached run goes on
            event.ignore()
            self._close_mid_run()
            return
        # a programmatic close, or the stop ran out of time: stop and join now
        if self.controller.running and not self.controller.detached:
            self.show_message("Stopping the run before closing…", "status-warn")
            self.statusBarWidget.message.repaint()
        self._close_deadline.stop()
        self.controller.shutdown()  # stop + join: no thread outlives the window
        self.jobs.shutdown()
        self._preload.shutdown()
        self.remote.shutdown()
        for dialog in (self.previewDialog, *self.tools.dialogs()):
            if dialog is not None:
                dialog.shutdown()
        for dialog in (self.historyDialog, self.queueDialog):  # a queue's running entry stops with its checkpoint
            if dialog is not None:
                dialog.panel.shutdown()
        self.save_settings()
        if self._kept_run is not None:
            self._kept_run.close()
        self._close_state = "closed"
        super().closeEvent(event)
        self.closed.emit()

    def _close_mid_run(self) -> None:
        if self.controller.stopping:  # Stop was pressed already: just close when it has ended
            answer = "stop"
        else:
            self._close_state = "asking"
            answer = self.ask_close_mid_run()
            if self._close_state != "asking":  # closed programmatically meanwhile
                return
            self._close_state = None
        if answer == "cancel":
            return
        self.controller.prepare_to_close()
        if not self.controller.running:  # it ended while the question was open
            self._close_state = "stopping"
            QTimer.singleShot(0, self._finish_close)
            return
        if answer == "keep":
            self._close_state = "background"
            if self.controller.paused:
                self.controller.resume()  # a hidden window could never resume it
            self.logPanel.log("Window closed; the run goes on, and AMP Console exits when it ends.")
            from app.keep_training import KeptRun  # a notification and a line on stderr: how to stop it

            thread_run = not self.controller.separate_process
            self._kept_run = KeptRun(self, stop_run=self.controller.stop if thread_run else None)
            self._kept_run.announce(self._run_folder, self.controller.stop_pid, icon=self.windowIcon())
            self.save_settings()
            for dialog in (self.historyDialog, self.previewDialog, *self.tools.dialogs()):
                if dialog is not None:
                    dialog.hide()
            self.hide()
            return
        self._close_state = "stopping"
        if not self.controller.stopping:
            self.controller.stop()
        self.show_message(STOPPING_TO_CLOSE, "status-warn")
        self.logPanel.log("Stopping the run to close the window.")
        self._update_buttons()
        self._close_deadline.start(CLOSE_TIMEOUT_MS)

    def _finish_close(self) -> None:
        """The run has ended (or did not stop in time): close for good."""
        if self._close_state in (None, "closed"):
            return
        self._close_now = True
        try:
            self.close()
        finally:
            self._close_now = False
