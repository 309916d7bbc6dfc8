"""Typing into the run form: a typed value stays as typed, core's message marks it, Start waits until it is fixed."""

from __future__ import annotations

import pytest
from gui_helpers import UI_WAIT_MS, find, quick_run, run_form
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from core.config import RunConfig


def type_into(qtbot, window, name: str, text: str) -> None:
    """Click into the field, replace its text by typing, and leave it with Tab, as a user does."""
    widget = find(window, name)
    window.activateWindow()
    widget.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.waitUntil(widget.hasFocus, timeout=UI_WAIT_MS)
    widget.selectAll()
    qtbot.keyClick(widget, Qt.Key.Key_Backspace)
    qtbot.keyClicks(widget, text)
    qtbot.keyClick(widget, Qt.Key.Key_Tab)
    qtbot.waitUntil(lambda: not widget.hasFocus(), timeout=UI_WAIT_MS)


def engine_message(**changes) -> str:
    """Core's message for one bad setting of the tiny task's defaults."""
    (name,) = changes
    return RunConfig.for_task("tiny").replace(**changes).errors()[name]


@pytest.fixture
def form(qtbot):
    """The run form alone, for what it does by itself (Start and the saved settings are the window's)."""
    return run_form(qtbot)


@pytest.fixture
def ready(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    start = find(window, "startButton")
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)
    return window


@pytest.mark.timeout(60)
def test_a_negative_learning_rate_stays_marked_and_blocks_start(qtbot, ready):
    window = ready
    start = find(window, "startButton")
    lr = find(window, "lrEdit")
    type_into(qtbot, window, "lrEdit", "-0.01")

    assert lr.text() == "-0.01"  # not clamped, not put back to the previous value
    qtbot.waitUntil(lambda: not start.isEnabled(), timeout=UI_WAIT_MS)
    message = engine_message(lr=-0.01)
    error = find(window, "lrError")
    assert error.isVisible() and error.text() == message
    assert lr.property("invalid") is True
    assert lr.toolTip().startswith(message)
    summary = find(window, "formProblems")
    assert summary.isVisible() and f"Learning rate: {message}" in summary.text()

    type_into(qtbot, window, "lrEdit", "0.003")
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)
    assert not error.isVisible() and not summary.isVisible()
    assert lr.property("invalid") is False
    assert window.setupPanel.config().lr == 0.003


@pytest.mark.timeout(60)
def test_a_zero_batch_size_stays_marked_and_blocks_start(qtbot, ready):
    window = ready
    start = find(window, "startButton")
    type_into(qtbot, window, "batchSizeEdit", "0")

    assert find(window, "batchSizeEdit").text() == "0"
    qtbot.waitUntil(lambda: not start.isEnabled(), timeout=UI_WAIT_MS)
    assert find(window, "batchSizeError").text() == engine_message(batch_size=0)

    type_into(qtbot, window, "batchSizeEdit", "48")
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)
    assert window.setupPanel.config().batch_size == 48


@pytest.mark.timeout(60)
def test_a_fraction_for_a_whole_number_gets_cores_type_message(qtbot, ready):
    window = ready
    type_into(qtbot, window, "batchSizeEdit", "2.5")
    assert find(window, "batchSizeEdit").text() == "2.5"
    qtbot.waitUntil(lambda: not find(window, "startButton").isEnabled(), timeout=UI_WAIT_MS)
    assert find(window, "batchSizeError").text() == "expected int, got float 2.5"


@pytest.mark.timeout(60)
def test_small_learning_rates_in_scientific_notation(qtbot, ready):
    window = ready
    start = find(window, "startButton")
    lr = find(window, "lrEdit")
    for text, value in (("3e-5", 3e-5), ("1e-6", 1e-6), ("0.00002", 2e-5), ("2.5E-4", 2.5e-4)):
        type_into(qtbot, window, "lrEdit", text)
        assert lr.text() == text
        assert window.setupPanel.config().lr == value
        qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)
    lr.setValue(1e-6)  # shown from a value (a loaded file): not rounded to 0.0000
    assert float(lr.text()) == 1e-6
    lr.setValue(3e-5)
    assert float(lr.text()) == 3e-5


@pytest.mark.timeout(60)
def test_small_weight_decay_and_out_of_range_momentum(qtbot, ready):
    window = ready
    type_into(qtbot, window, "weightDecayEdit", "5e-4")
    assert window.setupPanel.config().weight_decay == 5e-4
    type_into(qtbot, window, "momentumEdit", "1.5")
    assert find(window, "momentumEdit").text() == "1.5"
    qtbot.waitUntil(lambda: find(window, "momentumError").isVisible(), timeout=UI_WAIT_MS)
    assert find(window, "momentumError").text() == engine_message(momentum=1.5)
    assert not find(window, "startButton").isEnabled()


