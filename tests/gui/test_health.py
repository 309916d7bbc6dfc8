"""AMP health in the console: gradient norm plot, skipped (overflow) steps marked, the module that made inf/NaN."""

from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch
from gui_helpers import finish_run, quick_run, set_field

from core.devices import cpu_info

# The CPU can run fp16 autocast; the real device list only withholds it because it is slow there.
CPU_WITH_FP16 = dataclasses.replace(cpu_info(), precisions=("fp32", "fp16", "bf16"), unsupported={})


@pytest.mark.timeout(60)
def test_fp16_overflow_is_marked_counted_and_traced(qtbot, make_window, tmp_path, monkeypatch):
    original = torch.nn.Linear.forward
    calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per layer: the form's estimate has its own

    def hidden_layer_overflows(self, x):  # as if fc1's fp16 output overflowed on two steps
        out = original(self, x)
        if self.out_features == 16 and self.training:
            calls[self] = calls.get(self, 0) + 1
            if calls[self] in (3, 8):
                out = out * float("inf")
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", hidden_layer_overflows)
    window = make_window(devices=[CPU_WITH_FP16])
    quick_run(window, tmp_path / "run", max_steps=15, log_interval=5, separate_process=False)
    set_field(window, "precisionCombo", "fp16")
    finish_run(qtbot, window)

    plots = window.plotsPanel
    assert plots.skipped_steps == 2
    skipped = plots.series("skipped")
    assert list(skipped.x) == [5.0, 10.0]  # one marker per interval that skipped a step, at the scale it fell to
    assert list(skipped.y) == list(plots.series("scale").y[:2])
    assert len(plots.series("grad_norm")) == 3
    assert plots.plots["grad_norm"].objectName() == "gradNormPlot"
    health = window.statusBarWidget.health
    qtbot.waitUntil(health.isVisible, timeout=2000)
    assert health.text() == "2 skipped steps · inf/NaN first from fc1"
    log = window.logPanel.toPlainText()
    assert "fp16 overflow" in log and "inf/NaN first produced by fc1" in log
    assert "skipped" in plots.title("scale")


@pytest.mark.timeout(60)
def test_fp32_run_plots_grad_norm_and_shows_no_health_warning(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=10, log_interval=5)
    set_field(window, "gradClipEdit", 1.0)  # the engine measures the norm when it clips (or scales, in fp16)
    finish_run(qtbot, window)
    norms = window.plotsPanel.series("grad_norm")
    assert len(norms) == 2 and all(n > 0 for n in norms.y)
    assert not window.statusBarWidget.health.isVisible()
    assert len(window.plotsPanel.series("skipped")) == 0


@pytest.mark.timeout(60)
def test_grad_norm_is_plotted_without_clipping_too(qtbot, window, tmp_path):
    quick_run(window, tmp_path / "run", max_steps=10, log_interval=5)
    set_field(window, "gradClipEdit", 0.0)
    finish_run(qtbot, window)
    assert len(window.plotsPanel.series("grad_norm")) == 2  # measured on every logged step
    assert window.plotsPanel.title("grad_norm").startswith("Gradient norm (pre-clip)")
