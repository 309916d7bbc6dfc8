"""Run setup: precision choices follow the device, core's validation messages block Start, TOML and QSettings."""

from __future__ import annotations

import pytest
from gui_helpers import UI_WAIT_MS, find, quick_run, run_form, set_field
from PySide6.QtCore import Qt

from core.config import RunConfig
from core.devices import DeviceInfo


def fake_devices() -> list[DeviceInfo]:
    cpu = DeviceInfo(
        id="cpu",
        type="cpu",
        name="Fake CPU",
        memory_total=8 * 2**30,
        precisions=("fp32",),
        unsupported={"bf16": "this fake CPU has no bfloat16", "tf32": "CUDA only", "fp16": "GPU only"},
    )
    gpu = DeviceInfo(
        id="cuda:0",
        type="cuda",
        name="Fake T4",
        memory_total=16 * 2**30,
        capability="7.5",
        fp16=True,
        tensor_cores=True,
        precisions=("fp32", "fp16"),
        unsupported={"bf16": "bf16 needs compute capability 8.0", "tf32": "TF32 needs 8.0"},
    )
    return [cpu, gpu]


@pytest.fixture
def form(qtbot):
    """The run form alone, for what it does by itself (the window's wiring is the other tests')."""
    return run_form(qtbot)


def precision_item(window, mode: str):
    combo = find(window, "precisionCombo")
    return combo.model().item(combo.findData(mode))


@pytest.mark.timeout(30)
def test_unsupported_precision_is_disabled_with_the_reason(qtbot, make_window):
    window = make_window(devices=fake_devices())
    device_list = find(window, "deviceList")
    assert device_list.count() == 2
    assert window.devicesPanel.current_id() == "cuda:0"  # accelerators first
    assert precision_item(window, "fp16").isEnabled()
    assert not precision_item(window, "bf16").isEnabled()
    assert "compute capability 8.0" in precision_item(window, "bf16").toolTip()
    assert find(window, "precisionCombo").itemText(0) == "auto → fp16"

    set_field(window, "precisionCombo", "fp16")
    device_list.setCurrentRow(0)  # the fake CPU: fp16 no longer possible
    assert not precision_item(window, "fp16").isEnabled()
    assert "GPU only" in precision_item(window, "fp16").toolTip()
    assert not precision_item(window, "bf16").isEnabled()
    assert find(window, "precisionCombo").currentData() == "auto"
    assert find(window, "precisionCombo").itemText(0) == "auto → fp32"
    assert window.setupPanel.config().device == "cpu"


@pytest.mark.timeout(30)
def test_invalid_field_blocks_start_with_cores_message(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run")
    start = find(window, "startButton")
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)

    set_field(window, "epochsEdit", 0)
    set_field(window, "maxStepsEdit", 0)
    qtbot.waitUntil(lambda: not start.isEnabled(), timeout=UI_WAIT_MS)
    error = find(window, "epochsError")
    assert error.isVisible()
    assert error.text() == RunConfig(epochs=0, max_steps=0).errors()["epochs"]
    assert find(window, "epochsEdit").property("invalid") is True

    set_field(window, "outDirEdit", "   ")  # empty is fine (a new folder under the runs root); blanks are not
    qtbot.waitUntil(lambda: find(window, "outDirError").isVisible(), timeout=UI_WAIT_MS)
    assert "leave it empty" in find(window, "outDirError").text()
    set_field(window, "outDirEdit", "")
    qtbot.waitUntil(lambda: not find(window, "outDirError").isVisible(), timeout=UI_WAIT_MS)
    assert "runs root" in find(window, "outDirEdit").placeholderText()

    set_field(window, "epochsEdit", 1)
    set_field(window, "outDirEdit", str(tmp_path / "run"))
    qtbot.waitUntil(start.isEnabled, timeout=UI_WAIT_MS)
    assert not find(window, "epochsError").isVisible()


@pytest.mark.timeout(30)
def test_task_options_update_the_parameter_count(qtbot, form):
    set_field(form, "taskCombo", "tiny")
    set_field(form, "hiddenOptionEdit", 16)
    assert find(form, "paramCount").text().startswith("210 ")  # 10*16+16 + 16*2+2
    set_field(form, "hiddenOptionEdit", 32)
    assert find(form, "paramCount").text().startswith("418 ")


@pytest.mark.timeout(30)
def test_every_registered_task_is_offered(form):
    from core.tasks import TASKS

    combo = find(form, "taskCombo")
    assert [combo.itemData(i) for i in range(combo.count())] == list(TASKS)
    for index in range(combo.count()):
        combo.setCurrentIndex(index)  # each task's options form builds and counts parameters
        assert "trainable parameters" in find(form, "paramCount").text()


@pytest.mark.timeout(30)
def test_toml_round_trip(qtbot, window, tmp_path):
    set_field(window, "lrEdit", 0.003)
    set_field(window, "batchSizeEdit", 96)
    set_field(window, "hiddenOptionEdit", 24)
    path = tmp_path / "run.toml"
    assert window.file_actions.save_toml(str(path))
    saved = RunConfig.load_toml(path)
    assert saved.lr == pytest.approx(0.003) and saved.batch_size == 96 and saved.task_options["hidden"] == 24

    set_field(window, "batchSizeEdit", 8)
    assert window.file_actions.load_toml(str(path))
    assert find(window, "batchSizeEdit").value() == 96
    assert find(window, "hiddenOptionEdit").value() == 24

    path.write_text("lr = [", encoding="utf-8")
    assert not window.file_actions.load_toml(str(path))
    assert "invalid toml" in window.statusBarWidget.message.text().lower()


