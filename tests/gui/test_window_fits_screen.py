"""The window and the run history fit the screen: at the window's minimum size every plot is whole (the right
column too), and the history grown for a comparison stays on its screen (a 1000-pixel one included)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QScrollArea

SHOTS = os.environ.get("AMP_FIT_SHOTS", "")  # a folder: save the screenshots there


def shot(widget, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(SHOTS) / f"{name}.png"))


@pytest.mark.timeout(60)
def test_at_the_minimum_size_every_plot_is_whole(qtbot, window):
    window.resize(1, 1)  # held at the window's minimum size
    qtbot.waitUntil(lambda: window.size() == window.minimumSizeHint(), timeout=5_000)
    panel = window.plotsPanel
    qtbot.waitUntil(lambda: panel.width() >= panel.minimumSizeHint().width(), timeout=5_000)
    assert panel.height() >= panel.minimumSizeHint().height()
    shown = QRect(panel.mapTo(window, panel.rect().topLeft()), panel.size()) & window.rect()
    for key, plot in panel.plots.items():
        assert plot.width() >= plot.minimumWidth() and plot.height() >= plot.minimumHeight(), key
        where = QRect(plot.mapTo(window, plot.rect().topLeft()), plot.size())
        assert shown.contains(where), (key, where, shown)  # the right column too: nothing cut at the edge
    for key, plot in panel.plots.items():  # each title on one line inside its plot, the whole one in the tooltip
        item = plot.getPlotItem()
        column = plot.width() - item.getAxis("left").width()  # the title's column: right of the left axis
        assert item.titleLabel.item.boundingRect().width() <= column + 0.5, (key, item.titleLabel.text)
        shown, whole = item.titleLabel.text, panel.title(key)
        assert shown == whole or (shown.endswith("…") and plot.toolTip() == whole), (key, shown, whole)
    scroll = window.findChild(QScrollArea, "setupScroll")  # the left column: its form is not cut either
    assert scroll.viewport().width() >= scroll.widget().minimumSizeHint().width()
    assert scroll.widget().width() <= scroll.viewport().width()
    shot(window, "window-minimum")


@pytest.mark.timeout(60)
def test_the_history_grown_for_a_comparison_stays_on_its_screen(qtbot, window, tmp_path, monkeypatch):
    from tests.test_runs_cli import fake_run

    root = tmp_path / "runs"
    for name, run_id, precision in (("fp32-run", "aaaa000001", "fp32"), ("bf16-run", "bbbb000002", "bf16")):
        (fake_run(root, name, run_id, precision=precision) / "checkpoint.pt").write_bytes(b"last")
    monkeypatch.setenv("AMP_CONSOLE_RUNS_DIR", str(root))
    window.historyAction.trigger()
    dialog, panel = window.historyDialog, window.historyDialog.panel
    qtbot.waitUntil(lambda: not panel.busy and panel.model.rowCount() == 2, timeout=30_000)
    area = dialog.screen().availableGeometry()
    dialog.move(area.left() + 20, area.bottom() - dialog.frameGeometry().height() - 20)  # low on the screen
    qtbot.waitUntil(lambda: dialog.frameGeometry().bottom() > area.bottom() - 40, timeout=5_000)
    panel.select_names("fp32-run", "bf16-run")
    panel.compareButton.click()
    qtbot.waitUntil(lambda: dialog.height() >= min(760, area.height() - 40), timeout=5_000)
    frame = dialog.frameGeometry()  # top to bottom on the screen (the test screen is narrower than the dialog)
    assert area.top() <= frame.top() and frame.bottom() <= area.bottom(), (frame, area)
    assert dialog.minimumSizeHint().height() <= 1000 - 100  # a 1000-pixel screen, its panel and the title bar
    assert panel.compareView.height() > 200 and panel.table.height() > 60
    shot(dialog, "history-compare")
