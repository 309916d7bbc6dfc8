"""RunControl: a Qt-free handle another thread uses to stop or pause a run between optimizer steps."""

from __future__ import annotations

import threading


class RunControl:
    """Stop and pause requests, checked by the trainer between optimizer steps.

    The requests change under one lock, so `requested` always agrees with the two events whatever threads ask
    at once (a stop that lands in the middle of a resume stays asked for); the trainer reads `requested` once
    per step without the lock: a plain attribute, written whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        # True once a stop or pause was asked for (False again after a resume without a stop): one attribute
        # read lets the trainer skip the full checks on the steps where nothing was asked for.
        self.requested = False

    def stop(self) -> None:
        """Ask the run to stop after the current optimizer step (it writes a final checkpoint)."""
        with self._lock:
            self._stop.set()
            self._running.set()  # a paused run must wake up to stop
            self.requested = True

    def pause(self) -> None:
        """Ask the run to wait before its next optimizer step; a run asked to stop stops instead."""
        with self._lock:
            if not self._stop.is_set():
                self._running.clear()
            self.requested = True

    def resume(self) -> None:
        with self._lock:
            self._running.set()
            self.requested = self._stop.is_set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_while_paused(self, poll_seconds: float = 0.1) -> None:
        """Block while paused; returns at once when running or stopping."""
        while not self._running.wait(poll_seconds):
            pass
