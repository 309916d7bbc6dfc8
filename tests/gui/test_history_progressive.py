"""The run history on a cold cache (no index) lists runs as they are read, in batches, and the GUI thread keeps
running meanwhile: a 10 ms timer keeps ticking while the rows come (counted, no wall-clock threshold). The index's
own writes in the root make no rescan; a run folder coming does. How long it stalls is benchmarks/run_history.py's."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QTimer

import core.engine.run_index as run_index
from core.engine.run_index import INDEX_FILE
from tests.test_run_index import age, make_run

RUNS = 500


@pytest.mark.timeout(300)
def test_a_cold_history_lists_runs_in_batches_while_the_gui_thread_ticks(qtbot, tmp_path, request, monkeypatch):
    from app.panels.history import HistoryPanel

    monkeypatch.setattr(run_index, "BATCH_SECONDS", 0.01)  # batches by time: several, however quick the disk
    scans = []  # a root this small is scanned on the job's thread (app.panels.history_scan.CHILD_ABOVE)
    real = run_index.indexed_records
    monkeypatch.setattr(run_index, "indexed_records", lambda *a: scans.append(a[0]) or real(*a))

    root = tmp_path / "runs"
    for i in range(RUNS):
        make_run(root, f"run-{i:04d}", f"{i:04x}aaaaaa", start=f"2026-01-01T10:{i // 60:02d}:{i % 60:02d}+00:00")
    age(root)
    assert not (root / INDEX_FILE).exists()
    panel = HistoryPanel(lambda: root)
    qtbot.addWidget(panel)
    request.addfinalizer(panel.shutdown)
    counts: list[int] = []  # the rows after each change of the model
    ticks: list[int] = []  # the rows shown at each tick of the timer
    panel.model.modelReset.connect(lambda: counts.append(panel.model.rowCount()))
    timer = QTimer(interval=10)
    timer.timeout.connect(lambda: ticks.append(panel.model.rowCount()))
    timer.start()
    panel.show()
    qtbot.waitUntil(lambda: not panel.busy and panel.model.rowCount() == RUNS, timeout=240_000)
    timer.stop()
    partial = [n for n in counts if 0 < n < RUNS]
    assert partial, counts  # rows shown before the whole index was built
    assert any(0 < n < RUNS for n in ticks), (counts, len(ticks))  # the timer ticked while rows were coming
    assert panel.model.index(0, 0).data() == f"run-{RUNS - 1:04d}"  # newest first, as after a whole scan
    assert (root / INDEX_FILE).is_file()

    # the watcher's refresh: the root's entries are the same (only the index's files came), nothing is read
    with qtbot.waitSignal(panel.scanned, timeout=120_000):
        panel.refresh(listing=True)
    assert len(scans) == 1 and panel.model.rowCount() == RUNS
    make_run(root, "run-new", "ffffaaaaaa", start="2026-01-02T10:00:00+00:00")
    panel.refresh(listing=True)  # (or the watcher's, which saw the folder come)
    qtbot.waitUntil(lambda: not panel.busy and panel.model.index(0, 0).data() == "run-new", timeout=120_000)
    assert len(scans) >= 2
