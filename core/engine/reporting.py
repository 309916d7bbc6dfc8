"""What a run reports: its events, timed, written to metrics.jsonl and folded into run.json (RunRecord) and
handed to the sink, by rank 0 alone. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeGuard

from core.config import TENSORBOARD_MISSING
from core.devices import memory_in_use
from core.engine.events import CheckpointSaved, EvalMetrics, Event, RunEnded, RunStarted, StepMetrics, event_to_dict
from core.engine.run_folder import describe_os_error
from core.engine.run_record import RECORD_FILE, load_record, lower_is_better, new_id, now_iso, primary_metric
from core.engine.tensorboard_live import TENSORBOARD_FOLDER, LiveTensorBoard
from core.errors import ConfigError
from core.files import atomic_write_bytes

if TYPE_CHECKING:
    from core.engine.folder_control import FolderControl

Sink = Callable[[Event], None]

# metrics.jsonl is flushed at every event but StepMetrics, and StepMetrics at most this often (a kill -9 loses
# at most those; a torn line is skipped by core.files.read_jsonl); every other event flushes the lines before it.
FLUSH_SECONDS = 0.25
MEMORY_SECONDS = 0.2  # StepMetrics.memory_bytes is read this often at most (TrainingClock.memory)

_ENCODER = json.JSONEncoder(default=str)  # one encoder (json.dumps with default= builds one per call)


class EventLog:
    """Rank 0's events, each appended to metrics.jsonl (once opened) and handed to the sink. A failed write never
    raises here: the file is given up, `failure` names the path and the cause (the trainer ends the run), and
    the events still reach the sink. Opened with the run's RunControl, it also watches the folder's control
    channel (core.engine.folder_control), whose acknowledgements are emitted here too, so `emit` takes a lock."""

    def __init__(self, is_main: bool):
        self.is_main = is_main
        self._file: TextIO | None = None
        self.path: Path | None = None
        self.failure: str | None = None
        self.record: RunRecord | None = None  # run.json beside metrics.jsonl
        self.tensorboard: LiveTensorBoard | None = None  # <run folder>/tensorboard (RunConfig.tensorboard)
        self._flushed_at = float("-inf")  # when a StepMetrics line was last flushed (the first one goes at once)
        self._queued: list[Event] = []  # StepMetrics not yet written (see emit)
        self._lock = threading.Lock()  # the trainer's thread and the control channel's emit (see the class doc)
        self.channel: FolderControl | None = None  # while open with a control

    def open(self, path: Path, tensorboard: bool = False, control=None, sink: Sink | None = None) -> None:
        """Open metrics.jsonl (and run.json) at `path`; with `tensorboard`, event files beside it (a ConfigError
        without tensorboardX, before anything is opened); with `control`, the folder's control channel."""
        live = None
        if tensorboard:
            try:
                live = LiveTensorBoard(Path(path).parent / TENSORBOARD_FOLDER)
            except ImportError:
                raise ConfigError("tensorboard", TENSORBOARD_MISSING) from None
        self.tensorboard = live
        self.path = Path(path)
        self._file = file = open(path, "a", encoding="utf-8")
        if _ends_mid_line(self.path):  # an earlier run was killed mid-line: end that line so ours stay whole
            file.write("\n")
            file.flush()
        try:
            self.record = RunRecord(self.path.parent)
        except Exception as exc:  # run.json is a summary: the run goes on without it
            self._extra_failed("record", exc)
        if control is not None and self.is_main:
            from core.engine.folder_control import FolderControl

            self.channel = FolderControl(self.path.parent, control, lambda ack: self.emit(ack, sink)).start()

    def emit(self, event: Event, sink: Sink | None) -> None:
        """Write `event` and hand it to the sink. A StepMetrics is only queued: the queue is written at most every
        FLUSH_SECONDS and before any other event, so the per-step work at a log interval of 1 is an append."""
        if not self.is_main:
            return
        with self._lock:
            if type(event) is StepMetrics:
                self._queued.append(event)
                if (now := time.monotonic()) - self._flushed_at >= FLUSH_SECONDS:
                    self._flushed_at = now
                    self._write(flush=True)
            else:
                if self._queued:
                    self._write(flush=False)
                self._write(flush=True, events=[event])
            if sink is not None:
                sink(event)

    def _write(self, flush: bool, events: list[Event] | None = None) -> None:
        """`events` (by default the queued StepMetrics): one write of their lines, then run.json and TensorBoard."""
        if events is None:
            events, self._queued = self._queued, []
        if self._file is None and self.record is None and self.tensorboard is None:
            return
        records = [event_to_dict(event) for event in events]
        if self._file is not None:
            try:
                encode = _ENCODER.encode
                self._file.write("".join([encode(record) + "\n" for record in records]))
                if flush:
                    self._file.flush()
            except OSError as exc:
                self.failure = f"could not write {self.path}: {describe_os_error(exc)}"
                file, self._file = self._file, None
                with contextlib.suppress(OSError):
                    file.close()
        if self.record is not None:
            try:
                for event in events:
                    self.record.update(event)
            except Exception as exc:  # run.json is a summary: a failed write never ends the run
                self._extra_failed("record", exc)
        if self.tensorboard is not None:
            try:
                for record in records:
                    self.tensorboard.write(record)
            except Exception as exc:  # event files are an extra, like run.json: the run goes on without them
                self._extra_failed("tensorboard", exc)

    def _extra_failed(self, which: str, exc: Exception) -> None:
        """Give up run.json or the live TensorBoard files (`which`) with one line on stderr (stdout may carry
        the events)."""
        cause = describe_os_error(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        if which == "record":
            self.record = None
            failure = f"run.json in {self.path.parent if self.path else '?'}: {cause}; the run goes on without it"
        else:
            live, self.tensorboard = self.tensorboard, None
            failure = f"TensorBoard files in {live.folder if live else '?'}: {cause}; the run goes on without them"
            with contextlib.suppress(Exception):
                if live is not None:
                    live.close()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"amp-console: could not write {failure}\n")
            sys.stderr.flush()

    def removed(self) -> bool:
        """Whether metrics.jsonl was deleted while open (its folder removed): appends would go nowhere."""
        if self._file is None:
            return False
        try:
            return os.fstat(self._file.fileno()).st_nlink == 0
        except OSError:
            return True

    def close(self) -> None:
        if self.channel is not None:  # no acknowledgement after the run has ended
            self.channel.close()
            self.channel = None
        if self._queued:
            self._write(flush=False)
        if self.tensorboard is not None:  # flushed and closed however the run ended
            try:
                self.tensorboard.close()
            except Exception as exc:
                self._extra_failed("tensorboard", exc)
            self.tensorboard = None
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:  # the last flush failed (disk full): the lines before it are on disk
                self.failure = self.failure or f"could not write {self.path}: {describe_os_error(exc)}"
            self._file = None