@pytest.mark.timeout(60)
def test_arrows_step_an_invalid_value_back_into_range(qtbot, ready):
    window = ready
    type_into(qtbot, window, "batchSizeEdit", "-5")
    batch = find(window, "batchSizeEdit")
    batch.setFocus()
    qtbot.waitUntil(batch.hasFocus, timeout=UI_WAIT_MS)
    qtbot.keyClick(batch, Qt.Key.Key_Up)
    assert window.setupPanel.config().batch_size == 1  # the smallest allowed, not -4
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)


@pytest.mark.timeout(60)
def test_too_many_processes_are_marked_not_clamped(qtbot, ready):
    window = ready
    window.setupPanel.set_process_limit(2)
    type_into(qtbot, window, "processesEdit", "9")
    assert find(window, "processesEdit").text() == "9"
    qtbot.waitUntil(lambda: not find(window, "startButton").isEnabled(), timeout=UI_WAIT_MS)
    assert "between 1 and 2" in find(window, "processesError").text()
    type_into(qtbot, window, "processesEdit", "1")
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)
    assert window.setupPanel.processes() == 1


@pytest.mark.timeout(60)
def test_an_invalid_typed_value_does_not_replace_the_saved_one(qtbot, ready):
    import json

    window = ready
    type_into(qtbot, window, "lrEdit", "0.004")
    window.save_settings()
    type_into(qtbot, window, "lrEdit", "-1")
    type_into(qtbot, window, "batchSizeEdit", "40")
    assert find(window, "lrEdit").text() == "-1"  # still shown (and marked) in the form
    window.save_settings()
    saved = json.loads(window.settings.value("run/config"))
    assert saved["lr"] == 0.004 and saved["batch_size"] == 40


@pytest.mark.timeout(60)
def test_the_wheel_over_an_unfocused_field_changes_nothing(qtbot, form):
    window = form
    batch = find(window, "batchSizeEdit")
    before = batch.value()
    find(window, "taskCombo").setFocus()
    centre = QPointF(batch.rect().center())
    event = QWheelEvent(
        centre,
        QPointF(batch.mapToGlobal(QPoint(5, 5))),
        QPoint(0, 0),
        QPoint(0, 120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(batch, event)
    assert batch.value() == before


@pytest.mark.timeout(60)
def test_tab_walks_the_form_top_to_bottom(qtbot, form):
    window = form
    combo = find(window, "taskCombo")
    window.activateWindow()
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus, timeout=UI_WAIT_MS)
    qtbot.keyClick(combo, Qt.Key.Key_Tab)  # the task's options come right after the task picker
    assert (
        QApplication.focusWidget() is find(window, "hiddenOptionEdit").lineEdit()
        or find(window, "hiddenOptionEdit").hasFocus()
    )


@pytest.mark.timeout(60)
def test_what_zero_and_empty_mean_is_shown_from_the_help(qtbot, form):
    from core.config import FIELD_SPECS

    window = form
    type_into(qtbot, window, "gradClipEdit", "0")
    assert find(window, "gradClipEdit").text() == "0 (off)"  # FieldSpec help: "...; 0 = off"
    assert form.config().grad_clip == 0.0
    type_into(qtbot, window, "gradClipEdit", "1.5")
    assert form.config().grad_clip == 1.5
    assert "empty" in FIELD_SPECS["data"].help
    assert find(window, "dataEdit").placeholderText() == "synthetic data"


@pytest.mark.timeout(60)
def test_labels_line_up_and_carry_the_help(form):
    from PySide6.QtWidgets import QLabel

    from core.config import FIELD_SPECS

    window = form
    labels = [label for label in form.findChildren(QLabel) if label.property("formLabel")]
    assert len({label.minimumWidth() for label in labels}) == 1
    assert all(label.minimumWidth() >= label.sizeHint().width() for label in labels)
    by_text = {label.text(): label for label in labels}
    assert by_text["Learning rate"].toolTip() == FIELD_SPECS["lr"].help
    assert find(window, "lrEdit").toolTip() == FIELD_SPECS["lr"].help


@pytest.mark.timeout(60)
def test_nan_and_inf_from_a_file_are_shown_and_marked_then_typed_over(qtbot, ready, tmp_path):
    window = ready
    path = tmp_path / "bad.toml"
    path.write_text('task = "tiny"\nlr = nan\nmomentum = inf\nbatch_size = 5000000000\n', encoding="utf-8")
    assert window.file_actions.load_toml(str(path))
    assert find(window, "lrEdit").text() == "nan"  # not a bound of the spin box
    assert find(window, "momentumEdit").text() == "inf"
    assert window.setupPanel.config().batch_size == 5_000_000_000
    qtbot.waitUntil(lambda: find(window, "lrError").isVisible(), timeout=UI_WAIT_MS)
    assert find(window, "lrError").text().startswith("nan is out of range")
    assert not find(window, "startButton").isEnabled()
    type_into(qtbot, window, "lrEdit", "0.002")
    type_into(qtbot, window, "momentumEdit", "0")
    type_into(qtbot, window, "batchSizeEdit", "16")
    qtbot.waitUntil(find(window, "startButton").isEnabled, timeout=UI_WAIT_MS)
    config = window.setupPanel.config()
    assert (config.lr, config.momentum, config.batch_size) == (0.002, 0.0, 16)
