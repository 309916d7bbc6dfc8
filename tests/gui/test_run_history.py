"""File -> Run history: the runs under the runs folder, made by the real trainer and CLI, in a table that
filters, loads a run's settings into the form, overlays runs' curves on the plots, resumes and deletes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from core.engine.control import RunControl
from core.engine.events import StepMetrics
from core.engine.run_record import RECORD_FILE
from core.engine.trainer import train

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs_root(tmp_path, tiny_config, one_intra_op_thread, monkeypatch):
    """runs/fp32-run (completed, 20 steps), runs/bf16-run (stopped at step 10 of 40, resumable) and
    runs/crashed (a run.json still saying 'running' with no live run holding the folder: 'interrupted')."""
    root = tmp_path / "runs"
    options = {"log_interval": 2, "eval_interval": 5, "checkpoint_interval": 5}
    first = train(tiny_config(out_dir=str(root / "fp32-run"), max_steps=20, **options))
    assert first.status == "completed"
    control = RunControl()

    def stop_at_10(event):
        if isinstance(event, StepMetrics) and event.step >= 10:
            control.stop()

    second = train(tiny_config(out_dir=str(root / "bf16-run"), precision="bf16", max_steps=40, **options),
                   sink=stop_at_10, control=control)
    assert second.status == "stopped"
    crashed = root / "crashed"
    crashed.mkdir()
    record = json.loads((root / "fp32-run" / RECORD_FILE).read_text())
    record.update(status="running", id="0123456789", checkpoints={})
    (crashed / RECORD_FILE).write_text(json.dumps(record))
    monkeypatch.setenv("AMP_CONSOLE_RUNS_DIR", str(root))
    return root


def open_history(qtbot, window):
    """File -> Run history, once its first scan has filled the table."""
    window.historyAction.trigger()
    panel = window.historyDialog.panel
    qtbot.waitUntil(lambda: not panel.busy and panel.model.rowCount() > 0, timeout=30_000)
    return panel


def status_of(panel, name: str) -> str:
    return next(r["status"] for r in panel.model.runs if r["name"] == name)


@pytest.mark.timeout(120)
def test_history_lists_filters_and_loads_settings(qtbot, window, runs_root):
    panel = open_history(qtbot, window)
    assert panel.root == runs_root
    assert sorted(panel.visible_names()) == ["bf16-run", "crashed", "fp32-run"]
    assert status_of(panel, "fp32-run") == "completed"
    assert status_of(panel, "bf16-run") == "stopped"
    assert status_of(panel, "crashed") == "interrupted"
    row = next(r for r in range(panel.proxy.rowCount()) if panel.proxy.index(r, 0).data() == "fp32-run")
    cells = [panel.proxy.index(row, c).data() for c in range(panel.proxy.columnCount())]
    assert cells[1:6] == ["tiny", "completed", "fp32", "cpu", "20/20"]
    best = next(r["best"] for r in panel.model.runs if r["name"] == "fp32-run")
    assert cells[6] == f"{best['name']} {best['value']:.4g}"

    panel.filterEdit.setText("bf16")
    assert panel.visible_names() == ["bf16-run"]
    panel.filterEdit.setText("tiny interrupted")
    assert panel.visible_names() == ["crashed"]
    panel.filterEdit.clear()
    assert len(panel.visible_names()) == 3

    panel.table.sortByColumn(5, Qt.SortOrder.AscendingOrder)  # steps: the run stopped at 10 first
    assert panel.visible_names()[0] == "bf16-run"
    panel.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
    assert panel.visible_names() == ["fp32-run", "crashed", "bf16-run"]

    panel.select_names("bf16-run")
    assert panel.loadButton.isEnabled() and panel.resumeButton.isEnabled()
    panel.loadButton.click()
    config = window.setupPanel.config()
    assert config.precision == "bf16"
    assert config.max_steps == 40
    assert Path(config.out_dir) == runs_root / "bf16-run"
    panel.revealButton.click()  # harmless offscreen

    panel.select_names("crashed")
    assert not panel.resumeButton.isEnabled()  # no checkpoint of its own


@pytest.mark.timeout(180)
def test_a_cli_run_finished_while_open_appears_after_refresh(qtbot, window, runs_root):
    panel = open_history(qtbot, window)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "core.cli", "train", "--task", "tiny", "--max-steps", "4",
                           "--device", "cpu", "--threads", "1", "--out", str(runs_root / "from-cli")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    panel.refreshButton.click()
    qtbot.waitUntil(lambda: "from-cli" in panel.visible_names(), timeout=30_000)
    assert status_of(panel, "from-cli") == "completed"


@pytest.mark.timeout(120)
def test_overlay_of_two_runs_draws_two_curves_with_legend_entries(qtbot, window, runs_root):
    panel = open_history(qtbot, window)
    panel.select_names("fp32-run", "bf16-run")
    panel.overlayButton.click()
    plots = window.plotsPanel
    qtbot.waitUntil(lambda: len(plots.overlay_labels("loss")) == 2, timeout=30_000)
    assert sorted(plots.overlay_labels("loss")) == ["bf16-run · bf16", "fp32-run · fp32"]
    assert len(plots.overlay_labels("eval")) == 2
    assert plots.note("loss") == "" and plots.note("eval") == ""  # not "No run yet" under other runs' curves
    legend = plots._legends["loss"]
    labels = [label.text for _sample, label in legend.items]
    assert "fp32-run · fp32" in labels and "bf16-run · bf16" in labels
    curves = [c for p, c, _l in plots._overlays if p == "loss"]
    xs = sorted(tuple(c.xData.tolist()) for c in curves)
    assert xs == [tuple(range(2, 11, 2)), tuple(range(2, 21, 2))]  # the bf16 run stopped at step 10
    colours = {c.opts["pen"].color().name() for c in curves}
    assert len(colours) == 2
    if os.environ.get("AMP_HISTORY_SCREENSHOTS"):
        window.resize(1400, 900)
        plots.redraw()
        qtbot.wait(50)
        window.grab().save(os.path.join(os.environ["AMP_HISTORY_SCREENSHOTS"], "overlay.png"))
        window.historyDialog.grab().save(os.path.join(os.environ["AMP_HISTORY_SCREENSHOTS"], "history.png"))

    panel.clearButton.click()
    assert plots.overlay_labels("loss") == [] and plots.overlay_labels("eval") == []
    assert all(label.text not in ("fp32-run · fp32", "bf16-run · bf16") for _s, label in legend.items)


@pytest.mark.timeout(120)
def test_resume_from_history_continues_the_run(qtbot, window, runs_root):
    panel = open_history(qtbot, window)
    panel.select_names("bf16-run")
    panel.resumeButton.click()
    qtbot.waitUntil(lambda: "resumed at step 10" in window.logPanel.toPlainText(), timeout=60_000)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=60_000)
    panel.refreshButton.click()
    qtbot.waitUntil(lambda: not panel.busy and status_of(panel, "bf16-run") == "completed", timeout=30_000)


@pytest.mark.timeout(120)
def test_delete_asks_and_refuses_a_running_run(qtbot, window, runs_root):
    panel = open_history(qtbot, window)
    asked = []
    panel._confirm = lambda text: asked.append(text) or True
    panel.select_names("crashed")
    panel.deleteButton.click()
    qtbot.waitUntil(lambda: "crashed" not in panel.visible_names(), timeout=30_000)
    assert asked and "crashed" in asked[0]
    assert not (runs_root / "crashed").exists()

    from app.panels.history import delete_run
    from core.engine.run_folder import claim_run_folder

    claim = claim_run_folder(runs_root / "bf16-run", resume_from=runs_root / "bf16-run" / "checkpoint.pt")
    try:  # a live run holds the folder (its run.json may not say so yet): never deleted
        panel.select_names("bf16-run")
        assert not panel.deleteButton.isEnabled()
        panel.delete()
        assert "stop it first" in panel.statusLabel.text()
        with pytest.raises(RuntimeError, match="stop it first"):
            delete_run(str(runs_root / "bf16-run"))
        assert (runs_root / "bf16-run" / "checkpoint.pt").exists()
    finally:
        claim.release()
