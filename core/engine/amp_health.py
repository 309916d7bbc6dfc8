"""AMP health: find which module first produced inf/NaN, without taxing the hot loop.

Forward hooks are armed only after an overflow was seen. While armed, each hook ORs a device-side flag
(no host sync); the flags are read once, at the next log interval. Hooks fire when a module's forward
finishes, so the first flagged module in firing order is the innermost, earliest producer.
`check_health` turns a diverged interval into RunFailed. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class RunFailed(Exception):
    """The run cannot go on. `nonfinite`: the loss or gradients went inf/NaN (nonfinite_fixes applies); `module`:
    the one that first produced it."""

    def __init__(self, message: str, nonfinite: bool = False, module: str | None = None):
        super().__init__(message)
        self.nonfinite, self.module = nonfinite, module


class NonFiniteWatch:
    """Device-side inf/NaN flags per module output, armed on demand."""

    def __init__(self, model: nn.Module):
        self.model = model
        self._handles: list = []
        self._flags: dict[str, torch.Tensor] = {}
        self._order: list[str] = []

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self) -> None:
        """Register a forward hook on every submodule (and the model itself, as '<model>')."""
        if self.armed:
            return
        for name, module in self.model.named_modules():
            self._handles.append(module.register_forward_hook(self._hook(name or "<model>")))

    def _hook(self, name: str):
        def check(module, inputs, output):
            for tensor in output if isinstance(output, (tuple, list)) else (output,):
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                    self._flag(name, ~torch.isfinite(tensor).all())

        return check

    def _flag(self, name: str, bad: torch.Tensor) -> None:
        if name in self._flags:
            self._flags[name] |= bad
        else:
            self._flags[name] = bad
            self._order.append(name)

    def flag_loss(self, loss: torch.Tensor) -> None:
        """Also watch the loss itself (it is computed outside any module)."""
        if self.armed:
            self._flag("loss", ~torch.isfinite(loss))

    def first_source(self) -> str | None:
        """The first module (or 'loss') whose output was non-finite since arming; resets the flags. One sync."""
        if not self._flags:
            return None
        names = list(self._order)
        values = torch.stack([self._flags[n] for n in names]).tolist()  # the one host read
        self._flags.clear()
        self._order.clear()
        for name, bad in zip(names, values, strict=True):
            if bad:
                return name
        return None

    def after_interval(self, new_skips: int) -> str | None:
        """At a log interval (fp16): what the armed hooks caught; arm after an overflow, disarm once quiet."""
        source = self.first_source() if self.armed else None
        if new_skips and not self.armed:
            self.arm()
        elif not new_skips and self.armed:
            self.disarm()
        return source

    def disarm(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._flags.clear()
        self._order.clear()


def first_nonfinite_parameter(model: nn.Module) -> str | None:
    """Name of the first parameter holding inf/NaN (after a divergence), or None."""
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            return name
    return None


def nonfinite_source(watch: NonFiniteWatch, model: nn.Module, forward, restore=None) -> str | None:
    """bf16/fp32 after a non-finite loss: the module that first makes inf/NaN, from one `forward()` with the
    hooks armed. The failing steps already poisoned the weights, so `restore()` puts the last good ones back first
    (nothing is saved after this), and a module whose own weights are non-finite is not named."""
    try:
        if restore is not None and first_nonfinite_parameter(model) is not None:
            restore()
        watch.arm()
        with torch.no_grad():
            watch.flag_loss(forward())
        source = watch.first_source()
        module = None if source in (None, "loss") else model if source == "<model>" else model.get_submodule(source)
        return None if module is not None and first_nonfinite_parameter(module) is not None else source
    except Exception:  # a diagnosis never replaces the failure it explains
        return None
    finally:
        watch.disarm()


def check_health(
    plan,
    model: nn.Module,
    loss: float,
    new_skips: int,
    scale: float | None,
    step: int,
    interval_steps: int,
    lr: float,
    source=None,
) -> None:
    """Raise RunFailed when an interval diverged: a non-finite loss without a scaler (naming the first
    non-finite parameter), or fp16 steps that all overflowed while the loss scale collapsed. `source`: a callable
    naming the module that first produced inf/NaN, called only on a divergence (or that name)."""
    if plan.use_scaler:
        if new_skips < interval_steps or scale is None or scale >= 2.0**-14:
            return
    elif math.isfinite(loss):
        return
    bad = None if plan.use_scaler else first_nonfinite_parameter(model)  # before source(), which may restore them
    module = source() if callable(source) else source
    first = f"; first produced by module {module}" if module else ""
    if plan.use_scaler:
        message = (
            f"fp16: every step since step {step - interval_steps:,} overflowed and the loss scale fell to "
            f"{scale:g}{first}; the model diverged. Try bf16, a lower lr or grad_clip"
        )
    else:
        where = f" (parameter {bad} is now non-finite)" if bad else ""
        message = (
            f"loss became {loss} in {plan.mode} between steps {step - interval_steps:,} and {step:,}{where}{first}; "
            f"the last good checkpoint is kept. Try a lower lr (now {lr:g}) or grad_clip"
        )
    raise RunFailed(message, nonfinite=True, module=module)


def nonfinite_fixes(
    mode: str,
    cfg,
    precisions,
    folder: str,
    checkpoint: str | None,
    module: str | None,
    own_optimizer: bool = False,
) -> list[dict]:
    """Re-runs that may cure a divergence of run `cfg`, each {label, changes, resume, note}: bf16 for fp16, lr / 10
    (not for a task's own optimizer), fp32 for `module` and fp32 for the run, each into a folder beside `folder`."""
    fixes: list[tuple[str, str, dict]] = []
    if mode == "fp16" and "bf16" in precisions:
        fixes.append(("bf16 instead of fp16", "bf16", {"precision": "bf16"}))
    if not own_optimizer:
        fixes.append((f"lower LR to {cfg.lr / 10:g}", "lr-div10", {"lr": cfg.lr / 10}))
    named = [n.strip() for n in cfg.fp32_modules.split(",") if n.strip()]
    if mode not in ("fp32", "tf32") and module and module not in ("loss", "<model>", *named):
        fp32 = {"fp32_modules": ",".join([*named, module])}
        fixes.append((f"fp32 for module {module}", f"fp32-{module}", fp32))
    if mode != "fp32":
        fixes.append((f"fp32 for the run (instead of {mode})", "fp32", {"precision": "fp32"}))
    return [
        {
            "label": label,
            "changes": {**changes, "out_dir": f"{folder}-{slug}"},
            "resume": checkpoint,
            "note": f"rerun_of: {folder}, fix: {label}",
        }
        for label, slug, changes in fixes
    ]