def _ends_mid_line(path: Path) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


class TrainingClock:
    """Training time and samples, interval by interval; evaluations, checkpoints and pauses are left out."""

    def __init__(self) -> None:
        self.started = self.interval_start = time.perf_counter()
        self.interval_steps = 0
        self.train_seconds = 0.0
        self.samples = 0
        self._memory: int | None = None
        self._memory_at = float("-inf")  # when memory() last read the device (the first call reads at once)

    def leave_out(self, since: float) -> None:
        """Leave the time from `since` until now out of the interval (side work, a pause)."""
        self.interval_start += time.perf_counter() - since

    def close_interval(self, samples: int) -> tuple[float, float]:
        """End the interval, which trained on `samples`: (its seconds, now)."""
        now = time.perf_counter()
        seconds = now - self.interval_start
        self.train_seconds += seconds
        self.samples += samples
        self.interval_steps = 0
        self.interval_start = now
        return seconds, now

    def memory(self, device, fresh: bool = False) -> int | None:
        """Memory in use on `device` (the resident set for the CPU), read at most every MEMORY_SECONDS (a system
        call per step at a log interval of 1) unless `fresh`."""
        now = time.perf_counter()
        if fresh or now - self._memory_at >= MEMORY_SECONDS:
            self._memory = resident_set_size() if device.type == "cpu" else memory_in_use(device)
            self._memory_at = now
        return self._memory

    @property
    def samples_per_second(self) -> float | None:
        return self.samples / self.train_seconds if self.train_seconds > 0 else None


