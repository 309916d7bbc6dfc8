"""The Model preview (Tools > Try a model…): each task's page shows exactly what core.runs.predict's Predictor
says for the same input (the predict CLI is checked against the same Predictor), computed off the GUI thread;
a corrupt checkpoint is a message in the panel; and it works while a run is training in the window."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import MODES, PROCESS_WAIT_MS, UI_WAIT_MS, click, find, loss_points, quick_run, set_field
from PySide6.QtCore import Qt

SHOTS = os.environ.get("AMP_PREVIEW_SHOTS", "")  # a folder: save a screenshot of each task's page there
RECOMMENDER = "recommender-synthetic"  # the shared recommender of synthetic ids 0..n-1: typed ids are numbers


@pytest.fixture
def runs(trained_runs) -> Path:
    """The session's shared runs root (read only): a small trained run of each task, and the synthetic recommender."""
    return trained_runs.root


@pytest.fixture
def dialog(qtbot, runs):
    from app.panels.preview import PreviewDialog

    view = PreviewDialog(lambda: runs)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    yield view
    view.shutdown()


def predictor(runs: Path, task: str):
    from core.runs.predict import load_predictor

    return load_predictor(runs / task, device="cpu")  # the run's advised checkpoint, as the preview loads it


def open_run(qtbot, view, folder: Path, task: str):
    view.select_run(str(folder))

    def loaded() -> bool:  # this folder's checkpoint, not the one shown before the list was scanned again
        predictor = view.predictor
        return (
            predictor is not None
            and predictor.task == task
            and Path(folder).resolve() in Path(str(predictor.checkpoint)).resolve().parents
        )

    qtbot.waitUntil(loaded, timeout=30_000)
    assert view.stack.currentWidget() is view.pages[task]
    assert view.current_source() == str(folder)  # the chooser names what is loaded
    assert f"<b>{task}</b>" in view.header.text() and "step" in view.header.text()
    return view.pages[task]


def shot(view, task: str) -> None:
    if SHOTS:
        from PySide6.QtWidgets import QApplication

        QApplication.processEvents()  # the pending layout pass (a label grown by a line)
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        view.grab().save(str(Path(SHOTS) / f"preview_{task}.png"))


def type_review(qtbot, page, text: str) -> None:
    page.edit.clear()
    qtbot.keyClicks(page.edit, text)
    qtbot.waitUntil(lambda: page.scored_text == text and page.explained_text == text, timeout=UI_WAIT_MS)
    assert page.score is not None and page.words


def test_sentiment_scores_as_you_type(qtbot, dialog, runs):
    page = open_run(qtbot, dialog, runs / "sentiment", "sentiment")
    reference = predictor(runs, "sentiment")
    started = dialog.queue.started
    text = "great lesson, clear and useful, but the pace was boring"
    type_review(qtbot, page, text)
    # one keystroke at a time, yet only the text as it stood after the pause was sent (score + explain)
    assert dialog.queue.started - started < len(text) // 4
    assert page.score == pytest.approx(reference.sentiment([text])[0], abs=1e-6)
    assert f"{page.score:.3f}" in page.output.label.text()
    assert page.output.bar.value() == round(page.score * 1000)
    expected = reference.explain(text)
    assert [w for w, _ in page.words] == [w for w, _ in expected]
    assert [e for _, e in page.words] == pytest.approx([e for _, e in expected], abs=1e-6)
    table = page.words_table
    assert table.rowCount() == len(expected)
    first_word, first_effect = expected[0]
    assert first_word in table.item(0, 0).text() and table.item(0, 1).text() == f"{first_effect:+.3f}"
    assert table.item(0, 0).text().startswith("▲" if first_effect >= 0 else "▼")

    other = "boring and confusing, a waste of time"
    type_review(qtbot, page, other)
    assert page.score == pytest.approx(reference.sentiment([other])[0], abs=1e-6)
    shot(dialog, "sentiment")


