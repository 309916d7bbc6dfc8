"""The evaluation view draws each task's real report (core.runs.evaluation_report) as plots and a confusion grid,
copes with older, partial and damaged reports without raising, and clears to a message."""

from __future__ import annotations

import copy
import json

import pytest

from app.panels.evaluation_view import EvaluationView, headline
from core.runs.evaluation_report import evaluation_report, load_report, write_report

EXPECTED = {
    "tiny": ["confusion"],
    "sentiment": ["roc", "confusion", "histogram"],
    "recommender": ["curves", "buckets"],
    "ranking": ["curves", "buckets"],
}


@pytest.fixture(scope="module")
def reports(trained_runs):
    """One real report per task, of the shared runs (module-wide: the tests only read them); the recommender's
    of its synthetic run (a catalogue of 200 lessons for its curves)."""
    name = {"recommender": "recommender-synthetic"}
    return {task: evaluation_report(trained_runs[name.get(task, task)].checkpoint) for task in EXPECTED}


@pytest.fixture
def view(qtbot):
    widget = EvaluationView()
    qtbot.addWidget(widget)
    widget.resize(1000, 720)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def show(qtbot, view, report) -> None:
    """show_report, then the turns of the event loop it draws the sections in."""
    view.show_report(report)
    qtbot.waitUntil(lambda: view.done, timeout=10_000)


@pytest.mark.parametrize("task", list(EXPECTED))
def test_each_tasks_report_is_drawn(qtbot, view, reports, task, tmp_path):
    report = reports[task]
    show(qtbot, view, report)
    assert view.sections == EXPECTED[task] and view.problems == []
    assert view.message.isHidden() and not view.headline.isHidden()
    primary = report["primary_metric"]
    assert f"<b>{primary} {report['metrics'][primary]:.4f}</b>" in view.headline.text()
    if "confusion" in report:
        table = view.confusion_table
        matrix = report["confusion"]["matrix"]
        for r, row in enumerate(matrix):
            for c, count in enumerate(row):
                count_text, share_text = table.item(r, c).text().split("\n")
                assert count_text == f"{count:,}"
                assert share_text == f"{100 * count / sum(row):.1f}%"
    if "curves" in report:
        for index, curve in enumerate(report["curves"]):
            item = view.plots[f"curve{index}"].getPlotItem()
            drawn = {c.name(): list(c.yData) for c in item.listDataItems()}
            for series in curve["series"]:
                assert drawn[series["label"]] == pytest.approx(series["values"])
            assert item.getAxis("left").labelText == curve["y_label"]
    if "roc" in report:
        names = [c.name() for c in view.plots["roc"].getPlotItem().listDataItems()]
        assert names == ["chance (AUC 0.5)", f"model (AUC {report['roc']['auc']:.4f})"]
    if "buckets" in report:
        ticks = view.plots["buckets"].getPlotItem().getAxis("bottom")._tickLevels[0]
        assert [label.split("\n")[0] for _, label in ticks] == [row["label"] for row in report["buckets"]["rows"]]
        assert all(
            f"{row['count']:,}" in label for (_, label), row in zip(ticks, report["buckets"]["rows"], strict=True)
        )
    shot = tmp_path / f"eval_{task}.png"
    assert view.grab().save(str(shot)) and shot.stat().st_size > 5000


def test_bars_share_the_colour_of_their_curve(qtbot, view, reports):
    show(qtbot, view, reports["recommender"])
    lines = {c.name(): c.opts["pen"].color().name() for c in view.plots["curve0"].getPlotItem().listDataItems()}
    bars = [i for i in view.plots["buckets"].getPlotItem().items if type(i).__name__ == "BarGraphItem"]
    labels = {s["curve"]: s for s in reports["recommender"]["buckets"]["series"]}
    protocol_label = {s["name"]: s["label"] for s in reports["recommender"]["curves"][0]["series"]}
    for bar, series in zip(bars, reports["recommender"]["buckets"]["series"], strict=True):
        assert bar.opts["brush"].color().name() == lines[protocol_label[series["curve"]]]
    assert labels  # every charted series names its curve


def broken_variants(report: dict) -> list[dict]:
    """An older report (metrics only), sections missing, nulls where numbers were, wrong shapes and types."""
    variants = [{}, {"task": "sentiment", "metrics": {"accuracy": 0.8}}, {"metrics": "oops", "rows": "many"}]
    for key in ("roc", "confusion", "curves", "buckets", "histogram"):
        if key in report:
            partial = copy.deepcopy(report)
            del partial[key]
            variants.append(partial)
            damaged = copy.deepcopy(report)
            damaged[key] = {
                "fpr": [0, None],
                "tpr": [0],
                "labels": ["a"],
                "matrix": [[1, 2]],
                "rows": [None],
                "series": "x",
                "edges": [None],
            }
            variants.append(damaged)
            wrong_type = copy.deepcopy(report)
            wrong_type[key] = [1, "two", None] if not isinstance(report[key], list) else {"a": 1}
            variants.append(wrong_type)
    nulls = json.loads(json.dumps(report).replace("0.", "-0."))  # still valid JSON, odd values
    variants.append(nulls)
    return variants


