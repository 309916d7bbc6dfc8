"""Sweep trials N at a time: one training process per device slot (run_sweep with `devices`). Each trial is
`python -m core.cli train --events --config-stdin`, followed through its metrics.jsonl (core.engine.follow) and
stopped with a checkpoint by a request in its folder. A child also stops when this process dies. Only this process
writes sweep.json, from one thread. Trials left at automatic threads share the cores; spare processes load torch
ahead for pending trials. No torch here.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import train_command
from core.engine.folder_control import ControlError, write_request
from core.engine.follow import MetricsFollower
from core.engine.threads import usable_cpu_cores
from core.errors import ConfigError
from core.process import STOP_GRACE_SECONDS, StopEscalation, child_environment, signal_group, signal_name
from core.text import first_line

if TYPE_CHECKING:
    from core.engine.events import RunEnded

STDERR_LINES = 40
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?|xpu(:\d+)?)$")
_DISTRIBUTED_ENV = (
    "WORLD_SIZE RANK LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID GROUP_RANK ROLE_RANK"
).split()


def parse_devices(spec, flag: str = "--devices") -> list[str]:
    """'cuda:0, cuda:1' (or a list) -> ['cuda:0', 'cuda:1']; 'cuda' means cuda:0; a device may repeat ('cpu,cpu').
    ConfigError naming `flag` for an empty list, 'auto' or a name that is not a device."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    devices = []
    for raw in items:
        text = str(raw).strip().lower()
        if not text:
            raise ConfigError(
                flag, f"an empty name in {spec!r}: give devices separated by commas, e.g. cuda:0,cuda:1 or cpu,cpu"
            )
        if text == "auto":
            raise ConfigError(
                flag, "name the devices (e.g. cuda:0,cuda:1 or cpu,cpu): 'auto' is one device, the first accelerator"
            )
        if not _DEVICE.match(text):
            raise ConfigError(flag, f"{str(raw).strip()!r} is not a device; use cpu, cuda:N, mps or xpu:N")
        devices.append(f"{text}:0" if text in ("cuda", "xpu") else text)
    if not devices:
        raise ConfigError(flag, "no devices given: e.g. --devices cuda:0,cuda:1 (or cpu,cpu)")
    return devices


def device_slots(devices: list[str], parallel: int | None = None) -> list[str]:
    """The device of each slot: one per listed device, or `parallel` slots dealt round-robin over them."""
    if parallel is None:
        return list(devices)
    if parallel < 1:
        raise ConfigError("--parallel", f"{parallel}: give at least 1 trial at a time")
    return [devices[i % len(devices)] for i in range(parallel)]


