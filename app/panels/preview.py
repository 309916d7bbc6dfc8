"""Try a trained model: the Model preview dialog (Tools > Try a model…, or Try it… in the run history).

Pick a run under the runs root (or browse to a checkpoint file), its best or last checkpoint and a device; the
checkpoint loads as a core.lab.predict.Predictor and each task gets its own page: a review scored as you type
(with the words that pushed it most), a user's next ten lessons, a query's candidates re-ranked next to their
true labels, the tiny task's class probabilities for ten numbers. A run still training can be previewed: its
last checkpoint is a finished file (checkpoints are written atomically), and the preview runs beside it.

The model never runs on the GUI thread. Loading and every prediction is a plain function run by a
PredictionQueue: one BackgroundJob at a time, and per kind of request only the newest waits its turn, so typing
never builds a backlog (each edit restarts a 250 ms timer before anything is asked); a result that a newer
request has overtaken is dropped, and a load drops everything asked of the model before it. Errors (a corrupted
file, a checkpoint of a task with no preview) are one line in the panel, never a dialog of their own.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QCompleter, QDialog, QDoubleSpinBox, QFileDialog, QGridLayout, QHBoxLayout, QLabel,
    QLineEdit, QPlainTextEdit, QProgressBar, QPushButton, QStackedWidget, QTabWidget, QVBoxLayout, QWidget,
)

from app.panels.tool_dialog import ERROR_COLOUR
from app.panels.tuning import NumericItem, make_table
from app.run.jobs import BackgroundJob, JobRunner
from core.text import printable

DEBOUNCE_MS = 250  # an edit waits this long for the next one before the model is asked
TOP_K = 10
EXAMPLES = 200  # users / queries offered in the pickers
UP_COLOUR = "#2e9b57"
DOWN_COLOUR = "#d0453c"
MUTED_COLOUR = "#8a8f98"
BAR_CHARS = 24  # the longest effect bar, in block characters
EXPLAIN_MAX_CHARS = 20_000  # a longer text (a pasted essay) is scored, but not explained word by word


# ============================================================================== plain helpers (no Qt)
def parse_ids(text: str, like: type | None = int) -> list:
    """Lesson ids typed as '3, 17 42' -> [3, 17, 42]. Ids are ints when the run's ids are ints and the token
    is one, else the text itself (the model names what it does not know)."""
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


def ndcg_at(labels_in_order, k: int = TOP_K) -> float | None:
    """NDCG@k of the labels in the order shown against the labels' own best order (gain 2^label - 1); None
    when no candidate is relevant (every order is as good as any other)."""
    labels = [float(x) for x in labels_in_order]

    def dcg(values):
        return sum((2.0 ** v - 1.0) / math.log2(i + 2) for i, v in enumerate(values[:k]))

    ideal = dcg(sorted(labels, reverse=True))
    return None if ideal <= 0 else dcg(labels) / ideal


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def describe_predictor(predictor) -> str:
    """'<b>sentiment</b> · best.pt, step 400 (epoch 2) · accuracy 0.91 · cpu': the header over the pages."""
    from core.engine.run_record import primary_metric

    metrics = dict(getattr(predictor, "metrics", None) or {})
    config = dict(getattr(predictor, "config", None) or {})
    name = config.get("monitor") or primary_metric(predictor.task)
    shown = [(name, metrics[name])] if name in metrics else list(metrics.items())[:2]
    parts = [f"<b>{predictor.task}</b>", f"{Path(predictor.checkpoint).name}, step {predictor.step:,} "
                                         f"(epoch {predictor.epoch})"]
    if shown:
        parts.append(", ".join(f"{k} {_fmt(v)}" for k, v in shown))
    parts.append(str(predictor.device))
    return " · ".join(parts)


# ============================================================================== the worker plumbing
class PredictionQueue(QObject):
    """Runs `fn()` requests one at a time on a BackgroundJob; results come back on the GUI thread.

    Each request has a kind ('load', 'score', 'recommend'...). A newer request of a kind replaces the one of
    that kind still waiting, and only the newest request of a kind has its result delivered: `finished(kind,
    result)` or `failed(kind, message, details)`. `submit(..., supersede=True)` (a load) drops every waiting
    request and every result still to come.
    """

    finished = Signal(str, object)
    failed = Signal(str, str, str)
    busyChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.job = BackgroundJob("previewThread", self)
        self.job.succeeded.connect(self._succeeded)
        self.job.failed.connect(self._failed)
        self.job.runningChanged.connect(self._running_changed)
        self._serial = 0
        self._latest: dict[str, int] = {}  # kind -> serial of its newest request
        self._waiting: dict[str, tuple[int, Callable]] = {}  # kind -> (serial, fn), in the order asked
        self._current: tuple[str, int] | None = None
        self.started = 0  # functions actually run (a test can see that typing did not run one per key)
        self._closed = False

    @property
    def idle(self) -> bool:
        return not self.job.running and not self._waiting

    def submit(self, kind: str, fn: Callable[[], object], supersede: bool = False) -> None:
        if self._closed:
            return
        self._serial += 1
        if supersede:
            self._waiting.clear()
            self._latest.clear()
        self._latest[kind] = self._serial
        self._waiting.pop(kind, None)  # the newer request goes to the back of the line
        self._waiting[kind] = (self._serial, fn)
        self._start_next()

    def cancel(self) -> None:
        """Forget everything waiting and every result still to come (the running function finishes)."""
        self._waiting.clear()
        self._latest.clear()

    def _start_next(self) -> None:
        if self.job.running or not self._waiting or self._closed:
            return
        kind = next(iter(self._waiting))
        serial, fn = self._waiting.pop(kind)
        self._current = (kind, serial)
        self.started += 1
        self.job.start(lambda _progress, _control: fn())
        self.busyChanged.emit(True)

    def _fresh(self) -> str | None:
        if self._current is None:
            return None
        kind, serial = self._current
        return kind if self._latest.get(kind) == serial else None

    def _succeeded(self, result) -> None:
        kind = self._fresh()
        if kind is not None:
            self.finished.emit(kind, result)

    def _failed(self, message: str, _field: str, details: str) -> None:
        kind = self._fresh()
        if kind is not None:
            self.failed.emit(kind, message, details)

    def _running_changed(self, running: bool) -> None:
        if running:
            return
        self._current = None
        self._start_next()
        if not self.job.running:
            self.busyChanged.emit(False)

    def shutdown(self) -> None:
        """Drop what waits and join the running function's thread."""
        self._closed = True
        self._waiting.clear()
        self.job.shutdown()


