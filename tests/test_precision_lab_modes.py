"""The precision lab with bf16-pure, fp8 and adamw8bit (issues 43, 44): a sweep's rows say why (layers, speed,
memory, loss drift), fp8 is recommended only at 1.10x bf16 with the same loss and never emulated, a memory that
grows every window is flagged, and the batch finder says an emulated fp8's speed means nothing."""

from __future__ import annotations

import importlib.util

import pytest

from core.config import RunConfig
from core.lab.batch_finder.results import BatchFinderResult, ModeResult, compare_to_fp32
from core.lab.precision_results import explain_rows, recommended_row
from core.lab.precision_sweep import memory_growth, run_sweep
from tests.test_precision_recommendation import row, sweep

MIB = 2**20


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed")
def test_a_sweep_over_the_new_modes_gives_rows_with_reasons():
    config = RunConfig.for_task("tiny", device="cpu", task_options={"hidden": 512})  # fc1: 8-bit state
    result = run_sweep(
        config,
        ["fp32", "bf16", "bf16-pure"],
        steps=3,
        repeats=2,
        isolate=False,
        optimizer_options=["adamw", "adamw8bit"],
    )
    labels = [r.label for r in result.rows]
    assert labels == ["fp32", "fp32 + adamw8bit", "bf16", "bf16 + adamw8bit", "bf16-pure", "bf16-pure + adamw8bit"]
    assert all(r.status == "ok" and r.why for r in result.rows), [(r.label, r.reason) for r in result.rows]
    assert result.rows[0].why.endswith(("the reference", "recommended"))
    for r in result.rows[1:]:
        assert "x fp32's speed" in r.why and "x memory" in r.why and ("same loss" in r.why or "drifts" in r.why)
        assert ("bf16-pure:" in r.reason) == (r.mode == "bf16-pure")
        assert ("adamw8bit:" in r.reason) == (r.optimizer == "adamw8bit")
        assert len(r.memory_windows) == 3  # after the warm-up and each timed window
    assert result.recommended_label in labels


def fp8_sweep(speed_over_bf16: float, loss: float = 1.0, emulated: bool = False):
    fp32, bf16 = row("fp32", [10.0, 10.1, 10.2]), row("bf16", [5.0, 5.05, 5.1], loss=1.01)
    fp8 = row("fp8", [w / speed_over_bf16 for w in (5.0, 5.05, 5.1)], loss=loss)
    fp8.compute_dtype = f"float8 (tensorwise{', emulated' if emulated else ''}) + bfloat16"
    rows = sweep(fp32, bf16, fp8)
    best, _ = recommended_row(rows)
    explain_rows(rows, best)
    return best.mode, fp8.why


def test_fp8_is_recommended_only_at_1_10x_bf16_with_the_same_loss():
    picked, why = fp8_sweep(1.05)
    assert picked == "bf16" and "1.05x bf16's samples/s, under the 1.10x" in why
    assert fp8_sweep(1.2) == ("fp8", fp8_sweep(1.2)[1]) and fp8_sweep(1.2)[1].endswith("recommended")
    picked, why = fp8_sweep(1.2, loss=1.3)
    assert picked == "bf16" and "loss drifts" in why
    picked, why = fp8_sweep(3.0, emulated=True)
    assert picked == "bf16" and why.endswith("emulated: speed not meaningful")


def test_memory_that_grows_every_window_is_flagged():
    steady = [500 * MIB, 501 * MIB, 500 * MIB, 501 * MIB]
    assert memory_growth(steady, steps=20) is None
    assert memory_growth([500 * MIB, 540 * MIB, 580 * MIB, 620 * MIB], steps=20) == pytest.approx(2.0)
    assert memory_growth([500 * MIB, 540 * MIB, 540 * MIB, 620 * MIB], steps=20) is None  # not every window
    assert memory_growth([500 * MIB, 502 * MIB, 504 * MIB], steps=1) is None  # under a few MiB per window
    fp32, bf16 = row("fp32", [10.0, 10.1, 10.2]), row("bf16", [9.0, 9.1, 9.2])
    bf16.memory_growth = memory_growth([0, 40 * MIB, 80 * MIB], steps=20)
    rows = sweep(fp32, bf16)
    explain_rows(rows, fp32)
    assert "memory grows 2.0 MiB/step: a per-shape kernel cache? (see docs)" in bf16.why


def test_the_batch_finder_says_an_emulated_fp8_speed_means_nothing():
    fp32 = ModeResult("fp32", "ok", batch=100, samples_per_second=10.0, compute_dtype="float32")
    fp8 = ModeResult("fp8", "ok", batch=150, samples_per_second=99.0, compute_dtype="float8 (rowwise, emulated)")
    compare_to_fp32([fp32, fp8])
    assert fp8.comparison.endswith("(emulated: speed not meaningful)") and "1.5× the fp32 batch" in fp8.comparison
    result = BatchFinderResult.__new__(BatchFinderResult)
    result.modes = [fp32, fp8]
    assert result.best() is fp32
