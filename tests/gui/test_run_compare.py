"""The history's Compare: two or more selected runs side by side (app.panels.run_compare), with the rows where
they differ highlighted (background, bold, a '≠' before the row's name) and the same rows as `runs compare`."""

from __future__ import annotations

import json
import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QDialog
from test_run_history import fake_history

from app.panels.run_compare import DIFFERS_BRUSH, DIFFERS_MARK, DIFFERS_ROLE
from core.cli.main import main


def highlighted(view, label: str) -> bool:
    cells = [view.cell(label, c) for c in range(view.table.columnCount())]
    marks = {(c.background() == DIFFERS_BRUSH, c.font().bold(), bool(c.data(DIFFERS_ROLE))) for c in cells}
    assert len(marks) == 1 and marks <= {(True, True, True), (False, False, False)}, (label, marks)
    return marks == {(True, True, True)}


@pytest.mark.timeout(60)
def test_compare_highlights_precision_and_the_differing_config_only(qtbot, tmp_path, capsys):
    root = tmp_path / "runs"
    panel = fake_history(qtbot, root)
    main(["runs", "note", "bbbb", "bf16 try", "--runs-dir", str(root)])
    panel.refresh()
    qtbot.waitUntil(lambda: not panel.busy and any(r["note"] for r in panel.model.runs), timeout=30_000)
    panel.select_names("fp32-run")
    assert not panel.compareButton.isEnabled()
    panel.select_names("fp32-run", "bf16-run")
    assert panel.compareButton.isEnabled() and panel.compareView.isHidden()
    panel.compareButton.click()
    view = panel.compareView
    assert view.isVisible()
    names = [view.table.horizontalHeaderItem(c).text().split("\n")[0] for c in range(view.table.columnCount())]
    assert names == ["bf16-run", "fp32-run"]  # the table's order: newest first
    assert view.labels()[:7] == ["task", "precision", "device", "samples/s", "peak memory", "best", "final loss"]
    assert view.labels()[-2:] == ["note", "config lr"]  # no "config precision": the precision row shows it
    assert view.differing_labels() == ["precision", "note", "config lr"]
    assert view.cell("precision", 0).text() == "bf16 (autocast bfloat16)"
    assert view.cell("precision", 1).text() == "fp32 (autocast float32)"
    assert view.cell("note", 0).text() == "bf16 try" and view.cell("note", 1).text() == "-"
    assert view.cell("config lr", 0).text() == "0.02" and view.cell("config lr", 1).text() == "0.01"
    for label in ("precision", "note", "config lr"):
        assert highlighted(view, label)
        assert view.row_label_text(label) == DIFFERS_MARK + label
    for label in ("task", "device", "samples/s", "best", "final loss", "val accuracy", "wall time", "steps", "status"):
        assert not highlighted(view, label)
        assert view.row_label_text(label) == label
    assert "config task" not in view.labels() and "config out_dir" not in view.labels()
    assert (
        view.table.verticalHeaderItem(view.labels().index("precision")).data(Qt.ItemDataRole.AccessibleTextRole)
        == "precision, differs"
    )

    # The very rows the CLI prints: compare_rows is shared
    capsys.readouterr()
    assert main(["runs", "compare", "bbbb", "aaaa", "--json", "--runs-dir", str(root)]) == 0
    cli_rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["label"], tuple(r["values"]), r["differs"]) for r in cli_rows] == [
        (r.label, r.values, r.differs) for r in view.rows
    ]

    view.copyButton.click()
    lines = QGuiApplication.clipboard().text().splitlines()
    assert lines[0] == "\tbf16-run\tfp32-run\tdiffers"
    assert "precision\tbf16 (autocast bfloat16)\tfp32 (autocast float32)\tyes" in lines
    assert "task\ttiny\ttiny\t" in lines
    view.closeButton.click()
    assert view.isHidden()


@pytest.mark.timeout(60)
def test_screenshot_of_the_history_dialog_with_the_comparison(qtbot, tmp_path):
    """The dialog as File -> Run history builds it (1100 x 480), after Compare: it grows to fit both."""
    root = tmp_path / "runs"
    dialog = QDialog(objectName="historyDialog")
    dialog.setWindowTitle("Run history")
    dialog.resize(1100, 480)
    qtbot.addWidget(dialog)
    panel = fake_history(qtbot, root, dialog=dialog)
    qtbot.waitExposed(dialog)
    main(["runs", "note", "aaaa", "fp32 baseline for the bf16 comparison", "--runs-dir", str(root)])
    panel.refresh()
    qtbot.waitUntil(lambda: not panel.busy and any(r["note"] for r in panel.model.runs), timeout=30_000)
    panel.select_names("fp32-run", "bf16-run")
    panel.compareButton.click()
    qtbot.waitUntil(lambda: dialog.height() >= 700, timeout=5_000)
    view = panel.compareView
    qtbot.waitUntil(lambda: not view.table.verticalScrollBar().isVisible(), timeout=5_000)  # 14 rows fit
    assert view.height() > 200 and panel.table.height() > 80
    for column in range(view.table.columnCount()):  # the run names fit their column
        header = view.table.horizontalHeader()
        width = header.fontMetrics().horizontalAdvance(view.table.horizontalHeaderItem(column).text().split("\n")[0])
        assert header.sectionSize(column) >= width
    bold = QFont(view.table.font())
    bold.setBold(True)
    assert view.cell("precision", 0).font().bold() == bold.bold()
    dialog.grab().save(os.environ.get("AMP_HISTORY_COMPARE_SCREENSHOT", "/tmp/history_compare.png"))
