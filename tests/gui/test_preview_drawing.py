"""The Model preview's drawing pad (app/panels/preview/drawing.py), for a feature row that is an image
(PreviewSpec.image): strokes drawn with the mouse ink the pixels under them (softly, nothing else), the right
button erases, Clear blanks them, a sample or a typed field shows on the pad, values stay in the spec's
pixel_range, and what is drawn is what the model is asked (the digits example's trained model reads a drawn 1)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from trained_runs import DIGITS_EXAMPLE

from app.panels.preview.drawing import BRUSH_CORE, BRUSH_EDGE
from app.panels.preview.pages import page_class
from core.tasks.serving import PreviewSpec

SHOTS = os.environ.get("AMP_PREVIEW_SHOTS", "")  # a folder: save screenshots of the pad there
REACH = BRUSH_CORE + BRUSH_EDGE  # how far from the pointer the brush inks at all, in pixels


def spec_of(**options) -> PreviewSpec:
    options.setdefault("image", (8, 8))
    return PreviewSpec(
        "feature_row",
        "class_probabilities",
        answer="predict_rows",
        examples="example_rows",
        noun="digit",
        classes=tuple("0123456789"),
        **options,
    )


class FakePredictor:
    """What the page reads of a Predictor: its spec, `n_features`, and an answer per input (recorded)."""

    def __init__(self, spec, n_features=64):
        self.preview, self.n_features = spec, n_features
        self.asked: list[list[float]] = []

    def preview_answer(self, value):
        self.asked.append(list(value))
        return [0.1] * 10


def build(qtbot, spec, examples=(), n_features=64):
    page = page_class(spec)(spec, "previewDigits", lambda kind, fn: page.show_result(kind, fn()))
    qtbot.addWidget(page)
    page.resize(1000, 640)
    page.show()
    qtbot.waitExposed(page)
    predictor = FakePredictor(spec, n_features)
    page.set_predictor(predictor, [list(row) for row in examples])
    return page, predictor


def at(pad, x: float, y: float) -> QPoint:
    """The pad's widget position of (x, y) in the image's pixels."""
    rect = pad.image_rect()
    side = rect.width() / pad.cols
    return QPoint(round(rect.left() + x * side), round(rect.top() + y * side))


def drag(pad, points, button=Qt.MouseButton.LeftButton) -> None:
    """Press at the first point, move through the others, release at the last (real mouse events)."""
    no = Qt.KeyboardModifier.NoModifier
    QTest.mousePress(pad, button, no, at(pad, *points[0]))
    for point in points[1:]:
        QTest.mouseMove(pad, at(pad, *point))
    QTest.mouseRelease(pad, button, no, at(pad, *points[-1]))


def grid(page) -> np.ndarray:
    return np.asarray(page.values()).reshape(page.spec.image)


def asked_for_what_is_shown(qtbot, page, predictor) -> None:
    """The page's debounce fires and asks the model for the fields' values as they are now."""
    qtbot.waitUntil(lambda: bool(predictor.asked) and predictor.asked[-1] == page.values(), timeout=5_000)
    assert page.asked == page.values()


def segment_distance(cell: tuple[int, int], start, end) -> float:
    """How close the segment start..end (in pixels) comes to the square of pixel `cell` (row, column)."""
    row, col = cell
    ts = np.linspace(0.0, 1.0, 401)
    xs, ys = start[0] + (end[0] - start[0]) * ts, start[1] + (end[1] - start[1]) * ts
    dx = np.maximum(np.maximum(col - xs, xs - (col + 1)), 0.0)
    dy = np.maximum(np.maximum(row - ys, ys - (row + 1)), 0.0)
    return float(np.hypot(dx, dy).min())


def test_the_image_option_is_checked_where_it_is_declared():
    assert spec_of().pixels == 64 and spec_of(image=()).pixels == 0
    with pytest.raises(ValueError, match="only a feature_row input is drawn"):
        PreviewSpec("text", "score", answer="x", image=(8, 8))
    with pytest.raises(ValueError, match="height, width"):
        spec_of(image=(8, 0))
    with pytest.raises(ValueError, match="pixel_range"):
        spec_of(pixel_range=(1.0, 1.0))


def test_a_stroke_inks_the_pixels_under_it_and_no_others(qtbot):
    page, predictor = build(qtbot, spec_of())
    pad = page.findChild(type(page.drawing.pad), "previewDigitsPad")
    assert pad is page.drawing.pad and pad.isVisible() and page.pad_shown
    assert page.values() == [0.0] * 64  # no sample: a blank pad, blank fields
    start, end = (1.5, 3.5), (6.5, 3.5)
    drag(pad, [start, (2.5, 3.5), (4.0, 3.5), end])  # across row 3, from column 1 to column 6
    values = grid(page)
    assert values[3, 1:7].min() >= 0.9  # under the stroke: fully inked, as the model's training digits
    for row in range(8):
        for col in range(8):
            if segment_distance((row, col), start, end) >= REACH:
                assert values[row, col] == 0.0, (row, col)  # out of the brush's reach: untouched
    assert 0.0 < values[2, 3] < 0.5 and 0.0 < values[4, 3] < 0.5  # the stroke's soft edge greys its neighbours
    assert values[:2].max() == 0.0 and values[5:].max() == 0.0
    assert pad.values() == pytest.approx(page.values(), abs=1e-4)  # the fields are the pad's pixels
    asked_for_what_is_shown(qtbot, page, predictor)  # and the model is asked for them once the drawing pauses

    drag(pad, [(1.5, 6.5), (6.5, 6.5)])  # one fast move across: no gaps
    assert grid(page)[6, 1:7].min() >= 0.9

    drag(pad, [(3.5, 0.5), (3.5, 7.5)], Qt.MouseButton.RightButton)  # the right button erases down column 3
    erased = grid(page)
    assert erased[3, 3] <= 0.05 and erased[6, 3] <= 0.05
    assert erased[3, 1] == values[3, 1] and erased[3, 6] == values[3, 6]  # out of the eraser's reach: kept
    asked_for_what_is_shown(qtbot, page, predictor)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.grab().save(str(Path(SHOTS) / "drawpad_stroke.png"))


def test_clear_blanks_every_pixel_and_asks_again(qtbot):
    page, predictor = build(qtbot, spec_of())
    drag(page.drawing.pad, [(2.0, 2.0), (5.0, 5.0)])
    assert max(page.values()) > 0.9
    qtbot.mouseClick(page.drawing.clearButton, Qt.MouseButton.LeftButton)
    assert page.values() == [0.0] * 64 and page.drawing.pad.pixel_ink().max() == 0.0
    asked_for_what_is_shown(qtbot, page, predictor)
    assert predictor.asked[-1] == [0.0] * 64


def test_a_sample_and_a_typed_field_show_on_the_pad(qtbot):
    sample = np.zeros((8, 8))
    sample[1:7, 4] = 1.0  # a "1": column 4 inked, a grey serif
    sample[1, 3] = 0.5
    page, predictor = build(qtbot, spec_of(), examples=[sample.ravel(), np.zeros(64)])
    pad = page.drawing.pad
    assert predictor.asked == [sample.ravel().tolist()]  # the first sample, asked
    assert pad.pixel_ink() == pytest.approx(sample)  # and painted
    shown = pad.grab().toImage()

    def shade(row, col) -> int:
        point = at(pad, col + 0.5, row + 0.5)
        return shown.pixelColor(point).lightness()

    assert shade(3, 4) < 40 and shade(3, 2) > 240 and 90 < shade(1, 3) < 170  # inked, blank, half inked

    page.inputs[8 * 5 + 1].setValue(0.75)  # typed into x42 (row 5, column 1)
    assert pad.pixel_ink()[5, 1] == pytest.approx(0.75)
    asked_for_what_is_shown(qtbot, page, predictor)

    drag(pad, [(0.5, 7.5), (0.5, 7.5)])  # drawing on a sample adds to it
    assert grid(page)[7, 0] > 0.5 and grid(page)[3, 4] == 1.0 and grid(page)[5, 1] == pytest.approx(0.75)
    qtbot.mouseClick(page.sampleButton, Qt.MouseButton.LeftButton)  # the next sample: blank
    assert pad.pixel_ink().max() == 0.0 and page.values() == [0.0] * 64


@pytest.mark.parametrize("pixel_range", [(0.0, 16.0), (-1.0, 1.0)])
def test_the_pixels_keep_to_the_value_range(qtbot, pixel_range):
    blank, inked = pixel_range
    sample = np.full(64, blank)
    sample[:8] = inked
    sample[8:16] = (blank + inked) / 2
    page, predictor = build(qtbot, spec_of(pixel_range=pixel_range), examples=[sample])
    pad = page.drawing.pad
    assert pad.pixel_ink()[0] == pytest.approx([1.0] * 8) and pad.pixel_ink()[1] == pytest.approx([0.5] * 8)
    assert pad.pixel_ink()[2:].max() == 0.0  # blank pixels are blank, whatever number blank is
    qtbot.mouseClick(page.drawing.clearButton, Qt.MouseButton.LeftButton)
    assert page.values() == [blank] * 64
    drag(pad, [(1.5, 4.5), (6.5, 4.5)])
    values = grid(page)
    assert values[4, 1:7] == pytest.approx([inked] * 6, abs=0.1 * (inked - blank))
    assert values.min() >= blank and values.max() <= inked and values[0].tolist() == [blank] * 8
    box = page.inputs[0]
    assert (box.minimum(), box.maximum()) == (blank, inked)
    box.setValue(inked + 5)  # a field holds no more than fully inked
    assert box.value() == inked and pad.pixel_ink()[0, 0] == 1.0
    asked_for_what_is_shown(qtbot, page, predictor)


def test_a_model_reading_another_count_gets_fields_only(qtbot):
    page, predictor = build(qtbot, spec_of(), n_features=10)
    assert page.drawing.isHidden() and not page.pad_shown and len(page.inputs) == 10
    assert page.inputs[0].maximum() == 1e6  # not pixels: any number
    assert predictor.asked == [[0.0] * 10]


@pytest.mark.slow  # a task file's model is served from a child process
def test_a_drawn_digit_reaches_the_digits_model(qtbot, digits_run):
    """The digits example's trained model (the session's run, tests/trained_runs.py) in the real dialog: a sample
    is painted on the pad; a 1 drawn there is asked of the model, and its probabilities are the Predictor's."""
    import core.tasks as registry
    from app.panels.preview import PreviewDialog
    from core.runs.predict import load_predictor

    registry.add_task(str(DIGITS_EXAMPLE))
    view = PreviewDialog(lambda: digits_run.root)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    try:
        view.select_run(str(digits_run.folder))
        qtbot.waitUntil(lambda: view.predictor is not None and view.predictor.task == "digits", timeout=60_000)
        page = view.pages["digits"]
        qtbot.waitUntil(lambda: page.probabilities is not None, timeout=30_000)
        reference = load_predictor(digits_run.folder)
        first = reference.example_rows(1)[0]
        assert page.pad_shown and page.values() == pytest.approx(first.tolist(), abs=1e-4)  # the first digit
        assert page.drawing.pad.values() == pytest.approx(first.tolist(), abs=1e-4)  # painted on the pad

        qtbot.mouseClick(page.drawing.clearButton, Qt.MouseButton.LeftButton)
        drag(page.drawing.pad, [(4.5, 0.8), (4.5, 4.0), (4.4, 7.2)])  # a 1, down column 4
        drawn = page.values()
        assert max(drawn) > 0.9
        qtbot.waitUntil(lambda: page.asked == drawn, timeout=30_000)
        expected = reference.predict_rows(np.asarray([drawn], np.float32))[0]
        assert page.probabilities == pytest.approx(expected.tolist(), abs=1e-6)
        assert int(np.argmax(expected)) == 1 and page.output.infoLabel.text() == "The model says 1."
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            view.grab().save(str(Path(SHOTS) / "preview_digits_drawn.png"))
    finally:
        view.shutdown()
