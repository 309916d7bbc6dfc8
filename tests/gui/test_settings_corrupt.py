"""Corrupt saved settings never brick the window: each bad value is ignored on its own, with a note in the log."""

from __future__ import annotations

import json
import re

import pytest
from gui_helpers import UI_WAIT_MS, find
from PySide6.QtCore import QByteArray, QSettings

from core.config import RunConfig

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(60)]

TINY = RunConfig.for_task("tiny")


def notes(window) -> list[str]:
    return [line for line in window.logPanel.toPlainText().splitlines() if "Settings:" in line]


def assert_usable(qtbot, window) -> None:
    """The engine is loaded, the form takes input and a valid form can be started."""
    assert window.engine_ready
    assert window.setupPanel.isEnabled()
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)


def write_ini(settings: QSettings, text: str) -> QSettings:
    """Replace the settings file with raw text (what a crash mid-write or a hand edit leaves behind)."""
    path = settings.fileName()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return QSettings(path, QSettings.Format.IniFormat)


def test_garbage_window_layout_is_ignored(qtbot, make_window, settings):
    store = write_ini(
        settings, "[window]\ngeometry=not a geometry\nmainSplitter=garbage\nrightSplitter=@ByteArray(\\0\\x1junk)\n"
    )
    window = make_window(settings_store=store)
    assert_usable(qtbot, window)
    assert all(size > 0 for size in window.mainSplitter.sizes())
    logged = "\n".join(notes(window))
    for key in ("window/geometry", "window/mainSplitter", "window/rightSplitter"):
        assert key in logged
    window.close()  # and the next launch starts clean: good layout saved over the bad one
    again = make_window(settings_store=QSettings(store.fileName(), QSettings.Format.IniFormat))
    assert not notes(again)


@pytest.mark.parametrize("saved", ["{not json", "[1, 2]", "42", "null", '"text"'])
def test_unreadable_saved_form_leaves_the_defaults(qtbot, make_window, settings, saved):
    settings.setValue("run/config", saved)
    settings.sync()
    window = make_window(settings_store=settings)
    assert_usable(qtbot, window)
    assert window.setupPanel.config().lr == TINY.lr
    (note,) = notes(window)
    assert "saved run settings" in note


def test_saved_form_bytes_that_are_not_text(qtbot, make_window, settings):
    settings.setValue("run/config", QByteArray(b"\xff\xfe\x00garbage"))
    settings.sync()
    window = make_window(settings_store=settings)
    assert_usable(qtbot, window)
    assert "saved run settings" in notes(window)[0]


def test_bad_fields_fall_back_one_by_one_and_good_ones_stay(qtbot, make_window, settings):
    saved = (
        '{"task": "tiny", "lr": NaN, "weight_decay": Infinity, "momentum": -1, "batch_size": 77, '
        '"epochs": "3", "seed": 5, "precision": "fp64", "schedule": "cosine", "grad_scaler": true, '
        '"task_options": {"hidden": 24, "samples": "many", "gone": 1}}'
    )
    settings.setValue("run/config", saved)
    settings.sync()
    window = make_window(settings_store=settings)
    assert_usable(qtbot, window)
    config = window.setupPanel.config()
    # kept
    assert config.batch_size == 77 and config.seed == 5 and config.schedule == "cosine"
    assert config.task_options["hidden"] == 24
    # back to the task's defaults
    assert config.lr == TINY.lr and config.weight_decay == TINY.weight_decay and config.momentum == TINY.momentum
    assert config.epochs == TINY.epochs and config.precision == "auto"
    assert find(window, "samplesOptionEdit").value() == 8192
    assert "gone" not in config.task_options
    logged = notes(window)
    for name in (
        "lr",
        "weight_decay",
        "momentum",
        "epochs",
        "precision",
        "grad_scaler",
        "task_options.samples",
        "task_options.gone",
    ):
        named = re.compile(rf"saved (setting )?'?{re.escape(name)}'?[ :=]")
        assert sum(bool(named.search(line)) for line in logged) == 1, (name, logged)
    assert len(logged) == 8
    assert any("nan is out of range: must be between 1e-07 and 10" in line for line in logged)


def test_an_unknown_task_falls_back_and_keeps_the_rest(qtbot, make_window, settings):
    settings.setValue("run/config", json.dumps({"task": "vanished", "batch_size": 50, "task_options": {"layers": 3}}))
    settings.sync()
    window = make_window(settings_store=settings)
    assert_usable(qtbot, window)
    config = window.setupPanel.config()
    assert config.task == "tiny" and config.batch_size == 50
    (note,) = notes(window)
    assert "'vanished'" in note and "task" in note


def test_a_saved_data_file_that_is_gone(qtbot, make_window, settings, tmp_path):
    settings.setValue("run/config", json.dumps({"task": "tiny", "data": str(tmp_path / "gone.csv"), "batch_size": 40}))
    settings.sync()
    window = make_window(settings_store=settings)
    assert_usable(qtbot, window)
    assert window.setupPanel.config().data == "" and window.setupPanel.config().batch_size == 40
    assert "no such file" in notes(window)[0]


def test_bad_execution_choices_fall_back(qtbot, make_window, settings):
    settings.setValue("run/processes", "abc")
    settings.setValue("run/separateProcess", "maybe")
    settings.sync()
    window = make_window(settings_store=settings)
    assert_usable(qtbot, window)
    assert window.setupPanel.processes() == 1
    assert find(window, "separateProcessCheck").isChecked()
    logged = "\n".join(notes(window))
    assert "run/processes" in logged and "run/separateProcess" in logged
