"""The real PlotsPanel, fed a long run's StepMetrics: curves stay within the point budget and keep a spike and a gap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.panels.plots import PlotsPanel
from app.series import DEFAULT_BUDGET
from core.engine.events import RunStarted, StepMetrics

STEPS = 20_000  # logged steps: five times the budget, so every curve is bucketed
SPIKE_STEP, SPIKE_LOSS = 7_777, 50.0
OVERFLOW_STEP = 3_333  # the norm is inf there: the grad-norm curve must break
SKIP_STEPS = (100, 9_000, 15_001)  # GradScaler skipped a step in these intervals


def run_started(total_steps: int) -> RunStarted:
    return RunStarted(
        task="tiny",
        device="cpu",
        device_name="CPU",
        precision="fp16",
        autocast_dtype="float16",
        param_dtype="float32",
        scaler=True,
        param_count=1000,
        total_steps=total_steps,
        steps_per_epoch=100,
        start_step=0,
        config={},
    )


def columns() -> dict[str, np.ndarray]:
    steps = np.arange(1, STEPS + 1)
    rng = np.random.default_rng(5)
    loss = 2.0 * np.exp(-steps / 5000) + 0.05 * rng.random(STEPS)
    loss[steps == SPIKE_STEP] = SPIKE_LOSS
    norm = 1.0 + rng.random(STEPS)
    norm[steps == OVERFLOW_STEP] = math.inf
    skipped = np.searchsorted(np.array(SKIP_STEPS), steps, side="right")  # cumulative count
    scale = 65536.0 / 2.0**skipped
    return {
        "steps": steps,
        "loss": loss,
        "samples_per_second": 1000 + 100 * rng.random(STEPS),
        "lr": 1e-3 * (1 - steps / STEPS),
        "grad_norm": norm,
        "grad_scale": scale,
        "skipped_steps": skipped,
        "memory_bytes": (100 + steps % 7) * 2**20,
    }


def events(data: dict[str, np.ndarray]):
    for i, step in enumerate(data["steps"].tolist()):
        yield StepMetrics(
            step=step,
            epoch=step // 100,
            loss=float(data["loss"][i]),
            lr=float(data["lr"][i]),
            samples_per_second=float(data["samples_per_second"][i]),
            grad_scale=float(data["grad_scale"][i]),
            grad_norm=float(data["grad_norm"][i]),
            skipped_steps=int(data["skipped_steps"][i]),
            memory_bytes=int(data["memory_bytes"][i]),
            elapsed_seconds=step / 100,
        )


@pytest.fixture
def panel(qtbot):
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 600)
    panel.show()
    qtbot.waitExposed(panel)
    panel.build()
    panel.handle_event(run_started(STEPS))
    return panel


def test_long_run_curves_stay_in_budget_and_keep_spike_and_gap(qtbot, panel):
    data = columns()
    for event in events(data):
        panel.handle_event(event)
    panel.redraw()

    assert len(panel.series("loss_raw")) == STEPS  # every logged step counted...
    for key, curve in panel._curves.items():
        assert len(curve.xData) <= DEFAULT_BUDGET, key  # ...but no curve is handed more than the budget
        assert np.all(np.diff(curve.xData) > 0), key
    assert len(panel._curves["loss_raw"].xData) < STEPS / 4

    for curve in panel._curves.values():  # no second reduction: pyqtgraph's "peak" would blank a block with a gap
        assert curve.opts["autoDownsample"] is False and curve.opts["downsample"] == 1
    shown_x, shown_y = panel._curves["loss_raw"].getData()  # after pyqtgraph's own clipping/downsampling
    assert panel._ranges["loss"].log  # the spike is over 1000x the smallest loss: the loss axis turned log
    shown_y = 10**shown_y  # getData() is in the axis' (log10) units
    assert len(shown_x) == panel.series("loss_raw").stored
    assert np.nanmax(shown_y) == pytest.approx(SPIKE_LOSS, rel=1e-12) and shown_x[np.nanargmax(shown_y)] == SPIKE_STEP
    assert np.nanmin(shown_y) == pytest.approx(data["loss"].min())
    assert shown_x[-1] == STEPS  # the newest point is drawn
    norm_x, norm_y = panel._curves["grad_norm"].getData()
    assert norm_x[np.isnan(norm_y)].tolist() == [OVERFLOW_STEP]

    skipped_x, _ = panel._curves["skipped"].getData()
    assert skipped_x.tolist() == list(SKIP_STEPS)
    assert panel.skipped_steps == len(SKIP_STEPS)
    assert panel.plots["loss"].getPlotItem().getViewBox().viewRange()[1][1] >= math.log10(SPIKE_LOSS)  # y range has it


def test_bulk_ingest_draws_what_the_events_draw(qtbot, panel):
    data = columns()
    bulk = PlotsPanel()
    qtbot.addWidget(bulk)
    bulk.show()
    bulk.build()
    bulk.handle_event(run_started(0))  # no total: both must grow the x range the same way
    panel.handle_event(run_started(0))
    for event in events(data):
        panel.handle_event(event)
    half = STEPS // 2  # two blocks: the skipped-step count carries across them
    bulk.extend_steps(**{k: v[:half] for k, v in data.items()})
    bulk.extend_steps(**{k: v[half:] for k, v in data.items()})

    for key, series in panel._series.items():
        other = bulk.series(key)
        assert len(other) == len(series), key
        assert np.array_equal(other.x, series.x), key
        assert np.allclose(other.y, series.y, rtol=1e-12, atol=0, equal_nan=True), key
        assert (other.ymin, other.ymax) == pytest.approx((series.ymin, series.ymax), rel=1e-12), key
    assert bulk.skipped_steps == panel.skipped_steps == len(SKIP_STEPS)
    assert bulk._x_end == panel._x_end >= STEPS  # grown from 10 as the steps came
    title = panel.title("scale")
    assert bulk.title("scale") == title and "3 skipped" in title


def test_extend_steps_leaves_out_none_values(qtbot, panel):
    panel.extend_steps(
        steps=[1, 2, 3],
        loss=[1.0, 2.0, 3.0],
        samples_per_second=[5.0, 5.0, 5.0],
        lr=[0.1, 0.1, 0.1],
        grad_norm=[None, 2.0, float("nan")],
        grad_scale=None,
        skipped_steps=[0, 0, 0],
        memory_bytes=[None, None, None],
    )
    assert panel.series("grad_norm").x.tolist() == [2.0, 3.0]  # None: not measured; NaN: a gap
    assert np.isnan(panel.series("grad_norm").y[-1])
    assert len(panel.series("scale")) == len(panel.series("memory")) == 0
    assert len(panel.series("loss_raw")) == 3
