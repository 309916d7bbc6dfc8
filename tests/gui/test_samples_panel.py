"""The Samples panel beside the plots: hidden until a run sends samples, then the latest step's answers with the
previous step's beside them, newest step first; a new run clears it."""

from __future__ import annotations

import pytest
from gui_helpers import PROCESS_WAIT_MS, finish_run, quick_run, set_field

from core.engine.events import Samples


@pytest.mark.timeout(300)
def test_the_panel_shows_the_latest_samples_beside_the_previous_ones(qtbot, window, tmp_path):
    panel = window.samplesPanel
    assert not panel.isVisible()
    seen: list = []
    window.controller.event.connect(lambda e: seen.append(e) if isinstance(e, Samples) else None)
    quick_run(window, tmp_path / "run", max_steps=60, samples=2048)
    set_field(window, "evalIntervalEdit", 20)
    finish_run(qtbot, window, PROCESS_WAIT_MS)
    qtbot.waitUntil(lambda: panel.isVisible() and panel.table.rowCount() > 0, timeout=10_000)
    assert [e.step for e in seen] == [20, 40, 60]
    assert panel.title.text() == "Samples at step 60 (previous: step 40)"
    table = panel.table
    for row, (now, before) in enumerate(zip(seen[-1].rows, seen[-2].rows)):
        assert [table.item(row, c).text() for c in range(3)] == [now["input"], now["answer"], before["answer"]]
    panel.grab().save("/tmp/samples.png")
    window.grab().save("/tmp/samples_window.png")


@pytest.mark.timeout(300)
def test_a_resumed_run_shows_its_earlier_samples_from_its_record(qtbot, window, tmp_path):
    panel = window.samplesPanel
    quick_run(window, tmp_path / "run", max_steps=40, samples=2048)
    set_field(window, "evalIntervalEdit", 20)
    finish_run(qtbot, window, PROCESS_WAIT_MS)
    set_field(window, "maxStepsEdit", 60)
    seen: list = []
    window.controller.event.connect(lambda e: seen.append(e) if isinstance(e, Samples) else None)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=PROCESS_WAIT_MS, check_params_cb=lambda r: not r):
        assert window.start_run(resume_from=window.last_checkpoint)
    assert [e.step for e in seen] == [60]  # streamed since the resume; step 40's came from metrics.jsonl
    qtbot.waitUntil(lambda: panel.title.text() == "Samples at step 60 (previous: step 40)", timeout=60_000)
    assert panel.table.item(0, 2).text()  # step 40's answer beside step 60's


def test_an_answer_is_bold_when_it_changed_not_when_only_its_score_moved(qtbot):
    from app.panels.samples import SamplesPanel

    panel = SamplesPanel()
    qtbot.addWidget(panel)
    inputs = ["a", "b", "c", "d"]
    before = ["class 0 (0.995)", "class 1 (0.61)", "lessons 12, 7, 3", "positive (0.9)"]
    after = ["class 0 (0.986)", "class 0 (0.52)", "lessons 7, 12, 3", "positive (0.93)"]
    for step, answers in ((20, before), (40, after)):
        panel.handle_event(Samples(step, [{"input": i, "answer": a} for i, a in zip(inputs, answers)]))
    bold = [panel.table.item(r, 1).font().bold() for r in range(4)]
    assert bold == [False, True, True, False]  # another class, another order: bold; a score alone: not
