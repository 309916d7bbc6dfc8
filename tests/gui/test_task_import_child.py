"""Issue 42, "Nothing hangs": a task file's import runs in a child process (core.tasks.describe). One that exits,
loops, forks or is not a file leaves the window alive, with one line naming the file, and the other tasks Start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gui_helpers import find, set_field
from PySide6.QtWidgets import QFileDialog, QMessageBox

from core.tasks.describe import IMPORT_LIMIT_ENV

pytestmark = pytest.mark.slow  # each imports a task file in a child process
TASK_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "user_tasks" / "regression_task.py"


@pytest.fixture
def add(qtbot, window, monkeypatch):
    """File → Add task… on a file (its code's question answered Yes); returns the status line once it is done."""
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)

    def add_file(path: Path, wait: bool = True) -> str:
        monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
        window.task_actions.add_action.trigger()
        if wait:
            qtbot.waitUntil(lambda: not window.task_actions.busy, timeout=90_000)
        return window.statusBarWidget.message.text()

    return add_file


def others_still_start(window) -> None:
    set_field(window, "taskCombo", "tiny")
    assert find(window, "startButton").isEnabled()


def written(tmp_path: Path, head: str) -> Path:
    """The regression task's file with `head` run first at its import."""
    path = tmp_path / "hostile_task.py"
    future, rest = TASK_FILE.read_text().split("from __future__ import annotations\n")
    path.write_text(f"{future}from __future__ import annotations\n{head}\n{rest}")
    return path


@pytest.mark.timeout(180)
def test_os_exit_at_import_leaves_the_window_alive(window, tmp_path, add):
    path = written(tmp_path, "import os\nos._exit(3)")
    line = add(path)
    assert line.startswith(f"Could not load the task: {path}") and "exit code 3" in line and "\n" not in line, line
    assert window.statusBarWidget.message.property("role") == "status-error"
    others_still_start(window)


@pytest.mark.timeout(180)
def test_an_import_that_never_returns_is_stopped_at_the_limit(window, tmp_path, add, monkeypatch):
    monkeypatch.setenv(IMPORT_LIMIT_ENV, "3")
    line = add(written(tmp_path, "while True:\n    pass"))
    assert "did not finish in 3 s" in line and "hostile_task.py" in line, line
    others_still_start(window)


@pytest.mark.timeout(600)
def test_a_fork_at_import_loads_the_task_and_its_copy_is_killed(qtbot, window, tmp_path, add):
    """Each child that imports the file (its description, then the form's memory estimate) forks a copy that
    sleeps: every copy is killed with its child's process group, none is left behind."""
    marker = tmp_path / "forked.pid"
    head = f"import os, time\nif os.fork() == 0:\n    open({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\n    time.sleep(600)"
    add(written(tmp_path, head))
    assert window.setupPanel.taskCombo.currentData() == "regression", window.statusBarWidget.message.text()
    assert find(window, "paramCount").text() == "321 trainable parameters"  # the child's count, at the defaults
    copies = lambda: [int(pid) for pid in marker.read_text().split()] if marker.exists() else []  # noqa: E731
    qtbot.waitUntil(lambda: len(copies()) >= 2, timeout=300_000)  # the description's child's, the estimate's
    estimate = find(window, "memoryEstimate")
    qtbot.waitUntil(lambda: estimate.text().startswith("≈"), timeout=300_000)  # the estimate's child is done
    qtbot.waitUntil(lambda: not any(Path(f"/proc/{pid}").exists() for pid in copies()), timeout=120_000)
    assert os.getpid() not in copies()
    others_still_start(window)


@pytest.mark.timeout(60)
def test_a_fifo_is_refused_before_any_read(window, tmp_path, add):
    fifo = tmp_path / "pipe_task.py"
    os.mkfifo(fifo)
    line = add(fifo, wait=False)
    assert "named pipe (FIFO)" in line and not window.task_actions.busy, line
    loop = tmp_path / "loop_task.py"
    loop.symlink_to(loop)
    assert "cannot read the task file" in add(loop, wait=False)
    others_still_start(window)


@pytest.mark.timeout(120)
def test_closing_the_window_during_a_hanging_import_returns(qtbot, window, tmp_path, add, monkeypatch):
    monkeypatch.setenv(IMPORT_LIMIT_ENV, "600")
    marker = tmp_path / "child.pid"
    add(
        written(tmp_path, f"import os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\nwhile True:\n    pass"),
        False,
    )
    qtbot.waitUntil(lambda: marker.exists() and marker.read_text().isdigit(), timeout=60_000)
    assert window.task_actions.busy
    window.close()
    assert not window.task_actions.busy
    qtbot.waitUntil(lambda: not Path(f"/proc/{marker.read_text()}").exists(), timeout=30_000)
