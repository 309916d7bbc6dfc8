"""The Model preview loads the checkpoint a run's summary advised by default (its last weights when its validation
split was too small to choose the best by, the status line saying why; best.pt otherwise); Best still wins."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_advised_checkpoint import ADVISED_LAST, train_ranking


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("advised-preview")
    train_ranking(root / "small", queries=200)
    train_ranking(root / "normal", queries=600)
    return root


def loaded(qtbot, view, folder: Path, name: str):
    qtbot.waitUntil(
        lambda: view.predictor is not None and Path(str(view.predictor.checkpoint)) == folder / name, timeout=30_000
    )
    return view.predictor


def test_the_preview_loads_the_advised_checkpoint_and_says_why(qtbot, runs):
    from app.panels.preview import PreviewDialog

    view = PreviewDialog(lambda: runs)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    try:
        assert view.whichCombo.currentData() == "advised"
        view.select_run(str(runs / "small"))
        loaded(qtbot, view, runs / "small", "checkpoint.pt")
        assert ADVISED_LAST in view.statusLabel.text() and "too small" in view.statusLabel.text()

        view.whichCombo.setCurrentIndex(view.whichCombo.findData("best"))  # asked for: the best, no note
        view.load()
        loaded(qtbot, view, runs / "small", "best.pt")
        assert ADVISED_LAST not in view.statusLabel.text()

        view.whichCombo.setCurrentIndex(view.whichCombo.findData("advised"))
        view.select_run(str(runs / "normal"))
        loaded(qtbot, view, runs / "normal", "best.pt")
        assert ADVISED_LAST not in view.statusLabel.text()
    finally:
        view.shutdown()
