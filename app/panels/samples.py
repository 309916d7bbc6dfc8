"""Samples at each evaluation (core.engine.events.Samples): the task's answers to a few fixed inputs, newest step
first, each beside the previous step's answer, so that the model is seen getting better, not only a number.
Hidden until a run sends samples; a new run clears it, a resumed one shows its earlier samples from its record."""

from __future__ import annotations

import re

from PySide6.QtWidgets import QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QWidget

from app.panels.editors import box_layout
from core.engine.events import RunStarted, Samples, event_or_none

COLUMNS = ("Input", "Answer", "Previous")
MIN_WIDTH = 200  # three columns of wrapped text, and room for the window on a 1366-pixel screen
SCORE = re.compile(r"[-+]?\d*\.\d+(?:e[-+]?\d+)?")  # a score in an answer ("class 0 (0.986)"); ids stay


def changed(answer: str, previous: str) -> bool:
    """Whether the answer itself changed (a class, a lesson, an order), not only a score beside it."""
    return SCORE.sub("#", answer) != SCORE.sub("#", previous)


class SamplesPanel(QWidget):
    """`handle_event` takes core events; the table shows the latest Samples and the one before."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.title = QLabel("Samples", objectName="samplesTitle", wordWrap=True)
        self.table = QTableWidget(0, len(COLUMNS), objectName="samplesTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        box_layout(self, self.title, (self.table, 1))
        self.setMinimumWidth(MIN_WIDTH)
        self.steps: list[Samples] = []  # newest first
        self.start_step = 0  # the run's first step (a resumed run's earlier samples are those up to it)
        self.hide()

    def handle_event(self, event) -> None:
        if isinstance(event, RunStarted):
            self.steps.clear()
            self.start_step = event.start_step
            self.table.setRowCount(0)
            self.hide()
        elif isinstance(event, Samples):
            if event.note:
                self.title.setText(f"Samples: {event.note}")
                self.title.setToolTip(event.note)
            elif event.rows:
                self.steps.insert(0, event)
                del self.steps[2:]
                self._show()
            self.show()

    def show_history(self, records: list) -> None:
        """A resumed run's samples from before it resumed, from its metrics.jsonl records, with those sent since."""
        kept = [e for r in records if r.get("event") == "Samples" and (e := event_or_none(r)) and e.rows]
        earlier = [e for e in kept if e.step <= self.start_step][-2:]
        if earlier:
            self.steps = sorted({s.step: s for s in [*earlier, *self.steps]}.values(), key=lambda s: -s.step)[:2]
            self._show()
            self.show()

    def _show(self) -> None:
        latest = self.steps[0]
        before = self.steps[1] if len(self.steps) > 1 else None
        earlier = {row.get("input"): row.get("answer", "") for row in (before.rows if before else [])}
        self.title.setText(
            f"Samples at step {latest.step:,}" + (f" (previous: step {before.step:,})" if before else "")
        )
        self.table.setRowCount(len(latest.rows))
        for r, row in enumerate(latest.rows):
            answer, previous = str(row.get("answer", "")), earlier.get(row.get("input"), "")
            for c, text in enumerate((str(row.get("input", "")), answer, previous)):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if c == 1 and before is not None and changed(answer, previous):
                    font = item.font()
                    font.setBold(True)  # the answer changed since the step before, not only its score
                    item.setFont(font)
                self.table.setItem(r, c, item)
        self.table.resizeRowsToContents()
