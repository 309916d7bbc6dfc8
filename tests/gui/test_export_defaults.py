"""File > Export proposes a folder inside the run being exported, and the exported files get normal permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from gui_helpers import UI_WAIT_MS, finish_run, quick_run

import app.file_actions

SUFFIXES = (".pt", ".safetensors", ".json")


class FakeDialogs:
    """Stands in for QFileDialog: records what the export dialog proposes and accepts it (or `answer`)."""

    def __init__(self):
        self.proposed: list[str] = []
        self.answer: str | None = None  # None: accept the proposal; "": cancel

    def getSaveFileName(self, parent, caption, directory, filter_=""):
        self.proposed.append(directory)
        # What a real dialog needs to open there rather than in the working directory:
        assert Path(directory).parent.is_dir(), f"the proposed folder {Path(directory).parent} does not exist"
        answer = directory if self.answer is None else self.answer
        return answer, filter_

    def getOpenFileName(self, *args, **kwargs):
        raise AssertionError("the export should not ask for a checkpoint after a run")

    def getItem(self, parent, title, label, items, current=0, editable=True):
        """QInputDialog's: a run with a best checkpoint asks last or best; these tests export the last."""
        assert items[0].startswith("Last")
        return items[0], True


@pytest.fixture
def dialogs(monkeypatch):
    fake = FakeDialogs()
    monkeypatch.setattr(app.file_actions, "QFileDialog", fake)
    monkeypatch.setattr(app.file_actions, "QInputDialog", fake)
    return fake


def export_and_wait(qtbot, window) -> None:
    window.file_actions.export_action.trigger()
    qtbot.waitUntil(lambda: "Exported" in window.statusBarWidget.message.text(), timeout=30_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)


def normal_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@pytest.mark.timeout(120)
def test_export_defaults_to_the_runs_own_folder_with_normal_permissions(qtbot, window, tmp_path, dialogs, monkeypatch):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # nothing may land in the working directory
    quick_run(window, tmp_path / "a", max_steps=10, separate_process=False)
    finish_run(qtbot, window)

    export_and_wait(qtbot, window)
    assert dialogs.proposed == [str(tmp_path / "a" / "export" / "model")]
    for suffix in SUFFIXES:
        path = tmp_path / "a" / "export" / f"model{suffix}"
        assert path.is_file(), path
        assert stat.S_IMODE(os.stat(path).st_mode) == normal_mode(), f"{path.name}: {oct(os.stat(path).st_mode)}"
    assert list(elsewhere.iterdir()) == []

    # Another export of the same run does not overwrite the first.
    export_and_wait(qtbot, window)
    assert dialogs.proposed[-1] == str(tmp_path / "a" / "export" / "model-2")
    assert (tmp_path / "a" / "export" / "model-2.safetensors").is_file()

    # A second run: its export opens in its own folder.
    quick_run(window, tmp_path / "b", max_steps=10, separate_process=False)
    finish_run(qtbot, window)
    export_and_wait(qtbot, window)
    assert dialogs.proposed[-1] == str(tmp_path / "b" / "export" / "model")
    assert (tmp_path / "b" / "export" / "model.pt").is_file()
    assert list(elsewhere.iterdir()) == []


@pytest.mark.timeout(60)
def test_cancelling_the_export_leaves_no_empty_folder(qtbot, window, tmp_path, dialogs):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"not read: the dialog is cancelled")
    window.last_checkpoint = str(run / "checkpoint.pt")
    dialogs.answer = ""
    window.file_actions.export_action.trigger()
    assert dialogs.proposed == [str(run / "export" / "model")]
    assert not (run / "export").exists()
    assert not window.jobs.busy
