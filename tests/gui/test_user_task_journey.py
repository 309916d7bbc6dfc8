"""A user's task from start to finish in the window: `amp-console tasks new` writes the task file, File → Add
task… adds it, it trains in bf16 with its loss drawn live, the LR finder's suggestion goes into the form, a
second run is compared with the first in the run history, a third is stopped mid-run and resumed from its
checkpoint, and its model answers in the Model preview and is exported as a verified serving folder.

The pieces have tests of their own (test_add_task, test_tuning_lr_finder, test_run_compare, test_run_history,
test_preview_user_task, test_export_menu); this one walks them in one window on one task file, as a user does.
AMP_JOURNEY_SHOTS=<folder> saves a screenshot of each stage there."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import click, find, finish_run, loss_points, set_field
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QToolButton
from task_registry import task_files_run_here
from test_add_task import add_task

from app.file_actions import SERVING_FILTERS
from core.cli.main import main
from core.engine.checkpoints import load_checkpoint

SHOTS = os.environ.get("AMP_JOURNEY_SHOTS", "")
PROGRAM = next(text for text, fmt in SERVING_FILTERS.items() if fmt == "program")


@pytest.fixture
def dialogs(monkeypatch):
    """The window's dialogs answered as a user would: the open dialog gives `path`, the save dialog `save` with
    the file type `kind`, a list (which checkpoint to export) the entry starting with `pick`, and the question
    about running the task file's code Yes."""

    class Answers:
        path = ""
        save = ""
        kind = ""
        pick = "Last"
        asked: list = []
        offered: list = []

    answers = Answers()
    answers.asked, answers.offered = [], []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(answers.path), ""))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(answers.save), answers.kind))
    yes = QMessageBox.StandardButton.Yes
    monkeypatch.setattr(QMessageBox, "question", lambda _p, _t, text, *a, **k: answers.asked.append(text) or yes)

    def get_item(_parent, _title, _label, items, *args, **kwargs):
        answers.offered.append(list(items))
        return next(item for item in items if item.startswith(answers.pick)), True

    monkeypatch.setattr(QInputDialog, "getItem", get_item)
    return answers


def shot(widget, name: str) -> None:
    if SHOTS:
        plots = getattr(widget, "plotsPanel", None)
        if plots is not None:
            plots.redraw()  # what the next frame of the plots' timer draws: the last events too
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(SHOTS) / f"{name}.png"))


def status(window) -> str:
    return window.statusBarWidget.message.text()


def small_run(window, out_dir: Path, *, max_steps: int, samples: int = 512) -> None:
    """The task file's form, sized to train in about a second on a thread of the window's process."""
    find(window, "separateProcessCheck").setChecked(False)
    set_field(window, "precisionCombo", "bf16")
    set_field(window, "samplesOptionEdit", samples)
    set_field(window, "hiddenOptionEdit", 32)
    set_field(window, "batchSizeEdit", 32)
    set_field(window, "epochsEdit", 1000)
    set_field(window, "maxStepsEdit", max_steps)
    set_field(window, "minStepsEdit", 0)
    set_field(window, "logIntervalEdit", 2)
    set_field(window, "evalIntervalEdit", 10)
    set_field(window, "outDirEdit", str(out_dir))


def open_history(qtbot, window, *names: str):
    """File → Run history, once its scan lists `names`."""
    window.historyAction.trigger()
    panel = window.historyDialog.panel
    panel.refresh()
    qtbot.waitUntil(lambda: not panel.busy and set(names) <= set(panel.visible_names()), timeout=30_000)
    return panel


