"""Issue 42, "Nothing hangs": a task file's serving code runs in a child process for the Model preview and for
File → Export (core.runs.predictor_child). A serving part that exits or never returns leaves the window alive,
with one line naming the file and what happened."""

from __future__ import annotations

from pathlib import Path

import pytest
from task_registry import task_files_run_here

from core.cli.main import main
from core.runs.predictor_child import WORK_LIMIT_ENV

pytestmark = pytest.mark.slow  # the preview and the export start a child process
TASK_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "user_tasks" / "regression_task.py"
HOSTILE_ENV = "AMP_TEST_HOSTILE"  # exit: its serving calls os._exit(3); loop: it never returns (loop-at-load: loading)
HOSTILE = f'''

import os as _os

from core.tasks.feature_serving import FeatureServing as _FeatureServing


def _hostile():
    if _os.environ.get("{HOSTILE_ENV}") == "exit":
        _os._exit(3)
    while _os.environ.get("{HOSTILE_ENV}") == "loop":
        pass


class HostileServing(_FeatureServing):
    def preview_answer(self, predictor, value, **options):
        _hostile()
        return super().preview_answer(predictor, value, **options)

    def module(self, model, fmt):
        _hostile()
        return super().module(model, fmt)

    def preview_examples(self, predictor):
        while _os.environ.get("{HOSTILE_ENV}") == "loop-at-load":
            pass
        return super().preview_examples(predictor)
'''


@pytest.fixture
def hostile_run(tmp_path):
    """(the task file, a run of it): trained here with its serving harmless ({HOSTILE_ENV} unset)."""
    path = tmp_path / "hostile_task.py"
    path.write_text(TASK_FILE.read_text().replace("return FeatureServing", "return HostileServing") + HOSTILE)
    runs = tmp_path / "runs"
    argv = ["train", "--task", f"{path}:RegressionTask", "--epochs", "1", "--max-steps", "20", "--runs-dir", str(runs)]
    with task_files_run_here():  # trained here as the CLI does, a window or not
        assert main(argv) == 0
    (folder,) = runs.iterdir()
    return path, folder


def preview_line(qtbot, folder: Path) -> str:
    """The preview of the run in `folder`: its model loads in a child, its first answer fails; the one line shown."""
    from app.panels.preview import PreviewDialog

    view = PreviewDialog(lambda: folder.parent)
    qtbot.addWidget(view)
    view.show()
    try:
        view.select_run(str(folder))
        qtbot.waitUntil(lambda: view.predictor is not None, timeout=120_000)
        page = view.pages["regression"]
        qtbot.waitUntil(lambda: "preview_answer" in view.statusLabel.text(), timeout=120_000)
        assert view.stack.currentWidget() is page and view.isVisible()  # the dialog is alive, its page shown
        page.request()  # asked again: the same one line, no hang
        qtbot.waitUntil(lambda: view.queue.idle, timeout=60_000)
        return view.statusLabel.text()
    finally:
        view.shutdown()
        assert not view.children  # the model's child process is stopped with the dialog


@pytest.mark.timeout(300)
def test_a_preview_whose_serving_exits_leaves_the_window_alive(qtbot, hostile_run, monkeypatch):
    path, folder = hostile_run
    monkeypatch.setenv(HOSTILE_ENV, "exit")
    line = preview_line(qtbot, folder)
    assert str(path) in line and "exit code 3" in line and "\n" not in line, line


@pytest.mark.timeout(300)
def test_a_preview_whose_serving_never_returns_is_stopped_at_the_limit(qtbot, hostile_run, monkeypatch):
    path, folder = hostile_run
    monkeypatch.setenv(HOSTILE_ENV, "loop")
    monkeypatch.setenv(WORK_LIMIT_ENV, "30")  # the load (torch's import included) fits; the answer does not
    line = preview_line(qtbot, folder)
    assert str(path) in line and "did not finish in 30 s" in line, line


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how, said", [("exit", "exit code 3"), ("loop", "did not finish in 30 s")])
def test_an_export_whose_serving_fails_leaves_the_window_alive(qtbot, window, hostile_run, monkeypatch, how, said):
    path, folder = hostile_run
    monkeypatch.setenv(HOSTILE_ENV, how)
    monkeypatch.setenv(WORK_LIMIT_ENV, "30")
    window.file_actions.export(str(folder), str(folder / "export" / "model"), "program")
    message = window.statusBarWidget.message
    qtbot.waitUntil(lambda: message.text().startswith("Export failed"), timeout=120_000)
    assert str(path) in message.text() and said in message.text() and "\n" not in message.text(), message.text()
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=60_000)  # the message may come before the job ends
    assert not (folder / "export" / "model").exists()


@pytest.mark.timeout(300)
def test_evaluate_measures_a_task_files_model_in_a_child(hostile_run, monkeypatch):
    """The history's Evaluate (and the preview's): the report comes from the child and is written in the run."""
    from app.panels.run_evaluation import measure

    path, folder = hostile_run
    monkeypatch.setenv(HOSTILE_ENV, "exit")  # evaluation does not serve: the child answers
    report = measure(str(folder / "best.pt"))
    assert "rmse" in report["metrics"] and (folder / "evaluation.json").is_file()


@pytest.mark.timeout(300)
def test_closing_the_preview_stops_a_load_that_never_returns(qtbot, hostile_run, monkeypatch):
    """The window closing joins the preview's worker: a load waiting on its child (at the default limit, half an
    hour) ends at once, its child killed."""
    from app.panels.preview import PreviewDialog

    _path, folder = hostile_run
    monkeypatch.setenv(HOSTILE_ENV, "loop-at-load")
    view = PreviewDialog(lambda: folder.parent)
    qtbot.addWidget(view)
    view.show()
    view.select_run(str(folder))
    qtbot.waitUntil(lambda: bool(view.children), timeout=120_000)
    pid = view.children[0]._process.pid
    view.shutdown()
    assert not view.children and view.predictor is None and not Path(f"/proc/{pid}").exists()
