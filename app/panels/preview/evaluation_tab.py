"""The preview's Evaluation tab: the loaded checkpoint's evaluation report (read, or measured and saved)."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QScrollArea, QWidget

from app.panels.editors import box_layout
from app.panels.preview.widgets import MUTED_COLOUR, coloured
from app.run.jobs import BackgroundJob, JobRunner
from core.text import printable


class EvaluationTab(QWidget):
    """The loaded checkpoint's evaluation report: the evaluation.json in its run folder when there is one,
    else Evaluate measures it (core.runs.evaluation_report on its test split, on a worker of its own, so the
    Try it page stays quick meanwhile) and writes it there, as `amp-console evaluate --report` does."""

    def __init__(self, parent=None):
        super().__init__(parent)
        from app.panels.evaluation_view import EvaluationView

        self.setObjectName("previewEvaluationTab")
        self.checkpoint: Path | None = None
        self.device = "cpu"
        self.report: dict | None = None  # the report shown
        self._serial = 0  # a read or an evaluation of an earlier checkpoint is not shown
        self._evaluating = -1  # the serial of the checkpoint being evaluated
        self.view = EvaluationView(self)
        self.job = BackgroundJob("previewEvaluateThread", self)
        self.job.succeeded.connect(self._evaluated)
        self.job.failed.connect(self._failed)
        self.job.runningChanged.connect(lambda _running: self._update_button())
        self.reads = JobRunner(self)
        self.evaluateButton = QPushButton("Evaluate", objectName="previewEvaluateButton", clicked=self.evaluate)
        self.infoLabel = QLabel(objectName="previewEvaluationInfo", wordWrap=True)
        self.infoLabel.setTextFormat(Qt.TextFormat.RichText)
        top = box_layout(
            None, (self.infoLabel, 1), (self.evaluateButton, 0, Qt.AlignmentFlag.AlignTop), horizontal=True
        )
        scroll = QScrollArea(
            objectName="previewEvaluationScroll", widgetResizable=True, frameShape=QScrollArea.Shape.NoFrame
        )
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.view)
        box_layout(self, top, (scroll, 1))
        self.set_checkpoint(None)

    @property
    def folder(self) -> Path | None:
        from core.runs.evaluation_report import report_folder

        return None if self.checkpoint is None else report_folder(self.checkpoint)

    def set_checkpoint(self, checkpoint, device: str = "cpu") -> None:
        """The preview loaded `checkpoint` (None: nothing): show its run's report, read off the GUI thread."""
        self._serial += 1
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.device = device
        self.report = None
        self._update_button()
        if self.checkpoint is None:
            self.infoLabel.setText("")
            self.view.clear("Load a checkpoint to see its evaluation report.")
            return
        serial, folder = self._serial, self.folder
        self.view.clear("Reading the evaluation report…")

        def read():  # the read and the cutting down (a crafted file can hold millions of points) off the GUI thread
            from app.panels.evaluation_limits import bounded_report
            from core.runs.evaluation_report import load_report

            return bounded_report(load_report(folder, strict=True))  # a torn file: named, not "no report"

        self.reads.submit(
            read,
            lambda report: self._read(serial, report),
            lambda message, _details: self._read_failed(serial, message),
        )

    def _read(self, serial: int, report) -> None:
        if serial != self._serial:
            return
        if report is None:
            self.infoLabel.setText(
                f"No evaluation report in {self.folder} yet: Evaluate measures "
                f"{self.checkpoint.name} on its test split (its validation split when the "
                "task has no test split) and saves evaluation.json there."
            )
            self.view.clear("No evaluation yet.")
            return
        self._show(report)

    def _read_failed(self, serial: int, message: str) -> None:
        if serial == self._serial:
            self.view.clear(f"Could not read the evaluation report: {message}")

    def _show(self, bounded) -> None:
        """Show a BoundedReport (app.panels.evaluation_limits), cut down on the worker."""
        self.report = report = bounded.report
        measured = Path(str(report.get("checkpoint") or "?")).name
        step = report.get("step")
        about = f"{measured}" + (f", step {step:,}" if isinstance(step, int) else "")
        text = html.escape(
            printable(f"evaluation.json: {about}, {report.get('split', '?')} split, {report.get('created', '')}"),
            quote=False,
        )
        if self.checkpoint is not None and measured != self.checkpoint.name:
            shown = html.escape(printable(measured), quote=False)
            text += "<br>" + coloured(
                f"This report measured {shown}; Evaluate measures {self.checkpoint.name}.", MUTED_COLOUR
            )
        self.infoLabel.setText(text)
        self.view.show_report(bounded)

    def evaluate(self) -> None:
        """Measure the loaded checkpoint (on the preview's device) and save the report in its run folder."""
        if self.job.running or self.checkpoint is None:
            return
        checkpoint, device, folder = str(self.checkpoint), self.device, self.folder
        self._evaluating = self._serial

        def run(_progress, _control):  # a task file's in a child process: its code never runs in the window
            from app.panels.evaluation_limits import bounded_report
            from core.runs.predictor_child import call_once

            report = call_once("evaluate", checkpoint, device, str(folder))
            return bounded_report(report)  # a large test split's ROC: cut down here, not on the GUI thread

        self.view.clear(f"Evaluating {self.checkpoint.name} on {device}…")
        self.job.start(run)

    def _evaluated(self, report) -> None:
        if self._evaluating == self._serial:
            self._show(report)

    def _failed(self, message: str, _field: str, details: str) -> None:
        if self._evaluating == self._serial:
            self.view.clear(f"Could not evaluate {self.checkpoint.name if self.checkpoint else ''}: {message}")
            self.view.message.setToolTip(details)

    def _update_button(self) -> None:
        running = self.job.running
        self.evaluateButton.setEnabled(self.checkpoint is not None and not running)
        self.evaluateButton.setText("Evaluating…" if running else "Evaluate again" if self.report else "Evaluate")

    def shutdown(self) -> None:
        self.job.shutdown()
        self.reads.shutdown()
