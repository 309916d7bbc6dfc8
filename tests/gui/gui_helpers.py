"""Driving the real widgets by objectName, the way a user (or a script) would."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QLineEdit, QPushButton, QSpinBox, QWidget

# Both ways the window trains: in a child process (the app's default; slow, since each run starts Python and
# imports torch) and on a QThread of the window's process. For the tests about the process boundary.
MODES = pytest.mark.parametrize(
    "separate", [pytest.param(True, marks=pytest.mark.slow, id="separate-process"), pytest.param(False, id="thread")]
)
# A wait that includes a child process's start (Python, torch, the engine): generous, for a busy machine.
PROCESS_WAIT_MS = 180_000
# A wait for the form or a dialog to settle (a background estimate, a check): returns at once when it has.
UI_WAIT_MS = 20_000


def run_form(qtbot):
    """The run form alone (app.panels.run_setup.RunSetupPanel), filled with core's tasks and fields and shown as
    the window fills it: for what the form does by itself, without building a window (plots, menus, devices)."""
    from app.panels.run_setup import RunSetupPanel
    from core.config import FIELD_SPECS
    from core.devices import cpu_info
    from core.tasks import TASKS

    form = RunSetupPanel()
    qtbot.addWidget(form)
    form.populate(TASKS, FIELD_SPECS)
    form.set_device(cpu_info())
    form.show()
    qtbot.waitExposed(form)
    return form


def find(window: QWidget, name: str, kind=QWidget):
    widget = window.findChild(kind, name)
    assert widget is not None, f"no widget named {name!r}"
    return widget


def set_field(window: QWidget, name: str, value) -> None:
    """Set an editor found by objectName (lrEdit, batchSizeEdit, hiddenOptionEdit...)."""
    widget = find(window, name)
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        widget.setValue(value)
    elif isinstance(widget, QComboBox):
        index = widget.findText(str(value))
        assert index >= 0, f"{name} has no item {value!r}"
        widget.setCurrentIndex(index)
    elif isinstance(widget, QLineEdit):
        widget.setText(str(value))
    else:
        raise TypeError(f"don't know how to set {type(widget).__name__}")


def quick_run(
    window: QWidget,
    out_dir,
    *,
    max_steps: int = 0,
    epochs: int = 1,
    log_interval: int = 5,
    samples: int = 2048,
    batch_size: int = 32,
    separate_process: bool = False,
    min_steps: int = 0,
) -> None:
    """A tiny-task form that trains in about a second (or forever-ish with a large max_steps).

    `separate_process`: tick or clear "Train in a separate process". Tests train on a thread unless they are
    about the process boundary (they pass True, or run both modes): a child process starts Python and imports
    torch, about ten times the cost of a tiny run. Tests that patch torch in this process or inject fake
    devices need a thread anyway: a child process sees neither.
    """
    find(window, "separateProcessCheck").setChecked(separate_process)
    set_field(window, "taskCombo", "tiny")
    set_field(window, "samplesOptionEdit", samples)
    set_field(window, "batchSizeEdit", batch_size)
    set_field(window, "epochsEdit", epochs)
    set_field(window, "maxStepsEdit", max_steps)
    set_field(window, "minStepsEdit", min_steps)  # exactly `epochs` epochs: a run of the size the test asks for
    set_field(window, "logIntervalEdit", log_interval)
    set_field(window, "outDirEdit", str(out_dir))


def click(qtbot, window: QWidget, name: str) -> None:
    button = find(window, name, QPushButton)
    assert button.isEnabled(), f"{name} is disabled"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def finish_run(qtbot, window: QWidget, timeout_ms: int = PROCESS_WAIT_MS) -> None:
    """Click Start and wait until the run (or its failure to start) is over."""
    with qtbot.waitSignal(
        window.controller.runningChanged, timeout=timeout_ms, check_params_cb=lambda running: not running
    ):
        click(qtbot, window, "startButton")


def loss_points(window: QWidget) -> int:
    """Training-loss points plotted so far."""
    return len(window.plotsPanel.series("loss_raw"))
