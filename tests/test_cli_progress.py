"""Headless progress: when stderr is not a terminal (nohup, a log file, a batch job) a run prints plain progress
lines every --progress-every seconds, besides the first log and the end; the ETA leaves paused time out."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from core.cli.train import ProgressReporter
from core.engine.events import EvalMetrics, RunEnded, RunResumed, RunStarted, StepMetrics

LINE = re.compile(
    r"^step (\d+)/(\d+) \(\d+%\) epoch \d+ loss \d+\.\d{4}( val_\w+ \d+\.\d{4})* \| [\d,]+ samples/s "
    r"\| elapsed \w+(, ETA \w+)?$"
)


@pytest.mark.slow
def test_a_run_logging_to_a_pipe_prints_progress_lines(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "core.cli",
            "train",
            "--max-steps",
            "400",
            "--log-interval",
            "5",
            "--batch-size",
            "8",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--progress-every",
            "0.2",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert len(lines) >= 2 and all(LINE.match(line) for line in lines), result.stderr
    assert lines[0].startswith("step 5/400 ") and lines[-1].startswith("step 400/400 (100%)")
    assert "ETA" in lines[0] and "val_accuracy" in lines[-1]
    assert len(lines) < 400 / 5  # throttled, not one per log


def started(total=1000, start=0):
    return RunStarted(
        task="tiny",
        device="cpu",
        device_name="cpu",
        precision="fp32",
        autocast_dtype="float32",
        param_dtype="float32",
        scaler=False,
        param_count=1,
        total_steps=total,
        steps_per_epoch=100,
        start_step=start,
        config={},
    )


def step(n, elapsed):
    return StepMetrics(
        step=n,
        epoch=n // 100 + 1,
        loss=0.5,
        lr=0.1,
        samples_per_second=3412.0,
        grad_scale=None,
        grad_norm=None,
        skipped_steps=0,
        memory_bytes=None,
        elapsed_seconds=elapsed,
    )


class Lines:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_the_eta_leaves_paused_time_out():
    out = Lines()
    reporter = ProgressReporter(enabled=True, live=False, every=0.0, stream=out)
    reporter(started(total=1000, start=200))
    reporter(EvalMetrics(step=200, epoch=2, split="val", metrics={"acc": 0.91}))
    reporter(RunResumed(step=250, paused_seconds=600.0))
    reporter(step(400, elapsed=660.0))  # 200 steps in 60 s of training: 600 steps to go take 3 minutes
    assert out.text == (
        "step 400/1,000 (40%) epoch 5 loss 0.5000 val_acc 0.9100 | 3,412 samples/s | elapsed 11m00s, ETA 3m00s\n"
    )
    reporter(
        RunEnded(
            status="completed",
            message="",
            step=400,
            epoch=5,
            final_loss=0.5,
            metrics={},
            checkpoint=None,
            samples_per_second=None,
        )
    )
    assert out.text.count("\n") == 1  # the last step was printed already


def test_lines_are_throttled_and_the_end_is_always_printed():
    out = Lines()
    reporter = ProgressReporter(enabled=True, live=False, every=3600.0, stream=out)
    reporter(started())
    for n in range(10, 110, 10):
        reporter(step(n, elapsed=n / 10))
    reporter(
        RunEnded(
            status="stopped",
            message="",
            step=100,
            epoch=1,
            final_loss=0.5,
            metrics={},
            checkpoint=None,
            samples_per_second=None,
        )
    )
    assert [line.split(" (")[0] for line in out.text.splitlines()] == ["step 10/1,000", "step 100/1,000"]


def test_a_step_is_the_engines_step_metrics_not_any_class_of_that_name():
    """The CLI's sinks dispatch on the engine's event classes: an object of another module's class that is also
    called StepMetrics (with the same fields) is no step of this run, and draws no progress line."""
    impostor = type("StepMetrics", (), {})()
    vars(impostor).update(dataclasses.asdict(step(10, elapsed=1.0)))
    out = Lines()
    reporter = ProgressReporter(enabled=True, live=False, every=0.0, stream=out)
    reporter(started())
    reporter(impostor)
    reporter(step(20, elapsed=2.0))
    reporter(
        RunEnded(
            status="stopped",
            message="",
            step=20,
            epoch=1,
            final_loss=0.5,
            metrics={},
            checkpoint=None,
            samples_per_second=None,
        )
    )
    assert [line.split(" (")[0] for line in out.text.splitlines()] == ["step 20/1,000"]


def test_the_live_line_takes_a_step_at_most_every_bar_seconds_and_always_the_last(monkeypatch):
    """At a log interval of 1 a step event comes every few hundred microseconds: the terminal's line is rewritten at
    most every BAR_SECONDS with the newest figures, the run's last step at once, and the end leaves it as a line."""
    from core.cli import train as train_cli

    now, out = {"t": 50.0}, Lines()
    monkeypatch.setattr(train_cli.time, "monotonic", lambda: now["t"])
    reporter = ProgressReporter(enabled=True, live=True, stream=out)
    reporter(started(total=1000))

    def shown() -> list[str]:
        return [part.split(" (")[0] for part in out.text.split("\r\x1b[2K") if part]

    for n in range(1, 21):  # 20 steps within one BAR_SECONDS: the first is drawn, the rest wait
        reporter(step(n, elapsed=n / 1000))
        now["t"] += train_cli.BAR_SECONDS / 40
    assert shown() == ["step 1/1,000"]
    now["t"] += train_cli.BAR_SECONDS
    reporter(step(21, elapsed=0.1))
    reporter(step(22, elapsed=0.1))
    assert shown() == ["step 1/1,000", "step 21/1,000"] and "\n" not in out.text
    reporter(RunEnded("completed", "", 22, 1, 0.5, {}, None, None))
    assert shown()[-1] == "step 22/1,000" and out.text.endswith("\n")  # the end shows the last step, kept
    reporter(step(1000, elapsed=1.0))
    assert shown()[-1] == "step 1,000/1,000"  # the last step of the run is drawn at once


