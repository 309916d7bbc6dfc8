"""Form editors built from core's field specs (FieldSpec, TaskOption): one widget per setting, with `value()`,
`set_value(v)` and a `changed` signal, in a `FieldRow` showing core's validation message. Numbers stay as typed
(`NumberSpinBox` never clamps); core's validation marks one out of range.
"""

from __future__ import annotations

import math
import re
from typing import TypeVar

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QLayout,
    QLineEdit,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.assets import restyle
from core.config import columns_text, parse_columns

WIDE_INT = 2**53  # every integer up to this is exact in a double
WIDE_FLOAT = 1e300
Box = TypeVar("Box", bound=QBoxLayout)
LABEL_WIDTH = 118  # one label column width across all groups, so the editors line up


def form_label(text: str, tooltip: str = "", width: int = LABEL_WIDTH) -> QLabel:
    label = QLabel(text)
    label.setProperty("formLabel", True)
    label.setMinimumWidth(width)
    label.setMinimumHeight(26)
    label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    label.setToolTip(tooltip)
    return label


def mark_choices(combo: QComboBox, why_not) -> None:
    """Each choice of `combo` (its data, else its text) disabled where `why_not(choice)` says why, as its tooltip."""
    for index in range(combo.count()):
        data, item = combo.itemData(index), combo.model().item(index)
        reason = why_not(combo.itemText(index) if data is None else data) or ""
        item.setEnabled(not reason)
        item.setToolTip(reason)
        item.setStatusTip(reason)


def _fill(box: Box, items) -> Box:
    """`items` into `box`: a widget or layout, a tuple as addWidget (addLayout) takes it, None or an int a stretch."""
    for item in items:
        if item is None or isinstance(item, int):
            box.addStretch(1 if item is None else item)
        else:
            item = item if isinstance(item, tuple) else (item,)
            (box.addLayout if isinstance(item[0], QLayout) else box.addWidget)(*item)
    return box


def hbox(*items) -> QHBoxLayout:
    """`items` side by side: a widget, a tuple as addWidget takes it (widget, stretch[, alignment]), None a stretch."""
    return _fill(QHBoxLayout(), items)


def box_layout(parent: QWidget | None, *items, horizontal: bool = False, margins: bool = False) -> Box:
    """`parent`'s layout (None: one to nest): `items` (as hbox takes them) one under another, or side by side when
    `horizontal`, without margins unless asked."""
    box = (QHBoxLayout if horizontal else QVBoxLayout)(parent)
    if not margins:
        box.setContentsMargins(0, 0, 0, 0)
    return _fill(box, items)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def help_clause(help_text: str, head: str) -> str:
    """What a setting's help says a special value means: help_clause("...; 0 = off", "0") -> "off"."""
    match = re.search(rf"(?:^|[;,]\s*){re.escape(head)} = ([^;(]+)", help_text or "")
    return match.group(1).strip().replace("`", "'") if match else ""


def _partial_number(text: str) -> bool:
    """Text on its way to a number ('', '-', '1e', '1e-', '.'): allowed while typing, not yet a value."""
    return text == "" or text[-1] in "eE+-." or text.lower().endswith(("e-", "e+"))


def format_number(value: float, integer: bool = False) -> str:
    """Short text for a value that reads back as the same value: 0.0003, 3e-05, 1,000,000."""
    if not math.isfinite(value):
        return str(value)
    if integer and value.is_integer():
        return f"{int(value):,}"
    text = f"{value:.6g}"
    return text if float(text) == value else repr(value)


class FocusedWheel:
    """An input that ignores the mouse wheel unless it has focus: scrolling the form changes nothing."""

    def wheelEvent(self, event) -> None:
        if self.hasFocus():
            super().wheelEvent(event)
        else:
            event.ignore()


