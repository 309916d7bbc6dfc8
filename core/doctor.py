"""Turn errors raised mid-run into messages a user can act on (device mismatch, out of memory, ...)."""

from __future__ import annotations

import re

import torch

_MISMATCH = re.compile(r"Expected all tensors to be on the same device.*?found at least two devices, (\S+?) and (\S+?)[!,.]",
                       re.S)


def explain_exception(exc: BaseException, trainer=None) -> str:
    """One paragraph naming what went wrong and how to fix it."""
    step = f" at step {trainer.step}" if trainer is not None else ""
    text = str(exc).strip()
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text.lower():
        batch = f" (now {trainer.cfg.batch_size})" if trainer is not None else ""
        return (f"the device ran out of memory{step}: lower batch_size{batch}, use grad_accum for the same "
                f"effective batch, or a smaller model; bf16/fp16 halve activation memory")
    match = _MISMATCH.search(text)
    if match:
        first, second = match.groups()
        return (f"tensors on two devices{step}: one operation got tensors on {first} and on {second}. "
                f"Move every model and batch tensor to the run's device with .to(device)")
    if isinstance(exc, RuntimeError) and ("CUDA error" in text or "device-side" in text):
        return f"the device failed{step} (it may have vanished or reset): {text.splitlines()[0]}"
    first_line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}{step}: {first_line}"
