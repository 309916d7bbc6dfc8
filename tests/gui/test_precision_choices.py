"""The run form's new choices: bf16-pure, fp8 (and its recipe), adamw8bit, each disabled with the reason where the
device or a missing library cannot run it."""

from __future__ import annotations

import importlib.util

import pytest
from gui_helpers import find, run_form, set_field

from app.panels.bars import BAR_COLOURS
from app.panels.devices import describe_device
from core.devices import PRECISION_INSTALL, DeviceInfo, cpu_info, with_low_precision
from core.precision_modes import PRECISION_MODES

CPU = DeviceInfo(
    id="cpu",
    type="cpu",
    name="Fake CPU",
    memory_total=8 * 2**30,
    bf16=True,
    precisions=("fp32", "bf16", "bf16-pure"),
    unsupported={"fp8": "fp8 needs float8 tensor cores; Fake CPU has none", "fp16": "GPU only", "tf32": "CUDA"},
)
H100 = DeviceInfo(
    id="cuda:0",
    type="cuda",
    name="Fake H100",
    memory_total=80 * 2**30,
    capability="9.0",
    bf16=True,
    precisions=("fp32", "tf32", "fp16", "bf16", "bf16-pure", "fp8"),
)


def item(combo, text: str):
    return combo.model().item(combo.findText(text) if combo.findData(text) < 0 else combo.findData(text))


@pytest.fixture
def no_bitsandbytes(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )


@pytest.mark.timeout(60)
def test_new_modes_follow_the_device_and_the_recipe_shows_with_fp8(qtbot, no_bitsandbytes):
    form = run_form(qtbot)
    combo, recipe = find(form, "precisionCombo"), find(form, "fp8RecipeEdit")
    assert [combo.itemData(i) for i in range(1, combo.count())] == list(PRECISION_MODES)
    form.set_device(CPU)
    assert item(combo, "bf16-pure").isEnabled() and not item(combo, "fp8").isEnabled()
    assert "float8 tensor cores" in item(combo, "fp8").toolTip() and item(combo, "fp8").statusTip()
    form.set_device(H100)  # switching device updates what is enabled
    assert item(combo, "fp8").isEnabled() and item(combo, "fp8").toolTip() == ""
    assert not recipe.isVisibleTo(form)
    set_field(form, "precisionCombo", "fp8")
    qtbot.waitUntil(lambda: recipe.isVisibleTo(form))
    assert "float8 (tensorwise" in find(form, "precisionNote").text()
    assert not item(recipe, "rowwise_with_gw_hp").isEnabled() and "4616" in item(recipe, "rowwise_with_gw_hp").toolTip()
    set_field(form, "fp8RecipeEdit", "rowwise")
    qtbot.waitUntil(lambda: "rowwise" in find(form, "precisionNote").text())
    assert form.config().fp8_recipe == "rowwise"
    form.set_device(CPU)  # fp8 no longer possible: back to auto, and the recipe hides
    assert combo.currentData() == "auto" and not recipe.isVisibleTo(form)


@pytest.mark.timeout(60)
def test_adamw8bit_without_bitsandbytes_is_disabled_with_the_install_line(qtbot, no_bitsandbytes):
    form = run_form(qtbot)
    optimizer = find(form, "optimizerEdit")
    assert item(optimizer, "adamw8bit").isEnabled()  # the device's `unsupported` says what is missing, not the form
    form.set_device(with_low_precision(cpu_info()))
    assert not item(optimizer, "adamw8bit").isEnabled()
    assert PRECISION_INSTALL in item(optimizer, "adamw8bit").toolTip()
    assert item(optimizer, "adamw").isEnabled()
    form.set_field("optimizer", "adamw8bit")  # e.g. from a saved config: Start stays off, saying why
    qtbot.waitUntil(lambda: not form.is_valid())
    assert PRECISION_INSTALL in form.problem_summary()
    label, tooltip = describe_device(with_low_precision(CPU))
    assert "bf16-pure" in label and "float8 tensor cores" in tooltip and PRECISION_INSTALL in tooltip


def test_every_mode_has_its_bar_colour():
    assert set(PRECISION_MODES) <= set(BAR_COLOURS)
