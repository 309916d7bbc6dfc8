"""Memory estimate before Start: the peak of a run's training steps on its device, from one probe step.

Peak = parameters + gradients + optimizer state (rows of PRECISION_BYTES and OPTIMIZER_STATES) + the data kept on the
device + the larger of the forward + backward's activations (scaled linearly to the batch size) and the optimizer
step's scratch, both measured in one small-batch probe step on a throwaway Trainer (`AllocationPeak`: the allocator's
peak on CUDA/XPU, torch's profiler's allocations on the CPU, where RSS is too coarse). Evaluation is not counted.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from core.precision_modes import PRECISION_BYTES, tensor_state_bytes
from core.text import size

if TYPE_CHECKING:
    from core.config import RunConfig


PROBE_BATCH = 32  # rows of the probe step (the batch itself when smaller)


@dataclass
class Estimate:
    """The estimated peak (`total_bytes` = the sum of `parts`) against the device's free memory."""

    total_bytes: int
    parts: dict[str, int]  # name -> bytes, in the order shown
    free_bytes_of_device: int | None
    note: str = ""
    device: str = ""
    mode: str = ""
    batch_size: int = 0
    probe_batch: int = 0
    details: dict = field(default_factory=dict)

    def describe(self) -> str:
        """'≈ 1.2 GiB of 7.8 GiB free' (no 'of' where the free memory is unknown)."""
        free = f" of {size(self.free_bytes_of_device)} free" if self.free_bytes_of_device is not None else ""
        return f"≈ {size(self.total_bytes)}{free}"

    def breakdown(self) -> str:
        return ", ".join(f"{name} {size(value)}" for name, value in self.parts.items() if value)


_PRELOAD = threading.Lock()  # preload(): one thread imports at a time
# torch's profiler is one per process: two at once (two windows' forms estimating together) crash it in C++
_PROFILER = threading.Lock()


class AllocationPeak:
    """The peak of allocated bytes above the start between enter and exit on `device`: the allocator's peak on
    CUDA/XPU (PeakMemory), torch's profiler's allocation events on the CPU (one profile at a time in the
    process: another waits). `peak` is set on exit."""

    def __init__(self, device) -> None:
        from core.devices import PeakMemory

        self.meter = PeakMemory(device)
        self.peak = 0

    def __enter__(self) -> AllocationPeak:
        if self.meter.allocator:
            self.meter.reset()
        else:
            from torch.profiler import ProfilerActivity, profile

            # kineto reads this once, at its first profile: unset, it prints start/stop lines on every probe
            os.environ.setdefault("KINETO_LOG_LEVEL", "6")
            _PROFILER.acquire()
            try:
                self.profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
                self.profiler.__enter__()
            except BaseException:
                _PROFILER.release()
                raise
        return self

    def __exit__(self, *exc) -> bool:
        if self.meter.allocator:
            reading = self.meter.read()
            self.peak = max(0, (reading.peak_bytes or 0) - (reading.start_bytes or 0))
            return False
        try:
            self.profiler.__exit__(*exc)
        finally:
            _PROFILER.release()
        results: Any = self.profiler.profiler.kineto_results  # type: ignore[union-attr]
        events = [e for e in results.events() if e.name() == "[memory]"]
        now = peak = 0
        for event in sorted(events, key=lambda e: e.start_ns()):
            if event.device_type().name == "CPU":
                now += event.nbytes()
                peak = max(peak, now)
        self.peak = peak
        return False


def resident_bytes(trainer) -> dict[str, int]:
    """What a set-up Trainer keeps on its device between steps, per part: each storage counted once."""
    import torch

    seen: set[int] = set()

    def total(tensors) -> int:
        out = 0
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device == trainer.device:
                storage = t.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    out += storage.nbytes()
        return out

    model = trainer.raw_model
    state = [v for s in trainer.optimizer.state.values() for v in s.values()]
    splits = [s for s in (trainer.batches.split, trainer.val, trainer.test) if isinstance(s, dict)]
    return {
        "parameters": total([*model.parameters(), *model.buffers()]),
        "optimizer state": total(state),
        "data": total(v for s in splits for v in s.values()),
    }


def _probe(trainer) -> tuple[int, int]:
    """(forward + backward peak, optimizer step peak) above what was in use before each, on one batch of a
    set-up Trainer whose optimizer already made its state: the trainer's own step (`_optimizer_step`) in two."""
    import torch

    t, plan = trainer, trainer.plan
    scaler = t.scaler if t.scaler.is_enabled() else None
    order = t.batches.order(0)
    with AllocationPeak(t.device) as backward:  # the batch's copy included: it grows with the batch too
        batch = t.batches.batch(order, 0)
        with plan.autocast():
            loss = t.task.loss(t.model, batch)
        (loss if scaler is None else scaler.scale(loss)).backward()
        del loss, batch
    with AllocationPeak(t.device) as step:
        if scaler is not None:
            scaler.unscale_(t.optimizer)
        if t.cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(t._params, t.cfg.grad_clip)
        (t.optimizer.step() if scaler is None else (scaler.step(t.optimizer), scaler.update()))
        t.optimizer.zero_grad(set_to_none=True)
    return backward.peak, step.peak


def free_bytes(info) -> int | None:
    """Free memory of a device now: the CUDA driver's figure, available RAM on the CPU, else what it listed."""
    from core.devices import available_ram, cuda_free_memory

    if info.type == "cpu":
        return available_ram()
    if info.type == "cuda":
        return cuda_free_memory(int(info.id.partition(":")[2] or 0))
    return info.memory_free


