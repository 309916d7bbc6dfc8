"""Following a run's metrics.jsonl as it grows, by byte offset: every complete line once, in order, none lost.

A line counts once its newline is written (one that is not a JSON object is passed over); the offset after each
is where a follower that went away resumes. Following ends when no live run holds the folder and nothing more is
in the file. A child process tells its driver where its events start with one `run_start` line. Torch-free.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.engine.run_folder import METRICS_FILE, is_in_use

POLL_SECONDS = 0.1  # a live run's new lines are looked for this often
CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FollowLine:
    record: dict
    raw: bytes  # the line as written, without its newline
    offset: int  # the byte offset just after the line: where to resume


class MetricsFollower:
    """The complete lines of `<folder>/metrics.jsonl` from byte `offset` on (`read()`: what is there now;
    `lines()`: until the run is over). After `lines()` ends, `status` says how: "ended" (its last event is a
    RunEnded and no live run holds the folder), "gone" (no live run holds it, and it ends without a RunEnded:
    killed, or never started), "timeout" (the deadline passed) or "stopped" (the caller's stop event)."""

    def __init__(self, folder: str | os.PathLike, offset: int = 0, poll_seconds: float = POLL_SECONDS):
        self.folder = Path(folder)
        self.path = self.folder / METRICS_FILE
        self.offset = offset  # just after the last complete line read
        self.poll_seconds = poll_seconds
        self.status = "running"
        self.last_event: str | None = None  # the "event" of the last record read
        self._file: BinaryIO | None = None
        self._tail = b""  # bytes after `offset`: a line not complete yet

    @classmethod
    def of_run_start(cls, record: dict) -> MetricsFollower | None:
        """The follower of a `run_start` record a child printed; None for any other record."""
        folder, offset = record.get("folder"), record.get("offset")
        return cls(folder, offset) if isinstance(folder, str) and type(offset) is int else None

    def read(self) -> list[FollowLine]:
        """The complete lines written since the last call."""
        file = self._file
        if file is None:
            try:
                self._file = file = open(self.path, "rb")
            except FileNotFoundError:
                return []
            file.seek(self.offset)
        chunks = [self._tail]
        while chunk := file.read(CHUNK):
            chunks.append(chunk)
        data = b"".join(chunks)
        end = data.rfind(b"\n") + 1
        self._tail = data[end:]
        out = []
        offset = self.offset
        for raw in data[:end].split(b"\n")[:-1]:
            offset += len(raw) + 1
            try:
                record = json.loads(raw)
            except (UnicodeDecodeError, ValueError):
                continue
            if isinstance(record, dict):
                out.append(FollowLine(record, raw, offset))
                self.last_event = record.get("event")
        self.offset = offset
        return out

    def lines(
        self, deadline: float | None = None, stop: threading.Event | None = None, idle_seconds: float | None = None
    ) -> Iterator[FollowLine | None]:
        """Every complete line as it is written, until the run is over. `deadline`: a time.monotonic() to give up
        at; `stop`: an event that ends it; `idle_seconds`: yield None after that long without a line."""
        quiet_since = time.monotonic()
        try:
            while True:
                got = self.read()
                if got:
                    yield from got
                    quiet_since = time.monotonic()
                    continue
                if not is_in_use(self.folder):
                    got = self.read()  # what the run wrote before it let go of the folder
                    if not got:
                        self.status = "ended" if self.last_event == "RunEnded" else "gone"
                        return
                    yield from got
                    continue
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self.status = "timeout"
                    return
                if idle_seconds is not None and now - quiet_since >= idle_seconds:
                    quiet_since = now
                    yield None
                if stop is not None:
                    if stop.wait(self.poll_seconds):
                        self.status = "stopped"
                        return
                else:
                    time.sleep(self.poll_seconds)
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (`lines()` does when it ends); a later read reopens it at `offset`."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._tail = b""  # read again from `offset` if reopened


def run_start(folder: str | os.PathLike) -> dict:
    """`{"folder": F, "offset": N}`: N is where the last line of F's metrics.jsonl begins (called just after a
    run's RunStarted, where that run's events start; 0 for an empty or no file)."""
    folder = os.path.abspath(folder)
    try:
        with open(Path(folder) / METRICS_FILE, "rb") as file:
            start = max(0, file.seek(0, os.SEEK_END) - CHUNK)  # RunStarted's line is shorter than CHUNK
            file.seek(start)
            tail = file.read()
    except OSError:
        return {"folder": folder, "offset": 0}
    return {"folder": folder, "offset": start + tail.rfind(b"\n", 0, len(tail) - 1) + 1}  # the newline before it
