"""The devices torch can train on (CPU, CUDA/ROCm, MPS, XPU), the precision modes each supports and why not
the others; peak memory measured one way."""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib.util
import os
import platform
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from core.errors import DeviceError
from core.text import size

if TYPE_CHECKING:
    import torch  # imported where a device is probed: DeviceInfo and its parsing (`remote devices`) need none

FP8_EMULATE_ENV = "AMP_FP8_EMULATE"  # =1: fp8 emulated where bf16 runs (the CPU included): correctness, not speed
PRECISION_INSTALL = 'pip install "amp-console[precision]"'  # torchao (fp8) and bitsandbytes (adamw8bit)


@dataclass(frozen=True)
class DeviceInfo:
    """What one device is and which precision modes it can run."""

    id: str
    type: str
    name: str
    memory_total: int | None
    memory_free: int | None = None
    capability: str | None = None
    bf16: bool = False
    bf16_fast: bool = False
    tf32: bool = False
    fp16: bool = False
    tensor_cores: bool = False
    details: dict = field(default_factory=dict)
    precisions: tuple[str, ...] = ("fp32",)
    unsupported: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the `devices --json` schema)."""
        data = asdict(self)
        data["precisions"] = list(self.precisions)
        return data

    def summary(self) -> str:
        """One human line: name, memory, capability."""
        parts = [self.name]
        if self.memory_total:
            parts.append(size(self.memory_total))
        if self.capability:
            parts.append(f"sm {self.capability}")
        return ", ".join(parts)


def _cpuinfo(*keys: str) -> str | None:
    """The value of the first /proc/cpuinfo line starting with one of `keys`; None if there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(keys)), None)
    except OSError:
        return None


def _cpu_flags() -> set[str]:
    """The first CPU's feature flags (`flags` on x86, `Features` on Arm); empty if unreadable."""
    return set((_cpuinfo("flags", "Features") or "").split())


def cpu_bf16_support(flags: set[str]) -> tuple[bool, str]:
    """(has bf16 hardware, one line naming it) from the CPU's feature flags (AMX, avx512_bf16, Arm bf16)."""
    amx = {"amx_tile", "amx_bf16"} <= flags
    units = (["AMX bf16 tiles"] if amx else []) + (["avx512_bf16"] if "avx512_bf16" in flags else [])
    if "bf16" in flags:
        units.append("Arm bf16 instructions")
    if units:
        return True, "bf16 in hardware: " + " + ".join(units)
    if not flags:
        return False, "bf16 hardware support unknown (no CPU flags to read); bench measures it"
    return False, "bf16 emulated (no AMX or avx512_bf16): expect it slower than fp32"


def _psutil(read) -> int | None:
    """read(psutil) as bytes; None where psutil cannot tell."""
    import psutil

    try:
        return int(read(psutil))
    except (OSError, psutil.Error):
        return None


def total_ram() -> int | None:
    """The host's physical memory in bytes; None where it cannot be told."""
    return _psutil(lambda p: p.virtual_memory().total)


def available_ram() -> int | None:
    """The host's memory available to a new allocation without swapping (MemAvailable on Linux), in bytes."""
    return _psutil(lambda p: p.virtual_memory().available)


def resident_set() -> int | None:
    """This process's resident set in bytes; None where it cannot be told."""
    return _psutil(lambda p: p.Process().memory_info().rss)


def peak_resident_set() -> int | None:
    """This process's resident-set high-water mark in bytes (ru_maxrss; psutil's peak_wset on Windows)."""
    try:
        import resource
    except ImportError:  # Windows
        import psutil

        peak = getattr(psutil.Process().memory_info(), "peak_wset", None)
        return int(peak) if peak is not None else None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cpu_info() -> DeviceInfo:
    """The host CPU: model, cores/threads, RAM, and whether bf16 has hardware support."""
    import psutil
    import torch

    flags = _cpu_flags()
    bf16_fast, speed = cpu_bf16_support(flags)
    return DeviceInfo(
        id="cpu",
        type="cpu",
        name=_cpuinfo("model name") or platform.processor() or platform.machine() or "CPU",
        memory_total=total_ram(),
        bf16=True,
        bf16_fast=bf16_fast,
        details={
            "threads": os.cpu_count(),
            "cores": psutil.cpu_count(logical=False),
            "torch_threads": torch.get_num_threads(),
            "bf16_speed": speed,
            "amx": {"amx_tile", "amx_bf16"} <= flags,
            "avx512_bf16": "avx512_bf16" in flags,
        },
        precisions=("fp32", "bf16"),
        unsupported={
            "tf32": "TF32 is a CUDA tensor-core format; on the CPU use fp32 or bf16",
            "fp16": "fp16 autocast with GradScaler is a GPU mode; on the CPU use bf16, which needs no scaler",
        },
    )


