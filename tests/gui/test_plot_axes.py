"""The live plots fit what has run: the x range follows the steps (with headroom, never past the planned total),
a zoom by the user is kept, and no axis's labels run together at the window's default and minimum
sizes."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QImage, QPainter

from app.plot_axes import step_label
from app.plot_ranges import x_end_for
from core.engine.events import RunStarted, StepMetrics


def started(total_steps: int, start_step: int = 0) -> RunStarted:
    return RunStarted(
        task="tiny",
        device="cpu",
        device_name="CPU",
        precision="fp32",
        autocast_dtype=None,
        param_dtype="float32",
        scaler=False,
        param_count=1000,
        total_steps=total_steps,
        steps_per_epoch=1000,
        start_step=start_step,
        config={},
        ceiling={},
    )


def step(n: int) -> StepMetrics:
    return StepMetrics(
        step=n,
        epoch=1,
        loss=1.0 / n,
        lr=1e-3,
        samples_per_second=1000.0,
        grad_scale=None,
        grad_norm=1.0,
        skipped_steps=0,
        memory_bytes=100 * 2**20,
        elapsed_seconds=n / 10,
    )


def x_range(panel, plot: str = "loss") -> list[float]:
    return panel.plots[plot].getPlotItem().getViewBox().viewRange()[0]


def test_x_end_grows_a_few_times_a_decade_and_stops_at_the_total():
    assert [x_end_for(s) for s in (1, 10, 40, 100, 900, 123_456)] == [10, 15, 50, 150, 1000, 150_000]
    assert x_end_for(500, 200_000) == 750
    assert x_end_for(170_000, 200_000) == 200_000  # within a fifth of the end: the whole run
    assert x_end_for(5, 8) == 8
    assert all(x_end_for(s) >= s * 1.1 for s in range(1, 5000, 7))


def test_the_x_range_follows_the_steps_not_the_planned_total(window, qtbot):
    panel = window.plotsPanel
    panel.handle_event(started(total_steps=200_000))
    assert x_range(panel)[1] < 20  # not a vertical sliver at x = 0 of 200,000
    for n in range(10, 501, 10):
        panel.handle_event(step(n))
    panel.redraw()
    lo, hi = x_range(panel)
    assert lo <= 0 and 500 <= hi <= 1000  # the curve fills at least half the plot
    assert all(x_range(panel, key)[1] == pytest.approx(hi) for key in panel.plots)

    panel.handle_event(step(170_000))
    # Near the end: the planned total and room for the end's markers (8% at most), no more.
    assert 200_000 <= x_range(panel)[1] <= 200_000 * 1.08


def test_a_zoom_by_the_user_is_kept_as_the_run_grows(window):
    panel = window.plotsPanel
    panel.handle_event(started(total_steps=0))
    for n in range(10, 101, 10):
        panel.handle_event(step(n))
    view = panel.plots["loss"].getPlotItem().getViewBox()
    view.setXRange(20, 60, padding=0)
    panel._user_moved("loss")  # what sigRangeChangedManually calls for a mouse zoom
    for n in range(110, 5001, 10):
        panel.handle_event(step(n))
    panel.redraw()
    assert x_range(panel, "loss") == pytest.approx([20, 60])
    assert x_range(panel, "lr")[1] >= 5000  # the other plots still follow


def label_rects(plot_widget, side: str = "bottom") -> list[tuple[QRectF, str]]:
    """The tick labels an axis draws, as (rect, text), from pyqtgraph's own layout of them."""
    axis = plot_widget.getPlotItem().getAxis(side)
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(rect, text) for rect, _flags, text in specs[2]] if specs else []


@pytest.mark.parametrize("size", ["default", "minimum"])
@pytest.mark.parametrize("last_step", [950, 187_500, 3_400_000])
def test_tick_labels_never_overlap_at_the_default_and_minimum_window_size(window, qtbot, size, last_step):
    if size == "minimum":
        window.resize(window.minimumSizeHint())
    qtbot.wait(10)  # let the layout settle at the new size
    panel = window.plotsPanel
    panel.handle_event(started(total_steps=last_step))
    for n in range(last_step // 40, last_step + 1, last_step // 40):
        panel.handle_event(step(n))
    panel.redraw()
    for key, widget in panel.plots.items():
        rects = sorted(label_rects(widget), key=lambda pair: pair[0].left())
        assert len(rects) >= (3 if key == "loss" else 1), (key, size, [t for _r, t in rects])  # loss: the widest
        for (a, text_a), (b, text_b) in pairwise(rects):
            assert a.right() <= b.left(), f"{key} at {size} size: {text_a!r} runs into {text_b!r}"
        rows = sorted(label_rects(widget, "left"), key=lambda pair: pair[0].top())
        for (a, text_a), (b, text_b) in pairwise(rows):
            assert a.bottom() <= b.top(), f"{key}'s y axis at {size} size: {text_a!r} runs into {text_b!r}"


def test_step_labels_are_short():
    assert [step_label(v) for v in (0, 750, 1500, 50_000, 187_500, 1_200_000)] == [
        "0",
        "750",
        "1.5k",
        "50k",
        "188k",
        "1.2M",
    ]


def test_compact_labels_have_the_digits_their_spacing_needs_and_no_more():
    from app.plot_axes import compact_label

    assert [compact_label(v, 5e-5) for v in (0, 5e-5, 1e-4, 1.5e-4)] == ["0", "5e-5", "0.0001", "0.00015"]
    assert [compact_label(v, 0.1) for v in (0.1, 1.0)] == ["0.1", "1"]
    assert compact_label(1.001e-4, 1e-7) == "0.0001001"


@pytest.mark.parametrize("peak", [1e-4, 3e-3])
def test_the_learning_rate_axis_is_compact(window, peak):
    from dataclasses import replace

    panel = window.plotsPanel
    panel.handle_event(started(total_steps=1000))
    for n in range(10, 1001, 10):  # a warm-up, then flat
        panel.handle_event(replace(step(n), lr=peak * min(1.0, n / 300)))
    panel.redraw()
    texts = [text for _rect, text in label_rects(panel.plots["lr"], "left")]
    assert len(texts) >= 2 and all(len(t) <= 7 and not re.search(r"\.\d*0$", t) for t in texts), texts
