"""Try a trained model: the Model preview dialog (Tools > Try a model…, or Try it… in the run history).

Pick a run (or a checkpoint file), its checkpoint (the one its summary advised, its best or its last) and a device; it
loads as a core.runs.predict.Predictor (a task file's in a child process, core.runs.predictor_child) and the task's
page is built from its serving's PreviewSpec (pages.py, widgets.py, drawing.py): no task is named here. The model
never runs on the GUI thread: a PredictionQueue (queue.py) runs one request at a time. Errors are one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QLabel,
    QPushButton,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
)

from app.panels.editors import box_layout
from app.panels.preview.evaluation_tab import EvaluationTab
from app.panels.preview.pages import PAGES, Page, page_class
from app.panels.preview.queue import PredictionQueue
from app.panels.preview.widgets import coloured, fmt, refill
from app.panels.tool_dialog import ERROR_COLOUR
from app.run.jobs import JobRunner


def describe_predictor(predictor) -> str:
    """'<b>sentiment</b> · best.pt, step 400 (epoch 2) · accuracy 0.91 · cpu': the header over the pages."""
    from core.engine.run_record import primary_metric

    metrics = dict(getattr(predictor, "metrics", None) or {})
    config = dict(getattr(predictor, "config", None) or {})
    name = config.get("monitor") or primary_metric(predictor.task)
    shown = [(name, metrics[name])] if name in metrics else list(metrics.items())[:2]
    parts = [
        f"<b>{predictor.task}</b>",
        f"{Path(predictor.checkpoint).name}, step {predictor.step:,} (epoch {predictor.epoch})",
    ]
    if shown:
        parts.append(", ".join(f"{k} {fmt(v)}" for k, v in shown))
    parts.append(str(predictor.device))
    return " · ".join(parts)


class PreviewDialog(QDialog):
    """The Model preview: a run (or a checkpoint file), advised, best or last, a device; then the task's page.
    `runs_root()` gives the folder whose runs are offered; `devices()` the device ids to offer (cpu first)."""

    def __init__(self, runs_root: Callable[[], Path], devices: Callable[[], list[str]] | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("previewDialog")
        self.setWindowTitle("Model preview")
        self.resize(1040, 720)  # the evaluation plots need the room
        self._runs_root = runs_root
        self._devices = devices or (lambda: ["cpu"])
        self.predictor = None
        self.children: list = []  # the child processes holding task files' models (core.runs.predictor_child)
        self.runs: list[dict] = []
        self.files: list[str] = []  # checkpoint files browsed to, offered after the runs
        self.outside: list[str] = []  # run folders outside the runs root asked for by select_run
        self._wanted: str | None = None  # a run folder to select once the scan is in
        self.source: str | None = None  # what is loaded (or loading)
        self._note = ""  # what the status line says about the loaded checkpoint (its notes)
        self.queue = PredictionQueue(self)
        self.queue.finished.connect(self._finished)
        self.queue.failed.connect(self._failed)
        self.scans = JobRunner(self)

        self.runCombo = QComboBox(objectName="previewRunCombo")
        self.runCombo.setMinimumWidth(320)
        self.runCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.refreshButton = QPushButton("Refresh", objectName="previewRefreshButton", clicked=self.refresh)
        self.browseButton = QPushButton("Browse…", objectName="previewBrowseButton", clicked=self.browse)
        self.browseButton.setToolTip("Preview a checkpoint file (.pt) from anywhere")
        self.whichCombo = QComboBox(objectName="previewWhichCombo")
        for which in ("advised", "best", "last"):
            self.whichCombo.addItem(f"{which.capitalize()} checkpoint", which)
        self.whichCombo.setToolTip(
            "The checkpoint the run's summary advised (its best, or its last weights when its validation split "
            "was too small to choose the best by: said below), its best (its last when it kept no best), or its last"
        )
        self.deviceCombo = QComboBox(objectName="previewDeviceCombo")
        self.deviceCombo.setToolTip(
            "Where the model runs; one request at a time is quick on the CPU, which also "
            "leaves an accelerator to a run that is training"
        )
        for combo in (self.runCombo, self.whichCombo, self.deviceCombo):
            combo.activated.connect(lambda _i: self.load())
        choices = (QLabel("Run"), (self.runCombo, 1), self.refreshButton, self.browseButton, self.whichCombo)
        top = box_layout(None, *choices, QLabel("Device"), self.deviceCombo, horizontal=True)

        self.header = QLabel("Pick a run to try its model.", objectName="previewHeader", wordWrap=True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.statusLabel = QLabel(objectName="previewStatus", wordWrap=True)
        self.statusLabel.setTextFormat(Qt.TextFormat.RichText)

        self.stack = QStackedWidget(objectName="previewStack")
        self.messageLabel = QLabel(
            "Pick a run (or Browse… for a checkpoint file) to try its model here.",
            objectName="previewMessage",
            wordWrap=True,
        )
        self.messageLabel.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.messageLabel.setTextFormat(Qt.TextFormat.RichText)
        self.stack.addWidget(self.messageLabel)
        self.pages: dict[str, Page] = {}  # task -> its page, built on its first load from its PreviewSpec
        self.tabs = QTabWidget(objectName="previewTabs")
        self.tabs.addTab(self.stack, "Try it")
        self.evaluation = EvaluationTab(self)
        self.tabs.addTab(self.evaluation, "Evaluation")

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.statusLabel)
        self.refresh_devices()

    def refresh_devices(self) -> None:
        keep = self.deviceCombo.currentText() or "cpu"
        ids = [str(d) for d in self._devices()]
        ids = ids if "cpu" in ids else ["cpu", *ids]
        refill(self.deviceCombo, ids)
        self.deviceCombo.setCurrentText(keep if keep in ids else "cpu")

    def refresh(self) -> None:
        """Scan the runs root again (off the GUI thread); the current choice is kept."""
        root = self._runs_root()

        def scan():
            from core.engine.run_index import find_runs

            return [r for r in find_runs(root) if r.get("checkpoints")]

        self.refreshButton.setEnabled(False)
        self.scans.submit(scan, self._scanned, self._scan_failed)

    def _scanned(self, runs: list[dict]) -> None:
        self.refreshButton.setEnabled(True)
        keep = self._wanted or self.current_source()
        self.runs = runs
        combo = self.runCombo
        with QSignalBlocker(combo):
            combo.clear()
            for run in runs:
                combo.addItem(f"{run.get('name')} · {run.get('task')} · {run.get('status') or '?'}", run.get("folder"))
            if self._wanted and combo.findData(self._wanted) < 0 and self._wanted not in self.outside:
                self.outside.append(self._wanted)  # a run outside the runs root (Try it… on it): offered from now on
            for folder in self.outside:
                if combo.findData(folder) < 0:
                    combo.addItem(f"{Path(folder).name} · {folder}", folder)
            for path in self.files:
                self._add_file_item(path)
            index = combo.findData(keep) if keep else -1
            combo.setCurrentIndex(index if index >= 0 else (0 if combo.count() else -1))
        if keep and index < 0 and self.runCombo.count():  # what was shown is gone (deleted): show what is picked
            self._wanted = None
            self.load()
            return
        if not self.runCombo.count():
            self._message(
                f"No run with a checkpoint under {self._runs_root()}. Train one, or Browse… for a checkpoint file."
            )
            return
        if self._wanted is not None or self.source is None:
            self._wanted = None
            self.load()

    def _scan_failed(self, message: str, _details: str) -> None:
        self.refreshButton.setEnabled(True)
        self._message(f"Could not list the runs: {message}")

    def current_source(self) -> str | None:
        data = self.runCombo.currentData()
        return str(data) if data else None

    def select_run(self, folder: str) -> None:
        """Show `folder`'s run (the History's Try it…): selected and loaded once the list is scanned."""
        self._wanted = str(folder)
        self.refresh()

    def open_file(self, path: str) -> None:
        path = str(path)
        if path not in self.files:
            self.files.append(path)
        index = self.runCombo.findData(path)
        if index < 0:
            self._add_file_item(path)
            index = self.runCombo.count() - 1
        self.runCombo.setCurrentIndex(index)
        self.load()

    def _add_file_item(self, path: str) -> None:
        self.runCombo.addItem(f"file: {Path(path).name} ({Path(path).parent.name})", path)
        self.runCombo.setItemData(self.runCombo.count() - 1, path, Qt.ItemDataRole.ToolTipRole)

    def browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Checkpoint to preview", str(self._runs_root()), "Checkpoints (*.pt);;All files (*)"
        )
        if path:
            self.open_file(path)

    def load(self) -> None:
        """Load the chosen checkpoint (a newer choice supersedes a load still running)."""
        source = self.current_source()
        if not source:
            return
        which = self.whichCombo.currentData() or "advised"
        device = self.deviceCombo.currentText() or "cpu"
        self.whichCombo.setEnabled(Path(source).is_dir() or not Path(source).suffix)
        self.source = source
        self.predictor = None
        self._note = ""
        for page in self.pages.values():
            page.debounce.stop()
            page.predictor = None
        self.header.setText(f"Loading {Path(source).name} ({which}) on {device}…")
        self.statusLabel.setText("")
        self._close_children()
        self.queue.submit("load", lambda: load_for_preview(source, which, device, self.children), supersede=True)

    def _page(self, predictor) -> Page | None:
        """The page for the predictor's task, built from its serving's PreviewSpec (again when that changed), or None."""
        spec = getattr(predictor.serving, "preview", None)
        page = self.pages.get(predictor.task)
        if page is not None and page.spec == spec:
            return page
        cls = None if spec is None else page_class(spec)
        if cls is None:
            return None
        if page is not None:
            self.stack.removeWidget(page)
            page.debounce.stop()
            page.deleteLater()
        page = cls(spec, f"preview{predictor.task.capitalize()}", self._submit, self)
        page.setObjectName(f"preview{predictor.task.capitalize()}Page")
        self.pages[predictor.task] = page
        self.stack.addWidget(page)
        return page

    def _loaded(self, result) -> None:
        predictor, examples, note = result
        page = self._page(predictor)
        if page is None:
            spec = getattr(predictor.serving, "preview", None)
            said = (
                "its serving part declares no preview"
                if spec is None
                else f"no page shows {spec.input_kind} -> {spec.output_kind}"
            )
            self._message(f"No preview for the {predictor.task!r} task ({said}; the pages take {', '.join(PAGES)}).")
            return
        self.predictor = predictor
        self._close_children(keep=predictor)
        self.header.setText(describe_predictor(predictor))
        self.header.setToolTip(str(predictor.checkpoint))
        self.stack.setCurrentWidget(page)
        self.evaluation.set_checkpoint(predictor.checkpoint, self.deviceCombo.currentText() or "cpu")
        notes = list(getattr(predictor, "notes", None) or [])  # e.g. the last weights advised, or no best kept yet
        self._note = " ".join(notes + ([note] if note else []))
        self.statusLabel.setText(self._note)
        page.set_predictor(predictor, examples)

    def _message(self, text: str, error: bool = True) -> None:
        self.predictor = None
        self.evaluation.set_checkpoint(None)
        self.messageLabel.setText(coloured(text, ERROR_COLOUR) if error else text)
        self.stack.setCurrentWidget(self.messageLabel)
        if error:
            self.header.setText(coloured("Nothing loaded", ERROR_COLOUR))

    def _close_children(self, keep=None) -> None:
        """Stop the child processes of task files' models (ChildPredictor) but `keep`'s: dropped, or superseded."""
        for child in [c for c in self.children if c is not keep]:
            self.children.remove(child)
            child.close()

    def _submit(self, kind: str, fn: Callable[[], object]) -> None:
        self.statusLabel.setText(self._note)  # a new request: an earlier request's error no longer stands
        self.queue.submit(kind, fn)

    def _page_for(self, kind: str) -> Page | None:
        if self.predictor is None:
            return None
        page = self.pages.get(self.predictor.task)
        return page if page is not None and kind in page.KINDS else None

    def _finished(self, kind: str, result) -> None:
        if kind == "load":
            self._loaded(result)
            return
        page = self._page_for(kind)
        if page is not None:
            page.show_result(kind, result)

    def _failed(self, kind: str, message: str, details: str) -> None:
        if kind == "load":
            self._message(message)  # core's one line names the file
            self.statusLabel.setToolTip(details)
            return
        page = self._page_for(kind)
        if page is not None:
            page.show_error(kind, message)
        self.statusLabel.setText(coloured(message, ERROR_COLOUR))
        self.statusLabel.setToolTip(details)

    @property
    def busy(self) -> bool:
        return not self.queue.idle

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh_devices()
        if not self.scans.busy and self._wanted is None:
            self.refresh()  # runs started or deleted since it was last open
        if self.predictor is None and self.source and self._wanted is None:
            self.load()  # its load was dropped when the view closed

    def shutdown(self) -> None:
        """Join the worker threads (the window calls this when it closes)."""
        for page in self.pages.values():
            page.debounce.stop()
        self._close_children()  # a load or answer waiting on a child ends now: the worker is joined at once
        self.queue.shutdown()
        self._close_children()
        self.scans.shutdown()
        self.evaluation.shutdown()

    def closeEvent(self, event) -> None:
        """Closing drops what was asked; what is running (one request, a scan, an evaluation that will be
        saved) finishes on its own thread without blocking the window, which joins them all when it closes
        (shutdown). Opened again, the view loads its checkpoint again if that load was dropped."""
        for page in self.pages.values():
            page.debounce.stop()
        self.queue.cancel()
        super().closeEvent(event)


def load_for_preview(source: str, which: str, device: str, children: list):
    """(predictor, its examples for the pickers, a note): run on the queue's worker. A task file's model is held by a
    child process (core.runs.predictor_child.ChildPredictor, appended to `children`): its code never runs here."""
    from core.runs.predictor_child import ChildPredictor, preview_parts, task_files

    files = task_files(source)
    if files is not None:
        children.append(predictor := ChildPredictor(files))  # before its load: closing the dialog stops it
        predictor.load(source, which, device)
        return predictor, predictor.examples, predictor.note
    from core.runs.predict import load_predictor

    predictor = load_predictor(source, which=which, device=device)
    return (predictor, *preview_parts(predictor))