def test_recommender_top10_is_the_predictors(qtbot, dialog, runs):
    page = open_run(qtbot, dialog, runs / RECOMMENDER, "recommender")
    reference = predictor(runs, RECOMMENDER)
    users = reference.example_users(200)
    assert page.userCombo.count() == len(users) > 1
    qtbot.waitUntil(lambda: page.result is not None, timeout=UI_WAIT_MS)
    expected = reference.recommend(users[0][1], k=10, exclude_seen=True)
    assert page.result.items == expected.items and page.result.scores == pytest.approx(expected.scores)
    assert [page.table.item(r, 1).text() for r in range(page.table.rowCount())] == [str(i) for i in expected.items]

    page.userCombo.setCurrentIndex(1)  # another user: the history field follows and the list is theirs
    qtbot.waitUntil(lambda: page.asked is not None and page.asked[0] == list(users[1][1]), timeout=UI_WAIT_MS)
    assert page.result.items == reference.recommend(users[1][1]).items

    page.excludeCheck.setChecked(False)  # seen lessons come back, marked
    qtbot.waitUntil(lambda: page.asked is not None and page.asked[1] is False, timeout=UI_WAIT_MS)
    unfiltered = reference.recommend(users[1][1], exclude_seen=False)
    assert page.result.items == unfiltered.items and page.result.seen == unfiltered.seen
    marks = [page.table.item(r, 3).text() for r in range(page.table.rowCount())]
    assert marks == ["seen" if s else "" for s in unfiltered.seen]

    page.historyEdit.clear()
    qtbot.keyClicks(page.historyEdit, "3, 17, 42, no-such-lesson, 999999")  # typed ids; unknown ones are named
    assert page.userCombo.currentIndex() == -1  # no longer user 1's history
    qtbot.waitUntil(
        lambda: page.asked is not None and page.asked[0] == [3, 17, 42, "no-such-lesson", 999999], timeout=UI_WAIT_MS
    )
    typed = reference.recommend([3, 17, 42, "no-such-lesson", 999999], exclude_seen=False)
    assert page.result.items == typed.items and page.result.unknown == typed.unknown
    assert "no-such-lesson" in page.infoLabel.text() and "999999" in page.infoLabel.text()
    shot(dialog, "recommender")
    page.excludeCheck.setChecked(True)
    page.userCombo.setCurrentIndex(0)
    qtbot.waitUntil(lambda: page.asked is not None and page.asked == (list(users[0][1]), True), timeout=UI_WAIT_MS)


