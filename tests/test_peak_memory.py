"""core.devices.PeakMemory, the one peak-memory measurement of the lab tools (batch finder, model summary, precision
sweep): on the CPU the resident set's high-water mark from a reset, on CUDA/XPU the allocator's peaks, nothing on a
device without peak statistics; and the three tools read it."""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch

import core.devices as devices
from core.devices import PeakMemory

MIB = 2**20


@contextlib.contextmanager
def no_collection():
    """No automatic garbage collection meanwhile: freeing an earlier test's tensors in the middle of a measurement
    would lower the resident set under the block being measured (the start is read before it)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _touch(mib: int) -> torch.Tensor:
    """A tensor of `mib` MiB whose pages are really written (resident)."""
    return torch.ones(mib * MIB // 4, dtype=torch.float32)


def test_cpu_peak_counts_a_block_allocated_and_freed_inside_the_measurement():
    meter = PeakMemory(torch.device("cpu"))
    assert meter.measurable and not meter.allocator and "peak RSS" in meter.source
    with no_collection():
        meter.release()
        with meter:
            block = _touch(64)
            del block  # freed before the read: the peak still holds it
    reading = meter.reading
    assert reading.start_bytes > 0 and reading.peak_bytes >= reading.start_bytes
    assert reading.growth_bytes >= 60 * MIB


def test_cpu_reset_starts_a_new_peak_where_linux_allows_it():
    meter = PeakMemory(torch.device("cpu"))
    if not meter.resettable:
        pytest.skip("this system cannot reset the resident set's high-water mark (/proc/self/clear_refs)")
    with no_collection():
        meter.release()
        with meter:
            block = _touch(96)
        del block
        first = meter.reading.growth_bytes
        meter.release()
        with meter:  # the 96 MiB peak above is behind the reset
            small = _touch(1)
        del small
    assert first >= 90 * MIB and meter.reading.growth_bytes < 48 * MIB
    assert "VmHWM, reset" in meter.source


def test_cpu_without_a_resettable_peak_reads_the_process_peak(monkeypatch):
    monkeypatch.setattr(devices, "_read_status_bytes", lambda key: None)  # no /proc: ru_maxrss / peak working set
    meter = PeakMemory(torch.device("cpu"))
    meter.resettable = False
    with meter:
        block = _touch(32)
    del block
    reading = meter.reading
    assert reading.peak_bytes == devices.peak_resident_set() and reading.peak_bytes >= reading.start_bytes


def test_the_reading_is_left_only_when_the_block_ends_normally():
    meter = PeakMemory(torch.device("cpu"))
    with pytest.raises(MemoryError):
        with meter:
            raise MemoryError("a trial that ran out of memory")
    assert meter.reading is None


def test_a_device_without_peak_statistics_reads_none():
    meter = PeakMemory(torch.device("meta"))
    assert not meter.measurable and not meter.allocator and "no peak-memory statistics" in meter.source
    with meter:
        torch.ones(1024, device="meta")
    assert meter.reading.peak_bytes is None and meter.reading.growth_bytes is None
    meter.release()  # nothing to free, and no error


def _available(kind: str) -> bool:
    module = getattr(torch, kind, None)
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        return backend is not None and backend.is_available()
    return module is not None and hasattr(module, "is_available") and module.is_available()


@pytest.mark.parametrize("kind", ["cuda", "xpu"])
def test_an_accelerator_reads_its_allocator_peaks(kind):
    if not _available(kind):
        pytest.skip(f"no {kind} device here: the allocator path is checked where one is")
    device = torch.device(kind, 0)
    meter = PeakMemory(device)
    assert meter.allocator and meter.measurable and kind.upper() in meter.source
    meter.release()
    with meter:
        block = torch.ones(64 * MIB // 4, device=device)
        del block
    reading = meter.reading
    assert reading.growth_bytes >= 64 * MIB and reading.reserved_bytes >= reading.peak_bytes
    meter.release()
    with meter:  # reset: the 64 MiB block is behind it
        small = torch.ones(1024, device=device)
        del small
    assert meter.reading.growth_bytes < 16 * MIB


class FakeAllocator:
    """torch.cuda / torch.xpu's statistics as a caching allocator keeps them, for a machine without the device."""

    def __init__(self):
        self.allocated = self.peak = 100
        self.reserved = self.peak_reserved = 256
        self.calls: list[str] = []

    def synchronize(self, device):
        self.calls.append(f"synchronize {device}")

    def memory_allocated(self, device):
        return self.allocated

    def reset_peak_memory_stats(self, device):
        self.calls.append("reset")
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def max_memory_allocated(self, device):
        return self.peak

    def max_memory_reserved(self, device):
        return self.peak_reserved

    def empty_cache(self):
        self.calls.append("empty_cache")

    def run(self, grow: int):  # a measurement that allocates `grow` bytes and frees them
        self.peak = max(self.peak, self.allocated + grow)
        self.peak_reserved = max(self.peak_reserved, self.allocated + 2 * grow)


@pytest.mark.parametrize("kind", ["cuda", "xpu"])
def test_the_allocator_path_syncs_resets_and_reads_both_peaks(monkeypatch, kind):
    fake = FakeAllocator()
    monkeypatch.setattr(PeakMemory, "_api", lambda self: fake)
    meter = PeakMemory(torch.device(kind, 1))
    fake.run(5000)  # before the reset: not counted
    with meter:
        fake.run(1000)
    assert meter.reading == devices.PeakReading(peak_bytes=1100, start_bytes=100, reserved_bytes=2100)
    assert meter.reading.growth_bytes == 1000
    assert fake.calls == [f"synchronize {kind}:1", "reset", f"synchronize {kind}:1"]
    meter.release()
    assert fake.calls[-2:] == [f"synchronize {kind}:1", "empty_cache"]


def test_mps_has_no_peak_and_says_so():
    if not _available("mps"):
        pytest.skip("no MPS device here (Apple silicon): its no-peak path is checked where it is")
    meter = PeakMemory(torch.device("mps"))
    assert not meter.measurable
    with meter:
        torch.ones(1024, device="mps")
    assert meter.reading.peak_bytes is None
    meter.release()


def test_the_three_tools_measure_through_it():
    from core.lab.batch_finder import CpuProbe, make_probe
    from core.lab.precision_sweep import memory_source

    probe = make_probe(torch.device("cpu"))
    assert isinstance(probe, CpuProbe) and isinstance(probe.meter, PeakMemory)
    probe.limit()
    probe.begin_trial(8)
    block = _touch(48)
    del block
    grown, allocated = probe.end_trial()
    assert allocated is None and grown >= (44 * MIB if probe.resettable else 0)
    with pytest.raises(devices.DeviceError, match="no peak-memory statistics"):
        make_probe(torch.device("meta"))
    cpu = PeakMemory(torch.device("cpu"))
    assert memory_source(cpu, isolate=True).endswith("a fresh process per mode")
    assert (
        memory_source(PeakMemory(torch.device("meta")), isolate=False) == "none: torch keeps no peak-memory "
        "statistics on meta"
    )