@pytest.mark.parametrize("task", list(EXPECTED))
def test_partial_and_damaged_reports_never_raise(qtbot, view, reports, task):
    for variant in broken_variants(reports[task]):
        show(qtbot, view, variant)
        assert view.sections or not view.message.isHidden()  # drawn, or a line says why not
    show(qtbot, view, {"task": "ranking", "metrics": {"ndcg@10": 0.7}})
    assert view.sections == [] and "no plots" in view.message.text()
    assert "ndcg@10 0.7000" in view.headline.text()


def test_a_malformed_section_is_one_line_and_the_rest_is_drawn(qtbot, view, reports):
    report = copy.deepcopy(reports["sentiment"])
    report["confusion"]["matrix"] = [[1, 2, 3]]
    show(qtbot, view, report)
    assert view.sections == ["roc", "histogram"] and len(view.problems) == 1
    assert "confusion" in view.message.text() and "\n" not in view.message.text()


def test_clear_shows_the_message_and_nothing_else(qtbot, view, reports):
    show(qtbot, view, reports["recommender"])
    view.clear("Evaluating on the test split…")
    assert view.sections == [] and view.plots == {} and view.grid.count() == 0
    assert view.message.text() == "Evaluating on the test split…" and view.headline.isHidden()
    show(qtbot, view, "not a report")  # a caller passing something else gets a message, not an exception
    assert "cannot be read" in view.message.text()


def test_a_saved_report_round_trips_into_the_view(qtbot, view, reports, tmp_path):
    write_report(reports["ranking"], tmp_path)
    show(qtbot, view, load_report(tmp_path))
    assert view.sections == ["curves", "buckets"]
    (tmp_path / "evaluation.json").write_text('{"task": "ranking", "curves": [')  # torn
    assert load_report(tmp_path) is None


def test_sections_are_drawn_one_per_turn_and_a_newer_report_drops_the_rest(qtbot, view, reports, monkeypatch):
    """A plot widget costs some tens of milliseconds: a large report is drawn a section per turn of the event
    loop (the window's thread answers in between), and a newer show_report (or clear) drops what an earlier one
    had left to draw."""
    added = []
    draw_next = EvaluationView._draw_next

    def counting(self, chain):
        before = len(self.plots) + (self.confusion_table is not None)
        draw_next(self, chain)
        added.append(len(self.plots) + (self.confusion_table is not None) - before)

    monkeypatch.setattr(EvaluationView, "_draw_next", counting)
    view.show_report(reports["sentiment"])
    assert not view.done and view.plots == {} and view.confusion_table is None  # nothing built in the call
    qtbot.waitUntil(lambda: view.done, timeout=10_000)
    assert view.sections == EXPECTED["sentiment"] and max(added) == 1 and sum(added) == 3

    drawn = []
    view.drawn.connect(lambda: drawn.append(list(view.sections)))
    view.show_report(reports["recommender"])  # four curve plots and the buckets' to come...
    qtbot.waitUntil(lambda: len(view.plots) >= 1, timeout=10_000)
    view.show_report(reports["tiny"])  # ...dropped for this one
    qtbot.waitUntil(lambda: view.done, timeout=10_000)
    qtbot.wait(50)  # turns the dropped chain would have drawn in
    assert view.sections == ["confusion"] and view.plots == {} and drawn == [["confusion"]]
    assert view.grid.count() == 1

    view.show_report(reports["recommender"])
    view.clear("Evaluating…")
    qtbot.wait(50)
    assert view.done and view.plots == {} and view.grid.count() == 0 and drawn == [["confusion"]]


def test_a_lone_last_plot_spans_both_columns_and_empty_sections_leave_no_gap(qtbot, view, reports):
    report = copy.deepcopy(reports["recommender"])
    show(qtbot, view, report)
    widgets = [view.grid.itemAt(i).widget() for i in range(view.grid.count())]
    assert len(widgets) == len(report["curves"]) + 1
    spans = [view.grid.getItemPosition(view.grid.indexOf(w))[3] for w in widgets]
    assert spans == ([1] * (len(widgets) - 1) + [2] if len(widgets) % 2 else [1] * len(widgets))
    report["curves"][0]["series"] = []  # a curve with nothing to draw: the others close ranks
    show(qtbot, view, report)
    widgets = [view.grid.itemAt(i).widget() for i in range(view.grid.count())]
    assert len(widgets) == len(report["curves"]) and "curve0" not in view.plots
    cells = sorted(view.grid.getItemPosition(view.grid.indexOf(w))[:2] for w in widgets)
    assert cells[:2] == [(0, 0), (0, 1)]


def test_headline_without_fields():
    assert headline({}) == "?"
    assert "ROC AUC 0.7500" in headline({"task": "t", "roc": {"auc": 0.75}, "metrics": {"accuracy": None}})
