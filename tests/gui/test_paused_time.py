"""Paused time is not training time: the status bar's ETA and its final "took" leave pauses out.

Events are fed to the window as the engine would send them, with a clock the test moves (no real waiting).
"""

from __future__ import annotations

import pytest

from core.engine.events import RunEnded, RunPaused, RunResumed, RunStarted, StepMetrics


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def started(total=1000) -> RunStarted:
    return RunStarted(
        task="tiny",
        device="cpu",
        device_name="CPU",
        precision="fp32",
        autocast_dtype="float32",
        param_dtype="float32",
        scaler=False,
        param_count=210,
        total_steps=total,
        steps_per_epoch=100,
        start_step=0,
        config={},
    )


def step(n: int, elapsed: float) -> StepMetrics:
    return StepMetrics(
        step=n,
        epoch=1,
        loss=0.5,
        lr=0.01,
        samples_per_second=100.0,
        grad_scale=None,
        grad_norm=None,
        skipped_steps=0,
        memory_bytes=None,
        elapsed_seconds=elapsed,
    )


def ended(status: str, n: int, elapsed: float) -> RunEnded:
    return RunEnded(
        status=status,
        message=f"{status} at step {n}",
        step=n,
        epoch=1,
        final_loss=0.5,
        metrics={},
        checkpoint=None,
        samples_per_second=100.0,
        elapsed_seconds=elapsed,
    )


@pytest.fixture
def fed(window):
    clock = Clock()
    window.statusBarWidget._clock = clock

    def feed(event, at: float | None = None):
        if at is not None:
            clock.now = 1000.0 + at
        window._on_event(event)
        window._flush_status()  # the 4 Hz refresh, now

    return feed


@pytest.mark.timeout(60)
def test_eta_and_took_leave_a_pause_out(window, fed):
    eta = window.statusBarWidget.eta
    fed(started(), at=0)
    fed(step(10, 1.0), at=1)
    fed(step(20, 11.0), at=11)  # 1 step/s
    assert eta.text() == "ETA 16m20s"  # 980 steps left
    fed(RunPaused(step=20), at=11)
    assert "paused" in eta.text()
    fed(RunResumed(step=20, paused_seconds=30.0), at=41)
    fed(step(30, 51.0), at=51)  # 20 steps in 20 s of training (30 s paused)
    assert eta.text() == "ETA 16m10s"
    fed(ended("completed", 1000, elapsed=764.0 + 30.0), at=1000)
    assert eta.text() == "took 12m44s"  # 794 s since the start, 30 of them paused


@pytest.mark.timeout(60)
def test_a_run_stopped_while_paused_does_not_count_its_last_pause(window, fed):
    eta = window.statusBarWidget.eta
    fed(started(), at=0)
    fed(step(10, 1.0), at=1)
    fed(RunPaused(step=12), at=2)
    fed(RunResumed(step=12, paused_seconds=8.0), at=10)
    fed(step(20, 20.0), at=20)
    fed(RunPaused(step=22), at=22)
    fed(ended("stopped", 22, elapsed=22.0 + 8.0 + 60.0), at=82)  # no RunResumed: the stop ended the pause
    assert eta.text() == "took 22s"


@pytest.mark.timeout(60)
def test_the_next_run_starts_with_no_pauses_counted(window, fed):
    eta = window.statusBarWidget.eta
    fed(started(), at=0)
    fed(RunPaused(step=1), at=1)
    fed(RunResumed(step=1, paused_seconds=100.0), at=101)
    fed(ended("completed", 1000, elapsed=150.0), at=150)
    assert eta.text() == "took 50s"
    fed(started(), at=200)
    fed(ended("completed", 1000, elapsed=40.0), at=240)
    assert eta.text() == "took 40s"


@pytest.mark.timeout(60)
def test_replayed_events_keep_their_own_times(window, fed):
    """An Attach replays a run's events at once: the ETA keeps the run's pace, the log the events' times."""
    from dataclasses import replace

    run_started = started()
    run_started = replace(run_started, config={**run_started.config, "out_dir": "/r/20260102-030405-tiny-fp32"})
    for event in (run_started, step(10, 1.0), step(20, 11.0)):  # all at the same instant
        fed(event, at=500)
    assert window.statusBarWidget.eta.text() == "ETA 16m20s"  # 1 step/s, as the run went
    lines = [line for line in window.logPanel.toPlainText().splitlines() if line[:2].isdigit()]
    assert lines[0].startswith("03:04:05  Run started") and lines[1].startswith("03:04:06  step 10")
