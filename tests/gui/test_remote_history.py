"""The hosts' runs in the run history, over a real sshd on 127.0.0.1 (tests/local_sshd.py): a host's run listed
as HOST:RUN beside this machine's, a host that can't be reached one row saying why (no dialog), a host's run
compared with a local one, and Try it… on it fetching the run first, with progress, then loading the fetched
best checkpoint in the Model preview. No ssh call comes from the GUI thread (the autouse fixture)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from app.panels import hosts
from app.window_settings import WindowSettings
from tests.gui.gui_helpers import PROCESS_WAIT_MS, click, find
from tests.gui.test_remote_window import (  # noqa: F401 (fixtures: the module's sshd, ssh never on the GUI thread)
    ssh_never_on_the_gui_thread,
    sshd,
)

WAIT = PROCESS_WAIT_MS


def row(panel, name: str) -> dict | None:
    return next((r for r in panel.model.runs if r.get("name") == name), None)


@pytest.mark.slow
def test_a_hosts_runs_in_the_history_compared_and_tried_from_a_fetched_copy(
    qtbot, make_window, settings, sshd, trained_runs, monkeypatch
):
    monkeypatch.setattr(hosts, "SSH_OPTIONS", ("-F", str(sshd.config)))
    tiny = trained_runs["tiny"]
    shutil.copytree(tiny.folder, sshd.runs / "host-tiny")
    WindowSettings(settings).set_hosts(
        [{"dest": sshd.dest, "command": sshd.prefix}, {"dest": "amp-closed", "command": ""}]
    )
    window = make_window()
    local = window.runs_root()
    shutil.copytree(tiny.folder, local / "local-tiny")

    window.historyAction.trigger()
    panel = window.historyDialog.panel
    qtbot.waitUntil(
        lambda: (
            row(panel, "amp-test:host-tiny") is not None
            and row(panel, "local-tiny") is not None
            and row(panel, "amp-closed:") is not None
            and row(panel, "amp-closed:")["status"] != "listing…"
        ),
        timeout=WAIT,
    )
    closed = row(panel, "amp-closed:")
    assert closed["status"] == "unreachable" and "\n" not in closed["note"]
    assert closed["note"].startswith("amp-closed is unreachable over ssh (")
    remote = row(panel, "amp-test:host-tiny")
    copy = local / ".hosts" / "amp-test" / "host-tiny"
    assert remote["status"] == "completed" and remote["folder"] == str(copy) and not copy.exists()
    assert "local-tiny" in panel.visible_names() and "amp-test:host-tiny" in panel.visible_names()

    # compared with the local run from its listed record: the same run, here and there
    panel.select_names("amp-test:host-tiny", "local-tiny")
    assert find(panel, "historyCompareButton").isEnabled()
    click(qtbot, panel, "historyCompareButton")
    assert panel.compareView.isVisible() and len(panel.compareView.runs) == 2
    assert {r["name"] for r in panel.compareView.runs} == {"amp-test:host-tiny", "local-tiny"}

    # Try it…: fetched first (progress in the status line), then the preview loads the copy's best checkpoint
    panel.select_names("amp-test:host-tiny")
    assert find(panel, "historyPreviewButton").isEnabled()
    assert not find(panel, "historyDeleteButton").isEnabled() and not find(panel, "historyResumeButton").isEnabled()
    texts: list[str] = []
    original = panel.statusLabel.setText
    monkeypatch.setattr(panel.statusLabel, "setText", lambda text: (texts.append(text), original(text)))
    click(qtbot, panel, "historyPreviewButton")
    qtbot.waitUntil(
        lambda: window.previewDialog is not None and window.previewDialog.predictor is not None, timeout=WAIT
    )
    predictor = window.previewDialog.predictor
    assert Path(str(predictor.checkpoint)) == copy / "best.pt" and predictor.task == "tiny"
    assert (copy / "best.pt").read_bytes() == (tiny.folder / "best.pt").read_bytes()
    assert any(text.startswith("Fetching amp-test:host-tiny: best.pt, ") and "%)" in text for text in texts), texts
    assert any(text.startswith("Fetched amp-test:host-tiny: 3 file(s)") for text in texts), texts
    assert not [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
