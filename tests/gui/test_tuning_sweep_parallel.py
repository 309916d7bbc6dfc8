"""The sweep dialog's "Run on": two trials at once (each in its own training process), the table filling in as
they finish, and Stop stopping every running trial with a checkpoint."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from gui_helpers import click, quick_run

from app.panels.tuning_sweep import run_on_choices

pytestmark = pytest.mark.slow


def test_run_on_offers_one_at_a_time_then_the_gpus_then_the_cpu():
    devices = [
        SimpleNamespace(id="cpu", type="cpu"),
        SimpleNamespace(id="cuda:0", type="cuda"),
        SimpleNamespace(id="cuda:1", type="cuda"),
        SimpleNamespace(id="cuda:2", type="cuda"),
    ]
    choices = run_on_choices(devices, cores=4)
    assert [c[1] for c in choices] == [
        None,
        ["cuda:0", "cuda:1"],
        ["cuda:0", "cuda:1", "cuda:2"],
        ["cpu", "cpu"],
        ["cpu"] * 4,
    ]
    assert choices[0][0].startswith("One trial at a time")
    assert [c[1] for c in run_on_choices([SimpleNamespace(id="cpu", type="cpu")], cores=1)] == [None, ["cpu", "cpu"]]


def _sweep(tmp_path, window, max_steps: int):
    window.set_runs_root(str(tmp_path / "runs"))
    quick_run(window, tmp_path / "run", max_steps=max_steps, log_interval=10, samples=512, separate_process=False)
    dialog = window.tools.show_sweep()
    assert dialog.runOnCombo.currentData() is None  # the default: one trial at a time, as before
    dialog.set_run_on(["cpu", "cpu"])
    return dialog


@pytest.mark.default_threads  # the trainer's automatic thread choice is what it checks
@pytest.mark.timeout(240)
def test_two_trials_at_once_on_the_cpu_fill_the_table(qtbot, window, tmp_path):
    dialog = _sweep(tmp_path, window, max_steps=300)
    dialog.set_axes("lr = 1e-3, 3e-3, 1e-2")
    assert "3 trials" in dialog.planLabel.text()
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=200_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "sweepRunButton")
        assert not dialog.runOnCombo.isEnabled()
        # the table fills in as trials end, while the others still run
        qtbot.waitUntil(lambda: "completed" in dialog.trial_column("status"), timeout=150_000)
    result = dialog.result
    assert result is not None, dialog.statusLabel.text()
    assert result.counts == {"completed": 3}, result.counts
    assert dialog.trial_column("status") == ["completed"] * 3 and dialog.trial_column("device") == ["cpu"] * 3
    assert all(text != "–" for text in dialog.trial_column("best"))
    sweep = json.loads(next((tmp_path / "runs").glob("*/sweep.json")).read_text())
    assert [(t["status"], t["device"]) for t in sweep["trials"]] == [("completed", "cpu")] * 3
    for trial in sweep["trials"]:
        record = json.loads((tmp_path / "runs" / sweep["name"] / trial["folder"] / "run.json").read_text())
        assert any("2 processes" in note for note in record["notes"]), record["notes"]  # the cores shared out
    assert window.startButton.isEnabled()


@pytest.mark.timeout(240)
def test_stop_stops_every_running_trial(qtbot, window, tmp_path):
    from core.engine.events import StepMetrics
    from core.lab.sweep import TrialEvent

    dialog = _sweep(tmp_path, window, max_steps=1_000_000)
    dialog.set_axes("lr = 1e-3, 3e-3")  # one trial per slot: both running when Stop is clicked
    stepping: set[int] = set()
    dialog.job.progress.connect(
        lambda e: stepping.add(e.index) if isinstance(e, TrialEvent) and isinstance(e.event, StepMetrics) else None
    )
    click(qtbot, dialog, "sweepRunButton")
    qtbot.waitUntil(lambda: len(stepping) == 2, timeout=150_000)
    with qtbot.waitSignal(dialog.job.runningChanged, timeout=120_000, check_params_cb=lambda running: not running):
        click(qtbot, dialog, "sweepStopButton")
    assert dialog.result is not None and dialog.result.status == "stopped"
    sweep = json.loads(next((tmp_path / "runs").glob("*/sweep.json")).read_text())
    assert [t["status"] for t in sweep["trials"]] == ["stopped", "stopped"]
    for trial in sweep["trials"]:
        assert (tmp_path / "runs" / sweep["name"] / trial["folder"] / "checkpoint.pt").is_file()
