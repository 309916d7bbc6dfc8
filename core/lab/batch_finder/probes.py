"""How the batch-size finder reads a device's memory: one `MemoryProbe` per device kind, over core.devices.PeakMemory
(the one peak-memory measurement of the lab tools), and `FakeProbe`, a pretend device for tests and demos.
Importing this module does not import torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from core.errors import DeviceError
from core.text import size

if TYPE_CHECKING:
    from core.devices import PeakMemory


class MemoryProbe(Protocol):
    """How a device's memory is read for the finder (see the module's docstring)."""

    kind: str
    source: str  # one line: what is measured against what
    estimate: bool  # True where the figures are an estimate (the CPU)
    predicts: bool  # True: trials beyond the measured ones are predicted first, and not run when over budget
    oom_errors: tuple[type[BaseException], ...]

    def limit(self) -> int: ...  # the device's limit for this mode, read once when its model and data are ready
    def begin_trial(self, batch: int) -> None: ...
    def end_trial(self) -> tuple[int, int | None]: ...  # (peak compared with the budget, allocated peak or None)
    def release(self) -> None: ...  # after every trial, an OOM included: free what it left


class FakeOutOfMemoryError(RuntimeError):
    """What FakeProbe raises when a trial would pass its limit (as torch.OutOfMemoryError would)."""


class FakeProbe:
    """A pretend device for tests and demos: a trial at batch B takes fixed_bytes + per_sample_bytes * B; past
    limit_bytes `begin_trial` raises FakeOutOfMemoryError (the allocation that fails)."""

    kind = "fake"
    estimate = False
    predicts = False
    oom_errors = (FakeOutOfMemoryError,)

    def __init__(self, limit_bytes: int, per_sample_bytes: int, fixed_bytes: int = 0):
        self.limit_bytes, self.per_sample_bytes, self.fixed_bytes = limit_bytes, per_sample_bytes, fixed_bytes
        self.source = f"a fake device of {size(limit_bytes)} ({per_sample_bytes:,} bytes per sample)"
        self.batch = 0
        self.begun: list[int] = []
        self.released = 0

    def footprint(self, batch: int) -> int:
        return self.fixed_bytes + self.per_sample_bytes * batch

    def limit(self) -> int:
        return self.limit_bytes

    def begin_trial(self, batch: int) -> None:
        self.batch = batch
        self.begun.append(batch)
        if self.footprint(batch) > self.limit_bytes:
            raise FakeOutOfMemoryError(
                f"fake device: tried to allocate {self.footprint(batch):,} bytes of {self.limit_bytes:,}"
            )

    def end_trial(self) -> tuple[int, int | None]:
        return self.footprint(self.batch), None

    def release(self) -> None:
        self.released += 1


class _MeterProbe:
    """A probe over a PeakMemory: reset at each trial's start, released after it."""

    meter: PeakMemory

    def begin_trial(self, batch: int) -> None:
        self.meter.reset()

    def release(self) -> None:
        self.meter.release()


class AcceleratorProbe(_MeterProbe):
    """CUDA (and ROCm) or XPU: the caching allocator's peak reserved bytes per trial (PeakMemory's
    reserved_bytes; its peak allocated is reported too) against free memory + what this process had reserved."""

    estimate = False
    predicts = False

    def __init__(self, device, meter: PeakMemory) -> None:
        import torch

        self.device = device
        self.kind = device.type
        self.meter = meter
        self.api = getattr(torch, device.type)  # torch.cuda / torch.xpu: mem_get_info, memory_reserved
        self.oom_errors: tuple[type[BaseException], ...] = (torch.OutOfMemoryError,)
        self.source = (
            f"{device.type.upper()} allocator peak reserved bytes per trial against free memory + this "
            f"process's reserved memory"
        )

    def limit(self) -> int:
        self.release()
        free, _total = self.api.mem_get_info(self.device)
        return int(free + self.api.memory_reserved(self.device))

    def end_trial(self) -> tuple[int, int | None]:
        reading = self.meter.read()
        assert reading.reserved_bytes is not None and reading.peak_bytes is not None  # an accelerator reports both
        return int(reading.reserved_bytes), int(reading.peak_bytes)


class CpuProbe(_MeterProbe):
    """The CPU: growth of the process's RSS peak during a trial above its RSS when the mode was ready, against
    MemAvailable (an estimate; see core.lab.batch_finder)."""

    kind = "cpu"
    estimate = True
    predicts = True

    def __init__(self, meter: PeakMemory) -> None:
        import torch

        self.meter = meter
        self.oom_errors: tuple[type[BaseException], ...] = (torch.OutOfMemoryError, MemoryError)
        self.resettable = self.meter.resettable
        how = "VmHWM reset per trial" if self.resettable else "ru_maxrss, never reset: conservative"
        self.source = f"process RSS growth per trial ({how}) against MemAvailable"
        self.base = 0

    def limit(self) -> int:
        from core.devices import available_ram

        self.release()
        self.base = self.meter.in_use() or 0
        available = available_ram()
        if available is None:
            raise DeviceError("fit-batch on the CPU needs the available RAM, which psutil cannot read here")
        return available

    def end_trial(self) -> tuple[int, int | None]:
        return max(0, (self.meter.read().peak_bytes or 0) - self.base), None


def make_probe(device) -> MemoryProbe:
    """The probe for a torch.device; DeviceError where the device has no peak-memory statistics (MPS)."""
    from core.devices import PeakMemory

    meter = PeakMemory(device)
    if meter.allocator:
        return AcceleratorProbe(device, meter)
    if device.type == "cpu":
        return CpuProbe(meter)
    raise DeviceError(
        f"fit-batch cannot measure memory on {device.type}: torch has no peak-memory statistics "
        f"for it; run it on a CUDA/XPU GPU or the CPU"
    )