# ============================================================================== one page per task
def _bar(name: str) -> QProgressBar:
    bar = QProgressBar(objectName=name)
    bar.setRange(0, 1000)
    bar.setTextVisible(False)
    bar.setFixedHeight(14)
    return bar


def _set_bar(bar: QProgressBar, value: float, colour: str) -> None:
    bar.setValue(round(max(0.0, min(1.0, value)) * 1000))
    bar.setStyleSheet(f"QProgressBar::chunk {{ background: {colour}; }}")


class _Page(QWidget):
    """A task's page: `set_predictor` when a checkpoint has loaded, `request` asks the dialog's queue."""

    def __init__(self, submit: Callable[[str, Callable[[], object]], None], parent=None):
        super().__init__(parent)
        self.predictor = None
        self._submit = submit
        self.debounce = QTimer(self, singleShot=True, interval=DEBOUNCE_MS)
        self.debounce.timeout.connect(self.request)

    def set_predictor(self, predictor, examples) -> None:
        self.predictor = predictor

    def request(self) -> None:
        raise NotImplementedError

    def show_result(self, kind: str, result) -> None:
        raise NotImplementedError

    def show_error(self, kind: str, message: str) -> None:
        raise NotImplementedError


WORDS_TEXT = "Words that pushed it most (P(positive) with the word minus P(positive) without it):"


