"""One timing method for the lab (core.lab.timing): Compare precisions and the batch-size finder time their modes
with the same function and compare them with fp32 through the same ratio, so on the same task and batch they agree."""

from __future__ import annotations

import pytest


def test_both_tools_time_and_compare_through_core_lab_timing():
    from core.lab import precision_results, precision_sweep, timing
    from core.lab.batch_finder import finder, results

    assert precision_sweep.time_steps is finder.time_steps is timing.time_steps
    assert precision_results.speed_ratio is results.speed_ratio is timing.speed_ratio


def test_the_median_window_is_the_speed_and_warm_up_is_left_out():
    from core.lab.timing import Timing, speed_ratio

    timing = Timing(warmup=1, samples_per_step=32, steps=5, step_seconds=[9.0, 0.02, 0.04, 0.5])
    assert timing.timed == [0.02, 0.04, 0.5] and timing.samples_per_second == pytest.approx(32 / 0.04)
    assert Timing(1, 32, 5, [0.1]).samples_per_second is None  # only a warm-up window: no speed
    assert speed_ratio(50.0, 100.0) == 0.5 and speed_ratio(None, 100.0) is None
