"""The history's Evaluate: `measure` writes a run's evaluation.json off the GUI thread; `EvaluationLine` shows
the selected run's latest result."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from core.text import printable


def measure(checkpoint: str) -> dict:
    """The report of `checkpoint` (see the module doc), written beside it; runs on a worker thread (a task file's
    in a child process: core.runs.predictor_child.call_once)."""
    from core.runs.evaluation_report import report_folder
    from core.runs.predictor_child import call_once

    return call_once("evaluate", checkpoint, None, str(report_folder(checkpoint)))


def _figure(value) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def result_text(result: dict) -> str:
    """One line: which checkpoint, step and split, and each metric (with the task's baseline where it has one)."""
    baseline = result.get("baseline") or {}
    metrics = " · ".join(
        f"{name} {_figure(value)}" + (f" (baseline {_figure(baseline[name])})" if name in baseline else "")
        for name, value in (result.get("metrics") or {}).items()
    )
    step = result.get("step")
    at = f", step {step:,}" if isinstance(step, int) else ""
    return printable(
        f"{Path(str(result.get('checkpoint') or '?')).name}{at}, {result.get('split', '?')} split: {metrics}"
    )


class EvaluationLine(QLabel):
    """The selected run's evaluation: hidden until the run is evaluated in this session."""

    def __init__(self, parent=None):
        super().__init__(parent, objectName="historyEvaluationLabel", wordWrap=True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._texts: dict[str, str] = {}  # run folder -> what to show for it
        self._folder: str | None = None
        self.hide()

    def started(self, folder: str, checkpoint: str) -> None:
        self._set(folder, f"Evaluating {Path(checkpoint).name}…")

    def finished(self, folder: str, result: dict) -> None:
        self._set(folder, f"Evaluated {result_text(result)}")

    def failed(self, folder: str, message: str) -> None:
        self._set(folder, printable(f"Could not evaluate: {message}"))

    def show_for(self, folder: str | None) -> None:
        """Show the line of the run selected (None: none, or several)."""
        self._folder = folder
        text = self._texts.get(folder) if folder else None
        self.setText(text or "")
        self.setVisible(bool(text))

    def _set(self, folder: str, text: str) -> None:
        self._texts[folder] = text
        if folder == self._folder:
            self.show_for(folder)
