"""The run history over a big runs root (2,000 runs as the engine writes them, from benchmarks/run_history.py):
it opens and lists every run, scanning and making the rows in a child process; the filter shows exactly the
matching runs at each keystroke and keeps the selection of those still shown; sorting and a change on disk
(read through the runs root's index) show up. How long it stalls the GUI thread is the benchmark's to say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from core.engine.run_index import INDEX_FILE, indexed_runs
from core.engine.run_record import write_note

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

RUNS = 2_000


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    from run_history import make_runs

    root = tmp_path_factory.mktemp("history") / "runs"
    make_runs(root, RUNS)
    return root


def open_panel(qtbot, root: Path, request):
    from app.panels.history import HistoryPanel

    panel = HistoryPanel(lambda: root)
    qtbot.addWidget(panel)
    request.addfinalizer(panel.shutdown)  # a rescan (the timer's) may be under way: waited for
    panel.resize(1100, 480)
    panel.show()
    qtbot.waitUntil(lambda: not panel.busy and panel.model.rowCount() > 0, timeout=120_000)
    return panel


@pytest.mark.slow  # a root this big is scanned in a child process (app.panels.history_scan)
@pytest.mark.timeout(300)
def test_thousands_of_runs_open_list_filter_and_sort(qtbot, big_root, monkeypatch, request):
    from app.panels import history_scan
    from core.engine import run_index

    here: list = []  # what this process read or made of the runs: nothing, the scan's child did
    monkeypatch.setattr(run_index, "read_run", lambda folder: here.append(folder))
    monkeypatch.setattr(history_scan, "row_cells", lambda run: here.append(run))
    panel = open_panel(qtbot, big_root, request)
    assert here == [] and not panel._scan_pids  # the child is gone
    assert panel.model.rowCount() == RUNS and panel.statusLabel.text() == f"{RUNS} run(s)"
    runs = indexed_runs(big_root)
    assert {r["name"] for r in panel.model.runs} == {r["name"] for r in runs}
    assert (big_root / INDEX_FILE).is_file()
    newest = max(runs, key=lambda r: r["start_time"])
    assert panel.model.index(0, 0).data() == newest["name"]  # newest first

    wanted = {r["name"] for r in runs if r["precision"] == "bf16" and r["status"] == "completed"}
    target = sorted(wanted)[len(wanted) // 2]
    panel.select_names(target)
    assert [r["name"] for r in panel.selected_runs()] == [target]
    assert panel.selected_runs()[0]["config"]["precision"] == "bf16"  # the whole record, config included
    text = "bf16 completed"
    for i in range(1, len(text) + 1):  # typed a key at a time
        panel.filterEdit.setText(text[:i])
        shown = set(panel.visible_names())
        assert shown == {r["name"] for r in runs if all(w in panel_haystack(r) for w in text[:i].split())}
        assert [r["name"] for r in panel.selected_runs()] == [target]
    assert set(panel.visible_names()) == wanted and panel.loadButton.isEnabled()
    panel.filterEdit.setText("bf16 completed no-such-run")
    assert panel.visible_names() == [] and panel.selected_runs() == []
    panel.filterEdit.clear()
    assert panel.model.rowCount() == RUNS

    panel.table.sortByColumn(5, Qt.SortOrder.AscendingOrder)  # steps
    steps = [panel.model.run(r)["steps"] for r in range(0, RUNS, 97)]
    assert steps == sorted(steps)
    panel.filterEdit.setText("failed")
    assert panel.model.rowCount() == sum(r["status"] == "failed" for r in runs)
    steps = [panel.model.run(r)["steps"] for r in range(panel.model.rowCount())]
    assert steps == sorted(steps)  # filtered rows keep the sort


def panel_haystack(run: dict) -> str:
    from app.panels.run_rows import FILTERED, row_cells

    texts, _keys = row_cells(run)
    return " ".join(texts[c] for c in FILTERED).lower()


@pytest.mark.timeout(300)
def test_a_change_on_disk_shows_after_a_rescan_through_the_index(qtbot, tmp_path, request):
    from run_history import make_runs

    root = tmp_path / "runs"
    make_runs(root, 300)
    panel = open_panel(qtbot, root, request)
    assert panel.model.rowCount() == 300
    name = panel.visible_names()[10]
    folder = next(r["folder"] for r in panel.model.runs if r["name"] == name)
    write_note(folder, "the one with the odd loss curve")
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    with qtbot.waitSignal(panel.scanned, timeout=60_000):
        panel.refresh()
    panel.filterEdit.setText("odd loss")
    assert panel.visible_names() == [name]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_closing_during_a_big_cold_scan_ends_its_child_at_once(qtbot, big_root):
    import sqlite3

    from app.panels.history import HistoryPanel

    for path in big_root.glob(INDEX_FILE + "*"):
        path.unlink()
    panel = HistoryPanel(lambda: big_root)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: bool(panel._scan_pids), timeout=60_000)
    panel.shutdown()  # the child is killed: the job's thread does not wait for the whole scan
    assert not panel._scan_pids
    indexed = 0
    if (big_root / INDEX_FILE).exists():
        with sqlite3.connect(big_root / INDEX_FILE) as db:
            indexed = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert indexed < RUNS