_statm: tuple[int, int] | None = None  # (pid, descriptor of /proc/self/statm), opened once per process
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_set_size() -> int | None:
    """This process's resident set in bytes, one pread on a descriptor of /proc/self/statm kept open; None where
    there is no /proc."""
    global _statm
    pid = os.getpid()
    if _statm is None or _statm[0] != pid:  # first call, or a forked child (its /proc/self is its own)
        try:
            _statm = (pid, os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        except OSError:
            _statm = (pid, -1)
    if _statm[1] < 0:
        return None
    try:
        return int(os.pread(_statm[1], 256, 0).split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


FEW_STEPS = 100  # a run this short that ends near its baseline has barely trained


def barely_trained(steps: int, metrics: dict, baseline: dict, primary: str | None) -> str:
    """'val accuracy 0.517 is near its baseline 0.500 after only 14 optimizer steps: ...' when a run of fewer than
    FEW_STEPS steps ends with its primary metric within 2 points (or 5%) of the task's baseline, else ''."""
    value, base = metrics.get(primary), baseline.get(primary)
    if steps >= FEW_STEPS or not _finite(value) or not _finite(base):
        return ""
    if abs(value - base) > max(0.02, 0.05 * abs(base)):
        return ""
    return (
        f"val {primary} {value:.3f} is near its baseline {base:.3f} after only {steps:,} optimizer steps: the "
        f"model has barely trained; train longer (more epochs, max_steps or min_steps)"
    )


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


RECORD_VERSION = 1
WRITE_SECONDS = 2.0  # evaluations and best checkpoints reach run.json at most this late (see RunRecord)


def json_ready(value):
    """JSON has no NaN or inf: those are written as strings ('nan', 'inf')."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


class RunRecord:
    """The run.json of one run folder (read back by core.engine.run_record), folded from the run's events."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / RECORD_FILE
        self.data: dict | None = None
        self._mode = "auto"
        self._pending = False  # changed since the last write, by an event that may wait (see update)
        self._written_at = float("-inf")
        earlier = load_record(self.folder)
        self._earlier = earlier if isinstance(earlier, dict) else None

    def update(self, event) -> None:
        """Fold one event into the record and write it: at once for the start, a last checkpoint and the end;
        evaluations and best checkpoints once WRITE_SECONDS have passed since the last write (else pending)."""
        data = self.data
        if type(event) is StepMetrics and data is not None:  # the event of every logged step: straight here
            memory = event.memory_bytes
            if type(memory) is int and memory > (data.get("peak_memory_bytes") or 0):
                data["peak_memory_bytes"] = memory
            data["steps"] = event.step
            data["final_loss"] = event.loss
            data["wall_seconds"] = self._previous_wall + float(event.elapsed_seconds or 0.0)
            if self._pending and time.monotonic() - self._written_at >= WRITE_SECONDS:
                self.write()
            return  # otherwise kept in memory only: written with the next record-worthy event
        urgent = True
        if isinstance(event, RunStarted):
            self._started(event)
        elif data is None:
            return  # no RunStarted yet: no record
        elif isinstance(event, CheckpointSaved):
            which = getattr(event, "kind", "last") or "last"
            if which != "last" and getattr(event, "rank", None) not in (None, 1):
                return  # the k-th best kept: run.json names the best one
            data["checkpoints"][which] = {"path": str(event.path), "step": event.step}
            if which == "last":
                data["steps"] = max(data.get("steps") or 0, event.step)
            else:
                urgent = False
        elif isinstance(event, EvalMetrics):
            self._evaluated(data, event)
            urgent = False
        elif isinstance(event, RunEnded):
            self._ended(data, event)
        else:
            return
        if urgent or time.monotonic() - self._written_at >= WRITE_SECONDS:
            self.write()
        else:
            self._pending = True

    def write(self) -> None:
        payload = json.dumps(json_ready(self.data), indent=2, default=str) + "\n"
        atomic_write_bytes(self.path, payload.encode("utf-8"))
        self._pending = False
        self._written_at = time.monotonic()

    def _started(self, event) -> None:
        earlier = self._earlier or {}
        metric = event.config.get("monitor") or primary_metric(event.task)
        self._mode = str(event.config.get("monitor_mode") or "auto")
        self.data = {
            "version": RECORD_VERSION,
            "id": earlier.get("id") or new_id(),
            "name": self.folder.name,
            "task": event.task,
            "status": "running",
            "device": event.device,
            "device_name": getattr(event, "device_name", None),
            "precision": event.precision,
            "autocast_dtype": event.autocast_dtype,
            "versions": {
                "python": platform.python_version(),
                "torch": getattr(sys.modules.get("torch"), "__version__", None),
            },
            "start_time": earlier.get("start_time") or now_iso(),
            "resumed_at": list(earlier.get("resumed_at") or []) + ([now_iso()] if earlier else []),
            # restarts by torchrun or a requeued SLURM job: count, by, step, reason, last_step, at
            "restarts": list(earlier.get("restarts") or [])
            + ([{**event.restart, "at": now_iso()}] if getattr(event, "restart", None) else []),
            "end_time": None,
            "wall_seconds": earlier.get("wall_seconds") or 0.0,
            "steps": event.start_step,
            "start_step": event.start_step,
            "total_steps": event.total_steps,
            "final_loss": earlier.get("final_loss"),
            "samples_per_second": None,
            "peak_memory_bytes": earlier.get("peak_memory_bytes"),  # the most any logged step reported
            "metrics": dict(earlier.get("metrics") or {}),
            "test_metrics": {},
            "best": (
                earlier["best"]
                if (earlier.get("best") or {}).get("name") == metric
                else {"name": metric, "value": None, "step": None}
                if metric
                else None
            ),
            "checkpoints": dict(earlier.get("checkpoints") or {}),
            "config": dict(event.config),
            "notes": list(getattr(event, "notes", []) or []),
            "message": "",
        }
        self._previous_wall = float(self.data["wall_seconds"] or 0.0)

    def _evaluated(self, data: dict, event) -> None:
        if event.split not in ("val", "validation"):
            return
        data["metrics"] = dict(event.metrics)
        data["steps"] = max(data.get("steps") or 0, event.step)
        best = data.get("best")
        if not best or best.get("name") not in event.metrics:
            return
        value = event.metrics[best["name"]]
        if not isinstance(value, (int, float)) or value != value:
            return
        old = best.get("value")
        if not isinstance(old, (int, float)) or (
            value < old if lower_is_better(best["name"], self._mode) else value > old
        ):
            data["best"] = {"name": best["name"], "value": value, "step": event.step}

    def _ended(self, data: dict, event) -> None:
        data.update(
            status=event.status,
            end_time=now_iso(),
            steps=event.step,
            message=event.message,
            wall_seconds=self._previous_wall + float(event.elapsed_seconds or 0.0),
            samples_per_second=event.samples_per_second,
            test_metrics=dict(event.test_metrics or {}),
        )
        if event.final_loss is not None:
            data["final_loss"] = event.final_loss
        if event.checkpoint_advice and data.get("best"):  # its test metrics beside test_metrics (the last's)
            best = {"test_metrics": dict(event.best_test_metrics), "test_step": event.best_step}
            data["best"].update(best, advice=event.checkpoint_advice, use=event.advised_checkpoint)
        if event.metrics:
            data["metrics"] = dict(event.metrics)
        if event.checkpoint:
            data["checkpoints"].setdefault("last", {"path": str(event.checkpoint), "step": event.step})
            data["checkpoints"]["last"]["path"] = str(event.checkpoint)
