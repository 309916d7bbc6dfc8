"""Issue 44's "done when" in the window: bf16-pure with 8-bit AdamW picked in the form, its memory estimate shown
before Start, trained (its steps plotted), resumed from its checkpoint and exported."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from gui_helpers import find, finish_run, loss_points, quick_run, set_field
from PySide6.QtWidgets import QLabel

from core.devices import cpu_info, with_low_precision
from core.engine.checkpoints import load_checkpoint
from core.engine.events import RunEnded, RunStarted


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="needs bitsandbytes (adamw8bit)")
@pytest.mark.timeout(180)
def test_bf16_pure_with_adamw8bit_is_estimated_trained_resumed_and_exported(qtbot, make_window, tmp_path):
    window = make_window(devices=[with_low_precision(cpu_info())])  # as the window lists the CPU
    out_dir = tmp_path / "run"
    quick_run(window, out_dir, max_steps=6, log_interval=1)
    set_field(window, "hiddenOptionEdit", 512)  # fc1 (10 x 512) over bitsandbytes' 4,096 values: 8-bit state
    window.setupPanel.set_precision("bf16-pure")
    window.setupPanel.set_field("optimizer", "adamw8bit")
    label = find(window, "memoryEstimate", QLabel)
    qtbot.waitUntil(lambda: label.text().startswith("≈") and "free on cpu" in label.text(), timeout=60_000)
    events: list = []
    window.controller.event.connect(events.append)
    finish_run(qtbot, window)
    started = next(e for e in events if isinstance(e, RunStarted))
    ended = next(e for e in events if isinstance(e, RunEnded))
    assert ended.status == "completed" and started.precision == "bf16-pure", ended.message
    assert started.config["optimizer"] == "adamw8bit" and loss_points(window) >= 6
    checkpoint = out_dir / "checkpoint.pt"
    state = load_checkpoint(checkpoint)
    assert state["step"] == 6 and {v.dtype for v in state["model"].values()} == {torch.bfloat16}

    window.file_actions.resume(str(checkpoint))  # as File > Resume: its settings back, max steps reached
    qtbot.waitUntil(lambda: window.pending_resume == str(checkpoint) and not window.controller.running, timeout=30_000)
    set_field(window, "maxStepsEdit", 9)
    start = find(window, "startButton")
    qtbot.waitUntil(start.isEnabled, timeout=10_000)
    start.click()
    qtbot.waitUntil(lambda: "resumed at step 6" in window.logPanel.toPlainText(), timeout=30_000)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=60_000)
    assert load_checkpoint(checkpoint)["step"] == 9

    destination = tmp_path / "export" / "model"
    window.file_actions.export(str(checkpoint), str(destination))
    qtbot.waitUntil(lambda: "Exported" in window.statusBarWidget.message.text(), timeout=60_000)
    manifest = json.loads(destination.with_suffix(".json").read_text())
    assert manifest["step"] == 9 and destination.with_suffix(".safetensors").is_file()
