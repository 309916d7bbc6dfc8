"""Form editors built from core's field specs (FieldSpec, TaskOption): one widget per setting.

Each editor exposes `value()`, `set_value(v)` and a `changed` signal, and sits in a `FieldRow` that shows
the validation message from core under it.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QLineEdit, QSpinBox, QToolButton, QVBoxLayout, QWidget,
)

INT_LIMIT = 2**31 - 1  # QSpinBox holds a C int


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class ScientificSpinBox(QDoubleSpinBox):
    """A spin box for values spanning decades (learning rates): shows 3e-04, steps by ~26% per click."""

    FACTOR = 10 ** 0.1

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setDecimals(12)

    def textFromValue(self, value: float) -> str:  # noqa: N802 (Qt override)
        return f"{value:.4g}"

    def valueFromText(self, text: str) -> float:  # noqa: N802
        try:
            return float(text)
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int):
        stripped = text.strip()
        try:
            value = float(stripped)
        except ValueError:
            partial = stripped == "" or stripped[-1] in "eE+-." or stripped.lower().endswith(("e-", "e+"))
            state = QValidator.State.Intermediate if partial else QValidator.State.Invalid
            return state, text, pos
        if self.minimum() <= value <= self.maximum():
            return QValidator.State.Acceptable, text, pos
        return QValidator.State.Intermediate, text, pos

    def stepBy(self, steps: int) -> None:  # noqa: N802
        value = self.value() * self.FACTOR**steps
        self.setValue(float(f"{value:.3g}"))


class Editor(QWidget):
    """One setting's editor; wraps a Qt input widget of the right kind."""

    changed = Signal()

    def __init__(self, name: str, kind: type, help_text: str, minimum=None, maximum=None, step=None,
                 choices=None, object_name: str | None = None, parent=None):
        super().__init__(parent)
        self.name = name
        self.kind = kind
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.input = self._make_input(kind, minimum, maximum, step, choices)
        self.input.setObjectName(object_name or f"{camel(name)}Edit")
        self.input.setToolTip(help_text)
        layout.addWidget(self.input, 1)
        self.browse: QToolButton | None = None

    def _make_input(self, kind, minimum, maximum, step, choices) -> QWidget:
        if choices:
            widget = QComboBox()
            widget.addItems(list(choices))
            widget.currentIndexChanged.connect(self.changed)
        elif kind is bool:
            widget = QCheckBox()
            widget.toggled.connect(self.changed)
        elif kind is int:
            widget = QSpinBox()
            widget.setRange(int(minimum if minimum is not None else -INT_LIMIT),
                            int(min(maximum if maximum is not None else INT_LIMIT, INT_LIMIT)))
            widget.setSingleStep(int(step or 1))
            widget.setGroupSeparatorShown(True)
            widget.setKeyboardTracking(True)
            widget.valueChanged.connect(self.changed)
        elif kind is float:
            lo = minimum if minimum is not None else -1e12
            hi = maximum if maximum is not None else 1e12
            if lo > 0 and hi / lo >= 1e4:  # spans decades: scientific notation and log steps
                widget = ScientificSpinBox()
            else:
                widget = QDoubleSpinBox()
                widget.setDecimals(max(2, -int(math.floor(math.log10(step)))) if step else 3)
                widget.setSingleStep(step or 0.01)
            widget.setRange(lo, hi)
            widget.valueChanged.connect(self.changed)
        else:
            widget = QLineEdit()
            widget.textChanged.connect(self.changed)
        if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
            widget.setAccelerated(True)
            widget.setMinimumWidth(110)
        return widget

    def value(self):
        widget = self.input
        if isinstance(widget, QComboBox):
            return widget.currentText()
        if isinstance(widget, QCheckBox):
            return widget.isChecked()
        if isinstance(widget, QSpinBox):
            return int(widget.value())
        if isinstance(widget, QDoubleSpinBox):
            return float(widget.value())
        return widget.text()

    def set_value(self, value) -> None:
        widget = self.input
        if isinstance(widget, QComboBox):
            index = widget.findText(str(value))
            widget.setCurrentIndex(max(index, 0))
        elif isinstance(widget, QCheckBox):
            widget.setChecked(bool(value))
        elif isinstance(widget, QSpinBox):
            widget.setValue(int(min(value, INT_LIMIT)))
        elif isinstance(widget, QDoubleSpinBox):
            widget.setValue(float(value))
        else:
            widget.setText(str(value))

    def add_browse_button(self, tooltip: str, slot) -> None:
        self.browse = QToolButton(text="…")
        self.browse.setToolTip(tooltip)
        self.browse.clicked.connect(slot)
        self.layout().addWidget(self.browse)


class FieldRow(QWidget):
    """An editor with the validation message from core underneath (hidden while the value is valid)."""

    def __init__(self, editor: Editor, parent=None):
        super().__init__(parent)
        self.editor = editor
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(editor)
        self.error = QLabel(objectName=f"{camel(editor.name)}Error")
        self.error.setProperty("role", "error")
        self.error.setWordWrap(True)
        self.error.hide()
        layout.addWidget(self.error)

    def set_error(self, message: str | None) -> None:
        invalid = bool(message)
        self.error.setText(message or "")
        self.error.setVisible(invalid)
        widget = self.editor.input
        if widget.property("invalid") != invalid:
            widget.setProperty("invalid", invalid)
            widget.style().unpolish(widget)
            widget.style().polish(widget)
