"""Precision modes -> autocast dtype, GradScaler on/off and the TF32 switch: fp32 (no autocast), tf32 (TF32
matmuls), fp16 (autocast float16 + GradScaler), bf16 (autocast bfloat16), bf16-pure (bf16 parameters, gradients
and optimizer state, stochastic rounding, bf16 autocast on), fp8 (torchao's float8 Linear layers where they suit,
the rest in bf16 autocast). `fp32_modules` (any mode): the named modules run outside autocast in float32.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from core.devices import PRECISION_INSTALL, DeviceInfo, fp8_native
from core.errors import ConfigError, PrecisionError
from core.precision_modes import FP8_RECIPES, PRECISION_CHOICES

_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "bf16-pure": torch.bfloat16, "fp8": torch.bfloat16}


@dataclass(frozen=True)
class PrecisionPlan:
    """What a precision mode means on one device."""

    requested: str
    mode: str
    device_type: str
    autocast_dtype: torch.dtype | None
    use_scaler: bool
    tf32: bool
    param_dtype: torch.dtype = torch.float32  # bfloat16 in bf16-pure
    fp8_recipe: str = ""  # fp8: torchao's recipe
    fp8_emulate: bool = False  # fp8 without float8 tensor cores (AMP_FP8_EMULATE=1)

    @property
    def autocast_enabled(self) -> bool:
        return self.autocast_dtype is not None

    @property
    def compute_dtype_name(self) -> str:
        """The dtype matmuls compute in, as users read it ('float32', 'tf32', 'bfloat16', ...)."""
        if self.fp8_recipe:
            return f"float8 ({self.fp8_recipe}{', emulated' if self.fp8_emulate else ''}) + bfloat16"
        if self.autocast_dtype is not None:
            return str(self.autocast_dtype).removeprefix("torch.")
        return "tf32" if self.tf32 else "float32"

    def autocast(self):
        """Context for forward + loss (a no-op one when autocast is off: cheaper than enabled=False)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def make_scaler(self) -> torch.amp.GradScaler:
        """A GradScaler that is enabled for fp16 only; disabled it is a pass-through."""
        return torch.amp.GradScaler(self.device_type, enabled=self.use_scaler)

    def describe(self) -> str:
        scaler = "GradScaler on" if self.use_scaler else "no scaler"
        params = str(self.param_dtype).removeprefix("torch.")
        return f"{self.mode}: compute {self.compute_dtype_name}, params {params}, {scaler}"

    def prepare_model(self, model: nn.Module, fp32_modules: str = "") -> list[str]:
        """Make `model` (on its device, before the optimizer is built) what the mode trains: bf16 weights, float8
        Linear layers, and the modules `fp32_modules` names in float32; the notes say which."""
        kept = _fp32_modules(model, fp32_modules)
        if self.param_dtype != torch.float32:
            model.to(self.param_dtype)
        for module in kept.values():
            module.float()
            module.forward = functools.partial(_fp32_forward, module.forward, self.device_type)
        notes = [f"in float32 outside autocast: {', '.join(kept)}"] if kept else []
        return notes + (_to_float8(model, self.fp8_recipe, self.fp8_emulate, tuple(kept)) if self.fp8_recipe else [])


def auto_mode(info: DeviceInfo) -> str:
    """The best mode the device supports: bf16 on CUDA/XPU that have it, else fp16 on GPUs, else fp32."""
    if info.type == "cpu":
        return "fp32"
    if "bf16" in info.precisions and info.type in ("cuda", "xpu"):
        return "bf16"
    if "fp16" in info.precisions:
        return "fp16"
    return "fp32"


def resolve_precision(mode: str, info: DeviceInfo, fp8_recipe: str = "tensorwise") -> PrecisionPlan:
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
    if mode == "fp8" and fp8_recipe not in FP8_RECIPES[:2]:
        why = (
            "its high-precision weight gradient fails inside the bf16 autocast fp8 runs the other ops in "
            "(pytorch/ao#4616)"
            if fp8_recipe in FP8_RECIPES
            else "unknown"
        )
        raise PrecisionError(f"fp8 recipe {fp8_recipe!r}: {why}; choose tensorwise or rowwise")
    return PrecisionPlan(
        requested=requested,
        mode=mode,
        device_type=info.type,
        autocast_dtype=_AUTOCAST_DTYPES.get(mode),
        use_scaler=mode == "fp16",
        tf32=mode == "tf32",
        param_dtype=torch.bfloat16 if mode == "bf16-pure" else torch.float32,
        fp8_recipe=fp8_recipe if mode == "fp8" else "",
        fp8_emulate=mode == "fp8" and not fp8_native(info),
    )


def _fp32_modules(model: nn.Module, names: str) -> dict[str, nn.Module]:
    """The modules `names` lists (comma-separated names as named_modules gives them), refused by name when absent."""
    modules = dict(model.named_modules())
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    for name in wanted:
        if name not in modules:
            known = ", ".join(n for n in list(modules)[1:21] if n)
            raise ConfigError("fp32_modules", f"the model has no module {name!r}; its modules include {known}")
    return {name: modules[name] for name in wanted}


def _fp32_forward(forward, device_type: str, *args, **kwargs):
    """`forward` with autocast off and its floating-point tensor arguments (nested ones too) in float32."""
    args, kwargs = tree_map_only(torch.Tensor, lambda t: t.float() if t.is_floating_point() else t, (args, kwargs))
    with torch.autocast(device_type, enabled=False):
        return forward(*args, **kwargs)


def _to_float8(model: nn.Module, recipe: str, emulate: bool, fp32: tuple[str, ...] = ()) -> list[str]:
    """Swap the Linear layers that suit float8 for torchao's Float8Linear; one note naming them and the others with
    the reason (the output layer, whose rounding reaches the loss directly; features not multiples of 16)."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as exc:
        raise PrecisionError(f"fp8 training needs torchao ({exc}): {PRECISION_INSTALL}") from None
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children()) and list(m.parameters(False))]
    kept: dict[str, str] = {}
    for name, module in leaves:
        if type(module) is not nn.Linear:
            continue
        if any(name == n or name.startswith(f"{n}.") for n in fp32):
            kept[name] = "in float32: fp32_modules"
        elif name == leaves[-1][0]:
            kept[name] = "the output layer"
        elif module.in_features % 16 or module.out_features % 16:
            kept[name] = f"{module.in_features} -> {module.out_features} features, not multiples of 16"
    chosen = [n for n, m in leaves if type(m) is nn.Linear and n not in kept]
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
    convert_to_float8_training(model, config=config, module_filter_fn=lambda _module, name: name in chosen)
    others = "; ".join(f"{name} ({why})" for name, why in kept.items()) or "none"
    return [
        f"fp8 ({recipe}{', emulated' if emulate else ''}): {len(chosen)} of {len(chosen) + len(kept)} Linear layers "
        f"train in float8: {', '.join(chosen) or 'none'}; left in bf16: {others}"
    ]


@contextlib.contextmanager
def plain_linears(model: nn.Module):
    """torchao's float8 training layers refuse inference_mode: for the block they answer as plain nn.Linear."""
    float8 = sys.modules.get("torchao.float8.float8_linear")
    layers = [m for m in model.modules() if float8 is not None and isinstance(m, float8.Float8Linear)]
    for layer in layers:
        layer.forward = functools.partial(nn.Linear.forward, layer)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


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
