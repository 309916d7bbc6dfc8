"""The preview's pages, one per kind of input a task's serving declares (core.tasks.serving.PreviewSpec): text,
feature_row (fields, a sample, or a drawing pad for an image), feature_rows (a group of rows ranked beside their true
labels) and id_sequence (an id history and the model's top entries after it). Each shows its declared kind of output
with a view of app.panels.preview.widgets; no task is named here. A page asks through `submit(kind, fn)`: `fn` runs on
the dialog's worker (the Predictor's preview_* methods), its result comes back to `show_result`."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSignalBlocker, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QWidget,
)

from app.panels.editors import box_layout
from app.panels.preview.widgets import (
    DOWN_COLOUR,
    MUTED_COLOUR,
    UP_COLOUR,
    ClassesView,
    RankedListView,
    ScoreView,
    ValuesView,
    brush,
    clear_grid,
    coloured,
    fmt,
    parse_ids,
    picker,
    refill,
)
from app.panels.tuning import NumericItem, make_table

DEBOUNCE_MS = 250  # an edit waits this long for the next one before the model is asked
BAR_CHARS = 24  # the longest effect bar, in block characters
EXPLAIN_MAX_CHARS = 20_000  # a longer text (a pasted essay) is scored, but not explained word by word
SHOWN_UNKNOWN = 12  # unknown ids named at most


class Page(QWidget):
    """A page for one task's PreviewSpec: `set_predictor` when a checkpoint has loaded, `request` asks the
    dialog's queue. `name` prefixes the widgets' object names."""

    KINDS: tuple[str, ...] = ("answer",)  # the kinds of request whose results it shows
    OUTPUTS: tuple[str, ...] = ()  # the output kinds it can show

    def __init__(self, spec, name: str, submit: Callable[[str, Callable[[], object]], None], parent=None):
        super().__init__(parent)
        self.spec = spec
        self.name = name
        self.predictor = None
        self._submit = submit
        self.debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS, timeout=self.request)

    def set_predictor(self, predictor, examples) -> None:
        self.predictor = predictor

    def request(self) -> None:
        raise NotImplementedError

    def show_result(self, kind: str, result) -> None:
        raise NotImplementedError

    def show_error(self, kind: str, message: str) -> None:
        self.output.show_error(message)


class _OneAnswerPage(Page):
    """A page whose input gets one answer: a score (ScoreView), class probabilities (ClassesView) or the model's
    numbers (ValuesView)."""

    OUTPUTS = ("score", "class_probabilities", "values")
    VIEWS = {"score": ScoreView, "class_probabilities": ClassesView, "values": ValuesView}

    def __init__(self, spec, name, submit, parent=None):
        super().__init__(spec, name, submit, parent)
        self.answer = None  # the last answer shown (a float, or a list of probabilities or numbers)
        self.output = self.VIEWS[spec.output_kind](spec, name, self)

    @property
    def score(self) -> float | None:
        return self.answer if self.spec.output_kind == "score" else None

    @property
    def probabilities(self) -> list[float] | None:
        return self.answer if self.spec.output_kind == "class_probabilities" else None

    @property
    def labels(self):
        return self.output.labels

    def _show_answer(self, value) -> None:
        self.answer = value
        self.output.show_value(value)


class TextPage(_OneAnswerPage):
    """input_kind "text": type a text, scored as you type, with the words that moved it most."""

    KINDS = ("answer", "explain")

    def __init__(self, spec, name, submit, parent=None):
        super().__init__(spec, name, submit, parent)
        self.scored_text: str | None = None  # the text `answer` is for
        self.words: list[tuple[str, float]] = []
        self.explained_text: str | None = None  # the text `words` explains
        self.edit = QPlainTextEdit(objectName=f"preview{spec.noun.capitalize()}Edit")
        self.edit.setPlaceholderText(spec.hint or f"Type a {spec.noun}")
        self.edit.setTabChangesFocus(True)
        self.edit.textChanged.connect(self.debounce.start)
        self.words_table = make_table(("Word", "Effect", ""), f"{name}WordsTable")
        self.words_table.setSortingEnabled(False)
        self.words_table.horizontalHeaderItem(1).setToolTip(
            f"{spec.label} with the word minus {spec.label} without it: + pushed it up"
        )
        self.wordsLabel = QLabel(self._words_text(), objectName=f"{name}WordsLabel", wordWrap=True)
        box_layout(self, (self.edit, 1), self.output, self.wordsLabel, (self.words_table, 3))
        if not spec.explain:
            self.wordsLabel.hide()
            self.words_table.hide()

    def _words_text(self) -> str:
        label = self.spec.label
        return f"Words that pushed it most ({label} with the word minus {label} without it):"

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.request()

    def request(self) -> None:
        self.debounce.stop()
        predictor, text = self.predictor, self.edit.toPlainText()
        if predictor is None:
            return
        if not text.strip():
            self.answer, self.scored_text, self.words, self.explained_text = None, text, [], text
            if isinstance(self.output, ScoreView):
                self.output.clear(f"type a {self.spec.noun}")
            self.words_table.setRowCount(0)
            return
        self._submit("answer", lambda: (text, predictor.preview_answer(text)))
        if not self.spec.explain:
            self.words, self.explained_text = [], text
            return
        if len(text) > EXPLAIN_MAX_CHARS:  # one model pass per distinct word, each over the whole text
            self.words, self.explained_text = [], text
            self.words_table.setRowCount(0)
            self.wordsLabel.setText(
                f"The {self.spec.noun} is over {EXPLAIN_MAX_CHARS:,} characters: scored, but "
                "not explained word by word."
            )
            return
        self.wordsLabel.setText(self._words_text())
        self._submit("explain", lambda: (text, predictor.preview_explain(text)))

    def show_result(self, kind: str, result) -> None:
        text, value = result
        if text != self.edit.toPlainText():
            return  # typed on since: the newer request is on its way
        if kind == "answer":
            self.scored_text = text
            self._show_answer(value)
            return
        self.words, self.explained_text = value, text
        self.words_table.setRowCount(len(value))
        largest = max((abs(e) for _w, e in value), default=0.0) or 1.0
        for row, (word, effect) in enumerate(value):
            up = effect >= 0
            colour = UP_COLOUR if up else DOWN_COLOUR
            cells = (
                NumericItem(f"{'▲' if up else '▼'} {word}", None, right=False),
                NumericItem(f"{effect:+.3f}", effect),
                NumericItem("█" * max(1, round(BAR_CHARS * abs(effect) / largest)), None, right=False),
            )
            for column, item in enumerate(cells):
                item.setForeground(brush(colour))
                self.words_table.setItem(row, column, item)


class FeatureRowPage(_OneAnswerPage):
    """input_kind "feature_row": a field per number (named as `predict` reads the columns), or a sample; with
    spec.image, a drawing pad of the pixels beside them (app.panels.preview.drawing): drawing sets the fields,
    a sample or a typed field shows on the pad."""

    def __init__(self, spec, name, submit, parent=None):
        super().__init__(spec, name, submit, parent)
        self.samples: list = []
        self._next_sample = 0
        self.asked: list[float] | None = None  # the numbers `answer` is for
        self.inputs: list[QDoubleSpinBox] = []
        self.fields = QGridLayout()
        self.sampleButton = QPushButton("Sample", objectName=f"{name}SampleButton", clicked=self.sample)
        self.sampleButton.setToolTip("Fill the fields with a point from the run's data (the next one each click)")
        self.drawing = None  # spec.image: the pad, shown when the model reads that many pixels
        if spec.image:
            from app.panels.preview.drawing import DrawingPanel

            self.drawing = DrawingPanel(spec, name, self)
            self.drawing.drawn.connect(self._drawn)
        top = box_layout(None, self.drawing, (self.fields, 1), horizontal=True)
        buttons = box_layout(None, self.sampleButton, 1, horizontal=True)
        box_layout(self, top, buttons, self.output, 1)

    @property
    def pad_shown(self) -> bool:
        """Whether the fields are the pad's pixels (spec.image, and the model reads that many numbers)."""
        return self.drawing is not None and len(self.inputs) == self.spec.pixels

    def _build_fields(self, count: int) -> None:
        """A field per number the model reads, spec.field_columns to a row (an image's width: its pixels as
        they lie, each in spec.pixel_range), each under its column's name."""
        if count == len(self.inputs):
            return
        clear_grid(self.fields)
        self.inputs = []
        image = self.drawing is not None and count == self.spec.pixels
        low, high = sorted(self.spec.pixel_range) if image else (-1e6, 1e6)
        per_row = self.spec.image[1] if image else max(1, self.spec.field_columns)
        for i in range(count):
            box = QDoubleSpinBox(
                objectName=f"{self.name}Input{i}",
                decimals=4,
                minimum=low,
                maximum=high,
                singleStep=0.1 if not image else (high - low) / 16,
            )
            box.setKeyboardTracking(True)
            box.valueChanged.connect(self._edited)
            self.inputs.append(box)
            label = QLabel(f"{self.spec.column_prefix}{i + 1}", objectName=f"{self.name}Label{i}")
            self.fields.addWidget(label, i // per_row * 2, i % per_row)
            self.fields.addWidget(box, i // per_row * 2 + 1, i % per_row)
        if self.drawing is not None:
            self.drawing.setVisible(image)

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self._build_fields(predictor.n_features)
        self.samples = [[float(v) for v in row] for row in (examples if examples is not None else [])]
        self._next_sample = 0
        self.sampleButton.setEnabled(bool(self.samples))
        if self.samples:
            self.sample()
        else:
            self._show_pixels()
            self.request()

    def values(self) -> list[float]:
        return [box.value() for box in self.inputs]

    def _set_values(self, values) -> None:
        for box, value in zip(self.inputs, values):
            with QSignalBlocker(box):
                box.setValue(value)

    def _show_pixels(self) -> None:
        if self.pad_shown:
            self.drawing.pad.set_values(self.values())

    def _edited(self) -> None:
        """A field typed in: the pad shows it, the model is asked once the typing pauses."""
        self._show_pixels()
        self.debounce.start()

    def _drawn(self) -> None:
        """Drawn on the pad: its pixels are the fields' values, asked once the drawing pauses."""
        if self.pad_shown:
            self._set_values(self.drawing.pad.values())
            self.debounce.start()

    def sample(self) -> None:
        if not self.samples:
            return
        row = self.samples[self._next_sample % len(self.samples)]
        self._next_sample += 1
        self._set_values(row)
        self._show_pixels()
        self.request()

    def request(self) -> None:
        self.debounce.stop()
        predictor = self.predictor
        if predictor is None:
            return
        x = self.values()
        self._submit("answer", lambda: (x, predictor.preview_answer(x)))

    def show_result(self, kind: str, result) -> None:
        self.asked, value = result
        self._show_answer(value)


class FeatureRowsPage(Page):
    """input_kind "feature_rows": a group of rows from the run's data (a query's candidates), ranked by the
    model's score, true labels alongside and the task's measure of the order (TaskServing.preview_quality)."""

    OUTPUTS = ("ranked_list",)

    def __init__(self, spec, name, submit, parent=None):
        super().__init__(spec, name, submit, parent)
        self.queries: list = []
        self.order: list[int] = []  # rows as shown (by score, highest first)
        self.scores: list[float] = []  # the model's score per row, in the group's own order
        self.measure: float | None = None  # the task's measure of the order shown (None: none, or no labels)
        self.measure_name: str | None = None
        self.queryCombo = picker(spec.noun, 260)
        self.queryCombo.currentIndexChanged.connect(lambda _i: self.request())
        self.output = RankedListView(spec, "True label", name, self)
        self.table, self.infoLabel = self.output.table, self.output.infoLabel
        top = box_layout(None, QLabel(spec.noun.capitalize()), self.queryCombo, 1, horizontal=True)
        box_layout(self, top, (self.output, 1))

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.queries = list(examples or [])
        refill(self.queryCombo, (f"{self.spec.noun} {q.query_id} · {len(q.doc_ids)} candidates" for q in self.queries))
        self.request()

    def request(self) -> None:
        self.debounce.stop()
        index = self.queryCombo.currentIndex()
        predictor = self.predictor
        if predictor is None or not 0 <= index < len(self.queries):
            self.table.setRowCount(0)
            self.infoLabel.setText(f"No {self.spec.noun} to pick in this run's data." if predictor is not None else "")
            return
        query = self.queries[index]

        def run():
            scores = predictor.preview_answer(query.features)
            order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep the data's order
            quality = None
            if query.labels is not None:
                quality = predictor.serving.preview_quality([float(query.labels[i]) for i in order])
            return index, scores, order, quality

        self._submit("answer", run)

    def show_result(self, kind: str, result) -> None:
        index, scores, order, quality = result
        if index != self.queryCombo.currentIndex():
            return
        query = self.queries[index]
        labels = None if query.labels is None else [float(x) for x in query.labels]
        self.scores, self.order = scores, order
        rows = []
        for i in order:
            label = "" if labels is None else fmt(labels[i]).removesuffix(".0")
            colour = UP_COLOUR if labels is not None and labels[i] > 0 else None
            rows.append((query.doc_ids[i], scores[i], label, None if labels is None else labels[i], colour))
        self.output.show_rows(rows)
        self.measure_name, self.measure = quality if quality is not None else (None, None)
        said = f"{len(scores)} candidates by the model's score"
        if labels is None:
            self.infoLabel.setText(f"{said} (no true labels for this {self.spec.noun})")
        elif quality is None:
            self.infoLabel.setText(said)
        elif self.measure is None:
            self.infoLabel.setText(f"{said} · every candidate has label 0: any order is as good")
        else:
            self.infoLabel.setText(
                f"{said} · {self.measure_name} of this order {self.measure:.3f} (1 = the true labels' own order)"
            )


class IdSequencePage(Page):
    """input_kind "id_sequence": an example's ids (a user's history) or ids typed, the model's top entries
    after them, in the data's own ids (seen ones left out or marked, unknown ones named)."""

    OUTPUTS = ("ranked_list",)

    def __init__(self, spec, name, submit, parent=None):
        super().__init__(spec, name, submit, parent)
        self.users: list[tuple[object, list]] = []
        self.id_type: type = int
        self.result = None  # the last answer shown (core.runs.predict.Recommendation)
        self.asked: tuple[list, bool] | None = None  # the (ids, exclude_seen) it answers
        noun, item = spec.noun, spec.item
        self.userCombo = picker(noun, 220)
        self.userCombo.currentIndexChanged.connect(self._user_chosen)
        self.historyEdit = QLineEdit(objectName="previewHistoryEdit")
        self.historyEdit.setPlaceholderText(spec.hint or f"or type {item} ids, oldest first")
        self.historyEdit.setClearButtonEnabled(True)
        self.historyEdit.textChanged.connect(self.debounce.start)
        self.historyEdit.textEdited.connect(self._history_edited)
        self.excludeCheck = QCheckBox(f"Exclude {item}s already seen", objectName="previewExcludeSeenCheck")
        self.excludeCheck.setChecked(True)
        self.excludeCheck.toggled.connect(self.request)
        self.output = RankedListView(spec, "Seen", name, self)
        self.table, self.infoLabel = self.output.table, self.output.infoLabel
        top = box_layout(
            None, QLabel(noun.capitalize()), self.userCombo, QLabel("History"), (self.historyEdit, 1), horizontal=True
        )
        box_layout(self, top, self.excludeCheck, (self.output, 1))

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.users = list(examples or [])
        first = next((h[0] for _u, h in self.users if len(h)), None)
        self.id_type = str if isinstance(first, str) else int
        refill(self.userCombo, (f"{self.spec.noun} {user} · {len(h)} {self.spec.item}s" for user, h in self.users))
        if self.users:
            self._user_chosen(0)
        else:
            self.request()

    def _user_chosen(self, index: int) -> None:
        if 0 <= index < len(self.users):
            self.historyEdit.setText(", ".join(str(i) for i in self.users[index][1]))
            self.request()

    def _history_edited(self, _text: str) -> None:
        """Typed ids are no longer the picked example's: the picker says so by showing none."""
        index = self.userCombo.currentIndex()
        if 0 <= index < len(self.users) and self.history() != list(self.users[index][1]):
            with QSignalBlocker(self.userCombo):
                self.userCombo.setCurrentIndex(-1)

    def history(self) -> list:
        return parse_ids(self.historyEdit.text(), self.id_type)

    def request(self) -> None:
        self.debounce.stop()
        predictor = self.predictor
        if predictor is None:
            return
        history, exclude = self.history(), self.excludeCheck.isChecked()
        self._submit("answer", lambda: ((history, exclude), predictor.preview_answer(history, exclude_seen=exclude)))

    def show_result(self, kind: str, result) -> None:
        self.asked, rec = result
        self.result = rec
        self.output.show_rows(
            [
                (item, score, "seen" if seen else "", None, MUTED_COLOUR if seen else None)
                for item, score, seen in zip(rec.items, rec.scores, rec.seen)
            ]
        )
        history, exclude = self.asked
        item = self.spec.item
        parts = [
            f"Top {len(rec.items)} next {item}s after {len(history) - len(rec.unknown)} known {item}(s)"
            + (", already seen ones left out" if exclude else ", already seen ones marked")
        ]
        if rec.unknown:
            shown = ", ".join(str(u) for u in rec.unknown[:SHOWN_UNKNOWN])
            shown += " …" if len(rec.unknown) > SHOWN_UNKNOWN else ""
            parts.append(coloured(f"not in the model's {item}s (ignored): {shown}", DOWN_COLOUR))
        self.infoLabel.setText("<br>".join(parts))


# the page for each input kind (core.tasks.serving.PREVIEW_INPUTS); a page says which output kinds it shows
PAGES = {
    "text": TextPage,
    "feature_row": FeatureRowPage,
    "feature_rows": FeatureRowsPage,
    "id_sequence": IdSequencePage,
}


def page_class(spec) -> type[Page] | None:
    """The page for a PreviewSpec's kinds; None when no page shows that pair."""
    cls = PAGES.get(spec.input_kind)
    return cls if cls is not None and spec.output_kind in cls.OUTPUTS else None