def child_env(slots: int, base: dict | None = None) -> dict:
    """A trial process's environment (core.process.child_environment, or `base`): unbuffered output, none of our
    torchrun variables, and LOCAL_WORLD_SIZE so N processes share the cores (a `threads` setting is used as given)."""
    env = dict(child_environment() if base is None else base)
    for name in _DISTRIBUTED_ENV:
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    if slots > 1:
        share = max(1, usable_cpu_cores() // slots)
        env["LOCAL_WORLD_SIZE"] = str(slots)
        omp = env.get("OMP_NUM_THREADS", "").strip()
        if omp.isdigit() and int(omp) > share:
            env["OMP_NUM_THREADS"] = str(share)
    return env


@dataclass
class _Child:
    """One trial's process and what it has said so far."""

    slot: int
    device: str
    trial: dict | None  # None while a spare waits for a trial
    proc: subprocess.Popen
    stderr_tail: deque = field(default_factory=lambda: deque(maxlen=STDERR_LINES))
    ended: RunEnded | None = None
    started: bool = False
    setup_error: str | None = None
    stopping: StopEscalation | None = None
    stderr_reader: threading.Thread | None = None
    follower: MetricsFollower | None = None  # its metrics.jsonl, once it has said where

    def __post_init__(self) -> None:
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr  # opened with PIPE
        self.stdin, self.stdout, self.stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr

    def send(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # it has exited (or is exiting): nothing to tell it
            self.stdin.write(line + "\n")
            self.stdin.flush()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        if self.stopping is None:
            self.stopping = StopEscalation(self.proc.pid, grace)
            self.request_stop()

    def request_stop(self) -> None:  # in its run folder, once it has said where that is
        if self.follower is not None and self.stopping is not None and self.proc.poll() is None:
            with contextlib.suppress(ControlError):  # its folder went away: the escalation ends it
                write_request(self.follower.folder, "stop")

    def kill(self) -> None:
        if self.proc.poll() is None:
            signal_group(self.proc.pid, getattr(signal, "SIGKILL", signal.SIGTERM))


def _read_stdout(child: _Child, inbox: queue.Queue) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in child.stdout:
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    inbox.put(("line", child, json.loads(line)))
    _close(child.stdout)
    code = child.proc.wait()
    inbox.put(("exit", child, code))


def _close(stream) -> None:
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.close()


def _read_stderr(child: _Child) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in child.stderr:
            text = line.rstrip()
            if text.strip() and not set(text.strip()) <= {"*"}:
                child.stderr_tail.append(text)
    _close(child.stderr)


def run_parallel(folder: Path, data: dict, to_run: list[dict], total: int, emit, control, slots: list[str]) -> None:
    """Run `to_run` (trial dicts of `data`, in order) on `slots`, one trial per slot at a time, until all have run or
    control.stop() (every running trial is then stopped and waited for). sweep.json is written on this thread only.
    Spare processes load torch ahead for pending trials, so a freed slot starts its next one at once."""
    from core.engine.events import RunEnded, RunStarted, event_or_none
    from core.lab.sweep.trials import TrialEvent, begin_trial, end_trial, note_trial_folder

    grace = STOP_GRACE_SECONDS
    inbox: queue.Queue = queue.Queue()
    pending = deque(to_run)
    free = list(range(len(slots)))
    running: dict[int, _Child] = {}
    spares: deque[_Child] = deque()
    env = child_env(len(slots))

    def spawn() -> _Child:
        proc = subprocess.Popen(
            train_command(),  # stops with a checkpoint when this process ends, however it ends
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            cwd=os.getcwd(),
            env=env,
            start_new_session=os.name == "posix",
        )
        child = _Child(-1, "", None, proc)
        threading.Thread(target=_read_stdout, args=(child, inbox), name="sweep-trial-out", daemon=True).start()
        child.stderr_reader = threading.Thread(target=_read_stderr, args=(child,), name="sweep-trial-err", daemon=True)
        child.stderr_reader.start()
        return child

    def start(slot: int, trial: dict) -> None:
        device = slots[slot]
        config, resume_from = begin_trial(folder, data, trial, total, emit, device=device)
        while spares and spares[0].proc.poll() is not None:  # a spare that died waiting: its exit is ignored
            spares.popleft()
        try:
            child = spares.popleft() if spares else spawn()
        except OSError as exc:
            free.append(slot)
            end_trial(
                folder, data, trial, total, emit, "failed", f"could not start a training process: {exc.strerror or exc}"
            )
            return
        child.slot, child.device, child.trial = slot, device, trial
        running[slot] = child
        child.send(json.dumps({"config": config.to_dict(), "resume": str(resume_from) if resume_from else None}))
        if control.stop_requested:
            child.stop(grace)

    def top_up_spares() -> None:
        training = sum(1 for child in running.values() if child.started)
        while len(spares) < min(len(pending), training):
            try:
                spares.append(spawn())
            except OSError:  # no spare: the next trial starts its own process
                return

    def finish(child: _Child, code: int) -> None:
        if child.stderr_reader is not None:
            child.stderr_reader.join(5.0)  # its last lines may name the failure
        _close(child.stdin)
        if child.follower is not None:
            child.follower.close()
        status, message = _outcome(child, code, grace)
        assert child.trial is not None  # a running child has its trial
        end_trial(folder, data, child.trial, total, emit, status, message)

    def escalate() -> None:
        for child in running.values():
            if child.stopping is not None and child.proc.poll() is None:
                child.stopping.poll()

    def read_events(child: _Child) -> None:
        """Its events written since the last call, from its RunStarted on."""
        assert child.follower is not None and child.trial is not None
        for line in child.follower.read():
            event = event_or_none(line.record)
            if isinstance(event, RunStarted):
                child.started = True
                note_trial_folder(folder, data, child.trial, event)
            elif isinstance(event, RunEnded):
                child.ended = event
            if event is not None and child.started:
                emit(TrialEvent(child.trial["index"], child.trial["name"], event))

    try:
        while True:
            if control.stop_requested:
                for each in running.values():
                    each.stop(grace)
                while spares:  # a spare holds no run and no files: ending it loses nothing
                    _discard(spares.popleft())
            else:
                while free and pending:
                    free.sort()
                    start(free.pop(0), pending.popleft())
                top_up_spares()
            if not running:
                break
            try:
                kind, child, payload = inbox.get(timeout=0.1)
            except queue.Empty:
                escalate()
                kind, child = "", None
            for each in list(running.values()):
                if each.follower is not None:
                    read_events(each)
            if child is None or child.trial is None:  # nothing came, or a spare's "ready" line or exit
                continue
            if kind == "exit":
                finish(child, payload)
                del running[child.slot]
                free.append(child.slot)
            elif "setup_error" in payload:
                child.setup_error = str(payload["setup_error"])
            elif child.follower is None and (follower := MetricsFollower.of_run_start(payload)) is not None:
                child.follower = follower
                child.request_stop()  # asked for before it said where its folder is
                read_events(child)
    finally:
        for child in running.values():  # an error here (or in a progress callback): no child trains on
            child.stop(grace)
            _close(child.stdin)  # this process is going away: its end stops one that has not said where it runs
        while spares:
            _discard(spares.popleft())
        deadline = time.monotonic() + grace
        for child in running.values():
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.proc.wait()
            _close(child.stdin)


def _discard(child: _Child) -> None:
    """End a spare that was given no trial (it holds no run and no files)."""
    child.kill()
    _close(child.stdin)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.proc.wait(10)


def _outcome(child: _Child, code: int, grace: float) -> tuple[str, str]:
    """(status, one-line message) of a trial whose process exited with `code`."""
    ended = child.ended
    if ended is not None:
        status = ended.status if ended.status in ("completed", "stopped", "failed") else "failed"
        return status, first_line(ended.message)
    if child.setup_error is not None:
        return "failed", first_line(child.setup_error)
    if code < 0:  # a signal ended it before it could report
        name = signal_name(-code)
        if child.stopping is not None:
            return "stopped", (
                f"the trial did not stop within {grace:g} s of the stop and was ended ({name}); "
                "its last checkpoint is kept"
            )
        if -code == getattr(signal, "SIGKILL", 9):
            return "failed", (
                f"the training process was killed ({name}) before it could report; the system may "
                "have run out of memory (try a smaller batch size)"
            )
        return "failed", f"the training process crashed ({name}) before it could report"
    if code in (129, 130, 143):  # a signal stopped it (before it started, or without a report)
        return "stopped", f"the training process was stopped by {signal_name(code - 128)}"
    tail = [line for line in child.stderr_tail if not line.startswith("amp-console: ")] or list(child.stderr_tail)
    if tail:
        return "failed", first_line(tail[-1])
    return "failed", f"the training process exited with code {code} without reporting why"