def test_the_panel_says_what_predict_says(qtbot, dialog, runs, tmp_path, capsys):
    """The same input through the panel and through `amp-console predict`: the same numbers, the same ids."""
    import csv

    from core.cli.main import main

    def predict_cli(folder: Path, header: str, row: str) -> list[dict]:
        source, out = tmp_path / f"{folder.name}.csv", tmp_path / f"{folder.name}-out.csv"
        source.write_text(f"{header}\n{row}\n", encoding="utf-8")
        assert main(["predict", str(folder), "--input", str(source), "--out", str(out)]) == 0, capsys.readouterr()
        with open(out, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    page = open_run(qtbot, dialog, runs / "sentiment", "sentiment")
    text = "clear, useful and never boring"
    type_review(qtbot, page, text)
    [row] = predict_cli(runs / "sentiment", "text", f'"{text}"')
    assert float(row["p_positive"]) == pytest.approx(page.score, abs=1e-6)

    page = open_run(qtbot, dialog, runs / "tiny", "tiny")  # its fields are named as predict's columns: x1..x10
    names = [find(page, f"previewTinyLabel{i}").text() for i in range(len(page.inputs))]
    assert names == [f"x{n}" for n in range(1, 11)]
    qtbot.waitUntil(
        lambda: page.probabilities is not None and page.asked == pytest.approx(page.values()), timeout=UI_WAIT_MS
    )
    values = page.values()
    [row] = predict_cli(runs / "tiny", ",".join(reversed(names)), ",".join(map(str, reversed(values))))
    assert [float(row["p0"]), float(row["p1"])] == pytest.approx(page.probabilities, abs=1e-5)

    page = open_run(qtbot, dialog, runs / RECOMMENDER, "recommender")
    page.historyEdit.setText("3 17 42 5")
    qtbot.waitUntil(lambda: page.asked == ([3, 17, 42, 5], True), timeout=UI_WAIT_MS)
    rows = predict_cli(runs / RECOMMENDER, "history", "3 17 42 5")
    assert [int(r["item_id"]) for r in rows] == page.result.items
    assert [float(r["score"]) for r in rows] == pytest.approx(page.result.scores, abs=1e-5)


def test_a_run_whose_data_is_gone_still_answers_typed_ids(qtbot, dialog, runs, monkeypatch):
    from core.errors import DataError
    from core.tasks.recommender.serving import RecommenderTaskServing

    def gone(self, predictor, limit=200):
        raise DataError("/data/lessons.csv: no such file")

    monkeypatch.setattr(RecommenderTaskServing, "example_users", gone)
    page = open_run(qtbot, dialog, runs / RECOMMENDER, "recommender")
    # the examples are asked for off the GUI thread after the page opens: their failure lands a moment later
    qtbot.waitUntil(lambda: "No examples from the run's data" in dialog.statusLabel.text(), timeout=UI_WAIT_MS)
    assert "No examples from the run's data: /data/lessons.csv: no such file" in dialog.statusLabel.text()
    assert page.userCombo.count() == 0
    page.historyEdit.setText("5 6 7")
    qtbot.waitUntil(lambda: page.asked is not None and page.asked[0] == [5, 6, 7], timeout=UI_WAIT_MS)
    assert page.result.items == predictor(runs, RECOMMENDER).recommend([5, 6, 7]).items


def test_ranking_table_is_ordered_by_the_models_score(qtbot, dialog, runs):
    from core.tasks.ranking.losses import ndcg_at  # the preview's measure is the task's own (its serving says)

    page = open_run(qtbot, dialog, runs / "ranking", "ranking")
    reference = predictor(runs, "ranking")
    queries = reference.example_queries(200)
    qtbot.waitUntil(lambda: page.table.rowCount() > 0, timeout=UI_WAIT_MS)
    for index in (0, 1):
        page.queryCombo.setCurrentIndex(index)
        query = queries[index]
        scores = reference.rank(query.features)
        qtbot.waitUntil(
            lambda s=scores: page.scores and page.scores == pytest.approx(s.tolist(), abs=1e-6), timeout=UI_WAIT_MS
        )
        shown = [float(page.table.item(r, 2).text()) for r in range(page.table.rowCount())]
        assert shown == sorted(shown, reverse=True) and len(shown) == len(query.doc_ids)
        order = np.argsort(-scores, kind="stable")
        assert [page.table.item(r, 1).text() for r in range(len(order))] == [str(query.doc_ids[i]) for i in order]
        labels = [page.table.item(r, 3).text() for r in range(len(order))]
        assert labels == [str(int(query.labels[i])) for i in order]
        assert page.measure_name == "NDCG@10" and page.measure == pytest.approx(ndcg_at(query.labels[order]))
    assert f"{page.measure:.3f}" in page.infoLabel.text()
    page.queryCombo.setCurrentIndex(0)
    qtbot.waitUntil(lambda: page.table.rowCount() == len(queries[0].doc_ids), timeout=UI_WAIT_MS)
    shot(dialog, "ranking")


def test_tiny_probabilities_for_a_sample_and_typed_numbers(qtbot, dialog, runs):
    page = open_run(qtbot, dialog, runs / "tiny", "tiny")
    reference = predictor(runs, "tiny")
    samples = reference.example_rows(20)
    qtbot.waitUntil(lambda: page.probabilities is not None, timeout=UI_WAIT_MS)
    assert page.values() == pytest.approx(samples[0].tolist(), abs=1e-4)  # the first sample, shown as typed
    expected = reference.predict_rows(np.asarray([page.values()], dtype=np.float32))[0]
    assert page.probabilities == pytest.approx(expected.tolist(), abs=1e-6)

    page.inputs[0].setValue(3.5)
    page.inputs[4].setValue(-2.25)
    qtbot.waitUntil(lambda: page.asked == pytest.approx(page.values()), timeout=UI_WAIT_MS)
    expected = reference.predict_rows(np.asarray([page.values()], dtype=np.float32))[0]
    assert page.probabilities == pytest.approx(expected.tolist(), abs=1e-6)
    assert page.labels[0].text() == f"{expected[0]:.3f}"
    click(qtbot, page, "previewTinySampleButton")  # the next sample
    qtbot.waitUntil(lambda: page.asked == pytest.approx(samples[1].tolist(), abs=1e-4), timeout=UI_WAIT_MS)
    shot(dialog, "tiny")


def test_the_newest_request_of_a_kind_wins_and_none_piles_up(qtbot):
    import threading

    from app.panels.preview.queue import PredictionQueue

    queue = PredictionQueue()
    results, errors = [], []
    queue.finished.connect(lambda kind, result: results.append((kind, result)))
    queue.failed.connect(lambda kind, message, _details: errors.append((kind, message)))
    gate = threading.Event()
    ran = []

    def slow():
        ran.append("first")
        assert gate.wait(20)
        return "first"

    queue.submit("score", slow)
    qtbot.waitUntil(lambda: ran == ["first"], timeout=10_000)
    for text in ("g", "gr", "gre", "grea", "great"):  # typed while the first runs: only the last will run
        queue.submit("score", lambda text=text: ran.append(text) or text)
    queue.submit("explain", lambda: ran.append("explain") or "words")
    queue.submit("broken", lambda: 1 / 0)
    gate.set()
    qtbot.waitUntil(lambda: queue.idle and len(ran) == 3, timeout=10_000)
    assert ran == ["first", "great", "explain"] and queue.started == 4  # "broken" ran too, and failed
    assert results == [("score", "great"), ("explain", "words")]  # the first's result was overtaken: dropped
    assert errors and errors[0][0] == "broken" and "ZeroDivisionError" in errors[0][1]

    gate.clear()
    ran.clear()
    queue.submit("score", slow)
    qtbot.waitUntil(lambda: ran == ["first"], timeout=10_000)
    queue.submit("score", lambda: "stale")
    queue.submit("load", lambda: "model", supersede=True)  # a load drops what was asked of the old model
    gate.set()
    qtbot.waitUntil(lambda: queue.idle, timeout=10_000)
    assert results[-1] == ("load", "model") and ("score", "stale") not in results and ("score", "first") not in results
    queue.shutdown()


def test_a_corrupt_checkpoint_is_a_message_in_the_panel(qtbot, dialog, runs, tmp_path):
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"garbage, not a checkpoint")
    dialog.open_file(str(bad))
    qtbot.waitUntil(
        lambda: dialog.stack.currentWidget() is dialog.messageLabel and "broken.pt" in dialog.messageLabel.text(),
        timeout=UI_WAIT_MS,
    )
    assert "not a checkpoint" in dialog.messageLabel.text() and dialog.predictor is None
    assert dialog.isVisible()
    truncated = tmp_path / "truncated.pt"  # half of a real checkpoint: a torn copy
    data = (runs / "tiny" / "checkpoint.pt").read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    dialog.open_file(str(truncated))
    qtbot.waitUntil(lambda: "truncated.pt" in dialog.messageLabel.text(), timeout=UI_WAIT_MS)
    assert dialog.predictor is None
    shot(dialog, "error")
    open_run(qtbot, dialog, runs / "tiny", "tiny")  # the panel works on after a failure