class SentimentPage(_Page):
    """Type a review: P(positive) as a bar and a number, and the words that moved it most."""

    KINDS = ("score", "explain")

    def __init__(self, submit, parent=None):
        super().__init__(submit, parent)
        self.score: float | None = None  # the last P(positive) shown, for its text `scored_text`
        self.scored_text: str | None = None
        self.words: list[tuple[str, float]] = []
        self.explained_text: str | None = None  # the text `words` explains
        self.edit = QPlainTextEdit(objectName="previewReviewEdit")
        self.edit.setPlaceholderText("Type a review, e.g. 'clear explanations, but the pace was far too slow'")
        self.edit.setTabChangesFocus(True)
        self.edit.textChanged.connect(self.debounce.start)
        self.bar = _bar("previewSentimentBar")
        self.scoreLabel = QLabel("–", objectName="previewSentimentScore")
        self.scoreLabel.setMinimumWidth(150)
        self.scoreLabel.setTextFormat(Qt.TextFormat.RichText)
        self.words_table = make_table(("Word", "Effect", ""), "previewWordsTable")
        self.words_table.setSortingEnabled(False)
        self.words_table.horizontalHeaderItem(1).setToolTip("P(positive) with the word minus P(positive) "
                                                            "without it: + pushed towards positive")
        self.wordsLabel = QLabel(WORDS_TEXT, objectName="previewWordsLabel", wordWrap=True)
        score_row = QHBoxLayout()
        score_row.addWidget(QLabel("P(positive)"))
        score_row.addWidget(self.bar, 1)
        score_row.addWidget(self.scoreLabel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addLayout(score_row)
        layout.addWidget(self.wordsLabel)
        layout.addWidget(self.words_table, 3)

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.request()

    def request(self) -> None:
        self.debounce.stop()
        predictor, text = self.predictor, self.edit.toPlainText()
        if predictor is None:
            return
        if not text.strip():
            self.score, self.scored_text, self.words, self.explained_text = None, text, [], text
            self.bar.setValue(0)
            self.scoreLabel.setText(f"<span style='color:{MUTED_COLOUR}'>type a review</span>")
            self.words_table.setRowCount(0)
            return
        self._submit("score", lambda: (text, float(predictor.sentiment([text])[0])))
        if len(text) > EXPLAIN_MAX_CHARS:  # one model pass per distinct word, each over the whole text
            self.words, self.explained_text = [], text
            self.words_table.setRowCount(0)
            self.wordsLabel.setText(f"The review is over {EXPLAIN_MAX_CHARS:,} characters: scored, but not "
                                    "explained word by word.")
            return
        self.wordsLabel.setText(WORDS_TEXT)
        self._submit("explain", lambda: (text, [(str(w), float(e)) for w, e in predictor.explain(text)]))

    def show_result(self, kind: str, result) -> None:
        text, value = result
        if text != self.edit.toPlainText():
            return  # typed on since: the newer request is on its way
        if kind == "score":
            self.score, self.scored_text = value, text
            colour = UP_COLOUR if value >= 0.5 else DOWN_COLOUR
            _set_bar(self.bar, value, colour)
            verdict = "positive" if value >= 0.5 else "negative"
            self.scoreLabel.setText(f"<b>{value:.3f}</b> <span style='color:{colour}'>{verdict}</span>")
        else:
            self.words, self.explained_text = value, text
            self.words_table.setRowCount(len(value))
            largest = max((abs(e) for _w, e in value), default=0.0) or 1.0
            for row, (word, effect) in enumerate(value):
                up = effect >= 0
                colour = UP_COLOUR if up else DOWN_COLOUR
                cells = (NumericItem(f"{'▲' if up else '▼'} {word}", None, right=False),
                         NumericItem(f"{effect:+.3f}", effect),
                         NumericItem("█" * max(1, round(BAR_CHARS * abs(effect) / largest)), None, right=False))
                for column, item in enumerate(cells):
                    item.setForeground(_brush(colour))
                    self.words_table.setItem(row, column, item)

    def show_error(self, kind: str, message: str) -> None:
        self.scoreLabel.setText(f"<span style='color:{ERROR_COLOUR}'>failed</span>")
        self.scoreLabel.setToolTip(message)


def _brush(colour: str):
    from PySide6.QtGui import QBrush, QColor

    return QBrush(QColor(colour))


def _fixed_columns(table) -> None:
    """Columns as wide as their contents (at least 80 px), none stretched: a score and its label stay side by
    side instead of across the dialog."""
    table.setSortingEnabled(False)
    header = table.horizontalHeader()
    header.setStretchLastSection(False)
    header.setMinimumSectionSize(80)


def _searchable(combo: QComboBox, placeholder: str) -> None:
    """An editable combo whose typed text filters its items (anywhere in the text, any case)."""
    combo.setEditable(True)
    combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
    combo.lineEdit().setPlaceholderText(placeholder)
    completer = combo.completer()
    completer.setFilterMode(Qt.MatchFlag.MatchContains)
    completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
    completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)


