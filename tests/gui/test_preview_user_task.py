"""The Model preview of a task the window has no code for (tests/fixtures/user_tasks/regression_task.py, served by
core.tasks.feature_serving): its page is built from the kinds it declares, a field per number named as predict
reads them, filled from the run's validation rows, and the value shown is the Predictor's (in a child process)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from core.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = f"{ROOT / 'tests' / 'fixtures' / 'user_tasks' / 'regression_task.py'}:RegressionTask"
SHOTS = os.environ.get("AMP_PREVIEW_SHOTS", "")
pytestmark = pytest.mark.slow  # a task file's model is held by a child process (core.runs.predictor_child)


@pytest.fixture
def regression_run(tmp_path):
    assert (
        main(["train", "--task", REFERENCE, "--epochs", "1", "--max-steps", "40", "--runs-dir", str(tmp_path / "runs")])
        == 0
    )
    yield tmp_path / "runs"


def test_a_user_tasks_preview_shows_its_value(qtbot, regression_run):
    from PySide6.QtWidgets import QLabel

    from app.panels.preview import PreviewDialog
    from core.runs.predict import load_predictor

    view = PreviewDialog(lambda: regression_run)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    try:
        (folder,) = regression_run.iterdir()
        view.select_run(str(folder))
        qtbot.waitUntil(lambda: view.predictor is not None and view.predictor.task == "regression", timeout=60_000)
        page = view.pages["regression"]
        assert view.stack.currentWidget() is page
        names = [page.findChild(QLabel, f"previewRegressionLabel{i}").text() for i in range(8)]
        assert names == [f"x{i}" for i in range(1, 9)]
        reference = load_predictor(folder)
        first = reference.example_rows(1)[0]
        qtbot.waitUntil(lambda: page.answer is not None, timeout=30_000)
        assert page.values() == pytest.approx(first.tolist(), abs=1e-4)  # the first validation row
        expected = reference.predict_rows(np.asarray([page.values()], np.float32))[0, 0]
        assert page.answer == pytest.approx([expected], abs=1e-6)
        assert page.output.names[0].text() == "y" and page.output.labels[0].text() == f"<b>{expected:.4g}</b>"

        page.inputs[2].setValue(4.5)  # typed: asked again, answered as the Predictor answers
        qtbot.waitUntil(lambda: page.asked == pytest.approx(page.values()), timeout=30_000)
        expected = reference.predict_rows(np.asarray([page.values()], np.float32))[0, 0]
        assert page.answer == pytest.approx([expected], abs=1e-6)
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            view.grab().save(str(Path(SHOTS) / "preview_regression.png"))
    finally:
        view.shutdown()
