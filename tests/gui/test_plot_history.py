"""A resumed run's curves start with its history: PlotsPanel.show_history draws the earlier segments of the
run's metrics.jsonl (written by the real trainer), and a segment that restarted from an earlier checkpoint
replaces what the older one logged after that point."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from app.panels.plots import PlotsPanel
from app.plot_points import history_points
from core.engine.events import CheckpointSaved, EvalMetrics, RunStarted, StepMetrics
from core.engine.run_folder import METRICS_FILE
from core.engine.trainer import train
from core.files import read_jsonl


@pytest.fixture
def panel(qtbot):
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(1400, 650)
    panel.show()
    qtbot.waitExposed(panel)
    panel.build()
    return panel


@pytest.fixture
def three_segments(tiny_config):
    """One run folder, three segments: 0 -> 30; then 10 -> 20 from a copy of the step-10 checkpoint kept in
    the folder (a restart from an earlier checkpoint); then 20 -> 30 from that segment's final checkpoint.
    Returns (folder, the events of each segment)."""
    segments: list[list] = [[], [], []]
    early = {}

    def first_sink(event):
        segments[0].append(event)
        if isinstance(event, CheckpointSaved) and event.step == 10:
            early["path"] = Path(event.path).with_name("step-10.pt")
            shutil.copy(event.path, early["path"])

    options = {"log_interval": 5, "eval_interval": 10, "checkpoint_interval": 10}
    first = train(tiny_config(max_steps=30, **options), sink=first_sink)
    assert first.status == "completed"
    folder = Path(first.checkpoint).parent
    # another seed: other batches, so the values of this segment differ from those the first logged
    second = train(
        tiny_config(max_steps=20, seed=1, **options), sink=segments[1].append, resume_from=str(early["path"])
    )
    assert second.status == "completed" and Path(second.checkpoint).parent == folder
    third = train(tiny_config(max_steps=30, **options), sink=segments[2].append, resume_from=second.checkpoint)
    assert third.status == "completed"
    return folder, segments


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def test_resumed_run_continues_its_history_and_the_later_segment_wins(panel, three_segments):
    folder, (first, second, third) = three_segments
    records = read_jsonl(folder / METRICS_FILE)
    assert [r["start_step"] for r in records if r["event"] == "RunStarted"] == [0, 10, 20]

    started = of(third, RunStarted)[0]
    panel.handle_event(started)  # the resumed run starts: the panel is cleared...
    panel.show_history(records)  # ...then its history is drawn
    for event in third[1:]:
        panel.handle_event(event)
    panel.redraw()

    truth = {s.step: s.loss for s in of(first, StepMetrics) if s.step <= 10}
    truth |= {s.step: s.loss for s in of(second, StepMetrics)}
    truth |= {s.step: s.loss for s in of(third, StepMetrics)}
    loss = panel.series("loss_raw")
    assert loss.x.tolist() == [5, 10, 15, 20, 25, 30]  # each step once, in order: no zig-zag
    assert loss.y.tolist() == [truth[s] for s in (5, 10, 15, 20, 25, 30)]
    assert loss.y[2] != next(s.loss for s in of(first, StepMetrics) if s.step == 15)  # the later segment's 15
    assert np.all(np.diff(panel._curves["loss_raw"].xData) > 0)

    accuracy = panel.series("eval:accuracy")
    evals = {e.step: e.metrics["accuracy"] for e in of(first, EvalMetrics) if e.step <= 10}
    evals |= {e.step: e.metrics["accuracy"] for e in of(second, EvalMetrics)}
    evals |= {e.step: e.metrics["accuracy"] for e in of(third, EvalMetrics)}
    assert accuracy.x.tolist() == [10, 20, 30]
    assert accuracy.y.tolist() == [evals[10], evals[20], evals[30]]

    assert len(panel.series("loss_smooth")) == 6  # the average runs on through the history
    x_range = panel.plots["loss"].getPlotItem().getViewBox().viewRange()[0]
    assert x_range[0] <= 0 and x_range[1] >= 30  # the whole run, not only from the resume step
    assert panel.note("loss") == ""


def test_history_is_cut_at_the_resume_step(three_segments):
    folder, _segments = three_segments
    records = read_jsonl(folder / METRICS_FILE)
    steps, evals, begin = history_points(records, until_step=15)
    assert [s["step"] for s in steps] == [5, 10, 15] and [e.step for e in evals] == [10]
    assert begin == 0
    assert history_points([], until_step=10) == ([], [], None)
    torn = records + [{"event": "StepMetrics"}]  # a record without its fields is skipped
    assert [s["step"] for s in history_points(torn)[0]] == [5, 10, 15, 20, 25, 30]