class RecommenderPage(_Page):
    """A user from the run's data (or typed lesson ids): the next ten lessons, in the data's own ids."""

    KINDS = ("recommend",)

    def __init__(self, submit, parent=None):
        super().__init__(submit, parent)
        self.users: list[tuple[object, list]] = []
        self.id_type: type = int
        self.result = None  # the last Recommendation shown
        self.asked: tuple[list, bool] | None = None  # the (history, exclude_seen) it answers
        self.userCombo = QComboBox(objectName="previewUserCombo")
        _searchable(self.userCombo, "search a user id")
        self.userCombo.setMinimumWidth(220)
        self.userCombo.currentIndexChanged.connect(self._user_chosen)
        self.historyEdit = QLineEdit(objectName="previewHistoryEdit")
        self.historyEdit.setPlaceholderText("or type lesson ids, oldest first: 3, 17, 42")
        self.historyEdit.setClearButtonEnabled(True)
        self.historyEdit.textChanged.connect(self.debounce.start)
        self.historyEdit.textEdited.connect(self._history_edited)
        self.excludeCheck = QCheckBox("Exclude lessons already seen", objectName="previewExcludeSeenCheck")
        self.excludeCheck.setChecked(True)
        self.excludeCheck.toggled.connect(self.request)
        self.table = make_table(("#", "Lesson", "Score", "Seen"), "previewRecommendTable")
        _fixed_columns(self.table)
        self.infoLabel = QLabel(objectName="previewRecommendInfo", wordWrap=True)
        self.infoLabel.setTextFormat(Qt.TextFormat.RichText)
        top = QHBoxLayout()
        top.addWidget(QLabel("User"))
        top.addWidget(self.userCombo)
        top.addWidget(QLabel("History"))
        top.addWidget(self.historyEdit, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.excludeCheck)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.table, 1)

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.users = list(examples or [])
        first = next((h[0] for _u, h in self.users if len(h)), None)
        self.id_type = str if isinstance(first, str) else int
        self.userCombo.blockSignals(True)
        self.userCombo.clear()
        for user, history in self.users:
            self.userCombo.addItem(f"user {user} · {len(history)} lessons")
        self.userCombo.blockSignals(False)
        if self.users:
            self.userCombo.setCurrentIndex(0)
            self._user_chosen(0)
        else:
            self.request()

    def select_user(self, index: int) -> None:
        self.userCombo.setCurrentIndex(index)

    def _user_chosen(self, index: int) -> None:
        if 0 <= index < len(self.users):
            self.historyEdit.setText(", ".join(str(i) for i in self.users[index][1]))
            self.request()

    def _history_edited(self, _text: str) -> None:
        """Typed ids are no longer the picked user's history: the picker says so by showing no user."""
        index = self.userCombo.currentIndex()
        if 0 <= index < len(self.users) and self.history() != list(self.users[index][1]):
            self.userCombo.blockSignals(True)
            self.userCombo.setCurrentIndex(-1)
            self.userCombo.blockSignals(False)

    def history(self) -> list:
        return parse_ids(self.historyEdit.text(), self.id_type)

    def request(self) -> None:
        self.debounce.stop()
        predictor = self.predictor
        if predictor is None:
            return
        history, exclude = self.history(), self.excludeCheck.isChecked()
        self._submit("recommend", lambda: ((history, exclude),
                                           predictor.recommend(history, k=TOP_K, exclude_seen=exclude)))

    def show_result(self, kind: str, result) -> None:
        self.asked, rec = result
        self.result = rec
        self.table.setRowCount(len(rec.items))
        for row, (item, score, seen) in enumerate(zip(rec.items, rec.scores, rec.seen)):
            cells = (NumericItem(str(row + 1), row + 1), NumericItem(str(item), None, right=False),
                     NumericItem(f"{score:.4f}", float(score)), NumericItem("seen" if seen else "", None, right=False))
            for column, cell in enumerate(cells):
                if seen:
                    cell.setForeground(_brush(MUTED_COLOUR))
                self.table.setItem(row, column, cell)
        history, exclude = self.asked
        parts = [f"Top {len(rec.items)} next lessons after {len(history) - len(rec.unknown)} known lesson(s)"
                 + (", already seen ones left out" if exclude else ", already seen ones marked")]
        if rec.unknown:
            shown = ", ".join(str(u) for u in rec.unknown[:12]) + (" …" if len(rec.unknown) > 12 else "")
            parts.append(f"<span style='color:{DOWN_COLOUR}'>not in the model's lessons (ignored): {shown}</span>")
        self.infoLabel.setText("<br>".join(parts))

    def show_error(self, kind: str, message: str) -> None:
        self.table.setRowCount(0)
        self.infoLabel.setText(f"<span style='color:{ERROR_COLOUR}'>{message}</span>")