def test_a_checkpoint_of_an_unknown_task_is_a_message(qtbot, dialog, runs, tmp_path):
    import torch

    state = torch.load(runs / "tiny" / "checkpoint.pt", weights_only=True)
    state["task"] = "weather"
    torch.save(state, tmp_path / "weather.pt")
    dialog.open_file(str(tmp_path / "weather.pt"))
    qtbot.waitUntil(lambda: "weather.pt" in dialog.messageLabel.text(), timeout=UI_WAIT_MS)
    assert "weather" in dialog.messageLabel.text().split("weather.pt:", 1)[-1] and dialog.predictor is None


def test_closed_mid_load_and_opened_again_it_loads_again(qtbot, dialog, runs):
    open_run(qtbot, dialog, runs / "tiny", "tiny")
    dialog.open_file(str(runs / "ranking" / "best.pt"))
    dialog.close()  # the load in flight is dropped; nothing blocks the close
    assert dialog.predictor is None
    dialog.show()
    qtbot.waitUntil(lambda: dialog.predictor is not None and dialog.queue.idle, timeout=30_000)
    assert dialog.predictor.task == "ranking" and dialog.stack.currentWidget() is dialog.pages["ranking"]


def test_a_newer_choice_supersedes_a_load_in_flight(qtbot, dialog, runs):
    open_run(qtbot, dialog, runs / "tiny", "tiny")
    dialog.open_file(str(runs / "sentiment" / "best.pt"))
    dialog.open_file(str(runs / "ranking" / "checkpoint.pt"))  # asked before the sentiment load could land
    qtbot.waitUntil(lambda: dialog.queue.idle and dialog.predictor is not None, timeout=30_000)
    assert dialog.predictor.task == "ranking" and dialog.predictor.checkpoint.name == "checkpoint.pt"
    assert dialog.stack.currentWidget() is dialog.pages["ranking"]


