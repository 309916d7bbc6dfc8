"""Precision sweep on the CPU: every CPU mode measured, the GPU-only ones skipped with a reason, sane ratios."""

from __future__ import annotations

import pytest

from core.config import RunConfig
from core.engine.control import RunControl
from core.errors import PrecisionError
from core.lab.precision_results import SweepRow, recommended_row
from core.lab.precision_sweep import measure_mode, requested_modes, run_sweep
from core.precision_modes import PRECISION_MODES


@pytest.mark.slow
def test_cpu_sweep_has_every_cpu_mode_with_sane_ratios(monkeypatch):
    monkeypatch.delenv("AMP_FP8_EMULATE", raising=False)
    updates = []
    result = run_sweep(RunConfig.for_task("tiny", device="cpu"), steps=5, repeats=2, progress=updates.append)
    assert [r.mode for r in result.rows] == list(PRECISION_MODES)
    assert result.row("fp8").status == "skipped" and "fp8" in result.row("fp8").reason  # not emulated here
    fp32, bf16 = result.row("fp32"), result.row("bf16")
    for row in (fp32, bf16):
        assert row.status == "ok", row.reason
        assert row.step_ms > 0 and row.samples_per_second > 0 and len(row.step_ms_windows) == 2
        assert row.peak_memory_bytes > 50 * 2**20  # a fresh process's peak RSS: torch alone is bigger
    assert (fp32.speedup, fp32.memory_ratio, fp32.loss_delta) == (1.0, 1.0, 0.0)
    assert 0.0 < bf16.speedup < 100.0
    assert 0.5 < bf16.memory_ratio < 2.0
    assert abs(bf16.loss_delta) < 0.05  # same seed, same batches: bf16 tracks fp32 closely on this task
    assert bf16.compute_dtype == "bfloat16" and fp32.compute_dtype == "float32"
    for mode in ("tf32", "fp16"):
        assert result.row(mode).status == "skipped" and "CPU" in result.row(mode).reason
    assert result.recommended in ("fp32", "bf16") and result.recommendation
    assert "peak RSS" in result.memory_source and "a fresh process per mode" in result.memory_source
    assert [(u.mode, u.phase, u.window) for u in updates if u.mode == "bf16"] == [
        ("bf16", "running", 0),
        ("bf16", "setup", 0),
        ("bf16", "window", 1),
        ("bf16", "window", 2),
        ("bf16", "window", 3),
        ("bf16", "done", 0),
    ]  # 1 warm-up + 2 timed windows, relayed from its process
    assert result.to_dict()["rows"][0]["mode"] == "fp32"


def test_in_process_measurement_reports_windows_and_loss():
    row = measure_mode(RunConfig.for_task("tiny", device="cpu"), "fp32", steps=4, repeats=3)
    assert row.status == "ok" and len(row.step_ms_windows) == 3
    assert row.loss is not None and row.loss == row.loss


def test_fp32_always_comes_first_and_unknown_modes_are_refused():
    assert requested_modes(["bf16"]) == ["fp32", "bf16"]
    assert requested_modes(None) == list(PRECISION_MODES)
    with pytest.raises(PrecisionError, match="fp9"):
        requested_modes(["fp9"])


def test_stopping_between_modes_skips_the_rest():
    control = RunControl()
    control.stop()
    result = run_sweep(RunConfig.for_task("tiny", device="cpu"), ["bf16"], steps=2, repeats=1, control=control)
    assert [r.status for r in result.rows] == ["skipped", "skipped"]
    assert result.recommended is None


def test_recommendation_ignores_fast_modes_whose_loss_drifts():
    rows = [
        SweepRow("fp32", "ok", samples_per_second=100.0, loss=1.0, speedup=1.0),
        SweepRow("fp16", "ok", samples_per_second=400.0, loss=1.5, speedup=4.0),
        SweepRow("bf16", "ok", samples_per_second=250.0, loss=1.01, speedup=2.5, memory_ratio=0.6),
    ]
    best, why = recommended_row(rows)
    assert best is not None and best.mode == "bf16" and "2.50x" in why


def test_tokens_per_sample_counts_the_timed_windows_batches():
    from core.engine.step_metrics import IntervalReadout
    from core.lab.timing import Timing

    def window(tokens):
        return IntervalReadout(loss=1.0, skipped=0, tokens=tokens)

    # 10 samples a step, 2 steps a window: the warm-up window's tokens are left out; 3 and 4 tokens a sample after.
    timing = Timing(1, 10, 2, [1.0, 1.0, 1.0], [window(999.0), window(60.0), window(80.0)])
    assert timing.tokens_per_sample == 3.5 and timing.samples_per_second == 10.0
    assert Timing(1, 10, 2, [1.0, 1.0], [window(0.0), window(0.0)]).tokens_per_sample is None  # no tokens_key


@pytest.mark.slow
def test_stop_kills_an_isolated_measurement_at_once(tmp_path):
    import threading
    import time

    from core.config import RunConfig
    from core.engine.control import RunControl
    from core.lab.precision_sweep import run_sweep

    control = RunControl()
    config = RunConfig.for_task("tiny", device="cpu", out_dir=str(tmp_path))
    threading.Timer(1.0, control.stop).start()
    started = time.monotonic()
    result = run_sweep(config, modes=["fp32", "bf16"], steps=100_000, repeats=3, isolate=True, control=control)
    assert time.monotonic() - started < 30  # 100k-step windows would take minutes
    assert [(r.mode, r.status) for r in result.rows] == [("fp32", "skipped"), ("bf16", "skipped")]
