"""A hostile evaluation report (100,000 metrics, a million-point curve, hundreds of classes, thousands of
buckets) is read and cut down on a worker, and drawn capped with "… and M more": the window's thread never
parses it or draws it whole, and the panel answers events while the read is under way."""

from __future__ import annotations

import json
import threading

import pytest
from PySide6.QtCore import QTimer

from app.panels import evaluation_limits as limits
from app.panels.evaluation_view import EvaluationView
from core.files import RECORD_LIMIT

METRICS = 100_000
POINTS = 1_000_000
CLASSES = 300
BUCKETS = 10_000
BINS = 100_000
CURVES = 50


def hostile(points: int = POINTS, roc_points: int = 100_000) -> dict:
    metrics = {"<b>bold</b>": 0.25, **{f"m{i}": 0.5 for i in range(METRICS)}, "accuracy": 0.75}
    big = {
        "title": "HR@k",
        "y_label": "hit rate",
        "ks": list(range(1, points + 1)),
        "series": [{"name": "loo", "label": "leave one out", "values": [0.5] * points}],
    }
    small = [
        {"title": f"c{i}", "ks": [1, 2, 3], "series": [{"name": "s", "values": [0.1, 0.2, 0.3]}]}
        for i in range(CURVES - 1)
    ]
    return {
        "task": "hostile",
        "split": "test",
        "primary_metric": "accuracy",
        "metrics": metrics,
        "curves": [big, *small],
        "roc": {
            "fpr": [i / roc_points for i in range(roc_points)],
            "tpr": [i / roc_points for i in range(roc_points)],
            "auc": 0.5,
        },
        "confusion": {
            "labels": [str(i) for i in range(CLASSES)],
            "matrix": [[2 if r == c else 1 for c in range(CLASSES)] for r in range(CLASSES)],
        },
        "buckets": {
            "title": "by size",
            "rows": [{"label": str(i), "count": 1, "values": {"ndcg": 0.5}} for i in range(BUCKETS)],
            "series": [{"name": "ndcg"}],
        },
        "histogram": {"edges": [i / BINS for i in range(BINS + 1)], "series": [{"name": "0", "counts": [1] * BINS}]},
    }


@pytest.fixture
def view(qtbot):
    widget = EvaluationView()
    qtbot.addWidget(widget)
    widget.resize(1000, 720)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def assert_drawn_capped(view: EvaluationView, points: int = POINTS) -> None:
    text = view.headline.text()
    assert "<b>accuracy 0.7500</b>" in text and f"… and {METRICS + 2 - limits.MAX_METRICS:,} more" in text
    assert text.count(" 0.5000") <= limits.MAX_METRICS
    assert "<b>bold</b>" not in text and "&lt;b&gt;bold&lt;/b&gt; 0.2500" in text  # a name is text, not markup
    curves = [key for key in view.plots if key.startswith("curve")]
    assert len(curves) == limits.MAX_CURVES
    line = view.plots["curve0"].getPlotItem().listDataItems()[0]
    assert len(line.xData) <= limits.MAX_POINTS and line.xData[0] == 1 and line.xData[-1] == points
    roc = view.plots["roc"].getPlotItem().listDataItems()[-1]
    assert len(roc.xData) <= limits.MAX_POINTS
    table = view.confusion_table
    assert table.rowCount() == table.columnCount() == limits.MAX_CLASSES
    share = 100 * 2 / (CLASSES + 1)  # of the whole row, not of the 20 cells shown
    assert table.item(0, 0).text() == f"2\n{share:.1f}%"
    ticks = view.plots["buckets"].getPlotItem().getAxis("bottom")._tickLevels[0]
    assert len(ticks) == limits.MAX_BUCKETS
    bars = [i for i in view.plots["histogram"].getPlotItem().items if type(i).__name__ == "BarGraphItem"]
    assert len(bars) == 1 and len(bars[0].opts["x"]) <= limits.MAX_BINS
    left = view.leftOut.text()
    assert not view.leftOut.isHidden()
    for part in (
        f"… and {CLASSES - limits.MAX_CLASSES:,} more classes",
        f"… and {CURVES - limits.MAX_CURVES:,} more curve plots",
        f"… and {BUCKETS - limits.MAX_BUCKETS:,} more buckets",
    ):
        assert part in left, left


