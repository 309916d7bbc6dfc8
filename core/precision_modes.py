"""The precision modes, listed once: every other module (engine, CLI, form, sweep, inspector) imports them.

A torch-free leaf, so the window can build its menus before torch is imported. See docs/ARCHITECTURE.md.
"""

PRECISION_MODES = ("fp32", "tf32", "fp16", "bf16")  # concrete modes, in the order tables and menus show them
PRECISION_CHOICES = ("auto", *PRECISION_MODES)  # what a RunConfig may say: `auto` resolves per device
MIXED_MODES = ("fp16", "bf16")  # autocast to a 16-bit dtype: what the dtype inspector is for


def best_mixed_mode(precisions) -> str:
    """The mixed mode to look at on a device that runs `precisions` (DeviceInfo.precisions): bf16 where it is
    supported, else fp16 (a CUDA GPU without bf16), else fp32."""
    return next((mode for mode in ("bf16", "fp16") if mode in precisions), "fp32")
