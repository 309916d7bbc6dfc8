"""A diverged run's way out: what went non-finite and one button per fix of RunEnded.fixes
(core.engine.amp_health.nonfinite_fixes), each a re-run from the last good checkpoint with that fix, its note
recorded in the new run (the window's rerun_with_fix). Hidden until such a run ends; a new run hides it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QLabel, QPushButton

from app.assets import restyle
from app.panels.editors import box_layout


class FixesPanel(QFrame):
    """`show_fixes(RunEnded)`; `fixChosen(fix)` when a fix's button is clicked."""

    fixChosen = Signal(dict)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="fixesPanel", frameShape=QFrame.Shape.StyledPanel)
        self.title = restyle(QLabel(objectName="fixesTitle", wordWrap=True), role="error")
        self.hint = restyle(QLabel(objectName="fixesHint", wordWrap=True), role="hint")
        self.dismiss = QPushButton("Dismiss", objectName="fixesDismissButton", clicked=self.hide)
        self.buttons: list[QPushButton] = []
        box_layout(self, self.title, self.hint, self.dismiss, margins=True)
        self.hide()

    def show_fixes(self, ended) -> None:
        for button in self.buttons:
            button.deleteLater()
        self.buttons = []
        if not ended.fixes:
            self.hide()
            return
        self.title.setText(f"The run diverged: {ended.message}")
        resume = ended.fixes[0]["resume"]
        start = f"its last good checkpoint ({Path(resume).name})" if resume else "the start (no checkpoint was kept)"
        self.hint.setText(f"Re-run from {start} with one of these fixes, into a folder of its own:")
        for index, fix in enumerate(ended.fixes):
            button = QPushButton(f"Re-run with {fix['label']}", objectName=f"fixButton{index}")
            button.setToolTip(f"Trains into {fix['changes']['out_dir']}; its note: {fix['note']}")
            button.clicked.connect(lambda _=False, f=fix: self.fixChosen.emit(f))
            self.layout().insertWidget(2 + index, button)
            self.buttons.append(button)
        self.show()
