"""Precision modes -> autocast dtype, GradScaler on/off and the TF32 switch.

fp32: no autocast.  tf32: fp32 parameters and activations, TF32 tensor-core matmuls (CUDA).
fp16: autocast float16 + GradScaler.  bf16: autocast bfloat16, no scaler (same exponent range as fp32).
Parameters always stay float32; autocast only changes what ops compute in.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from core.devices import DeviceInfo
from core.errors import PrecisionError
from core.precision_modes import PRECISION_CHOICES

_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class PrecisionPlan:
    """What a precision mode means on one device."""

    requested: str
    mode: str
    device_type: str
    autocast_dtype: torch.dtype | None
    use_scaler: bool
    tf32: bool

    @property
    def autocast_enabled(self) -> bool:
        return self.autocast_dtype is not None

    @property
    def compute_dtype_name(self) -> str:
        """The dtype matmuls compute in, as users read it ('float32', 'tf32', 'bfloat16', ...)."""
        if self.autocast_dtype is not None:
            return str(self.autocast_dtype).removeprefix("torch.")
        return "tf32" if self.tf32 else "float32"

    def autocast(self):
        """Context for forward + loss. A no-op context when autocast is off (cheaper than enabled=False)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def make_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler that is enabled for fp16 only; disabled it is a pass-through."""
        return torch.amp.GradScaler(self.device_type, enabled=self.use_scaler)

    def describe(self) -> str:
        scaler = "GradScaler on" if self.use_scaler else "no scaler"
        return f"{self.mode}: compute {self.compute_dtype_name}, params float32, {scaler}"


def auto_mode(info: DeviceInfo) -> str:
    """The best mode the device supports: bf16 on CUDA/XPU that have it, else fp16 on GPUs, fp32 on CPU."""
    if info.type == "cpu":
        return "fp32"
    if "bf16" in info.precisions and info.type in ("cuda", "xpu"):
        return "bf16"
    if "fp16" in info.precisions:
        return "fp16"
    return "fp32"


def resolve_precision(mode: str, info: DeviceInfo) -> PrecisionPlan:
    """Turn a mode into a plan for `info`, refusing what the device can't run (naming the alternatives)."""
    requested = mode
    if mode not in PRECISION_CHOICES:
        raise PrecisionError(f"unknown mode {mode!r}; choose one of {', '.join(PRECISION_CHOICES)}")
    if mode == "auto":
        mode = auto_mode(info)
    if mode not in info.precisions:
        reason = info.unsupported.get(mode, "not supported")
        alternatives = ", ".join(info.precisions)
        raise PrecisionError(
            f"{mode} is not available on {info.id} ({info.name}): {reason}. Supported there: {alternatives}"
        )
    return PrecisionPlan(
        requested=requested,
        mode=mode,
        device_type=info.type,
        autocast_dtype=_AUTOCAST_DTYPES.get(mode),
        use_scaler=mode == "fp16",
        tf32=mode == "tf32",
    )


@contextlib.contextmanager
def matmul_precision(plan: PrecisionPlan):
    """Switch TF32 matmuls on for tf32 runs (and off otherwise), restoring the global setting afterwards."""
    previous = torch.get_float32_matmul_precision()
    cudnn_previous = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high" if plan.tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = plan.tf32
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
        torch.backends.cudnn.allow_tf32 = cudnn_previous