class RankingPage(_Page):
    """A query from the run's data: its candidates re-ranked by the model, true labels alongside."""

    KINDS = ("rank",)

    def __init__(self, submit, parent=None):
        super().__init__(submit, parent)
        self.queries: list = []
        self.order: list[int] = []  # candidate indices as shown (by score, highest first)
        self.scores: list[float] = []  # the model's score per candidate, in the query's own order
        self.ndcg: float | None = None
        self.queryCombo = QComboBox(objectName="previewQueryCombo")
        _searchable(self.queryCombo, "search a query id")
        self.queryCombo.setMinimumWidth(260)
        self.queryCombo.currentIndexChanged.connect(lambda _i: self.request())
        self.table = make_table(("Rank", "Lesson", "Score", "True label"), "previewRankTable")
        _fixed_columns(self.table)
        self.infoLabel = QLabel(objectName="previewRankInfo", wordWrap=True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Query"))
        top.addWidget(self.queryCombo)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.table, 1)

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.queries = list(examples or [])
        self.queryCombo.blockSignals(True)
        self.queryCombo.clear()
        for query in self.queries:
            self.queryCombo.addItem(f"query {query.query_id} · {len(query.doc_ids)} candidates")
        self.queryCombo.blockSignals(False)
        if self.queries:
            self.queryCombo.setCurrentIndex(0)
        self.request()

    def request(self) -> None:
        self.debounce.stop()
        index = self.queryCombo.currentIndex()
        predictor = self.predictor
        if predictor is None or not 0 <= index < len(self.queries):
            self.table.setRowCount(0)
            self.infoLabel.setText("No queries in this run's data." if predictor is not None else "")
            return
        query = self.queries[index]
        self._submit("rank", lambda: (index, [float(s) for s in predictor.rank(query.features)]))

    def show_result(self, kind: str, result) -> None:
        index, scores = result
        if index != self.queryCombo.currentIndex():
            return
        query = self.queries[index]
        labels = None if query.labels is None else [float(x) for x in query.labels]
        self.scores = scores
        self.order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep the data's order
        self.table.setRowCount(len(self.order))
        for row, i in enumerate(self.order):
            label = "" if labels is None else _fmt(labels[i]).removesuffix(".0")
            cells = (NumericItem(str(row + 1), row + 1), NumericItem(str(query.doc_ids[i]), None, right=False),
                     NumericItem(f"{scores[i]:.4f}", scores[i]), NumericItem(label, None if labels is None else labels[i]))
            if labels is not None and labels[i] > 0:
                cells[3].setForeground(_brush(UP_COLOUR))
            for column, cell in enumerate(cells):
                self.table.setItem(row, column, cell)
        if labels is None:
            self.ndcg = None
            self.infoLabel.setText(f"{len(scores)} candidates by the model's score (no true labels for this query)")
            return
        self.ndcg = ndcg_at([labels[i] for i in self.order])
        quality = ("every candidate has label 0: any order is as good" if self.ndcg is None else
                   f"NDCG@{TOP_K} of this order {self.ndcg:.3f} (1 = the true labels' own order)")
        self.infoLabel.setText(f"{len(scores)} candidates by the model's score · {quality}")

    def show_error(self, kind: str, message: str) -> None:
        self.table.setRowCount(0)
        self.infoLabel.setText(f"<span style='color:{ERROR_COLOUR}'>{message}</span>")


