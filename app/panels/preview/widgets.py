"""The preview pages' parts: colours, bars, tables, pickers, and one view per output kind (a score, class
probabilities, a ranked list), built from a task's PreviewSpec (core.tasks.serving) with no task named."""

from __future__ import annotations

import re

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QGridLayout,
    QLabel,
    QProgressBar,
    QWidget,
)

from app.panels.editors import box_layout
from app.panels.tool_dialog import ERROR_COLOUR
from app.panels.tuning import NumericItem, make_table

UP_COLOUR = "#2e9b57"
DOWN_COLOUR = "#d0453c"
MUTED_COLOUR = "#8a8f98"


def parse_ids(text: str, like: type | None = int) -> list:
    """Ids typed as '3, 17 42' -> [3, 17, 42]. Ids are ints when the run's ids are ints and the token is one,
    else the text itself (the model names what it does not know)."""
    tokens = [t for t in re.split(r"[\s,;]+", text.strip()) if t]
    if like is str:
        return tokens
    ids = []
    for token in tokens:
        try:
            ids.append(int(token))
        except ValueError:
            ids.append(token)
    return ids


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def coloured(text: str, colour: str) -> str:
    return f"<span style='color:{colour}'>{text}</span>"


def refill(combo: QComboBox, texts) -> None:
    """`combo`'s items replaced by `texts`, with no signal sent."""
    with QSignalBlocker(combo):
        combo.clear()
        combo.addItems(list(texts))


def clear_grid(grid: QGridLayout) -> None:
    """Take every widget out of `grid`, hidden at once and deleted later."""
    while grid.count():
        old = grid.takeAt(0).widget()
        old.hide()
        old.deleteLater()


def bar(name: str) -> QProgressBar:
    widget = QProgressBar(objectName=name)
    widget.setRange(0, 1000)
    widget.setTextVisible(False)
    widget.setFixedHeight(14)
    return widget


def set_bar(widget: QProgressBar, value: float, colour: str) -> None:
    widget.setValue(round(max(0.0, min(1.0, value)) * 1000))
    widget.setStyleSheet(f"QProgressBar::chunk {{ background: {colour}; }}")


def brush(colour: str):
    from PySide6.QtGui import QBrush, QColor

    return QBrush(QColor(colour))


def picker(noun: str, width: int) -> QComboBox:
    """A combo of the run's examples (`noun`s) whose typed text filters its items (anywhere in the text, any case)."""
    combo = QComboBox(objectName=f"preview{noun.capitalize()}Combo", editable=True, minimumWidth=width)
    combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
    combo.lineEdit().setPlaceholderText(f"search a {noun} id")
    completer = combo.completer()
    completer.setFilterMode(Qt.MatchFlag.MatchContains)
    completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
    completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
    return combo


class ScoreView(QWidget):
    """output_kind "score": the number (spec.label) as a bar, its value and its verdict (spec.classes: below
    and from 0.5)."""

    def __init__(self, spec, name: str, parent=None):
        super().__init__(parent)
        self.spec = spec
        self.bar = bar(f"{name}Bar")
        self.label = QLabel("–", objectName=f"{name}Score")
        self.label.setMinimumWidth(150)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        box_layout(self, QLabel(spec.label), (self.bar, 1), self.label, horizontal=True)

    def clear(self, text: str) -> None:
        self.bar.setValue(0)
        self.label.setText(coloured(text, MUTED_COLOUR))

    def show_value(self, value: float) -> None:
        up = value >= 0.5
        colour = UP_COLOUR if up else DOWN_COLOUR
        set_bar(self.bar, value, colour)
        verdicts = tuple(self.spec.classes) or ("low", "high")
        self.label.setText(f"<b>{value:.3f}</b> {coloured(verdicts[-1] if up else verdicts[0], colour)}")

    def show_error(self, message: str) -> None:
        self.label.setText(coloured("failed", ERROR_COLOUR))
        self.label.setToolTip(message)


class _GridView(QWidget):
    """A grid of rows (one per class or number) over a line of text."""

    def __init__(self, spec, name: str, parent=None):
        super().__init__(parent)
        self.spec, self.name = spec, name
        self.labels: list[QLabel] = []
        self.grid = QGridLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.infoLabel = QLabel(objectName=f"{name}Info", wordWrap=True)
        box_layout(self, self.grid, self.infoLabel)

    def show_error(self, message: str) -> None:
        self.infoLabel.setText(coloured(message, ERROR_COLOUR))


