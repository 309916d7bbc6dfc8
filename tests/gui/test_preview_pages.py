"""The Model preview's pages come from the kinds a task's serving declares (core.tasks.serving.PreviewSpec): every
built-in task's kinds have a page, and a task the window has never heard of, declaring kinds of its own, gets a
working page with no GUI code of its own."""

from __future__ import annotations

import pytest

from app.panels.preview.pages import PAGES, page_class
from core.tasks import TASKS
from core.tasks.serving import PREVIEW_INPUTS, PREVIEW_OUTPUTS, PreviewSpec


def test_every_built_in_task_declares_kinds_a_page_shows():
    assert set(PAGES) == set(PREVIEW_INPUTS)
    for name, task in TASKS.items():
        serving = task.serving_class()
        spec = serving.preview
        assert spec is not None and page_class(spec) is not None, name
        for method in filter(None, (spec.answer, spec.examples, spec.explain)):
            assert method in serving.answers, f"{name}: {method} is not among the Predictor methods it answers"


def test_a_kind_outside_the_lists_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="preview kinds"):
        PreviewSpec("image", "score", answer="x")
    assert "ranked_list" in PREVIEW_OUTPUTS


class FakePredictor:
    """What a page reads of a Predictor: its preview spec, `n_features` and the preview_* answers."""

    def __init__(self, spec, n_features=0):
        self.preview, self.n_features = spec, n_features
        self.asked = []

    def preview_answer(self, value, **options):
        self.asked.append(value)
        if self.preview.output_kind == "score":
            return 0.25
        return [0.1, 0.7, 0.2]

    def preview_explain(self, text):
        return [("word", 0.5)]


def build(qtbot, spec, n_features=0):
    cls = page_class(spec)
    page = cls(spec, "previewNewPage", lambda kind, fn: page.show_result(kind, fn()))
    qtbot.addWidget(page)
    predictor = FakePredictor(spec, n_features)
    page.set_predictor(predictor, [[1.0, 2.0, 3.0]] if spec.input_kind == "feature_row" else [])
    return page, predictor


def test_a_new_tasks_text_page_shows_its_classes(qtbot):
    spec = PreviewSpec(
        "text", "class_probabilities", answer="topic", noun="question", classes=("maths", "history", "art")
    )
    page, predictor = build(qtbot, spec)
    assert page.edit.placeholderText() == "Type a question" and page.words_table.isHidden()
    page.edit.setPlainText("when was the treaty signed")
    page.request()
    assert predictor.asked == ["when was the treaty signed"] and page.scored_text == "when was the treaty signed"
    assert page.probabilities == [0.1, 0.7, 0.2] and page.score is None
    assert [label.text() for label in page.labels] == ["0.100", "0.700", "0.200"]
    assert page.output.infoLabel.text() == "The model says history."


def test_unnamed_classes_get_a_row_each_for_the_models_answer(qtbot):
    """A classifier whose number of classes is an option (the `tasks new` template's): no `classes` in its
    spec, so the rows are the answer's: three here, class 0 .. class 2, built again for a model of another size."""
    from PySide6.QtWidgets import QLabel

    spec = PreviewSpec("feature_row", "class_probabilities", answer="predict_rows", examples="rows", noun="point")
    page, _predictor = build(qtbot, spec, n_features=3)
    page.show()
    qtbot.waitExposed(page)
    assert page.probabilities == [0.1, 0.7, 0.2]
    assert [label.text() for label in page.labels] == ["0.100", "0.700", "0.200"]

    def names():
        return [
            label.text()
            for label in page.findChildren(QLabel)
            if label.objectName().endswith("Name") and label.isVisible()
        ]

    qtbot.waitUntil(lambda: names() == ["class 0", "class 1", "class 2"])  # the 2 rows built before: gone
    assert all(b.isVisible() for b in page.output.bars)
    assert page.output.infoLabel.text() == "The model says class 1."
    page.output.show_value([0.6, 0.4])  # built again: the rows before are gone from the page
    assert [label.text() for label in page.labels] == ["0.600", "0.400"] and len(page.output.bars) == 2
    qtbot.waitUntil(lambda: names() == ["class 0", "class 1"])
    assert page.output.infoLabel.text() == "The model says class 0."


def test_a_new_tasks_feature_row_page_shows_its_score(qtbot):
    spec = PreviewSpec(
        "feature_row",
        "score",
        answer="risk",
        examples="rows",
        column_prefix="f",
        label="P(late)",
        classes=("on time", "late"),
    )
    page, predictor = build(qtbot, spec, n_features=3)
    from PySide6.QtWidgets import QLabel

    names = [page.findChild(QLabel, f"previewNewPageLabel{i}").text() for i in range(3)]
    assert names == ["f1", "f2", "f3"] and len(page.inputs) == 3  # the fields the model reads, named by the spec
    assert predictor.asked == [[1.0, 2.0, 3.0]] and page.asked == [1.0, 2.0, 3.0]  # the first sample, asked
    assert page.score == 0.25 and "on time" in page.output.label.text() and page.output.bar.value() == 250