def test_a_hostile_report_is_drawn_capped(qtbot, view):
    report = hostile(roc_points=POINTS)
    view.show_report(report)
    qtbot.waitUntil(lambda: view.done, timeout=10_000)  # a section per turn of the event loop
    assert view.sections == ["roc", "confusion", "curves", "buckets", "histogram"] and view.problems == []
    assert_drawn_capped(view)
    view.show_report({"task": "tiny", "metrics": {"accuracy": 0.9}})  # a small one after it: nothing left over
    qtbot.waitUntil(lambda: view.done, timeout=10_000)
    assert view.leftOut.isHidden() and "… and" not in view.headline.text()


def test_curves_cut_down_keep_their_ks_and_values_paired():
    curve = {
        "ks": list(range(10_000)),
        "series": [{"name": "a", "values": [k * 2 for k in range(10_000)]}, {"name": "b", "values": [1.0] * 10}],
    }
    bounded = limits.bounded_report({"curves": [curve]})
    ks = bounded.report["curves"][0]["ks"]
    a, b = (s["values"] for s in bounded.report["curves"][0]["series"])
    assert len(ks) == len(a) == len(b) <= limits.MAX_POINTS and ks[-1] == 9_999
    assert all(v == 2 * k for k, v in zip(ks, a, strict=True))
    assert b[0] == 1.0 and b[-1] is None  # the short line ends in a gap where it had no values
    assert limits.bounded_report(None) is None


def test_the_tab_reads_and_cuts_down_a_hostile_report_on_a_worker(qtbot, tmp_path, monkeypatch):
    from app.panels.preview.evaluation_tab import EvaluationTab
    from core.runs import evaluation_report

    folder = tmp_path / "run"
    folder.mkdir()
    payload = json.dumps(hostile(roc_points=10_000), separators=(",", ":")).encode()
    assert len(payload) <= RECORD_LIMIT  # a file the record rules read: big, but not refused
    (folder / "evaluation.json").write_bytes(payload)
    gate, threads = threading.Event(), {}
    real_load, real_bound = evaluation_report.load_report, limits.bounded_report

    def load(*args, **kwargs):
        threads["load"] = threading.current_thread()
        assert gate.wait(60)  # held until the test has seen the window answer meanwhile
        return real_load(*args, **kwargs)

    def bound(report):
        threads["bound"] = threading.current_thread()
        return real_bound(report)

    monkeypatch.setattr(evaluation_report, "load_report", load)
    monkeypatch.setattr(limits, "bounded_report", bound)
    tab = EvaluationTab()
    qtbot.addWidget(tab)
    tab.resize(1000, 720)
    tab.show()
    try:
        tab.set_checkpoint(folder / "best.pt")
        assert tab.report is None and "Reading" in tab.view.message.text()
        qtbot.waitUntil(lambda: "load" in threads, timeout=30_000)  # the read has begun, on its worker
        answered = []
        QTimer.singleShot(0, lambda: answered.append(True))
        qtbot.waitUntil(lambda: bool(answered), timeout=10_000)  # the window's thread is free while it reads
        assert tab.report is None
    finally:
        gate.set()
    qtbot.waitUntil(lambda: tab.report is not None and tab.view.done, timeout=60_000)
    main = threading.main_thread()
    assert threads["load"] is not main and threads["bound"] is not main
    assert len(tab.report["metrics"]) == limits.MAX_METRICS
    assert_drawn_capped(tab.view)
    tab.shutdown()