@pytest.mark.timeout(30)
def test_presets_load(window):
    assert window.file_actions.presets_menu.actions()
    for action in window.file_actions.presets_menu.actions():
        action.trigger()
        assert "loaded settings" in window.statusBarWidget.message.text().lower()


@pytest.mark.timeout(30)
def test_last_settings_come_back(qtbot, make_window, settings):
    first = make_window(settings_store=settings)
    assert find(first, "separateProcessCheck").isChecked()  # the default: runs get their own process
    set_field(first, "batchSizeEdit", 123)
    set_field(first, "lrEdit", 0.0005)
    find(first, "separateProcessCheck").setChecked(False)
    set_field(first, "processesEdit", 2)
    assert not find(first, "separateProcessCheck").isEnabled()  # several processes are always separate
    first.close()
    second = make_window(settings_store=settings)
    assert find(second, "batchSizeEdit").value() == 123
    assert find(second, "lrEdit").value() == pytest.approx(0.0005)
    assert find(second, "processesEdit").value() == 2
    assert not find(second, "separateProcessCheck").isChecked()
    assert second.setupPanel.separate_process()  # 2 processes


@pytest.mark.timeout(30)
def test_widgets_have_stable_names(window):
    for name in (
        "deviceList",
        "taskCombo",
        "precisionCombo",
        "startButton",
        "pauseButton",
        "stopButton",
        "lossPlot",
        "progressBar",
        "lrEdit",
        "batchSizeEdit",
        "epochsEdit",
        "maxStepsEdit",
    ):
        find(window, name)


@pytest.mark.timeout(30)
def test_scientific_spin_box_steps_in_decades(form):
    lr = find(form, "lrEdit")
    lr.setValue(1e-3)
    lr.stepBy(10)
    assert lr.value() == pytest.approx(1e-2, rel=1e-2)
    assert lr.textFromValue(3e-4) == "0.0003"
    assert lr.validate("1e-", 3)[0].name == "Intermediate"
    _ = Qt  # keep the import for readers: objectName lookups are Qt's findChild


@pytest.mark.timeout(30)
def test_every_run_config_field_has_an_editor(form):
    from app.panels.editors import camel
    from app.panels.run_setup import OWN_WIDGETS
    from core.config import FIELD_SPECS

    assert set(OWN_WIDGETS) == {"task", "task_file", "device", "precision"}
    for name in FIELD_SPECS:
        if name in OWN_WIDGETS:
            continue  # task picker (it sets the task and where a user's task is), devices panel, precision combo
        find(form, f"{camel(name)}Edit")


def test_every_precision_list_is_the_one_in_core(window):
    """The form, Compare precisions, the dtype inspector, the CLI flag and the sweep offer core's one list."""
    from core.config import FIELD_SPECS
    from core.lab.precision_sweep import requested_modes
    from core.precision_modes import PRECISION_CHOICES, PRECISION_MODES

    combo = find(window, "precisionCombo")
    assert [combo.itemData(i) for i in range(combo.count())] == list(PRECISION_CHOICES)
    assert list(window.tools.show_compare().modeChecks) == list(PRECISION_MODES)
    inspect = window.tools.show_inspector().precisionCombo
    assert [inspect.itemData(i) for i in range(inspect.count())] == list(PRECISION_MODES)
    assert tuple(FIELD_SPECS["precision"].choices) == PRECISION_CHOICES
    assert requested_modes(None) == list(PRECISION_MODES)


@pytest.mark.timeout(30)
def test_a_failing_device_detection_keeps_the_window_usable(qtbot, window):
    panel = window.devicesPanel
    before = panel.current_id()

    def broken():
        raise RuntimeError("CUDA driver initialization failed\nsecond line")

    panel.set_provider(broken)
    panel.refresh()  # the Refresh button / menu item
    assert find(window, "deviceSummary").text() == "Could not detect devices: CUDA driver initialization failed"
    assert panel.current_id() == before
    assert window.setupPanel.isEnabled()


def test_compile_and_activation_checkpointing_sit_with_precision_and_fill_the_config(qtbot, form):
    panel = form
    precision_group = find(form, "precisionCombo").parentWidget()
    rows = {name: panel._rows[name] for name in ("compile", "compile_mode", "activation_checkpointing")}
    assert all(row.parentWidget() is precision_group for row in rows.values())  # beside the mode, not the output
    compile_box, mode_combo = rows["compile"].editor.input, rows["compile_mode"].editor.input
    compile_box.setChecked(False)
    assert not mode_combo.isEnabled()  # a mode means nothing while compile is off
    compile_box.click()
    assert mode_combo.isEnabled()
    mode_combo.setCurrentIndex(mode_combo.findText("max-autotune"))
    rows["activation_checkpointing"].editor.input.click()
    config = panel.config()
    assert config.compile and config.compile_mode == "max-autotune"
    assert config.activation_checkpointing == (not RunConfig().activation_checkpointing)


@pytest.mark.timeout(30)
def test_switching_task_shows_the_new_tasks_defaults_not_the_previous_tasks(qtbot, form):
    from core.tasks import TASKS

    plain = RunConfig()
    set_field(form, "taskCombo", "sentiment")  # declares schedule=cosine; tiny leaves it at RunConfig's
    assert find(form, "scheduleEdit").currentText() == "cosine"
    set_field(form, "taskCombo", "tiny")
    assert find(form, "scheduleEdit").currentText() == plain.schedule
    assert find(form, "epochsEdit").value() == TASKS["tiny"].defaults["epochs"]
    set_field(form, "taskCombo", "sentiment")
    set_field(form, "scheduleEdit", "onecycle")
    set_field(form, "taskCombo", "tiny")  # a field the user set stays as they set it
    assert find(form, "scheduleEdit").currentText() == "onecycle"