def test_the_last_steps_line_waits_for_the_final_evaluation():
    """However the throttle falls, the line of the last step is printed at the run's end, after the final
    evaluation, so it carries the val metrics (printed at once, it came out without them now and then)."""
    out = Lines()
    reporter = ProgressReporter(enabled=True, live=False, every=0.0, stream=out)
    reporter(started(total=20))
    reporter(step(10, elapsed=1.0))
    reporter(step(20, elapsed=2.0))
    assert [line.split(" (")[0] for line in out.text.splitlines()] == ["step 10/20"]
    reporter(EvalMetrics(step=20, epoch=1, split="val", metrics={"accuracy": 0.9}))
    reporter(
        RunEnded(
            status="completed",
            message="",
            step=20,
            epoch=1,
            final_loss=0.5,
            metrics={},
            checkpoint=None,
            samples_per_second=None,
        )
    )
    lines = out.text.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["step 10/20", "step 20/20"]
    assert "val_accuracy 0.9000" in lines[-1]


def test_the_cli_live_line_rewrites_on_a_terminal_and_keeps_lines_in_a_log(monkeypatch):
    """core.text.LiveLine, the one self-rewriting line of train, the lab commands, remote fetch and predict."""
    import os

    from core.text import LiveLine

    monkeypatch.setattr("shutil.get_terminal_size", lambda: os.terminal_size((12, 24)))
    log, terminal = Lines(), Lines()
    for out, live in ((log, False), (terminal, True)):
        line = LiveLine(out, live=live)
        line("fetching 10%")
        line("fetching 20% of a long name")
        line("done", keep=True)
        line("next 50%")
        line.close()
    assert log.text == "done\n"  # a log gets the kept lines only
    assert terminal.text == "\r\x1b[2Kfetching 10\r\x1b[2Kfetching 20\r\x1b[2Kdone\n\r\x1b[2Knext 50%\n"
