"""The live plots tell the truth: test metrics are markers, axes start afresh each run, a lone point shows,
ceiling lines and legends never collide, and an empty plot says why it is empty."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gui_helpers import UI_WAIT_MS

from app.panels.plot_notes import NO_RUN, NOT_MEASURED, SCALER_OFF, WAITING, WAITING_EVAL
from app.panels.plots import PlotsPanel
from core.engine.events import EvalMetrics, RunEnded, RunStarted, StepMetrics


def started(
    total_steps: int = 100,
    scaler: bool = True,
    ceiling: dict | None = None,
    start_step: int = 0,
    device: str = "cuda:0",
) -> RunStarted:
    return RunStarted(
        task="tiny",
        device=device,
        device_name="GPU",
        precision="fp16" if scaler else "fp32",
        autocast_dtype="float16",
        param_dtype="float32",
        scaler=scaler,
        param_count=1000,
        total_steps=total_steps,
        steps_per_epoch=10,
        start_step=start_step,
        config={},
        ceiling=ceiling or {},
    )


def step(
    n: int,
    loss: float = 1.0,
    lr: float = 1e-3,
    grad_norm: float | None = 1.0,
    grad_scale: float | None = 65536.0,
    memory: int | None = 100 * 2**20,
    throughput: float = 1000.0,
):
    return StepMetrics(
        step=n,
        epoch=1,
        loss=loss,
        lr=lr,
        samples_per_second=throughput,
        grad_scale=grad_scale,
        grad_norm=grad_norm,
        skipped_steps=0,
        memory_bytes=memory,
        elapsed_seconds=n / 10,
    )


def ended(status: str, at: int) -> RunEnded:
    return RunEnded(
        status=status,
        message="",
        step=at,
        epoch=1,
        final_loss=None,
        metrics={},
        checkpoint=None,
        samples_per_second=None,
    )


@pytest.fixture
def panel(qtbot):
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(1400, 650)
    panel.show()
    qtbot.waitExposed(panel)
    panel.build()
    return panel


def y_range(panel, plot: str) -> list[float]:
    return panel.plots[plot].getPlotItem().getViewBox().viewRange()[1]


def test_test_split_metrics_are_markers_at_their_step_not_joined_to_validation(panel):
    panel.handle_event(started())
    for at, accuracy in ((50, 0.7), (100, 0.9)):
        panel.handle_event(EvalMetrics(step=at, epoch=1, split="val", metrics={"accuracy": accuracy, "loss": 0.3}))
    panel.handle_event(EvalMetrics(step=100, epoch=1, split="test", metrics={"accuracy": 0.6, "loss": 0.5}))
    panel.redraw()

    val = panel.series("eval:accuracy")
    assert val.x.tolist() == [50, 100] and val.y.tolist() == [0.7, 0.9]  # no vertical jump to the test value
    test = panel.series("split:test:accuracy")
    assert test.x.tolist() == [100] and test.y.tolist() == [0.6]  # at the step it was measured
    marker = panel._curves["split:test:accuracy"]
    assert marker.opts["pen"] is None and marker.opts["symbol"] == "star"  # not connected, a different symbol
    assert panel._curves["eval:accuracy"].opts["symbol"] != "star"
    # same colour as the metric's validation curve, so the pair reads together
    assert marker.opts["symbolBrush"] == panel._curves["eval:accuracy"].opts["symbolBrush"]
    labels = [label.text for _sample, label in panel._legends["eval"].items]
    assert labels.count("test") == 1 and "accuracy" in labels and "loss" in labels


def test_every_axis_starts_afresh_with_a_new_run(panel):
    panel.handle_event(started(scaler=True))
    for n in range(10, 101, 10):
        panel.handle_event(
            step(n, loss=n * 10.0, lr=0.5 * n, grad_norm=1000.0 * n, grad_scale=2.0**n, memory=n * 2**30)
        )
    panel.handle_event(EvalMetrics(step=100, epoch=1, split="val", metrics={"accuracy": 40.0}))
    panel.redraw()
    panel.plots["lr"].getPlotItem().getViewBox().setYRange(3, 4)  # a zoom, as the user would
    panel._user_moved("lr")
    before = {key: y_range(panel, key) for key in panel.plots}

    panel.handle_event(started(total_steps=40, scaler=False))
    panel.redraw()
    for key in ("eval", "throughput", "memory", "lr", "grad_norm", "loss"):  # no data yet: the empty range
        assert y_range(panel, key) == pytest.approx([0.0, 1.0]), key
        assert y_range(panel, key) != pytest.approx(before[key]), key
    assert y_range(panel, "scale") == pytest.approx([0.0, 6.0])  # log10 units: 1 .. 1e6
    assert not panel._ranges["lr"].manual
    for key in panel.plots:
        assert 10.2 <= panel.plots[key].getPlotItem().getViewBox().viewRange()[0][1] <= 10.8  # its first steps

    # the new run's values sit inside the old ranges: they are fitted anyway
    for n in (10, 20, 30):
        panel.handle_event(step(n, lr=0.01, grad_norm=2.0 + n / 100, grad_scale=None, memory=None))
    panel.redraw()
    lo, hi = y_range(panel, "lr")
    assert lo < 0.01 < hi and hi - lo < 0.01  # a flat curve: a small range around its value
    lo, hi = y_range(panel, "grad_norm")
    assert 1.9 < lo < 2.1 and 2.3 < hi < 2.5 and not panel._ranges["grad_norm"].log


def test_a_single_point_is_drawn_as_a_dot(panel):
    """A 6-step run logging every 10 steps: one point per curve, which a line alone would not draw."""
    panel.handle_event(started(total_steps=6, scaler=False, device="cpu"))
    panel.handle_event(step(6, grad_scale=None))
    panel.redraw()
    for key in ("loss_raw", "loss_smooth", "throughput", "throughput_smooth", "lr", "grad_norm", "memory"):
        curve = panel._curves[key]
        assert len(curve.xData) == 1, key
        assert curve.opts["symbol"] == "o", key  # a dot the point is drawn with
    for n in (12, 18):
        panel.handle_event(step(n, grad_scale=None))
    panel.redraw()
    assert panel._curves["loss_raw"].opts["symbol"] is None  # a line now: no dots on it

    panel.handle_event(step(24, grad_norm=math.inf, grad_scale=None))  # a gap, then one value, then a gap
    panel.handle_event(step(30, grad_norm=2.0, grad_scale=None))
    panel.handle_event(step(36, grad_norm=math.nan, grad_scale=None))
    panel.redraw()
    assert panel._curves["grad_norm"].opts["symbol"] == "o"  # the value between the gaps is visible
    assert panel._curves["loss_raw"].opts["symbol"] is None


def test_ceiling_lines_and_legend_never_overlap(panel, qtbot):
    panel.handle_event(started(ceiling={"accuracy": 0.95, "roc_auc": 0.985}))
    for at in (20, 40, 60, 80, 100):
        panel.handle_event(
            EvalMetrics(
                step=at, epoch=1, split="val", metrics={"accuracy": 0.9 + at / 2000, "roc_auc": 0.95, "loss": 0.3}
            )
        )
    panel.handle_event(EvalMetrics(step=100, epoch=1, split="test", metrics={"accuracy": 0.93, "roc_auc": 0.97}))
    panel.redraw()
    item = panel.plots["eval"].getPlotItem()
    legend = panel._legends["eval"]
    view = item.getViewBox().sceneBoundingRect()
    qtbot.waitUntil(lambda: legend.sceneBoundingRect().top() >= view.bottom(), timeout=UI_WAIT_MS)  # laid out below

    assert [line.value() for line in panel._ceiling_lines] == [0.95, 0.985]
    assert all(getattr(line, "label", None) is None for line in panel._ceiling_lines)  # no text drawn in the view...
    labels = [label.text for _sample, label in legend.items]
    assert "accuracy · ceiling 0.95" in labels and "roc_auc · ceiling 0.985" in labels  # ...it is in the legend
    view = item.getViewBox().sceneBoundingRect()
    assert legend.isVisible() and not legend.sceneBoundingRect().intersects(view)  # under the plot, not on it
    assert legend.sceneBoundingRect().right() <= item.sceneBoundingRect().right() + 1  # and no wider than it
    for plot in ("loss", "throughput", "scale"):
        other = panel._legends[plot]
        assert not other.sceneBoundingRect().intersects(
            panel.plots[plot].getPlotItem().getViewBox().sceneBoundingRect()
        ), plot
    low, high = y_range(panel, "eval")
    assert low <= 0.3 and high >= 0.985  # the ceilings are in view


def test_empty_plots_say_why(panel):
    panel.redraw()
    assert panel.note("loss") == NO_RUN
    panel.handle_event(started(scaler=False, device="cpu"))
    panel.redraw()
    assert panel.note("loss") == WAITING and panel.note("eval") == WAITING_EVAL
    assert panel.note("scale") == SCALER_OFF
    panel.handle_event(step(10, grad_scale=None, memory=None))
    panel.redraw()
    assert panel.note("loss") == "" and panel.note("lr") == ""
    assert panel.note("memory") == NOT_MEASURED
    assert panel.title("memory") == "Process memory (resident)"
    panel.handle_event(ended("completed", 10))
    panel.redraw()
    assert panel.note("scale") == SCALER_OFF  # still the reason once an fp32 run has ended, not "no points"

    panel.handle_event(started(scaler=True))  # a run that fails before its first logged step
    panel.handle_event(ended("failed", 0))
    panel.redraw()
    for plot in panel.plots:
        assert panel.note(plot) == "No points: the run failed at step 0", plot
    assert panel.title("memory") == "GPU memory (peak allocated)"


def test_quantities_keep_zero_in_view_and_decades_turn_log(panel):
    panel.handle_event(started())
    for n in range(10, 60, 10):
        panel.handle_event(
            step(n, throughput=300.0, memory=(1150 + n % 3) * 2**20, grad_norm=1.0 if n != 30 else 5000.0)
        )
    panel.redraw()
    assert y_range(panel, "throughput")[0] == pytest.approx(0.0)  # 300 samples/s is drawn as 300, not as noise
    assert y_range(panel, "memory")[0] == pytest.approx(0.0)
    assert panel._ranges["grad_norm"].log  # one spike 5000x the rest: log scale, the rest stays readable
    assert panel.plots["grad_norm"].getPlotItem().getAxis("left").logMode
    lo, hi = y_range(panel, "grad_norm")
    assert lo <= 0 and hi >= math.log10(5000)
    panel.handle_event(started())
    assert not panel.plots["grad_norm"].getPlotItem().getAxis("left").logMode  # linear again for the next run
    assert np.isinf(panel.series("grad_norm").ymax * -1)


def test_the_best_checkpoint_is_marked_on_the_validation_plot(panel):
    from core.engine.events import CheckpointSaved

    panel.handle_event(started())
    panel.handle_event(CheckpointSaved(step=30, path="run/best.pt", kind="best", metric="accuracy", value=0.91, rank=1))
    panel.handle_event(CheckpointSaved(step=40, path="run/checkpoint.pt"))  # the last one: no mark
    panel.redraw()
    assert panel.best_point() == ("accuracy", 30, 0.91)
    assert "best (accuracy)" in [label.text for _, label in panel._legends["eval"].items]
    panel.handle_event(started())  # a new run: the mark goes with the old run
    assert panel.best_point() is None
    assert all("best checkpoint" not in label.text for _, label in panel._legends["eval"].items)