def collect_garbage() -> None:
    """A full gc.collect() before a memory measurement, on the main thread only: on a worker thread it can
    finalize Qt objects whose destructors wait on the GUI thread, which waits for the collector's GIL."""
    if threading.current_thread() is threading.main_thread():
        gc.collect()


def cuda_free_memory(index: int) -> int | None:
    """Free bytes on one CUDA device; creates a context there, so ask only for a device this process uses."""
    import torch

    try:
        free, _total = torch.cuda.mem_get_info(index)
    except RuntimeError:
        return None
    return int(free)


def _pci_address(props) -> dict:
    """{"pci": "domain:bus:device"} in hex, as nvidia-smi's pci.bus_id names the GPU; {} where torch lacks it."""
    domain, bus, device = (getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device"))
    if not (isinstance(domain, int) and isinstance(bus, int) and isinstance(device, int)):
        return {}
    return {"pci": f"{domain:04x}:{bus:02x}:{device:02x}"}


def _cuda_info(index: int, free_memory: bool = False) -> DeviceInfo:
    import torch

    props = torch.cuda.get_device_properties(index)  # no context needed: the window can call it freely
    major, minor = props.major, props.minor
    is_rocm = torch.version.hip is not None
    free, total = (cuda_free_memory(index) if free_memory else None), props.total_memory
    bf16 = major >= 8 or (is_rocm and major >= 9)
    tf32 = major >= 8 and not is_rocm
    modes = {"fp32": True, "tf32": tf32, "fp16": True, "bf16": bf16}
    needs = f"needs compute capability 8.0 (Ampere) or newer; {props.name} is {major}.{minor}"
    unsupported = {"tf32": f"TF32 {needs}", "bf16": f"bf16 {needs}: use fp16"}
    return DeviceInfo(
        id=f"cuda:{index}",
        type="cuda",
        name=props.name,
        memory_total=int(total),
        memory_free=None if free is None else int(free),
        capability=f"{major}.{minor}",
        bf16=bf16,
        bf16_fast=bf16,
        tf32=tf32,
        fp16=True,
        tensor_cores=major >= 7,
        details={"multiprocessors": props.multi_processor_count, "rocm": is_rocm, **_pci_address(props)},
        precisions=tuple(mode for mode, runs in modes.items() if runs),
        unsupported={mode: why for mode, why in unsupported.items() if not modes[mode]},
    )


def _mps_info() -> DeviceInfo:
    import torch

    try:
        torch.zeros(1, dtype=torch.bfloat16, device="mps")
        bf16 = True
    except (RuntimeError, TypeError):
        bf16 = False
    precisions = ["fp32", "fp16"] + (["bf16"] if bf16 else [])
    unsupported = {"tf32": "TF32 is a CUDA tensor-core format; on MPS use fp16"}
    if not bf16:
        unsupported["bf16"] = "this macOS/torch build has no bfloat16 on MPS: use fp16"
    return DeviceInfo(
        id="mps",
        type="mps",
        name="Apple Metal (MPS)",
        memory_total=total_ram(),
        bf16=bf16,
        bf16_fast=bf16,
        fp16=True,
        precisions=tuple(precisions),
        unsupported=unsupported,
    )


def _xpu_info(index: int) -> DeviceInfo:
    import torch

    props = torch.xpu.get_device_properties(index)
    return DeviceInfo(
        id=f"xpu:{index}",
        type="xpu",
        name=props.name,
        memory_total=int(props.total_memory),
        bf16=True,
        bf16_fast=True,
        fp16=True,
        precisions=("fp32", "fp16", "bf16"),
        unsupported={"tf32": "TF32 is a CUDA tensor-core format; on XPU use bf16"},
    )


def fp8_native(info: DeviceInfo) -> bool:
    """Whether `info` has float8 tensor cores: an NVIDIA GPU of compute capability 8.9 (Ada, Hopper) or newer."""
    major, _, minor = (info.capability or "0.0").partition(".")
    return info.type == "cuda" and not info.details.get("rocm") and (int(major), int(minor)) >= (8, 9)


def with_low_precision(info: DeviceInfo) -> DeviceInfo:
    """`info` with bf16-pure and fp8 among its precisions where they run, else why not."""
    precisions, unsupported = list(info.precisions), dict(info.unsupported)
    if importlib.util.find_spec("bitsandbytes") is None:
        unsupported["adamw8bit"] = f"adamw8bit needs bitsandbytes, which is not installed: {PRECISION_INSTALL}"
    if "bf16" in precisions:
        precisions.append("bf16-pure")
    else:
        unsupported["bf16-pure"] = f"bf16-pure needs bf16: {unsupported.get('bf16', 'not supported here')}"
    emulate = os.environ.get(FP8_EMULATE_ENV) == "1"
    if importlib.util.find_spec("torchao") is None:
        unsupported["fp8"] = f"fp8 training needs torchao, which is not installed: {PRECISION_INSTALL}"
    elif "bf16" not in precisions:
        unsupported["fp8"] = "fp8 runs the other ops in bf16 autocast, which this device lacks"
    elif fp8_native(info) or emulate:
        precisions.append("fp8")
    else:
        unsupported["fp8"] = (
            f"fp8 needs float8 tensor cores (an NVIDIA GPU of compute capability 8.9, Ada or Hopper, or newer); "
            f"{info.name} {'is ' + info.capability if info.capability else 'has none'} ({FP8_EMULATE_ENV}=1 "
            f"emulates it, slowly: for correctness checks)"
        )
    return dataclasses.replace(info, precisions=tuple(precisions), unsupported=unsupported)


def list_devices(free_memory: bool = False) -> list[DeviceInfo]:
    """Every device torch can train on here, the CPU first (`free_memory`: a context on every GPU)."""
    import torch

    devices = [cpu_info()]
    if torch.cuda.is_available():
        devices += [_cuda_info(i, free_memory) for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append(_mps_info())
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        devices += [_xpu_info(i) for i in range(xpu.device_count())]
    return [with_low_precision(info) for info in devices]


def device_info(spec: str, devices: list[DeviceInfo] | None = None) -> DeviceInfo:
    """The DeviceInfo for `auto`, `cpu`, `cuda:N`, `mps` or `xpu:N`; DeviceError if it is not here."""
    devices = devices if devices is not None else list_devices()
    wanted = spec.strip().lower()
    if wanted == "auto":  # the first accelerator, else the CPU
        wanted = next((d.id for kind in ("cuda", "mps", "xpu") for d in devices if d.type == kind), "cpu")
    elif wanted in ("cuda", "xpu"):
        wanted += ":0"
    for info in devices:
        if info.id == wanted:
            return info
    available = ", ".join(d.id for d in devices)
    raise DeviceError(f"device {spec!r} is not available here (available: {available})")


def torch_device(info: DeviceInfo) -> torch.device:
    """The one torch.device a run uses; everything else is moved to it with `.to(device)`."""
    import torch

    return torch.device(info.id)


def memory_in_use(device: torch.device) -> int | None:
    """Bytes in use on `device` (peak allocated on CUDA/XPU); may synchronise: at log intervals only."""
    import torch

    if device.type in ("cuda", "xpu"):
        return int(getattr(torch, device.type).max_memory_allocated(device))
    return int(torch.mps.current_allocated_memory()) if device.type == "mps" else resident_set()


@dataclass(frozen=True)
class PeakReading:
    """What `PeakMemory.read` saw on its device since the last reset (None where the device cannot tell)."""

    peak_bytes: int | None  # CUDA/XPU: the allocator's peak allocated; CPU: the resident set's high-water mark
    start_bytes: int | None  # in use at the reset: allocated (CUDA/XPU), the resident set (CPU)
    reserved_bytes: int | None = None  # CUDA/XPU: the caching allocator's peak reserved (what the device gave it)

    @property
    def growth_bytes(self) -> int | None:
        """The peak above what was in use at the reset (at least 0)."""
        if self.peak_bytes is None or self.start_bytes is None:
            return None
        return max(0, self.peak_bytes - self.start_bytes)


class PeakMemory:
    """The high-water mark of memory on one torch.device between `reset()` and `read()` (the allocator's on
    CUDA/XPU, the resident set's on the CPU, none on MPS). `with PeakMemory(device) as meter:` leaves it in
    `meter.reading`. Reading synchronises the device: never per step."""

    def __init__(self, device: torch.device | str) -> None:
        import torch

        self.device = torch.device(device)
        self.kind = self.device.type
        self.allocator = self.kind in ("cuda", "xpu")  # a caching allocator with peak statistics
        self.resettable = self.kind == "cpu" and _can_reset_peak_rss()
        self.measurable = self.allocator or self.kind == "cpu"
        self.reading: PeakReading | None = None
        self._start: int | None = None
        if self.allocator:
            self.source = f"{self.kind.upper()} allocator peak (max_memory_allocated)"
        elif self.kind == "cpu":
            self.source = (
                "peak RSS (VmHWM, reset)" if self.resettable else "peak RSS of the process (ru_maxrss, never reset)"
            )
        else:
            self.source = f"none: torch keeps no peak-memory statistics on {self.kind}"

    def _api(self):
        """torch.cuda / torch.xpu / torch.mps for this device, or None (the CPU, kinds torch has no module for)."""
        import torch

        return getattr(torch, self.kind, None) if self.kind != "cpu" else None

    def synchronize(self) -> None:
        """Wait for the device's queued work (nothing to wait for on the CPU)."""
        api = self._api()
        if self.allocator:
            api.synchronize(self.device)
        elif api is not None and hasattr(api, "synchronize"):
            api.synchronize()  # MPS: one queue, no device argument

    def in_use(self) -> int | None:
        """Bytes in use now: allocated (CUDA/XPU/MPS), the resident set (CPU)."""
        if self.allocator:
            return int(self._api().memory_allocated(self.device))
        if self.kind == "cpu":
            current = resident_set()
            return current if current is not None else _peak_rss()
        api = self._api()
        return int(api.current_allocated_memory()) if hasattr(api, "current_allocated_memory") else None

    def reset(self) -> None:
        """Start a new peak from what is in use now."""
        self.synchronize()
        if self.allocator:
            self._start = self.in_use()
            self._api().reset_peak_memory_stats(self.device)
        elif self.kind == "cpu":
            if self.resettable:
                _reset_peak_rss()
            self._start = self.in_use()
        self.reading = None

    def read(self) -> PeakReading:
        """The peak since the last reset (since the process started where it was never reset)."""
        self.synchronize()
        if self.allocator:
            api = self._api()
            return PeakReading(
                int(api.max_memory_allocated(self.device)), self._start, int(api.max_memory_reserved(self.device))
            )
        return PeakReading(_peak_rss(), self._start) if self.kind == "cpu" else PeakReading(None, None)

    def release(self) -> None:
        """Free what the last measurement left: garbage, the allocator's cache or glibc's free heap pages."""
        collect_garbage()
        api = self._api()
        if api is not None and hasattr(api, "empty_cache"):
            self.synchronize()
            api.empty_cache()
        elif self.kind == "cpu":
            _malloc_trim()

    def __enter__(self) -> PeakMemory:
        self.reset()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.reading = self.read()


@functools.cache
def _can_reset_peak_rss() -> bool:
    """Whether this process can reset its resident set's high-water mark (asked once: asking resets it)."""
    try:
        _reset_peak_rss()
        return _read_status_bytes("VmHWM") is not None
    except OSError:
        return False


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:  # "5": reset the peak RSS (Linux >= 4.0)
        f.write("5")


def _read_status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _peak_rss() -> int:
    value = _read_status_bytes("VmHWM")
    return value if value is not None else peak_resident_set() or 0


def _malloc_trim() -> None:
    """Hand freed heap pages back to the OS (glibc), so the next measurement's RSS starts from the same place."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