def test_evaluation_tab_evaluates_and_reads_back_the_report(qtbot, dialog, trained_runs, tmp_path):
    from core.runs.evaluation_report import load_report

    folder = trained_runs["sentiment"].copy_to(tmp_path)  # a copy: the report is written into the run folder
    open_run(qtbot, dialog, folder, "sentiment")
    tab = dialog.evaluation
    dialog.tabs.setCurrentWidget(tab)
    qtbot.waitUntil(lambda: "No evaluation report" in tab.infoLabel.text(), timeout=UI_WAIT_MS)
    assert tab.report is None and tab.evaluateButton.isEnabled()
    click(qtbot, tab, "previewEvaluateButton")
    # the report arrives before the job's end relabels the button: wait for both
    qtbot.waitUntil(lambda: tab.report is not None and tab.evaluateButton.text() == "Evaluate again", timeout=60_000)
    saved = load_report(folder)
    assert saved is not None and saved["checkpoint"] == str(dialog.predictor.checkpoint)
    qtbot.waitUntil(lambda: tab.view.done, timeout=UI_WAIT_MS)  # drawn a section per turn of the event loop
    assert tab.report["metrics"] == saved["metrics"] and "roc" in tab.view.sections
    assert "best.pt" in tab.infoLabel.text() and tab.evaluateButton.text() == "Evaluate again"
    shot(dialog, "evaluation")

    dialog.whichCombo.setCurrentIndex(dialog.whichCombo.findData("last"))  # the last checkpoint: the saved
    dialog.load()  # report is of the best, and says so
    qtbot.waitUntil(lambda: dialog.predictor is not None and tab.report is not None, timeout=UI_WAIT_MS)
    assert dialog.predictor.checkpoint == folder / "checkpoint.pt"
    assert tab.report["metrics"] == saved["metrics"]
    assert "This report measured best.pt; Evaluate measures checkpoint.pt" in tab.infoLabel.text()


