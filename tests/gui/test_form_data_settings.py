"""Run setup: the data settings (validation / test data with browse buttons, delimiter, columns) fill the
config, show a saved config, and a Columns text that is not NAME=FILE_NAME pairs blocks Start with a message."""

from __future__ import annotations

import os

import pytest
from gui_helpers import UI_WAIT_MS, find, quick_run, set_field
from PySide6.QtWidgets import QToolButton

from core.config import RunConfig


def _data_files(tmp_path):
    files = {}
    for name in ("train", "val", "test"):
        path = tmp_path / f"{name}.csv"
        path.write_text("text,label\ngood,1\nbad,0\n", encoding="utf-8")
        files[name] = str(path)
    return files


@pytest.mark.timeout(30)
def test_data_fields_fill_the_config(qtbot, window, tmp_path):
    files = _data_files(tmp_path)
    set_field(window, "taskCombo", "sentiment")
    set_field(window, "dataEdit", files["train"])
    set_field(window, "valDataEdit", files["val"])
    set_field(window, "testDataEdit", files["test"])
    set_field(window, "delimiterEdit", "\\t")
    set_field(window, "columnsEdit", "text=review, label = stars")
    config = window.setupPanel.config()
    assert (config.data, config.val_data, config.test_data) == (files["train"], files["val"], files["test"])
    assert config.delimiter == "\t"  # typed as \t: a tab
    assert config.columns == {"text": "review", "label": "stars"}
    assert window.setupPanel.errors() == {}
    # browse buttons beside the data paths, like the data file's
    for name in ("valDataEdit", "testDataEdit"):
        assert find(window, name).parent().findChild(QToolButton) is not None


@pytest.mark.timeout(30)
def test_saved_config_shows_in_the_data_fields(qtbot, window, tmp_path):
    files = _data_files(tmp_path)
    config = RunConfig.for_task(
        "sentiment",
        data=files["train"],
        test_data=files["test"],
        delimiter="\t",
        columns={"user_id": "userId", "item_id": "movieId"},
    )
    window.setupPanel.set_config(config)
    assert find(window, "testDataEdit").text() == files["test"]
    assert find(window, "valDataEdit").text() == ""
    assert find(window, "delimiterEdit").text() == "\\t"
    assert find(window, "columnsEdit").text() == "user_id=userId, item_id=movieId"
    again = window.setupPanel.config()
    assert (again.columns, again.delimiter, again.test_data) == (config.columns, "\t", files["test"])


@pytest.mark.timeout(30)
def test_bad_columns_text_blocks_start_with_a_message(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    start = find(window, "startButton")
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)

    set_field(window, "columnsEdit", "user_id=userId, movieId")
    qtbot.waitUntil(lambda: not start.isEnabled(), timeout=UI_WAIT_MS)
    error = find(window, "columnsError")
    assert error.isVisible()
    assert "'movieId' is not NAME=FILE_NAME" in error.text()
    assert "Columns: " in window.setupPanel.problem_summary()
    assert find(window, "columnsEdit").property("invalid") is True

    set_field(window, "columnsEdit", "user_id=userId")
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)
    assert not error.isVisible()


@pytest.mark.timeout(30)
def test_missing_test_file_is_a_field_error(qtbot, window, tmp_path):
    files = _data_files(tmp_path)
    quick_run(window, tmp_path / "run")
    set_field(window, "taskCombo", "sentiment")
    set_field(window, "dataEdit", files["train"])
    set_field(window, "testDataEdit", str(tmp_path / "nowhere.csv"))
    start = find(window, "startButton")
    qtbot.waitUntil(lambda: find(window, "testDataError").isVisible(), timeout=UI_WAIT_MS)
    assert find(window, "testDataError").text() == f"{tmp_path / 'nowhere.csv'}: no such file or folder"
    assert not start.isEnabled()


@pytest.mark.timeout(30)
@pytest.mark.skipif(not os.environ.get("AMP_FORM_SCREENSHOT"), reason="writes a screenshot to look at by hand")
def test_form_screenshot(qtbot, window, tmp_path):
    files = _data_files(tmp_path)
    set_field(window, "taskCombo", "sentiment")
    set_field(window, "dataEdit", files["train"])
    set_field(window, "valDataEdit", files["val"])
    set_field(window, "columnsEdit", "user_id=userId, movieId")
    window.resize(1400, 1000)
    error = find(window, "columnsError")
    panel = window.setupPanel
    qtbot.waitUntil(lambda: error.isVisible() and panel.height() >= panel.sizeHint().height(), timeout=UI_WAIT_MS)
    window.setupPanel.grab().save(os.environ["AMP_FORM_SCREENSHOT"])


def _group_of(widget) -> str:
    from PySide6.QtWidgets import QGroupBox

    while widget is not None and not isinstance(widget, QGroupBox):
        widget = widget.parentWidget()
    return widget.title() if widget is not None else ""


def test_the_data_source_sits_in_the_task_group_and_synthetic_options_show_only_without_it(qtbot, window, tmp_path):
    files = _data_files(tmp_path)
    set_field(window, "taskCombo", "ranking")
    for name in ("dataEdit", "valDataEdit", "testDataEdit", "delimiterEdit", "columnsEdit"):
        assert _group_of(find(window, name)) == "Task", name
    form = window.setupPanel._task_form
    rows = {name: form.getWidgetPosition(window.setupPanel._option_rows[name])[0] for name in ("hidden", "queries")}
    data_row = form.getWidgetPosition(window.setupPanel._rows["data"])[0]
    assert rows["hidden"] < data_row < rows["queries"]  # the model's options, the data, then synthetic-only ones
    note = find(window, "syntheticNote")
    options = window.setupPanel._option_rows
    synthetic = [options[name] for name in ("queries", "docs", "features", "noise")]
    qtbot.waitUntil(lambda: options["hidden"].isVisible(), timeout=UI_WAIT_MS)  # rows added to a shown form show next
    assert note.isVisible() and all(row.isVisible() for row in synthetic)

    set_field(window, "dataEdit", files["train"])
    qtbot.waitUntil(lambda: not note.isVisible(), timeout=UI_WAIT_MS)
    assert not any(row.isVisible() for row in synthetic)
    assert options["hidden"].isVisible()  # the model's options stay

    set_field(window, "taskCombo", "recommender")  # another task, its own synthetic options hidden too
    qtbot.waitUntil(lambda: options["d_model"].isVisible(), timeout=UI_WAIT_MS)
    assert not options["items"].isVisible()
    set_field(window, "dataEdit", "")
    qtbot.waitUntil(lambda: options["items"].isVisible(), timeout=UI_WAIT_MS)
    assert note.isVisible()


def test_placeholders_fit_their_fields_at_the_default_window_size(qtbot, window):
    from PySide6.QtWidgets import QLineEdit

    window.resize(1400, 860)
    qtbot.waitUntil(lambda: window.setupPanel.width() > 0, timeout=UI_WAIT_MS)
    for name in ("dataEdit", "valDataEdit", "testDataEdit", "delimiterEdit", "columnsEdit", "outDirEdit"):
        edit = find(window, name, QLineEdit)
        text = edit.placeholderText()
        assert text, name
        room = edit.contentsRect().width() - 8  # the line edit's own text margins
        assert edit.fontMetrics().horizontalAdvance(text) <= room, f"{name}: {text!r} is clipped at {room} px"
