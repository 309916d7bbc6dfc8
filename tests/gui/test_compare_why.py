"""Compare precisions: each row's verdict (`why`) in its column and tooltip, the recommendation line, and the
optimizer checks that add a row per optimizer (bf16-pure + adamw8bit); adamw8bit disabled, with its install line,
where the device's `unsupported` names it (no bitsandbytes)."""

from __future__ import annotations

import importlib.util

import pytest
from gui_helpers import UI_WAIT_MS, click, find

import core.lab.precision_sweep as sweep
from app.panels.compare import COLUMNS, CompareDialog
from core.config import RunConfig
from core.devices import PRECISION_INSTALL, cpu_info, with_low_precision

WHY = COLUMNS.index("Why")


def fake_sweep(calls, eight_ms=5.0):
    """run_sweep's stand-in: the rows a sweep with adamw and adamw8bit gives, judged by core's own verdicts."""

    def run_sweep(config, **kwargs):
        calls.append((config.optimizer, kwargs["optimizer_options"], kwargs["modes"]))

        def row(mode, ms, loss, mib, optimizer="", dtype="float32"):
            return sweep.SweepRow(
                mode, "ok", compute_dtype=dtype, step_ms=ms, step_ms_windows=[ms, ms], samples_per_second=1000 / ms,
                peak_memory_bytes=mib * 2**20, loss=loss, optimizer=optimizer,
            )  # fmt: skip

        rows = [
            row("fp32", 10.0, 0.500, 400),
            row("bf16", 6.0, 0.501, 300),
            row("bf16-pure", 5.0, 0.502, 200),
            row("bf16-pure", eight_ms, 0.503, 120, "adamw8bit"),
            row("fp8", 20.0, 0.501, 300, dtype="bfloat16 + float8 (emulated)"),
        ]
        sweep.compare_to_fp32(rows)
        best, why = sweep.recommended_row(rows)
        sweep.explain_rows(rows, best)
        return sweep.SweepResult(
            "tiny", {}, "cpu", "Fake CPU", 32, 3, 2, 3, "RSS", rows, best.mode, why, recommended_label=best.label
        )

    return run_sweep


def make_dialog(qtbot, devices):
    dialog = CompareDialog(lambda: RunConfig.for_task("tiny"), lambda: devices)
    qtbot.addWidget(dialog)
    dialog.refresh_setting()
    dialog.show()
    qtbot.waitExposed(dialog)
    return dialog


@pytest.mark.timeout(60)
def test_rows_say_why_and_adamw8bit_adds_its_rows(qtbot, monkeypatch):
    calls = []
    monkeypatch.setattr(sweep, "run_sweep", fake_sweep(calls))
    dialog = make_dialog(qtbot, [with_low_precision(cpu_info())])
    own, eight = find(dialog, "adamwOptimizerCheck"), find(dialog, "adamw8bitOptimizerCheck")
    assert own.isChecked() and eight.isEnabled() and not eight.isChecked()  # the form's optimizer, by default
    eight.setChecked(True)
    click(qtbot, dialog, "compareRunButton")
    qtbot.waitUntil(lambda: dialog.result is not None and not dialog.job.running, timeout=UI_WAIT_MS)
    assert calls[0][:2] == ("adamw", ["adamw", "adamw8bit"])  # the form's own first: the reference rows
    assert dialog.row_modes() == ["fp32", "bf16", "bf16-pure", "bf16-pure + adamw8bit", "fp8"]
    why = [dialog.table.item(i, WHY) for i in range(dialog.table.rowCount())]
    assert why[0].text().endswith("the reference")
    assert "x fp32's speed" in why[3].text() and "x memory" in why[3].text() and why[3].toolTip() == why[3].text()
    assert "emulated: speed not meaningful" in why[4].text()
    best = dialog.result.recommended_label
    assert best in dialog.row_modes() and why[dialog.row_modes().index(best)].text().endswith("; recommended")
    assert (
        dialog.recommendation.text().startswith(f"Recommended: {best} (")
        and "samples/s" in dialog.recommendation.text()
    )
    assert len(dialog.throughputChart.values) == 5 and "adamw" in dialog.setting.text()
    dialog.grab().save("/tmp/compare.png")


@pytest.mark.timeout(60)
def test_adamw8bit_is_disabled_with_the_install_line_without_bitsandbytes(qtbot, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    dialog = make_dialog(qtbot, [with_low_precision(cpu_info())])
    eight = find(dialog, "adamw8bitOptimizerCheck")
    assert not eight.isEnabled() and not eight.isChecked() and PRECISION_INSTALL in eight.toolTip()
    assert find(dialog, "adamwOptimizerCheck").isChecked()
    assert dialog.selected_optimizers("adamw") == ["adamw"]


@pytest.mark.timeout(60)
def test_train_with_this_takes_the_recommended_rows_optimizer(qtbot, window, monkeypatch):
    monkeypatch.setattr(sweep, "run_sweep", fake_sweep([], eight_ms=4.0))
    started = []
    monkeypatch.setattr(window, "train_with_precision", started.append)
    dialog = window.tools.show_compare()
    qtbot.waitExposed(dialog)
    find(dialog, "adamw8bitOptimizerCheck").setChecked(True)
    click(qtbot, dialog, "compareRunButton")
    qtbot.waitUntil(lambda: dialog.result is not None and not dialog.job.running, timeout=UI_WAIT_MS)
    assert dialog.recommendation.text().startswith("Recommended: bf16-pure + adamw8bit (")
    click(qtbot, dialog, "trainWithButton")
    qtbot.waitUntil(lambda: started == ["bf16-pure"])
    assert window.setupPanel.config().optimizer == "adamw8bit"
