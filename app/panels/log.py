"""Log pane: one line per thing that happened in a run, errors included (their details on demand)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QPlainTextEdit

from core.engine.events import CheckpointSaved, EvalMetrics, RunEnded, RunPaused, RunResumed, RunStarted, StepMetrics


def run_start_time(event: RunStarted) -> float | None:
    """When the run started: its RunStarted's `started_at`, else the time in its folder's name, else None."""
    if isinstance(getattr(event, "started_at", None), (int, float)):
        return float(event.started_at)
    dated = re.match(r"(\d{8}-\d{6})-", Path(str(event.config.get("out_dir") or "")).name)
    return time.mktime(time.strptime(dated[1], "%Y%m%d-%H%M%S")) if dated else None


def _metrics_text(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())


class LogPanel(QPlainTextEdit):
    """Read-only, bounded log. `handle_event` turns core events into lines (not every StepMetrics)."""

    MAX_LINES = 5000

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("logView")
        self.setReadOnly(True)
        self.setMaximumBlockCount(self.MAX_LINES)
        self.setPlaceholderText("Run events and errors appear here.")
        self._steps_logged = 0
        self._skipped = 0
        self._started_at: float | None = None  # the run's start (run_start_time), for its events' own times
        self._own_time: float | None = None  # while an event is logged: when it happened (a replay's, not now)
        self._last_time: float | None = None  # the latest event's own time

    def log(self, text: str, level: str = "info") -> None:
        prefix = {"error": "ERROR ", "warning": "WARN  ", "note": "NOTE  "}.get(level, "")
        bar = self.verticalScrollBar()
        following = bar.value() >= bar.maximum() - 2  # at the end: follow new lines; scrolled up: stay there
        selection = self.textCursor()
        stamp = time.strftime("%H:%M:%S", time.localtime(self._own_time))  # None: now
        self.appendPlainText(f"{stamp}  {prefix}{text}")
        if following and not selection.hasSelection():
            self.moveCursor(QTextCursor.MoveOperation.End)
            bar.setValue(bar.maximum())

    def handle_event(self, event) -> None:
        """Log `event` at its own time where it says (replayed after an Attach: when it happened, not now)."""
        if isinstance(event, RunStarted):
            self._started_at = self._last_time = run_start_time(event)
        elapsed = getattr(event, "elapsed_seconds", None)  # an event without it: the last one's time
        if self._started_at is not None and elapsed is not None:
            self._last_time = min(self._started_at + elapsed, time.time())
        self._own_time = self._last_time
        try:
            self._log_event(event)
        finally:
            self._own_time = None

    def _log_event(self, event) -> None:
        if isinstance(event, RunStarted):
            self._steps_logged = 0
            self._skipped = 0
            if not self.document().isEmpty():
                self.appendPlainText("")  # a blank line between runs
            verb = f"resumed at step {event.start_step:,}" if event.start_step else "started"
            self.log(
                f"Run {verb}: task {event.task} on {event.device} ({event.device_name}), {event.precision} "
                f"(autocast {event.autocast_dtype}, params {event.param_dtype}, "
                f"GradScaler {'on' if event.scaler else 'off'}), {event.param_count:,} parameters, "
                f"{event.total_steps:,} steps, writing to {event.config.get('out_dir', '')}"
            )
            for note in getattr(event, "notes", []) or []:
                self.log(note, "note")  # what the engine decided or changed for this run
        elif isinstance(event, StepMetrics):
            # Every report would flood the pane on long runs; the plots carry the detail.
            self._steps_logged += 1
            if event.skipped_steps > self._skipped or event.nonfinite_source:
                new = event.skipped_steps - self._skipped
                self._skipped = event.skipped_steps
                source = f"; inf/NaN first produced by {event.nonfinite_source}" if event.nonfinite_source else ""
                scale = f", scale now {event.grad_scale:g}" if event.grad_scale is not None else ""
                self.log(
                    f"step {event.step:,}: fp16 overflow, GradScaler skipped {new} step(s) "
                    f"({self._skipped} in all{scale}){source}",
                    "warning",
                )
            if self._steps_logged <= 3 or self._steps_logged % 50 == 0:
                self.log(
                    f"step {event.step:,}: loss {event.loss:.4g}, lr {event.lr:.3g}, "
                    f"{event.samples_per_second:,.0f} samples/s"
                )
        elif isinstance(event, EvalMetrics):
            self.log(f"step {event.step:,} {event.split}: {_metrics_text(event.metrics)}")
        elif isinstance(event, RunPaused):
            self.log(f"paused at step {event.step:,}")
        elif isinstance(event, RunResumed):
            self.log(f"resumed at step {event.step:,} after {event.paused_seconds:.1f} s paused")
        elif isinstance(event, CheckpointSaved) and event.kind == "best":
            self.log(f"best checkpoint ({event.metric} {event.value:.4g}) saved at step {event.step:,}: {event.path}")
        elif isinstance(event, CheckpointSaved):
            self.log(f"checkpoint saved at step {event.step:,}: {event.path}")
        elif isinstance(event, RunEnded):
            level = "error" if event.status == "failed" else "info"
            self.log(f"Run {event.status}: {event.message}", level)
            if event.best_test_metrics and event.best_step != event.step:  # the last weights' test line came before
                self.log(
                    f"test of the best checkpoint (step {event.best_step:,}): {_metrics_text(event.best_test_metrics)}"
                )
            if event.checkpoint_advice:
                self.log(event.checkpoint_advice, "note")
            if event.details:
                self.log(event.details.rstrip(), level)
