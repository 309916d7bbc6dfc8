"""File -> Run history: the runs under the runs folder, made by the real trainer and CLI, in a table that
filters, loads a run's settings into the form, overlays runs' curves on the plots, resumes and deletes; and,
over fake run folders, the note on a run (CLI or panel, kept across rescans and run.json rewrites) and resume
or export from the best or the last checkpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gui_helpers import find
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout

from core.engine.control import RunControl
from core.engine.events import StepMetrics
from core.engine.run_record import RECORD_FILE
from core.engine.trainer import train


@pytest.fixture
def runs_root(tmp_path, tiny_config, monkeypatch):
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

    second = train(
        tiny_config(out_dir=str(root / "bf16-run"), precision="bf16", max_steps=40, **options),
        sink=stop_at_10,
        control=control,
    )
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
    row = next(r for r in range(panel.model.rowCount()) if panel.model.index(r, 0).data() == "fp32-run")
    cells = [panel.model.index(row, c).data() for c in range(panel.model.columnCount())]
    assert cells[1:6] == ["tiny", "completed", "fp32", "cpu", "20/20"]
    best = next(r["best"] for r in panel.model.runs if r["name"] == "fp32-run")
    assert cells[6] == f"{best['name']} {best['value']:.4g}"

    panel.filterEdit.setText("bf16")
    assert panel.visible_names() == ["bf16-run"]
    panel.filterEdit.setText("tiny interrupted")
    assert panel.visible_names() == ["crashed"]
    started = next(r["start_time"] for r in panel.model.runs if r["name"] == "fp32-run")[:10]  # YYYY-MM-DD
    panel.filterEdit.setText(f"{started} fp32")
    assert sorted(panel.visible_names()) == ["crashed", "fp32-run"]  # the crashed record copies fp32-run's
    panel.filterEdit.setText("1999-01-01")
    assert panel.visible_names() == []
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
def test_a_cli_run_finished_while_open_appears_after_refresh(qtbot, window, runs_root, capsys):
    """`amp-console train` (its main, in this process: the folder it leaves is what the history reads)."""
    from core.cli.main import main

    panel = open_history(qtbot, window)
    code = main(
        [
            "train",
            "--task",
            "tiny",
            "--max-steps",
            "4",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--out",
            str(runs_root / "from-cli"),
        ]
    )
    assert code == 0, capsys.readouterr().err
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
    assert sorted(plots.overlay_labels("loss")) == ["bf16-run", "fp32-run"]
    assert len(plots.overlay_labels("eval")) == 2
    assert plots.note("loss") == "" and plots.note("eval") == ""  # not "No run yet" under other runs' curves
    legend = plots._legends["loss"]
    labels = [label.text for _sample, label in legend.items]
    assert "fp32-run" in labels and "bf16-run" in labels
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
    assert all(label.text not in ("fp32-run", "bf16-run") for _s, label in legend.items)


@pytest.mark.timeout(120)
def test_resume_from_history_continues_the_run(qtbot, window, runs_root):
    find(window, "separateProcessCheck").setChecked(False)  # resumes on a thread: not a process-boundary test
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

    from core.engine.run_delete import RunDeleteError, delete_run
    from core.engine.run_folder import claim_run_folder

    claim = claim_run_folder(runs_root / "bf16-run", resume_from=runs_root / "bf16-run" / "checkpoint.pt")
    try:  # a live run holds the folder (its run.json may not say so yet): never deleted
        panel.select_names("bf16-run")
        assert not panel.deleteButton.isEnabled()
        panel.delete()
        assert "stop it first" in panel.statusLabel.text()
        with pytest.raises(RunDeleteError, match="stop it first"):
            delete_run(runs_root, str(runs_root / "bf16-run"))
        assert (runs_root / "bf16-run" / "checkpoint.pt").exists()
    finally:
        claim.release()


# ---------------------------------------------------------------------- notes, resume best/last, export
# The panel on its own over fake run folders (tests/test_runs_cli.fake_run): no training, no window.


def fake_history(qtbot, root: Path, *, best_step: int | None = 60, dialog=None, advised_last: str = ""):
    """A HistoryPanel over runs/fp32-run and runs/bf16-run (fake_run records with a checkpoint.pt and, with
    best_step, a best.pt at that step; the run named `advised_last`'s summary advised its last weights), shown
    and scanned; in `dialog` (a QDialog qtbot owns) when given."""
    from app.panels.history import HistoryPanel
    from tests.test_runs_cli import fake_run

    for name, run_id, precision, lr, start in (
        ("fp32-run", "aaaa000001", "fp32", 0.01, "2026-01-01T10:00:00+00:00"),
        ("bf16-run", "bbbb000002", "bf16", 0.02, "2026-01-02T10:00:00+00:00"),
    ):
        folder = fake_run(root, name, run_id, precision=precision, lr=lr, start=start)
        (folder / "checkpoint.pt").write_bytes(b"last")
        if best_step is not None:
            (folder / "best.pt").write_bytes(b"best")
            record = json.loads((folder / RECORD_FILE).read_text())
            record["best"]["step"] = best_step
            record["checkpoints"]["best"] = {"path": str(folder / "best.pt"), "step": best_step}
            if name == advised_last:  # its validation split was too small to choose the best by
                record["best"]["use"] = "checkpoint.pt"
            (folder / RECORD_FILE).write_text(json.dumps(record))
    panel = HistoryPanel(lambda: root, dialog)
    if dialog is None:
        qtbot.addWidget(panel)
        panel.resize(1100, 560)
        panel.show()
    else:
        QVBoxLayout(dialog).addWidget(panel)
        dialog.show()
    qtbot.waitUntil(lambda: not panel.busy and panel.model.rowCount() == 2, timeout=30_000)
    return panel


def note_cell(panel, name: str) -> str:
    from app.panels.run_rows import NOTE_COLUMN

    row = next(r for r in range(panel.model.rowCount()) if panel.model.index(r, 0).data() == name)
    return panel.model.index(row, NOTE_COLUMN).data()


def rescan(qtbot, panel) -> None:
    """One full scan that starts now (a scan already running is let finish first)."""
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    with qtbot.waitSignal(panel.scanned, timeout=30_000):
        panel.refresh()
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)


@pytest.mark.timeout(60)
def test_a_note_set_with_the_cli_shows_in_the_table_and_the_filter(qtbot, tmp_path, capsys):
    from core.cli.main import main

    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)
    assert panel.model.headerData(9, Qt.Orientation.Horizontal) == "note" and note_cell(panel, "fp32-run") == ""
    assert main(["runs", "note", "aaaa", "baseline before the\nwarmup change", "--runs-dir", str(root)]) == 0
    rescan(qtbot, panel)
    assert note_cell(panel, "fp32-run") == "baseline before the warmup change"  # one line in the table
    panel.filterEdit.setText("warmup")
    assert panel.visible_names() == ["fp32-run"]
    panel.filterEdit.setText("warmup bf16")
    assert panel.visible_names() == []
    panel.filterEdit.clear()
    panel.select_names("fp32-run")
    assert panel.noteEdit.isEnabled() and panel.noteEdit.toPlainText() == "baseline before the\nwarmup change"
    assert not panel.noteSaveButton.isEnabled()  # nothing edited yet
    panel.select_names("fp32-run", "bf16-run")
    assert not panel.noteEdit.isEnabled() and panel.noteEdit.toPlainText() == ""


@pytest.mark.timeout(60)
def test_a_note_edited_in_the_panel_is_on_disk_and_survives_rescans_and_run_json_rewrites(qtbot, tmp_path):
    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)
    panel.select_names("bf16-run")
    panel.noteEdit.setPlainText("loss spikes at step 40")
    assert panel.note_edited and panel.noteSaveButton.isEnabled()
    panel.noteSaveButton.click()
    assert note_cell(panel, "bf16-run") == "loss spikes at step 40"  # at once, before the write is done
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert (root / "bf16-run" / "note.txt").read_text() == "loss spikes at step 40\n"
    assert "Saved the note of bf16-run" in panel.statusLabel.text() and not panel.noteSaveButton.isEnabled()

    # The engine rewrites run.json (a resumed run: more steps) while the user types a new note: the rescan
    # shows the new steps, keeps the saved note in the table and the unsaved text in the editor.
    panel.noteEdit.setPlainText("loss spikes at step 40; fixed by clipping")
    record = json.loads((root / "bf16-run" / RECORD_FILE).read_text())
    record.update(steps=150, total_steps=200, status="completed")
    (root / "bf16-run" / RECORD_FILE).write_text(json.dumps(record))
    rescan(qtbot, panel)
    run = next(r for r in panel.model.runs if r["name"] == "bf16-run")
    assert run["steps"] == 150 and run["note"] == "loss spikes at step 40"
    assert [r["name"] for r in panel.selected_runs()] == ["bf16-run"]
    assert panel.noteEdit.toPlainText() == "loss spikes at step 40; fixed by clipping" and panel.note_edited
    panel.save_note()
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    rescan(qtbot, panel)
    assert (root / "bf16-run" / "note.txt").read_text() == "loss spikes at step 40; fixed by clipping\n"
    assert note_cell(panel, "bf16-run") == "loss spikes at step 40; fixed by clipping"

    panel.noteEdit.setPlainText("   ")  # an empty note removes note.txt
    panel.save_note()
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert not (root / "bf16-run" / "note.txt").exists() and note_cell(panel, "bf16-run") == ""
    assert "Removed the note of bf16-run" in panel.statusLabel.text()


def test_an_unsaved_note_is_saved_when_the_selection_moves_to_another_run(qtbot, tmp_path):
    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)
    panel.select_names("bf16-run")
    panel.noteEdit.setPlainText("typed, never saved by hand")
    panel.select_names("fp32-run")  # the user clicks another run
    assert panel.noteEdit.toPlainText() == "" and not panel.note_edited  # the other run's (empty) note
    assert note_cell(panel, "bf16-run") == "typed, never saved by hand"
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert (root / "bf16-run" / "note.txt").read_text() == "typed, never saved by hand\n"
    assert "Saved the note of bf16-run" in panel.statusLabel.text()
    assert not (root / "fp32-run" / "note.txt").exists()


@pytest.mark.timeout(60)
def test_a_note_that_cannot_be_written_is_one_status_line_and_stays_in_the_editor(qtbot, tmp_path, monkeypatch):
    import app.panels.run_note as run_note

    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)

    def refuse(folder, text):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(run_note, "write_note", refuse)
    panel.select_names("fp32-run")
    panel.noteEdit.setPlainText("will not fit")
    panel.save_note()
    qtbot.waitUntil(lambda: "Could not save the note of fp32-run" in panel.statusLabel.text(), timeout=30_000)
    assert "Permission denied" in panel.statusLabel.text() and "\n" not in panel.statusLabel.text()
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert note_cell(panel, "fp32-run") == "" and not (root / "fp32-run" / "note.txt").exists()
    assert panel.noteEdit.toPlainText() == "will not fit" and panel.noteSaveButton.isEnabled()  # to try again


@pytest.mark.timeout(60)
def test_resume_and_export_from_the_best_or_the_last_checkpoint(qtbot, tmp_path):
    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)
    panel.select_names("bf16-run")
    assert panel.resumeButton.isEnabled() and panel.exportButton.isEnabled()
    assert panel.resumeButton.menu() is panel.resumeMenu  # a choice: the arrow offers it
    assert panel.resumeMenu.actions()[0].text() == "From the last checkpoint (step 100)"
    assert panel.resumeMenu.actions()[1].text() == "From the best checkpoint (step 60, accuracy 0.8)"
    folder = root / "bf16-run"
    with qtbot.waitSignal(panel.resumeRequested, timeout=5_000) as resumed:
        panel.resumeButton.click()  # the button itself: the last checkpoint, as before
    assert resumed.args == [str(folder / "checkpoint.pt")]
    with qtbot.waitSignal(panel.resumeRequested, timeout=5_000) as resumed:
        panel.resumeMenu.actions()[1].trigger()
    assert resumed.args == [str(folder / "best.pt")]
    with qtbot.waitSignal(panel.resumeRequested, timeout=5_000) as resumed:
        panel.resumeMenu.actions()[0].trigger()
    assert resumed.args == [str(folder / "checkpoint.pt")]

    with qtbot.waitSignal(panel.exportRequested, timeout=5_000) as exported:
        panel.exportButton.click()  # export: the best model by default
    assert exported.args == [str(folder / "best.pt")]
    with qtbot.waitSignal(panel.exportRequested, timeout=5_000) as exported:
        panel.exportMenu.actions()[1].trigger()
    assert exported.args == [str(folder / "checkpoint.pt")]

    (folder / "best.pt").unlink()  # gone from disk: no choice, the last checkpoint for both
    panel.select_names("fp32-run")
    panel.select_names("bf16-run")
    assert panel.resumeButton.menu() is None and not panel.resumeMenu.actions()[1].isEnabled()
    with qtbot.waitSignal(panel.exportRequested, timeout=5_000) as exported:
        panel.exportButton.click()
    assert exported.args == [str(folder / "checkpoint.pt")]
    panel.select_names("fp32-run", "bf16-run")
    assert not panel.resumeButton.isEnabled() and not panel.exportButton.isEnabled()


@pytest.mark.timeout(60)
def test_export_takes_the_last_weights_where_the_runs_summary_advised_them(qtbot, tmp_path):
    root = tmp_path / "runs"
    folder = root / "bf16-run"
    panel = fake_history(qtbot, root, advised_last="bf16-run")
    panel.select_names("bf16-run")
    with qtbot.waitSignal(panel.exportRequested, timeout=5_000) as exported:
        panel.exportButton.click()  # as `amp-console export` and the preview: the advised checkpoint
    assert exported.args == [str(folder / "checkpoint.pt")]
    with qtbot.waitSignal(panel.exportRequested, timeout=5_000) as exported:
        panel.exportMenu.actions()[0].trigger()  # the best, asked for
    assert exported.args == [str(folder / "best.pt")]
    panel.select_names("fp32-run")  # advised nothing: the best
    with qtbot.waitSignal(panel.exportRequested, timeout=5_000) as exported:
        panel.exportButton.click()
    assert exported.args == [str(root / "fp32-run" / "best.pt")]


@pytest.mark.timeout(60)
def test_a_scan_that_read_the_folder_before_the_note_was_written_does_not_undo_it(qtbot, tmp_path, monkeypatch):
    import threading

    import app.panels.run_note as run_note
    from core.engine.run_record import write_note

    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)
    release = threading.Event()

    def slow_write(folder, text):  # the disk is slow: the write lands after a whole scan
        assert release.wait(20)
        return write_note(folder, text)

    monkeypatch.setattr(run_note, "write_note", slow_write)
    panel.select_names("fp32-run")
    panel.noteEdit.setFocus()
    panel.noteEdit.setPlainText("slow disk")
    qtbot.keyClick(panel.noteEdit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # Ctrl+Return saves
    assert panel._saved_notes and not panel.note_edited
    with qtbot.waitSignal(panel.scanned, timeout=30_000):
        panel.refresh()  # reads note.txt before it exists
    assert note_cell(panel, "fp32-run") == "slow disk" and panel.noteEdit.toPlainText() == "slow disk"
    release.set()
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert (root / "fp32-run" / "note.txt").read_text() == "slow disk\n"
    rescan(qtbot, panel)
    assert note_cell(panel, "fp32-run") == "slow disk" and not panel._saved_notes


def test_overlay_labels_are_short_enough_for_a_legend_row():
    from app.panels.run_rows import overlay_label

    assert overlay_label({"name": "20261201-023712-recommender-bf16", "precision": "bf16"}) == "recommender-bf16 02:37"
    assert (
        overlay_label({"name": "sweep/20261201-023712-tiny-auto", "precision": "fp32"})
        == "sweep/tiny-auto 02:37 · fp32"
    )  # auto resolved to fp32: said
    assert overlay_label({"name": "baseline", "precision": "fp16"}) == "baseline · fp16"


@pytest.mark.timeout(120)
def test_evaluate_a_stopped_run_from_the_history(qtbot, window, runs_root):
    """bf16-run was stopped at step 10: Evaluate measures its best checkpoint (tiny has no test split: on val).
    The result shows beside the run in the history (not only in the window's log), Evaluate is on again as
    soon as it is in, and the Model preview's Evaluation tab, open on that run, shows the same report."""
    panel = open_history(qtbot, window)
    preview = window.show_preview(str(runs_root / "bf16-run"))
    tab = preview.evaluation
    qtbot.waitUntil(lambda: "No evaluation report" in tab.infoLabel.text(), timeout=30_000)
    window.historyDialog.raise_()
    panel.select_names("bf16-run")
    assert panel.evaluateButton.isEnabled() and panel.evaluationLine.isHidden()
    with qtbot.waitSignal(panel.evaluated, timeout=60_000) as caught:
        panel.evaluateButton.click()
        assert not panel.evaluateButton.isEnabled() and "Evaluating best.pt" in panel.evaluationLine.text()
    result = caught.args[0]
    assert result["split"] == "val" and result["checkpoint"].endswith("best.pt") and result["step"] <= 10
    assert panel.evaluateButton.isEnabled()  # at once, not after the next click elsewhere
    line = panel.evaluationLine
    assert not line.isHidden() and "best.pt" in line.text() and "val split" in line.text()
    assert f"accuracy {result['metrics']['accuracy']:.4f}" in line.text()
    assert "val split" in panel.statusLabel.text() and "accuracy" in panel.statusLabel.text()
    assert "Evaluated" in window.logPanel.toPlainText() and "on the val split" in window.logPanel.toPlainText()
    panel.select_names("fp32-run")  # the line belongs to the run it measured
    assert line.isHidden() and panel.evaluateButton.isEnabled()
    panel.select_names("bf16-run")
    assert not line.isHidden() and "best.pt" in line.text()

    qtbot.waitUntil(lambda: tab.report is not None, timeout=30_000)
    assert tab.report["metrics"] == result["metrics"] and "best.pt" in tab.infoLabel.text()