def estimate(
    config: RunConfig,
    device: str | None = None,
    mode: str | None = None,
    optimizer: str | None = None,
    batch_size: int | None = None,
    devices=None,
) -> Estimate:
    """The peak training memory of `config` (device, precision mode, optimizer and batch size default to its own)
    on its device, from one probe step of at most PROBE_BATCH rows (see the module's docstring)."""
    preload()
    from core.devices import device_info, list_devices
    from core.engine.precision import resolve_precision
    from core.lab.timing import on_throwaway_trainer, step_sums

    given = dict(device=device, precision=mode, optimizer=optimizer, batch_size=batch_size)
    cfg = config.replace(**{k: v for k, v in given.items() if v}).validate()
    info = device_info(cfg.device, devices if devices is not None else list_devices())
    plan = resolve_precision(cfg.precision, info)
    probe_batch = min(cfg.batch_size, PROBE_BATCH)

    def measure(trainer) -> Estimate:
        trainer.train_step(trainer.batches.order(0), 0, step_sums(trainer))  # the optimizer makes its state
        resident = resident_bytes(trainer)
        backward, step = _probe(trainer)
        params = list(trainer.raw_model.parameters())
        buffers = resident["parameters"] - sum(p.numel() * p.element_size() for p in params)  # what else it holds
        # a module kept in float32 (fp32_modules) under bf16-pure has float32's row
        modes = ["fp32" if PRECISION_BYTES[plan.mode].weights < p.element_size() else plan.mode for p in params]
        rows = [(p.numel(), PRECISION_BYTES[m], m, p.requires_grad) for p, m in zip(params, modes)]
        grads = sum(n * row.grads for n, row, _m, trained in rows if trained)
        activations = max(0, backward - grads) * cfg.batch_size // probe_batch
        parts = {
            "parameters": sum(n * row.weights for n, row, _m, _t in rows) + buffers,
            "master weights": sum(n * row.master for n, row, _m, trained in rows if trained),
            "gradients": grads,
            "optimizer state": sum(
                tensor_state_bytes(n, cfg.optimizer, cfg.momentum, m) for n, _row, m, trained in rows if trained
            ),
            "data": resident["data"],
        }
        scratch = max(0, step - grads)
        moment = "activations" if activations >= scratch else "optimizer step"
        parts[moment] = max(activations, scratch)
        note = (
            f"peak {'in the backward pass' if moment == 'activations' else 'in the optimizer step'}; activations "
            f"measured at batch {probe_batch} and scaled to {cfg.batch_size}; evaluation not counted"
        )
        return Estimate(
            total_bytes=sum(parts.values()),
            parts={k: v for k, v in parts.items() if v or k != "master weights"},
            free_bytes_of_device=free_bytes(info),
            note=note,
            device=info.id,
            mode=plan.mode,
            batch_size=cfg.batch_size,
            probe_batch=probe_batch,
            details={"probe_backward_bytes": backward, "probe_step_bytes": step, "resident": resident},
        )

    return on_throwaway_trainer(
        cfg,
        "amp-memory-estimate-",
        measure,
        devices,
        device=info.id,
        precision=plan.mode,
        batch_size=probe_batch,
        grad_accum=1,
        compile=False,
        schedule="constant",
        warmup_steps=0,
        max_steps=2,
    )


def preload() -> None:
    """Import what the first estimate (and the first run in this process) would import on the way: the trainer,
    torch's profiler and dynamo (the window does it on a worker thread). One thread at a time: two threads importing
    torch's circular modules at once may see one half made."""
    with _PRELOAD:
        import torch._dynamo
        import torch.profiler  # noqa: F401

        import core.lab.timing  # noqa: F401


def measure_training_peak(config: RunConfig, steps: int = 3, devices=None) -> int:
    """The measured peak of a real short run of `config` (for checking `estimate`): what a set-up Trainer keeps
    on its device plus the peak allocated above it over `steps` of its own optimizer steps."""
    from core.lab.timing import on_throwaway_trainer, step_sums

    def run(trainer) -> int:
        sums, order = step_sums(trainer), trainer.batches.order(0)
        trainer.train_step(order, 0, sums)
        resident = sum(resident_bytes(trainer).values())
        with AllocationPeak(trainer.device) as peak:
            for index in range(1, steps):
                trainer.train_step(order, index % (trainer.batches.batches_per_epoch // trainer.cfg.grad_accum), sums)
        return resident + peak.peak

    return on_throwaway_trainer(config, "amp-memory-measure-", run, devices, compile=False, max_steps=steps)


def main() -> None:
    """`python -m core.lab.memory_estimate`: a RunConfig as JSON on stdin -> its Estimate as JSON on stdout; the
    window's estimate for a task file it added, whose code runs only in a child process."""
    import json
    import sys

    from core.config import RunConfig
    from core.errors import AmpConsoleError

    try:
        config = RunConfig.from_dict(json.loads(sys.stdin.read()))
        if config.task_file:
            from core.tasks import add_task

            add_task(config.task_file)  # the task file the window added: its code runs here, not in the window
        result = estimate(config)
    except AmpConsoleError as exc:
        sys.exit(str(exc))
    sys.stdout.write(json.dumps(asdict(result)) + "\n")


def in_child(config: RunConfig, seconds: float, started=None) -> Estimate:
    """estimate(config) in a child process (core.process.run_child, killed after `seconds`; `started(pid)` once
    it runs); its one-line error as an AmpConsoleError."""
    import json
    import sys

    from core.errors import AmpConsoleError
    from core.process import run_child

    command = [sys.executable, "-m", "core.lab.memory_estimate"]
    child = run_child(command, json.dumps(config.to_dict()), seconds, started)
    problem = child.problem("the estimate", seconds) or ("" if child.out.strip() else "the estimate: no answer")
    if problem:
        raise AmpConsoleError(problem.removeprefix("the estimate: "))
    return Estimate(**json.loads(child.out.splitlines()[-1]))


if __name__ == "__main__":
    main()