def record(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


def serve_module(folder: Path):
    spec = importlib.util.spec_from_file_location(f"serve_journey_{folder.name}", folder / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # adding the task imports it in a child process
@pytest.mark.timeout(240)
def test_a_task_file_from_the_template_goes_the_whole_way_in_the_window(
    qtbot, window, tmp_path, dialogs, capsys, monkeypatch
):
    root = tmp_path / "runs"
    monkeypatch.setenv("AMP_CONSOLE_RUNS_DIR", str(root))
    window.resize(1400, 900)

    # The task file, written as `amp-console tasks new my_points --out FOLDER` writes it; File → Add task….
    assert main(["tasks", "new", "my_points", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    path = tmp_path / "my_points.py"
    add_task(qtbot, window, dialogs, path)
    assert len(dialogs.asked) == 1 and f"{path.resolve()}:MyPointsTask" in dialogs.asked[0]
    combo = window.setupPanel.taskCombo
    assert combo.currentData() == "my_points" and combo.currentText() == "my_points (my_points.py)"
    assert find(window, "lrEdit").value() == pytest.approx(3e-3)  # the task's defaults

    # 1. bf16, its loss on the plot (drawn while it trains: step 4 waits for points mid-run).
    small_run(window, root / "first", max_steps=40)
    finish_run(qtbot, window)
    assert window.statusBarWidget.message.property("role") == "status-ok", status(window)
    assert loss_points(window) == 20  # every log_interval (2) of 40 steps
    first = record(root / "first")
    assert first["task"] == "my_points" and first["status"] == "completed"
    assert first["config"]["precision"] == "bf16" and first["config"]["task_file"] == f"{path.resolve()}:MyPointsTask"
    shot(window, "1_trained_bf16")

    # 2. The LR finder beside the learning rate, on the form's task; its suggestion goes into the form.
    qtbot.mouseClick(find(window, "lrFindButton", QToolButton), Qt.MouseButton.LeftButton)
    finder = window.tools.lrFinderDialog
    assert "my_points" in finder.setting.text()
    finder.startLrEdit.setValue(1e-5)
    find(finder, "lrStepsEdit").setValue(30)
    with qtbot.waitSignal(finder.job.runningChanged, timeout=90_000, check_params_cb=lambda running: not running):
        click(qtbot, finder, "lrFinderRunButton")
    result = finder.result
    assert result is not None, finder.statusLabel.text()
    assert result.task == "my_points" and len(result.lrs) >= 5 and result.suggestion.lr is not None
    shot(finder, "2_lr_finder")
    click(qtbot, finder, "lrUseButton")
    suggested = float(f"{result.suggestion.lr:.3g}")
    assert find(window, "lrEdit").number() == pytest.approx(suggested)
    finder.close()

    # 3. A second run at the suggested rate, compared with the first in the run history.
    set_field(window, "outDirEdit", str(root / "second"))
    finish_run(qtbot, window)
    assert window.statusBarWidget.message.property("role") == "status-ok", status(window)
    assert record(root / "second")["config"]["lr"] == pytest.approx(suggested)
    panel = open_history(qtbot, window, "first", "second")
    panel.select_names("first", "second")
    click(qtbot, panel, "historyCompareButton")
    view = panel.compareView
    assert view.isVisible()
    column = {view.table.horizontalHeaderItem(c).text().split("\n")[0]: c for c in range(view.table.columnCount())}
    assert sorted(column) == ["first", "second"]
    assert [view.cell("task", c).text() for c in range(2)] == ["my_points", "my_points"]
    assert [view.cell("precision", c).text() for c in range(2)] == ["bf16 (autocast bfloat16)"] * 2
    if suggested != pytest.approx(3e-3):  # the config rows shown are those that differ
        assert "config lr" in view.differing_labels()
        assert float(view.cell("config lr", column["second"]).text()) == pytest.approx(suggested)
        assert float(view.cell("config lr", column["first"]).text()) == pytest.approx(3e-3)
    shot(window.historyDialog, "3_compare")
    view.closeButton.click()
    window.historyDialog.close()

    # 4. A third run, stopped once its loss is on the plot, then resumed from its checkpoint (File → Resume).
    third = root / "third"
    small_run(window, third, max_steps=1_000_000, samples=4096)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 3, timeout=60_000)
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
    checkpoint = third / "checkpoint.pt"
    assert window.last_checkpoint == str(checkpoint) and record(third)["status"] == "stopped"
    stopped_at = load_checkpoint(checkpoint)["step"]
    assert stopped_at >= 6
    set_field(window, "maxStepsEdit", 10)  # the checkpoint's settings come back: not the form's
    dialogs.path = checkpoint
    window.file_actions.resume_action.trigger()
    qtbot.waitUntil(lambda: f"resumed at step {stopped_at}" in window.logPanel.toPlainText(), timeout=60_000)
    assert find(window, "maxStepsEdit").value() == 1_000_000 and combo.currentData() == "my_points"
    drawn = window.plotsPanel.series("loss_raw").x
    qtbot.waitUntil(lambda: max(window.plotsPanel.series("loss_raw").x) >= stopped_at + 6, timeout=60_000)
    assert min(drawn) < stopped_at  # the run's curve before the stop is drawn too
    shot(window, "4_resumed")
    with qtbot.waitSignal(window.controller.runningChanged, timeout=30_000):
        click(qtbot, window, "stopButton")
    resumed_to = load_checkpoint(checkpoint)["step"]
    assert resumed_to > stopped_at and record(third)["config"]["task"] == "my_points"

    # 5. The Model preview of the third run ("Try it…" in the history): a validation point and its classes.
    panel = open_history(qtbot, window, "third")
    panel.select_names("third")
    click(qtbot, panel, "historyPreviewButton")
    preview = window.previewDialog
    qtbot.waitUntil(lambda: preview.predictor is not None or "Nothing loaded" in preview.header.text(), timeout=60_000)
    assert preview.predictor is not None and preview.predictor.task == "my_points", preview.messageLabel.text()
    page = preview.pages["my_points"]
    assert preview.stack.currentWidget() is page
    qtbot.waitUntil(lambda: page.answer is not None, timeout=30_000)
    from core.runs.predict import load_predictor

    with task_files_run_here():  # the reference: the same checkpoint loaded here, as the CLI would
        reference = load_predictor(preview.predictor.checkpoint)
        assert page.values() == pytest.approx(reference.example_rows(1)[0].tolist(), abs=1e-4)  # Sample's first row
        expected = reference.predict_rows(np.asarray([page.values()], np.float32))[0]
    assert page.probabilities == pytest.approx(expected.tolist(), abs=1e-5) and sum(
        page.probabilities
    ) == pytest.approx(1.0, abs=1e-5)
    assert [label.text() for label in page.labels] == [f"{p:.3f}" for p in expected]  # a row per class: 4
    assert f"The model says class {int(expected.argmax())}." == page.output.infoLabel.text()
    shot(preview, "5_preview")
    preview.close()

    # 6. Export… in the history, its arrow's "The last checkpoint": a torch.export program, verified by reloading.
    destination = third / "export" / "model"
    dialogs.save, dialogs.kind, dialogs.pick = destination, PROGRAM, "Last"
    window.historyDialog.show()
    panel.select_names("third")
    assert find(panel, "historyExportButton", QToolButton).isEnabled()
    panel.exportMenu.actions()[1].trigger()
    qtbot.waitUntil(lambda: "max abs difference" in status(window) or "failed" in status(window), timeout=60_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=10_000)
    assert status(window).startswith(f"Exported my_points (step {resumed_to:,}) as program fp32"), status(window)
    shot(window, "6_exported")
    window.historyDialog.close()
    manifest = json.loads((destination / "manifest.json").read_text())
    assert manifest["task"] == "my_points" and manifest["step"] == resumed_to
    assert manifest["verification"]["max_abs_diff"] <= manifest["verification"]["tolerance"]
    assert manifest["serving"] == {"features": 16, "outputs": ["p0", "p1", "p2", "p3"], "probabilities": True}
    served = serve_module(destination).load(destination)  # the folder's own serve.py, no task file
    x = reference.example_rows(3)
    with task_files_run_here():
        last = load_predictor(third, which="last")  # what was exported
    assert last.step == resumed_to
    assert np.asarray(served.predict(x.tolist())) == pytest.approx(last.predict_rows(x), abs=1e-5)