def test_a_torn_evaluation_json_is_named_not_taken_for_no_report(qtbot, dialog, trained_runs, tmp_path):
    folder = trained_runs["tiny"].copy_to(tmp_path)
    (folder / "evaluation.json").write_text('{"task": "tiny", "metrics": {', encoding="utf-8")
    open_run(qtbot, dialog, folder, "tiny")
    tab = dialog.evaluation
    dialog.tabs.setCurrentWidget(tab)
    qtbot.waitUntil(lambda: "Could not read" in tab.view.message.text(), timeout=UI_WAIT_MS)
    assert "evaluation.json: line 1: not valid JSON" in tab.view.message.text()
    assert tab.report is None and tab.evaluateButton.isEnabled()  # Evaluate writes a whole one again


@pytest.mark.timeout(300)
@MODES
def test_preview_while_a_run_trains_in_the_window(qtbot, window, runs, tmp_path, separate):
    window.set_runs_root(str(runs))
    quick_run(window, tmp_path / "training", max_steps=1_000_000, samples=8192, separate_process=separate)
    set_field(window, "checkpointIntervalEdit", 20)
    click(qtbot, window, "startButton")
    qtbot.waitUntil(lambda: loss_points(window) >= 2, timeout=PROCESS_WAIT_MS)

    history = window.show_history()  # the History's Try it… opens the preview on the selected run
    panel = history.panel
    qtbot.waitUntil(lambda: "sentiment" in panel.visible_names(), timeout=PROCESS_WAIT_MS)
    panel.select_names("sentiment")
    button = find(panel, "historyPreviewButton")
    assert button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    view = window.previewDialog
    assert view is not None and view.isVisible()
    page = open_run(qtbot, view, runs / "sentiment", "sentiment")
    text = "clear and useful lesson"
    type_review(qtbot, page, text)
    assert window.controller.running  # the answer came while the run trained
    assert page.score == pytest.approx(predictor(runs, "sentiment").sentiment([text])[0], abs=1e-6)

    # the training run itself (outside the runs root): its last checkpoint, read beside the writer
    training = tmp_path / "training"
    qtbot.waitUntil(lambda: (training / "checkpoint.pt").is_file(), timeout=PROCESS_WAIT_MS)
    view.whichCombo.setCurrentIndex(view.whichCombo.findData("last"))
    tiny = open_run(qtbot, view, training, "tiny")
    assert view.predictor.checkpoint == training / "checkpoint.pt"
    qtbot.waitUntil(lambda: tiny.probabilities is not None, timeout=PROCESS_WAIT_MS)
    assert window.controller.running

    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=30_000, check_params_cb=lambda running: not running
    ):
        click(qtbot, window, "stopButton")
    assert window.previewAction.shortcut().toString() == "Ctrl+Shift+P"
    assert window.show_preview() is view  # the menu entry brings the same view back


@pytest.mark.timeout(60)
def test_try_a_model_waits_for_the_engine(qtbot, settings, cpu_devices):
    from app.main_window import MainWindow

    window = MainWindow(settings=settings, devices=cpu_devices, prestart_runs=False)
    qtbot.addWidget(window)
    assert not window.previewAction.isEnabled() and window.show_preview() is None
    window.load_engine()
    assert window.previewAction.isEnabled()
    window.previewAction.trigger()
    assert window.previewDialog is not None and window.previewDialog.isVisible()
    qtbot.waitUntil(lambda: not window.previewDialog.scans.busy, timeout=UI_WAIT_MS)


@pytest.mark.timeout(60)
def test_try_a_model_offers_the_windows_own_devices(qtbot, make_window, cpu_devices):
    import dataclasses

    gpu = dataclasses.replace(cpu_devices[0], id="cuda:0", type="cuda", name="Fake GPU")
    window = make_window(devices=[*cpu_devices, gpu])
    view = window.show_preview()
    combo = view.deviceCombo
    assert [combo.itemText(i) for i in range(combo.count())] == ["cpu", "cuda:0"]
