"""File > Export offers the serving formats as the save dialog's file types: a finished run exported as a
torch.export program (or ONNX) lands in a folder that plain torch loads, and the verification line (the max abs
difference against the trained model) ends in the status bar; a failure is one line there."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from gui_helpers import UI_WAIT_MS, finish_run, quick_run

import app.file_actions
from app.file_actions import CHECKPOINT_FILTER, SERVING_FILTERS


class FakeDialogs:
    """Stands in for QFileDialog and QInputDialog: accepts the proposed path with the file type `kind`, and
    exports the last checkpoint when asked last or best."""

    def __init__(self):
        self.kind = CHECKPOINT_FILTER
        self.filters: list[str] = []

    def getSaveFileName(self, parent, caption, directory, filter_=""):
        self.filters = filter_.split(";;")
        assert self.kind in self.filters
        return directory, self.kind

    def getOpenFileName(self, *args, **kwargs):
        raise AssertionError("the export should not ask for a checkpoint after a run")

    def getItem(self, parent, title, label, items, current=0, editable=True):
        return items[0], True


@pytest.fixture
def dialogs(monkeypatch):
    fake = FakeDialogs()
    monkeypatch.setattr(app.file_actions, "QFileDialog", fake)
    monkeypatch.setattr(app.file_actions, "QInputDialog", fake)
    return fake


def kind_of(fmt: str) -> str:
    return next(text for text, value in SERVING_FILTERS.items() if value == fmt)


def status(window) -> str:
    return window.statusBarWidget.message.text()


@pytest.mark.timeout(180)
def test_export_as_a_program_shows_the_verification_in_the_status_bar(qtbot, window, tmp_path, dialogs):
    quick_run(window, tmp_path / "a", max_steps=10, separate_process=False)
    finish_run(qtbot, window)

    dialogs.kind = kind_of("program")
    window.file_actions.export_action.trigger()
    qtbot.waitUntil(lambda: "max abs difference" in status(window) or "failed" in status(window), timeout=60_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)
    assert status(window).startswith("Exported tiny") and "as program fp32" in status(window)
    assert dialogs.filters[0] == CHECKPOINT_FILTER and set(SERVING_FILTERS) <= set(dialogs.filters)
    folder = tmp_path / "a" / "export" / "model"
    assert {p.name for p in folder.iterdir()} == {
        "model.pt2",
        "manifest.json",
        "serve.py",
        "serve_http.py",
        "serve_lines.py",
        "serve_program.py",
        "feature_rows.py",
    }
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (
        manifest["task"] == "tiny" and manifest["verification"]["max_abs_diff"] <= manifest["verification"]["tolerance"]
    )
    program = torch.export.load(str(folder / "model.pt2")).module()
    with torch.no_grad():
        probabilities = program(torch.randn(3, 10))
    assert probabilities.shape == (3, 2) and torch.allclose(probabilities.sum(1), torch.ones(3))

    # A second export proposes the next free name, not the folder just written.
    dialogs.kind = kind_of("onnx") if importlib.util.find_spec("onnxruntime") else CHECKPOINT_FILTER
    window.file_actions.export_action.trigger()
    qtbot.waitUntil(lambda: "model-2" in status(window) or "failed" in status(window), timeout=60_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)
    assert status(window).startswith("Exported"), status(window)
    second = tmp_path / "a" / "export" / "model-2"
    assert (
        (second / "model.onnx").is_file()
        if dialogs.kind != CHECKPOINT_FILTER
        else second.with_suffix(".safetensors").is_file()
    )


@pytest.mark.timeout(120)
def test_a_failed_export_is_one_line_and_leaves_no_folder(qtbot, window, tmp_path, dialogs, monkeypatch):
    quick_run(window, tmp_path / "b", max_steps=10, separate_process=False)
    finish_run(qtbot, window)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    dialogs.kind = kind_of("onnx")
    window.file_actions.export_action.trigger()
    qtbot.waitUntil(lambda: "Export failed" in status(window), timeout=30_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)
    assert "pip install 'amp-console[onnx]'" in status(window) and "\n" not in status(window)
    assert not (tmp_path / "b" / "export" / "model").exists()
    assert window.file_actions.export_action.isEnabled()


@pytest.mark.timeout(180)
def test_file_export_offers_the_serving_folder_first_each_format_its_own_entry(qtbot, window, tmp_path, dialogs):
    menu = window.file_actions.export_menu
    entries = [a.text() for a in menu.actions() if not a.isSeparator()]
    assert entries[0] == "&Serving folder: torch.export program + serve.py…" and len(entries) == 5
    assert menu.menuAction() in window.menuBar().actions()[0].menu().actions()  # File → Export ▸
    quick_run(window, tmp_path / "c", max_steps=10, separate_process=False)
    finish_run(qtbot, window)

    dialogs.kind = kind_of("program")
    window.file_actions.export_actions["program"].trigger()
    qtbot.waitUntil(lambda: "max abs difference" in status(window) or "failed" in status(window), timeout=60_000)
    qtbot.waitUntil(lambda: not window.jobs.busy, timeout=UI_WAIT_MS)
    assert dialogs.filters == [kind_of("program")]  # that format alone: nothing hidden in "Files of type"
    folder = tmp_path / "c" / "export" / "model"
    assert {"model.pt2", "serve.py", "manifest.json"} <= {p.name for p in folder.iterdir()}

    dialogs.kind = CHECKPOINT_FILTER
    window.file_actions.export_actions[None].trigger()
    qtbot.waitUntil(lambda: "model-2.safetensors" in status(window) or "failed" in status(window), timeout=60_000)
    assert dialogs.filters == [CHECKPOINT_FILTER] and (tmp_path / "c" / "export" / "model-2.pt").is_file()
    menu.popup(window.mapToGlobal(window.rect().center()))
    qtbot.waitUntil(menu.isVisible)
    menu.grab().save("/tmp/export_menu.png")
    menu.hide()
