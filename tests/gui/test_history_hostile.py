"""The window's run history over hostile run folders: a malformed or FIFO run.json is one row saying
"unreadable: <reason>" and every other run still shows; Delete never leaves the runs root through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.test_runs_cli import fake_run

STATUS_COLUMN = 2


def shown_panel(qtbot, root: Path, rows: int):
    from app.panels.history import HistoryPanel

    panel = HistoryPanel(lambda: root)
    qtbot.addWidget(panel)
    panel.resize(1100, 560)
    panel.show()
    qtbot.waitUntil(lambda: not panel.busy and panel.model.rowCount() == rows, timeout=30_000)
    return panel


def cell(panel, name: str, column: int) -> str:
    row = next(r for r in range(panel.model.rowCount()) if panel.model.index(r, 0).data() == name)
    return panel.model.index(row, column).data()


@pytest.mark.timeout(60)
def test_a_malformed_or_fifo_run_json_is_one_unreadable_row(qtbot, tmp_path):
    root = tmp_path / "runs"
    fake_run(root, "good", "a1b2c3d4e5", start="2026-01-02T10:00:00+00:00")
    bad = fake_run(root, "bad", "bad0000001", start="2026-01-03T10:00:00+00:00")
    record = json.loads((bad / "run.json").read_text())
    (bad / "run.json").write_text(json.dumps({**record, "start_time": 5, "task": "tiny\x1b[2J"}))
    fifo = root / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "run.json")
    panel = shown_panel(qtbot, root, rows=3)
    assert cell(panel, "good", STATUS_COLUMN) == "completed"
    assert cell(panel, "bad", STATUS_COLUMN) == "unreadable: run.json: start_time is a number, not text"
    assert cell(panel, "fifo", STATUS_COLUMN) == "unreadable: run.json is a named pipe (FIFO), not a file"
    assert "3 run(s)" in panel.statusLabel.text()


@pytest.mark.timeout(60)
def test_delete_never_leaves_the_runs_root_through_a_link(qtbot, tmp_path, monkeypatch):
    from core.engine.run_delete import delete_run

    root = tmp_path / "runs"
    fake_run(root, "good", "a1b2c3d4e5")
    victim = fake_run(tmp_path / "elsewhere", "victim", "0000dead00")
    (root / "ext").symlink_to(tmp_path / "elsewhere")
    panel = shown_panel(qtbot, root, rows=2)
    panel._confirm = lambda text: True
    said = []  # every text the status line showed
    set_text = panel.statusLabel.setText
    monkeypatch.setattr(panel.statusLabel, "setText", lambda text: (said.append(text), set_text(text)))
    panel.select_names("ext/victim")
    panel.delete()
    qtbot.waitUntil(lambda: any("Delete failed" in text for text in said), timeout=30_000)
    assert any("ext is a symbolic link" in text for text in said)
    assert (victim / "run.json").is_file()
    with pytest.raises(Exception, match="not a folder under the runs root"):
        delete_run(root, str(victim))
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    panel.select_names("good")
    panel.delete()
    qtbot.waitUntil(lambda: "good" not in panel.visible_names() and not panel.busy, timeout=30_000)
    assert not (root / "good").exists() and (victim / "run.json").is_file()
    panel.watcher.blockSignals(True)  # the deletions' change notices would scan again after the test
    panel.shutdown()


def test_a_row_is_drawn_for_any_field_of_any_type(tmp_path):
    from app.panels.run_rows import row_cells
    from core.engine.run_record import read_run

    folder = fake_run(tmp_path / "runs", "run", "a1b2c3d4e5")
    original = json.loads((folder / "run.json").read_text())
    for field in original:
        for value in (5, 1.5, "nan", [1], {"a": 1}, True, "\x1b[2J"):
            (folder / "run.json").write_text(json.dumps({**original, field: value}))
            texts, _keys = row_cells(read_run(folder))
            assert all("\x1b" not in text for text in texts), (field, value)


@pytest.mark.timeout(60)
def test_a_checkpoint_run_json_names_outside_the_run_folder_is_refused_in_one_line(qtbot, tmp_path):
    root = tmp_path / "runs"
    good = fake_run(root, "good", "a1b2c3d4e5", start="2026-01-02T10:00:00+00:00")
    (good / "checkpoint.pt").write_bytes(b"ours")
    hostile = fake_run(root, "hostile", "bad0000001")
    (good / "best.pt").write_bytes(b"another run's")
    record = json.loads((hostile / "run.json").read_text())
    record["checkpoints"] = {"last": {"path": "/etc/passwd", "step": 3}, "best": {"path": "../good/best.pt"}}
    (hostile / "run.json").write_text(json.dumps(record))
    panel = shown_panel(qtbot, root, rows=2)
    asked = []
    panel.resumeRequested.connect(asked.append)
    panel.exportRequested.connect(asked.append)
    panel.select_names("hostile")
    status = panel.statusLabel.text()
    assert "hostile: run.json's checkpoint /etc/passwd lies outside the run folder: not used" in status
    assert "\n" not in status and "2 run(s)" in status
    assert not panel.resumeButton.isEnabled() and not panel.exportButton.isEnabled()
    panel.resume("last")
    panel.resume("best")
    panel.export()
    assert asked == []
    panel.select_names("good")  # the rest of the history still works
    assert panel.resumeButton.isEnabled() and "outside" not in panel.statusLabel.text()
    panel.resume("last")
    assert asked == [str(good / "checkpoint.pt")]
    panel.shutdown()


@pytest.mark.timeout(60)
def test_a_failed_delete_stays_on_the_status_line_after_the_rescan(qtbot, tmp_path):
    root = tmp_path / "runs"
    fake_run(root, "good", "a1b2c3d4e5")
    fake_run(tmp_path / "elsewhere", "victim", "0000dead00")
    (root / "ext").symlink_to(tmp_path / "elsewhere")
    panel = shown_panel(qtbot, root, rows=2)
    panel._confirm = lambda text: True
    scans = []
    panel.scanned.connect(scans.append)
    panel.select_names("ext/victim")
    panel.delete()
    qtbot.waitUntil(lambda: bool(scans) and not panel.busy, timeout=30_000)  # the rescan after the failed delete
    status = panel.statusLabel.text()
    assert status.startswith("Delete failed: ") and "ext is a symbolic link" in status and "2 run(s)" in status
    panel.refresh()  # and any later one, until the user selects something else
    qtbot.waitUntil(lambda: len(scans) >= 2 and not panel.busy, timeout=30_000)
    assert panel.statusLabel.text() == status
    panel.select_names("good")
    assert panel.statusLabel.text() == "2 run(s)"
    panel.watcher.blockSignals(True)
    panel.shutdown()


@pytest.mark.timeout(60)
def test_names_and_notes_from_files_are_shown_as_text_not_control_sequences(qtbot, tmp_path):
    root = tmp_path / "runs"
    hostile = "run\x1b]0;owned\x07\u202egnp.exe"
    folder = fake_run(root, hostile, "a1b2c3d4e5")  # the run's name is its folder's
    (folder / "checkpoint.pt").write_bytes(b"ours")
    (folder / "best.pt").write_bytes(b"ours too")
    record = json.loads((folder / "run.json").read_text())
    record.update(
        best={"name": f"acc{hostile}", "value": 0.5, "step": 7},
        checkpoints={
            "last": {"path": str(folder / "checkpoint.pt"), "step": 9},
            "best": {"path": str(folder / "best.pt"), "step": 7},
        },
    )
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "note.txt").write_text(f"first line{hostile}\nsecond\u2066 line")
    panel = shown_panel(qtbot, root, rows=1)
    panel.table.selectRow(0)
    qtbot.waitUntil(lambda: panel.noteEdit.isEnabled(), timeout=10_000)
    confirmed = []
    panel._confirm = lambda text: (confirmed.append(text), False)[1]
    panel.delete()
    panel.resume("missing")  # a status message naming the run
    shown = [a.text() for m in (panel.resumeMenu, panel.exportMenu, panel.evaluateMenu) for a in m.actions()]
    shown += [panel.statusLabel.text(), panel.noteEdit.toPlainText(), *confirmed]
    shown += [panel.model.index(0, c).data(Qt.ItemDataRole.ToolTipRole) for c in (0, 9)]
    assert "\\x1b]0;owned\\x07\\u202egnp.exe" in panel.statusLabel.text()
    assert "\\u202e" in " ".join(shown[:6]) and "second\\u2066 line" in panel.noteEdit.toPlainText()
    for text in shown:
        assert not any(ch in text for ch in "\x1b\x07\u202e\u2066"), text
    assert panel.noteSaveButton.isEnabled() is False  # shown as text is not an edit
    panel.shutdown()