class ClassesView(_GridView):
    """output_kind "class_probabilities": a bar and a number per class (spec.classes), the likeliest in colour,
    and what the model says. Without spec.classes (a model whose number of classes is set by its options or its
    data) the rows are built for the model's answer: class 0, class 1, ..."""

    def __init__(self, spec, name: str, parent=None):
        super().__init__(spec, name, parent)
        self.named = bool(spec.classes)
        self._build(tuple(spec.classes) or ("class 0", "class 1"))

    def _build(self, classes: tuple[str, ...]) -> None:
        clear_grid(self.grid)
        self.classes, self.bars, self.labels = classes, [], []
        for c, class_name in enumerate(classes):
            widget = bar(f"{self.name}Class{c}Bar")
            label = QLabel("–", objectName=f"{self.name}Class{c}Label")
            label.setMinimumWidth(60)
            self.grid.addWidget(QLabel(class_name, objectName=f"{self.name}Class{c}Name"), c, 0)
            self.grid.addWidget(widget, c, 1)
            self.grid.addWidget(label, c, 2)
            self.bars.append(widget)
            self.labels.append(label)

    def show_value(self, probabilities: list[float]) -> None:
        if not self.named and len(probabilities) != len(self.bars):
            self._build(tuple(f"class {c}" for c in range(len(probabilities))))
        top = max(range(len(probabilities)), key=lambda c: probabilities[c])
        for c, (widget, label) in enumerate(zip(self.bars, self.labels)):
            p = probabilities[c] if c < len(probabilities) else 0.0
            set_bar(widget, p, UP_COLOUR if c == top else MUTED_COLOUR)
            label.setText(f"{p:.3f}")
        said = self.classes[top] if top < len(self.classes) else f"class {top}"
        self.infoLabel.setText(f"The model says {said}.")


class ValuesView(_GridView):
    """output_kind "values": each of the model's numbers under its name (spec.names; spec.label for one,
    label1..labelN for more), in bold."""

    def __init__(self, spec, name: str, parent=None):
        super().__init__(spec, name, parent)
        self.names: list[QLabel] = []

    def _name(self, i: int, count: int) -> str:
        if i < len(self.spec.names):
            return self.spec.names[i]
        return self.spec.label if count == 1 else f"{self.spec.label}{i + 1}"

    def show_value(self, values: list[float]) -> None:
        if len(values) != len(self.labels):  # a row per number, built for the model's outputs
            clear_grid(self.grid)
            self.names, self.labels = [], []
            for i in range(len(values)):
                title = QLabel(self._name(i, len(values)), objectName=f"{self.name}Value{i}Name")
                label = QLabel("–", objectName=f"{self.name}Value{i}Label")
                label.setTextFormat(Qt.TextFormat.RichText)
                label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                self.grid.addWidget(title, i, 0)
                self.grid.addWidget(label, i, 1, Qt.AlignmentFlag.AlignLeft)
                self.names.append(title)
                self.labels.append(label)
            self.grid.setColumnStretch(1, 1)
        for label, value in zip(self.labels, values):
            label.setText(f"<b>{fmt(value)}</b>")
        self.infoLabel.setText("")


class RankedListView(QWidget):
    """output_kind "ranked_list": a table of entries by the model's score, highest first (rank, entry, score and
    a last column the input kind names: a seen mark, a true label), and a line about the list."""

    def __init__(self, spec, last_column: str, name: str, parent=None):
        super().__init__(parent)
        self.table = make_table(("Rank", spec.item.capitalize(), "Score", last_column), f"{name}Table")
        self.table.setSortingEnabled(False)
        # columns as wide as their contents, none stretched: a score and its label stay side by side
        self.table.horizontalHeader().setStretchLastSection(False)
        self.table.horizontalHeader().setMinimumSectionSize(80)
        self.infoLabel = QLabel(objectName=f"{name}Info", wordWrap=True)
        self.infoLabel.setTextFormat(Qt.TextFormat.RichText)
        box_layout(self, self.infoLabel, (self.table, 1))

    def show_rows(self, rows) -> None:
        """rows: (entry, score, last cell's text, its sort value or None, colour or None) in rank order."""
        self.table.setRowCount(len(rows))
        for row, (entry, score, last, last_value, colour) in enumerate(rows):
            cells = (
                NumericItem(str(row + 1), row + 1),
                NumericItem(str(entry), None, right=False),
                NumericItem(f"{score:.4f}", float(score)),
                NumericItem(last, last_value, right=last_value is not None),
            )
            for column, cell in enumerate(cells):
                if colour is not None and (column == 3 or colour == MUTED_COLOUR):
                    cell.setForeground(brush(colour))
                self.table.setItem(row, column, cell)

    def show_error(self, message: str) -> None:
        self.table.setRowCount(0)
        self.infoLabel.setText(coloured(message, ERROR_COLOUR))