class TinyPage(_Page):
    """Ten numbers (or a sample from the run's data): the two class probabilities."""

    KINDS = ("classify",)
    FEATURES = 10

    def __init__(self, submit, parent=None):
        super().__init__(submit, parent)
        self.samples: list = []
        self._next_sample = 0
        self.probabilities: list[float] | None = None
        self.asked: list[float] | None = None
        self.inputs: list[QDoubleSpinBox] = []
        grid = QGridLayout()
        for i in range(self.FEATURES):
            column = f"x{i + 1}"  # the column names `amp-console predict` reads for the tiny task: x1..x10
            box = QDoubleSpinBox(objectName=f"previewTinyInput{i}", decimals=4, minimum=-1e6, maximum=1e6,
                                 singleStep=0.1)
            box.setKeyboardTracking(True)
            box.valueChanged.connect(self.debounce.start)
            self.inputs.append(box)
            grid.addWidget(QLabel(column, objectName=f"previewTinyLabel{i}"), i // 5 * 2, i % 5)
            grid.addWidget(box, i // 5 * 2 + 1, i % 5)
        self.sampleButton = QPushButton("Sample", objectName="previewTinySampleButton", clicked=self.sample)
        self.sampleButton.setToolTip("Fill the fields with a point from the run's data (the next one each click)")
        self.bars: list[QProgressBar] = []
        self.labels: list[QLabel] = []
        probs = QGridLayout()
        for c in range(2):
            bar = _bar(f"previewTinyClass{c}Bar")
            label = QLabel("–", objectName=f"previewTinyClass{c}Label")
            label.setMinimumWidth(60)
            probs.addWidget(QLabel(f"class {c}"), c, 0)
            probs.addWidget(bar, c, 1)
            probs.addWidget(label, c, 2)
            self.bars.append(bar)
            self.labels.append(label)
        self.infoLabel = QLabel(objectName="previewTinyInfo", wordWrap=True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.sampleButton)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(grid)
        layout.addLayout(buttons)
        layout.addLayout(probs)
        layout.addWidget(self.infoLabel)
        layout.addStretch(1)

    def set_predictor(self, predictor, examples) -> None:
        super().set_predictor(predictor, examples)
        self.samples = [[float(v) for v in row] for row in (examples if examples is not None else [])]
        self._next_sample = 0
        self.sampleButton.setEnabled(bool(self.samples))
        if self.samples:
            self.sample()
        else:
            self.request()

    def values(self) -> list[float]:
        return [box.value() for box in self.inputs]

    def sample(self) -> None:
        if not self.samples:
            return
        row = self.samples[self._next_sample % len(self.samples)]
        self._next_sample += 1
        for box, value in zip(self.inputs, row):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.request()

    def request(self) -> None:
        self.debounce.stop()
        predictor = self.predictor
        if predictor is None:
            return
        x = self.values()

        def run():
            import numpy as np

            return x, [float(p) for p in predictor.classify(np.asarray([x], dtype=np.float32))[0]]

        self._submit("classify", run)

    def show_result(self, kind: str, result) -> None:
        self.asked, self.probabilities = result
        top = max(range(len(self.probabilities)), key=lambda c: self.probabilities[c])
        for c, (bar, label) in enumerate(zip(self.bars, self.labels)):
            p = self.probabilities[c] if c < len(self.probabilities) else 0.0
            _set_bar(bar, p, UP_COLOUR if c == top else MUTED_COLOUR)
            label.setText(f"{p:.3f}")
        self.infoLabel.setText(f"The model says class {top}.")

    def show_error(self, kind: str, message: str) -> None:
        self.infoLabel.setText(f"<span style='color:{ERROR_COLOUR}'>{message}</span>")


PAGES = {"sentiment": SentimentPage, "recommender": RecommenderPage, "ranking": RankingPage, "tiny": TinyPage}


def load_for_preview(source: str, which: str, device: str):
    """(predictor, its examples for the pickers, a note): run on the queue's worker. Examples come from the
    run's data; when that cannot be read (a data file moved since), the model still loads and the note says
    why the pickers are empty (typed lesson ids and numbers still work)."""
    from core.errors import AmpConsoleError
    from core.lab.predict import load_predictor

    predictor = load_predictor(source, which=which, device=device)
    examples, note = None, ""
    try:
        if predictor.task == "recommender":
            examples = predictor.example_users(EXAMPLES)
        elif predictor.task == "ranking":
            examples = predictor.example_queries(EXAMPLES)
        elif predictor.task == "tiny":
            examples = predictor.example_inputs(20)
    except (AmpConsoleError, OSError) as exc:
        note = f"No examples from the run's data: {exc}"
    return predictor, examples, note


# ============================================================================== the evaluation report
class EvaluationTab(QWidget):
    """The loaded checkpoint's evaluation report: the evaluation.json in its run folder when there is one,
    else Evaluate measures it (core.lab.evaluation_report on its test split, on a worker of its own, so the
    Try it page stays quick meanwhile) and writes it there, as `amp-console evaluate --report` does."""

    def __init__(self, parent=None):
        super().__init__(parent)
        from PySide6.QtWidgets import QScrollArea

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
        top = QHBoxLayout()
        top.addWidget(self.infoLabel, 1)
        top.addWidget(self.evaluateButton, 0, Qt.AlignmentFlag.AlignTop)
        scroll = QScrollArea(objectName="previewEvaluationScroll", widgetResizable=True,
                             frameShape=QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.view)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(scroll, 1)
        self.set_checkpoint(None)

    @property
    def folder(self) -> Path | None:
        from core.lab.evaluation_report import report_folder

        return None if self.checkpoint is None else report_folder(self.checkpoint)

    def set_checkpoint(self, checkpoint, device: str = "cpu") -> None:
        """The preview loaded `checkpoint` (None: nothing loaded): show its run's report, read off the GUI
        thread."""
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
            from core.lab.evaluation_report import load_report

            return bounded_report(load_report(folder, strict=True))  # a torn file: named, not "no report"

        self.reads.submit(read, lambda report: self._read(serial, report),
                          lambda message, _details: self._read_failed(serial, message))

    def _read(self, serial: int, report) -> None:
        if serial != self._serial:
            return
        if report is None:
            self.infoLabel.setText(f"No evaluation report in {self.folder} yet: Evaluate measures "
                                   f"{self.checkpoint.name} on its test split (its validation split when the "
                                   "task has no test split) and saves evaluation.json there.")
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
        text = html.escape(printable(f"evaluation.json: {about}, {report.get('split', '?')} split, "
                                     f"{report.get('created', '')}"), quote=False)
        same = self.checkpoint is not None and measured == self.checkpoint.name
        if not same and self.checkpoint is not None:
            shown = html.escape(printable(measured), quote=False)
            text += (f"<br><span style='color:{MUTED_COLOUR}'>This report measured {shown}; Evaluate "
                     f"measures {self.checkpoint.name}.</span>")
        self.infoLabel.setText(text)
        self.view.show_report(bounded)

    def evaluate(self) -> None:
        """Measure the loaded checkpoint (on the preview's device) and save the report in its run folder."""
        if self.job.running or self.checkpoint is None:
            return
        checkpoint, device, folder = str(self.checkpoint), self.device, self.folder
        self._evaluating = self._serial

        def run(_progress, _control):
            from app.panels.evaluation_limits import bounded_report
            from core.lab.evaluation_report import evaluation_report, write_report

            report = evaluation_report(checkpoint, device=device)
            write_report(report, folder)
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


# ============================================================================== the dialog
class PreviewDialog(QDialog):
    """The Model preview: a run (or a checkpoint file), best or last, a device; then the task's page.

    `runs_root()` gives the folder whose runs are offered; `devices()` the device ids to offer (cpu first).
    """

    def __init__(self, runs_root: Callable[[], Path], devices: Callable[[], list[str]] | None = None,
                 parent=None):
        super().__init__(parent)
        self.setObjectName("previewDialog")
        self.setWindowTitle("Model preview")
        self.resize(1040, 720)  # the evaluation plots need the room
        self._runs_root = runs_root
        self._devices = devices or (lambda: ["cpu"])
        self.predictor = None
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
        self.runCombo.activated.connect(lambda _i: self.load())
        self.refreshButton = QPushButton("Refresh", objectName="previewRefreshButton", clicked=self.refresh)
        self.browseButton = QPushButton("Browse…", objectName="previewBrowseButton", clicked=self.browse)
        self.browseButton.setToolTip("Preview a checkpoint file (.pt) from anywhere")
        self.whichCombo = QComboBox(objectName="previewWhichCombo")
        self.whichCombo.addItem("Best checkpoint", "best")
        self.whichCombo.addItem("Last checkpoint", "last")
        self.whichCombo.setToolTip("The run's best checkpoint (its last when it kept no best), or its last")
        self.whichCombo.activated.connect(lambda _i: self.load())
        self.deviceCombo = QComboBox(objectName="previewDeviceCombo")
        self.deviceCombo.setToolTip("Where the model runs; one request at a time is quick on the CPU, which also "
                                    "leaves an accelerator to a run that is training")
        self.deviceCombo.activated.connect(lambda _i: self.load())
        top = QHBoxLayout()
        top.addWidget(QLabel("Run"))
        top.addWidget(self.runCombo, 1)
        top.addWidget(self.refreshButton)
        top.addWidget(self.browseButton)
        top.addWidget(self.whichCombo)
        top.addWidget(QLabel("Device"))
        top.addWidget(self.deviceCombo)

        self.header = QLabel("Pick a run to try its model.", objectName="previewHeader", wordWrap=True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.statusLabel = QLabel(objectName="previewStatus", wordWrap=True)
        self.statusLabel.setTextFormat(Qt.TextFormat.RichText)

        self.stack = QStackedWidget(objectName="previewStack")
        self.messageLabel = QLabel("Pick a run (or Browse… for a checkpoint file) to try its model here.",
                                   objectName="previewMessage", wordWrap=True)
        self.messageLabel.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.messageLabel.setTextFormat(Qt.TextFormat.RichText)
        self.stack.addWidget(self.messageLabel)
        self.pages: dict[str, _Page] = {}
        for task, page_class in PAGES.items():
            page = page_class(self._submit, self)
            page.setObjectName(f"preview{task.capitalize()}Page")
            self.pages[task] = page
            self.stack.addWidget(page)
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

    # ------------------------------------------------------------------ choices
    def refresh_devices(self) -> None:
        keep = self.deviceCombo.currentText() or "cpu"
        try:
            ids = [str(d) for d in self._devices()] or ["cpu"]
        except Exception:  # noqa: BLE001 (device detection failing leaves the CPU)
            ids = ["cpu"]
        if "cpu" not in ids:
            ids.insert(0, "cpu")
        self.deviceCombo.clear()
        self.deviceCombo.addItems(ids)
        self.deviceCombo.setCurrentText(keep if keep in ids else "cpu")

    def refresh(self) -> None:
        """Scan the runs root again (off the GUI thread); the current choice is kept."""
        root = self._runs_root()

        def scan():
            from core.engine.run_record import find_runs

            return [r for r in find_runs(root) if r.get("checkpoints")]

        self.refreshButton.setEnabled(False)
        self.scans.submit(scan, self._scanned, self._scan_failed)

    def _scanned(self, runs: list[dict]) -> None:
        self.refreshButton.setEnabled(True)
        keep = self._wanted or self.current_source()
        self.runs = runs
        self.runCombo.blockSignals(True)
        self.runCombo.clear()
        for run in runs:
            status = run.get("status") or "?"
            self.runCombo.addItem(f"{run.get('name')} · {run.get('task')} · {status}", run.get("folder"))
        if self._wanted and self.runCombo.findData(self._wanted) < 0 and self._wanted not in self.outside:
            self.outside.append(self._wanted)  # a run outside the runs root (Try it… on it): offered from now on
        for folder in self.outside:
            if self.runCombo.findData(folder) < 0:
                self.runCombo.addItem(f"{Path(folder).name} · {folder}", folder)
        for path in self.files:
            self._add_file_item(path)
        index = self.runCombo.findData(keep) if keep else -1
        self.runCombo.setCurrentIndex(index if index >= 0 else (0 if self.runCombo.count() else -1))
        self.runCombo.blockSignals(False)
        if keep and index < 0 and self.runCombo.count():  # what was shown is gone (deleted): show what is picked
            self._wanted = None
            self.load()
            return
        if not self.runCombo.count():
            self._message(f"No run with a checkpoint under {self._runs_root()}. Train one, or Browse… for a "
                          "checkpoint file.")
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
        path, _ = QFileDialog.getOpenFileName(self, "Checkpoint to preview", str(self._runs_root()),
                                              "Checkpoints (*.pt);;All files (*)")
        if path:
            self.open_file(path)

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        """Load the chosen checkpoint (a newer choice supersedes a load still running)."""
        source = self.current_source()
        if not source:
            return
        which = self.whichCombo.currentData() or "best"
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
        self.queue.submit("load", lambda: load_for_preview(source, which, device), supersede=True)

    def _loaded(self, result) -> None:
        predictor, examples, note = result
        page = self.pages.get(predictor.task)
        if page is None:
            self._message(f"No preview for the {predictor.task!r} task (it knows "
                          f"{', '.join(PAGES)}).")
            return
        self.predictor = predictor
        self.header.setText(describe_predictor(predictor))
        self.header.setToolTip(str(predictor.checkpoint))
        self.stack.setCurrentWidget(page)
        self.evaluation.set_checkpoint(predictor.checkpoint, self.deviceCombo.currentText() or "cpu")
        notes = list(getattr(predictor, "notes", None) or [])  # e.g. no best kept yet: its last checkpoint
        self._note = " ".join(notes + ([note] if note else []))
        self.statusLabel.setText(self._note)
        page.set_predictor(predictor, examples)

    def _message(self, text: str, error: bool = True) -> None:
        self.predictor = None
        self.evaluation.set_checkpoint(None)
        self.messageLabel.setText(f"<span style='color:{ERROR_COLOUR}'>{text}</span>" if error else text)
        self.stack.setCurrentWidget(self.messageLabel)
        if error:
            self.header.setText(f"<span style='color:{ERROR_COLOUR}'>Nothing loaded</span>")

    # ------------------------------------------------------------------ requests and results
    def _submit(self, kind: str, fn: Callable[[], object]) -> None:
        self.statusLabel.setText(self._note)  # a new request: an earlier request's error no longer stands
        self.queue.submit(kind, fn)

    def _page_for(self, kind: str) -> _Page | None:
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
        self.statusLabel.setText(f"<span style='color:{ERROR_COLOUR}'>{message}</span>")
        self.statusLabel.setToolTip(details)

    # ------------------------------------------------------------------ lifetime
    @property
    def busy(self) -> bool:
        return not self.queue.idle

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
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
        self.queue.shutdown()
        self.scans.shutdown()
        self.evaluation.shutdown()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        """Closing drops what was asked; what is running (one request, a scan, an evaluation that will be
        saved) finishes on its own thread without blocking the window, which joins them all when it closes
        (shutdown). Opened again, the view loads its checkpoint again if that load was dropped."""
        for page in self.pages.values():
            page.debounce.stop()
        self.queue.cancel()
        super().closeEvent(event)