class NoWheelComboBox(FocusedWheel, QComboBox):
    """A combo box whose current text, when too long for it, is cut with "…" and shown whole in its tooltip."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.elided = False

    def paintEvent(self, event) -> None:
        if self.isEditable():
            return super().paintEvent(event)
        painter, option = QStylePainter(self), QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        room = field.width() - (option.iconSize.width() + 4 if not option.currentIcon.isNull() else 0) - 2
        shown = self.fontMetrics().elidedText(option.currentText, Qt.TextElideMode.ElideRight, room)
        self.elided, option.currentText = shown != option.currentText, shown
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip and self.elided:
            help_text = self.toolTip()
            QToolTip.showText(event.globalPos(), self.currentText() + (f"\n\n{help_text}" if help_text else ""), self)
            return True
        return super().event(event)


class NumberSpinBox(FocusedWheel, QDoubleSpinBox):
    """A number field that keeps what the user typed (plain or scientific notation). `minimum`/`maximum` bound the steps
    only; core's validation decides what is allowed. `integer`: whole numbers with group separators; `log_steps`:
    each step multiplies by 10**0.1."""

    FACTOR = 10**0.1

    def __init__(
        self, minimum=None, maximum=None, step=None, integer=False, log_steps=False, zero_meaning="", parent=None
    ):
        super().__init__(parent)
        self.integer = integer
        self.zero_meaning = zero_meaning  # shown after a 0: "0 (off)"
        self.log_steps = log_steps
        self.spec_minimum = None if minimum is None else float(minimum)
        self.spec_maximum = None if maximum is None else float(maximum)
        self.step = float(step) if step else 1.0 if integer else 0.01
        self._typed: tuple[str, float] | None = None  # the user's text and its value, shown as typed
        self._nonfinite: float | None = None  # nan/inf from a file: shown and validated as such, not as a bound
        self.setDecimals(323)  # Qt's most: it rounds values to `decimals`, and 1e-9 must stay 1e-9
        wide = WIDE_INT if integer else WIDE_FLOAT
        self.setRange(-wide, wide)
        self.setSingleStep(self.step)
        self.setKeyboardTracking(True)
        self.setAccelerated(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setMinimumWidth(110)

    # -------------------------------------------------------------- text <-> value
    def _parse(self, text: str) -> float | None:
        if self.zero_meaning:
            text = text.split("(", 1)[0]  # "0 (off)" reads as 0
        cleaned = text.strip().replace(",", "").replace("_", "") if self.integer else text.strip()
        try:
            value = float(cleaned)
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    def number(self) -> float:
        """The value, nan and inf included (`value()` can only hold finite numbers)."""
        return self._nonfinite if self._nonfinite is not None else float(self.value())

    def textFromValue(self, value: float) -> str:
        if self._nonfinite is not None:
            return format_number(self._nonfinite)
        if value == 0 and self.zero_meaning:
            return f"0 ({self.zero_meaning})"
        if self._typed is not None and self._typed[1] == value:
            return self._typed[0]
        return format_number(value, self.integer)

    def valueFromText(self, text: str) -> float:
        value = self._parse(text)
        if value is None:
            return self.value()
        self._typed = (text.strip(), value)
        self._nonfinite = None
        return value

    def validate(self, text: str, pos: int):
        stripped = text.strip()
        value = self._parse(stripped)
        if value is None:
            allowed = stripped.replace(",", "") if self.integer else stripped
            if self.zero_meaning:
                allowed = allowed.split("(", 1)[0].strip()
            state = QValidator.State.Intermediate if _partial_number(allowed) else QValidator.State.Invalid
            return state, text, pos
        if self.minimum() <= value <= self.maximum():
            return QValidator.State.Acceptable, text, pos
        return QValidator.State.Intermediate, text, pos

    def fixup(self, text: str) -> str:
        return text

    def setValue(self, value: float) -> None:
        value = float(value)
        if not math.isfinite(value):
            self._nonfinite, self._typed = value, None
            super().setValue(self.minimum())  # a value no one types: typing any number then changes it
            self.lineEdit().setText(format_number(value))
            return
        self._nonfinite = None
        if self._typed is not None and self._typed[1] != value:
            self._typed = None
        super().setValue(value)

    # -------------------------------------------------------------- steps stay in the setting's range
    def _bounded(self, value: float) -> float:
        if self.spec_minimum is not None:
            value = max(value, self.spec_minimum)
        if self.spec_maximum is not None:
            value = min(value, self.spec_maximum)
        return value

    def stepBy(self, steps: int) -> None:
        current = self.number()
        low, high = self.spec_minimum, self.spec_maximum
        if not math.isfinite(current):
            value = self._bounded(0.0 if current != current else current)  # nan -> nearest allowed to 0
        elif (low is not None and current < low) or (high is not None and current > high):
            value = self._bounded(current)  # an out-of-range value steps back to the nearest allowed one
        elif self.log_steps and current > 0:
            value = float(f"{current * self.FACTOR**steps:.3g}")
        elif self.integer:
            value = float(round(current) + round(self.step) * steps)
        else:
            digits = max(0, -math.floor(math.log10(self.step))) + 2
            value = round(current + self.step * steps, digits)
        self._typed = None
        self.setValue(self._bounded(value))
        self.selectAll()

    def stepEnabled(self):
        if self.isReadOnly():
            return QAbstractSpinBox.StepEnabledFlag.StepNone
        current = self.value()
        flags = QAbstractSpinBox.StepEnabledFlag.StepNone
        if self.spec_maximum is None or current < self.spec_maximum:
            flags |= QAbstractSpinBox.StepEnabledFlag.StepUpEnabled
        if self.spec_minimum is None or current > self.spec_minimum:
            flags |= QAbstractSpinBox.StepEnabledFlag.StepDownEnabled
        return flags

    # -------------------------------------------------------------- as wide as the setting's numbers
    def _text_width(self) -> int:
        samples = [
            format_number(v, self.integer) for v in (self.spec_minimum, self.spec_maximum, self.step) if v is not None
        ]
        metrics = self.fontMetrics()
        return max([metrics.horizontalAdvance(s + "  ") for s in samples] + [metrics.horizontalAdvance("0.000000")])

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(max(110, self._text_width() + 40), hint.height())

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(max(80, self._text_width() + 30), hint.height())


class ScientificSpinBox(NumberSpinBox):
    """A number field for values spanning decades (learning rates): 3e-05 or 0.0003, ~26% per step."""

    def __init__(self, minimum=None, maximum=None, step=None, parent=None):
        super().__init__(minimum, maximum, step, integer=False, log_steps=True, parent=parent)


class Editor(QWidget):
    """One setting's editor; wraps a Qt input widget of the right kind."""

    changed = Signal()

    def __init__(
        self,
        name: str,
        kind: type,
        help_text: str,
        minimum=None,
        maximum=None,
        step=None,
        choices=None,
        object_name: str | None = None,
        parent=None,
    ):
        super().__init__(parent)
        self.name = name
        self.kind = kind
        self.help_text = help_text
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.input = self._make_input(kind, minimum, maximum, step, choices, help_text)
        self.input.setObjectName(object_name or f"{camel(name)}Edit")
        self.input.setToolTip(help_text)
        layout.addWidget(self.input, 1)
        self.setFocusProxy(self.input)
        self.buttons: list[QToolButton] = []  # beside the input: browse, a tool (add_button)

    def _make_input(self, kind, minimum, maximum, step, choices, help_text) -> QWidget:
        if choices:
            widget = NoWheelComboBox()
            widget.addItems(list(choices))
            widget.currentIndexChanged.connect(self.changed)
        elif kind is bool:
            widget = QCheckBox()
            widget.toggled.connect(self.changed)
        elif kind in (int, float):
            if kind is float and minimum and maximum and minimum > 0 and maximum / minimum >= 1e4:  # spans decades
                widget = ScientificSpinBox(minimum, maximum, step)
            else:
                allows_zero = minimum is None or minimum <= 0 <= (maximum if maximum is not None else 0)
                widget = NumberSpinBox(
                    minimum,
                    maximum,
                    step,
                    integer=kind is int,
                    zero_meaning=help_clause(help_text, "0") if allows_zero else "",
                )
            widget.valueChanged.connect(self.changed)
        else:
            widget = QLineEdit()
            # What leaving it empty means, as the help says (for a mapping typed as NAME=VALUE pairs, the label's
            # tooltip gives the form): short enough to fit the field.
            widget.setPlaceholderText(help_clause(help_text, "empty"))
            widget.textChanged.connect(self.changed)
        return widget

    def value(self):
        widget = self.input
        if isinstance(widget, QComboBox):
            return widget.currentText()
        if isinstance(widget, QCheckBox):
            return widget.isChecked()
        if isinstance(widget, NumberSpinBox):
            number = widget.number()
            if self.kind is int and number.is_integer():
                return int(number)
            return number  # a fraction typed for a whole number: core names the field and the type
        if self.kind is dict:  # 'a=b, c=d'; text that is not raises ConfigError naming the field
            return parse_columns(widget.text(), self.name)
        return widget.text()

    def set_value(self, value) -> None:
        widget = self.input
        if isinstance(widget, QComboBox):
            index = widget.findText(str(value))
            widget.setCurrentIndex(max(index, 0))
        elif isinstance(widget, QCheckBox):
            widget.setChecked(bool(value))
        elif isinstance(widget, NumberSpinBox):
            finite = math.isfinite(widget.number())
            widget.setValue(float(value))
            if not (finite and math.isfinite(widget.number())):
                self.changed.emit()  # a change to or from nan/inf does not move the spin box's own value
        elif self.kind is dict and isinstance(value, dict):
            widget.setText(columns_text(value))
        else:
            widget.setText(str(value))

    def add_button(self, text: str, tooltip: str, slot, **properties) -> None:
        """A button beside the input; its accessible name is its tooltip's head (before a colon)."""
        button = QToolButton(text=text, toolTip=tooltip, **properties)
        button.setAccessibleName(tooltip.split(":", 1)[0])
        button.clicked.connect(slot)
        self.layout().addWidget(button)
        self.buttons.append(button)


class FieldRow(QWidget):
    """An editor with core's validation message underneath (hidden while valid), also leading the editor's tooltip."""

    def __init__(self, editor: Editor, parent=None):
        super().__init__(parent)
        self.editor = editor
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(editor)
        self.error = restyle(QLabel(objectName=f"{camel(editor.name)}Error"), role="error")
        self.error.setWordWrap(True)
        self.error.hide()
        layout.addWidget(self.error)
        self.setFocusProxy(editor)

    def set_error(self, message: str | None) -> None:
        invalid = bool(message)
        self.error.setText(message or "")
        self.error.setVisible(invalid)
        widget = self.editor.input
        help_text = self.editor.help_text
        widget.setToolTip(f"{message}\n\n{help_text}" if invalid and help_text else message or help_text)
        restyle(widget, invalid=invalid)
