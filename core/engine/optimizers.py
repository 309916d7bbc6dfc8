"""Optimizers and learning-rate schedules from a RunConfig. Weight decay applies to weight matrices only (as in
nanoGPT): decaying biases, norm gains and embedding rows towards zero only hurts.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from core.config import TASK_OPTIMIZER_FIELDS, RunConfig
from core.devices import PRECISION_INSTALL
from core.errors import ConfigError
from core.text import size

# Devices with fused SGD/Adam/AdamW kernels: one kernel per step instead of torch's default loop over the
# parameters on the CPU, the same update in a quarter of the time on a small model.
_FUSED_DEVICES = ("cpu", "cuda", "xpu", "mps")

NO_DECAY_MODULES = (nn.Embedding, nn.EmbeddingBag)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """[decayed, not decayed] trainable parameters (matrices but embedding tables; empty groups left out). Without
    weight decay one group of every trainable parameter in model order: each group costs a pass every step."""
    if weight_decay == 0:
        return [{"params": trainable_parameters(model), "weight_decay": 0.0}]
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))  # a shared (tied) parameter counts once, where it first appears
            matrix = param.ndim >= 2 and not isinstance(module, NO_DECAY_MODULES)
            (decay if matrix else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def build_optimizer(model: nn.Module, cfg: RunConfig, device: torch.device) -> torch.optim.Optimizer:
    """SGD with momentum, Adam or AdamW over `parameter_groups` (fused where torch has them; StochasticRounding's
    for bf16 weights), or bitsandbytes' 8-bit AdamW."""
    groups = parameter_groups(model, cfg.weight_decay)
    if cfg.optimizer == "adamw8bit":  # 8-bit states in blocks of 256 values (a tensor under 4096 values: 32-bit)
        try:
            import bitsandbytes
        except ImportError as exc:
            raise ConfigError("optimizer", f"adamw8bit needs bitsandbytes ({exc}): {PRECISION_INSTALL}") from None
        return bitsandbytes.optim.AdamW8bit(groups, lr=cfg.lr)
    if any(p.dtype == torch.bfloat16 for group in groups for p in group["params"]):
        return StochasticRounding(groups, kind=cfg.optimizer, lr=cfg.lr, momentum=cfg.momentum, seed=cfg.seed)
    fused = True if device.type in _FUSED_DEVICES else None  # None: torch's default
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, fused=fused)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, fused=fused)
    return torch.optim.AdamW(groups, lr=cfg.lr, fused=fused)


class StochasticRounding(torch.optim.Optimizer):
    """SGD (with momentum), Adam or AdamW (`kind`) on bfloat16 parameters and state: each step computes in float32
    and writes back rounded stochastically, so an update far below a weight's bf16 spacing still moves it on
    average. The random bits are seeded by (seed, step, parameter index): alike on every rank and after a resume."""

    def __init__(self, params, kind: str, lr: float, momentum: float = 0.9, seed: int = 0):
        defaults = {"lr": lr, "kind": kind, "momentum": momentum, "betas": (0.9, 0.999), "eps": 1e-8, "seed": seed}
        super().__init__(params, defaults | {"weight_decay": 0.0})
        self._generators: dict[torch.device, torch.Generator] = {}

    @torch.no_grad()
    def step(self, closure=None):
        index = 0
        for group in self.param_groups:
            lr, decay, kind, (beta1, beta2) = group["lr"], group["weight_decay"], group["kind"], group["betas"]
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    names = (
                        ("exp_avg", "exp_avg_sq") if kind != "sgd" else ("momentum_buffer",) * bool(group["momentum"])
                    )
                    state.update({name: torch.zeros_like(p) for name in names})
                state["step"] += 1
                step = int(state["step"])
                generator = self._generators.setdefault(p.device, torch.Generator(p.device))
                generator.manual_seed(((group["seed"] * 1_000_003 + step) * 4099 + index) % (1 << 63))
                weight, grad = p.float(), p.grad.float()
                if kind == "adamw":
                    weight.mul_(1 - lr * decay)
                elif decay:
                    grad.add_(weight, alpha=decay)
                if kind == "sgd":
                    if "momentum_buffer" in state:
                        grad = state["momentum_buffer"].float().mul_(group["momentum"]).add_(grad)
                        _round_into(state["momentum_buffer"], grad.clone(), generator)
                    weight.add_(grad, alpha=-lr)
                else:
                    exp_avg = state["exp_avg"].float().lerp_(grad, 1 - beta1)
                    exp_avg_sq = state["exp_avg_sq"].float().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    denom = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(group["eps"])
                    weight.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
                    _round_into(state["exp_avg"], exp_avg, generator)
                    _round_into(state["exp_avg_sq"], exp_avg_sq, generator)
                _round_into(p, weight, generator)


def _round_into(target: torch.Tensor, value: torch.Tensor, generator: torch.Generator) -> None:
    """Write float32 `value` (a scratch tensor) into bfloat16 `target`, rounded stochastically: random low 16 bits
    added to the float32 bits, then cut off."""
    if target.dtype != torch.float32:  # float32: a module of fp32_modules, written exactly
        noise = torch.randint(0, 1 << 16, value.shape, dtype=torch.int32, device=value.device, generator=generator)
        value = value.view(torch.int32).add_(noise).bitwise_and_(-65536).view(torch.float32)
    target.copy_(value)


def optimizer_notes(model: nn.Module, cfg: RunConfig, mode: str) -> list[str]:
    """What bf16-pure saves against fp32 and which tensors adamw8bit keeps in 8 bits."""
    params = trainable_parameters(model)
    count, notes = sum(p.numel() for p in params), []
    if cfg.optimizer == "adamw8bit":
        big = [p.numel() for p in params if p.numel() >= 4096]
        notes.append(
            f"adamw8bit: {len(big)} of {len(params)} parameter tensors ({sum(big) / max(1, count):.0%} of the "
            f"values) keep 8-bit state; tensors under 4,096 values keep 32-bit state (bitsandbytes' rule)"
        )
    if mode == "bf16-pure":
        states = 2 if cfg.optimizer != "sgd" else int(cfg.momentum > 0)
        weights = sum(p.numel() * p.element_size() for p in params)  # bf16 but fp32_modules' float32
        state = (count, count) if cfg.optimizer == "adamw8bit" else (weights, 4 * count)  # bytes of a state
        now, fp32 = 2 * weights + states * state[0], 8 * count + states * state[1]
        rounds = (
            "bitsandbytes' step rounds to nearest" if cfg.optimizer == "adamw8bit" else "the step rounds stochastically"
        )
        notes.append(
            f"bf16-pure: parameters, gradients and {cfg.optimizer} state take {size(now)} instead of {size(fp32)} "
            f"in fp32 ({count:,} parameters; {rounds})"
        )
    return notes


def task_optimizer_note(optimizer, scheduler, mode: str = "") -> str:
    with_schedule = f" with {type(scheduler).__name__} (stepped once per optimizer step)" if scheduler else ""
    rounding = (
        "; bf16-pure: it writes the bf16 weights rounded to nearest (stochastic rounding is the engine's "
        "optimizers'), so updates below a weight's bf16 spacing are lost"
        if mode == "bf16-pure"
        else ""
    )
    return (
        f"the task chooses its optimizer: {type(optimizer).__name__}{with_schedule}; the "
        f"{', '.join(TASK_OPTIMIZER_FIELDS)} settings are not used{rounding}"
    )


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable parameters in model order, a shared (tied) one once."""
    return [p for p in model.parameters() if p.requires_grad]


def regroup_one_group_state(optimizer_state: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """A checkpoint's optimizer state in `optimizer`'s groups when the two differ only in how the same parameters
    are grouped (one group of every trainable parameter into decay and no-decay groups, or back); else as is."""
    groups, saved = optimizer.param_groups, optimizer_state["param_groups"]
    if sorted((len(saved), len(groups))) != [1, 2]:
        return optimizer_state
    trainable = trainable_parameters(model)
    # the saved groups' parameters, in the split they were written with (parameter_groups' for two)
    layout = [g["params"] for g in parameter_groups(model, 1.0)] if len(saved) == 2 else [trainable]
    if [len(params) for params in layout] != [len(g["params"]) for g in saved]:
        return optimizer_state  # other parameters: the caller's size check decides
    old_id = {id(p): old for g, params in zip(saved, layout) for old, p in zip(g["params"], params)}
    state, new_groups, index = {}, [], 0
    for group in groups:
        ids = []
        for param in group["params"]:
            if old_id[id(param)] in optimizer_state["state"]:
                state[index] = optimizer_state["state"][old_id[id(param)]]
            ids.append(index)
            index += 1
        new_groups.append({**saved[0], "params": ids, "weight_decay": group["weight_decay"]})
    return {"state": state, "param_groups": new_groups}


# State entries each optimizer reads without a default once a parameter has state (SGD reads its momentum
# buffer with .get): a checkpoint's entry without them would fail at the first step.
REQUIRED_STATE = {"sgd": (), "adam": ("step", "exp_avg", "exp_avg_sq"), "adamw": ("step", "exp_avg", "exp_avg_sq")}
REQUIRED_STATE["adamw8bit"] = ("step",)  # bitsandbytes' states sit in one dict of its own


def state_misfit(
    optimizer_state: dict, optimizer: torch.optim.Optimizer, kind: str, names: dict[int, str]
) -> str | None:
    """Why `optimizer_state` (in `optimizer`'s groups) cannot drive `optimizer` of `kind`, or None: an entry lacking
    what `kind` reads, or a tensor whose shape is not its parameter's. `names`: id(param) -> parameter name."""
    saved = [i for group in optimizer_state["param_groups"] for i in group["params"]]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    by_id = dict(zip(saved, params))
    for index, entry in optimizer_state["state"].items():
        param = by_id[index]
        name = names.get(id(param), f"parameter {index}")
        for key in REQUIRED_STATE.get(kind, ()):
            if entry and key not in entry:
                return f"the state of {name} lacks {key!r}, which {kind} needs"
        for key, value in entry.items():
            if not isinstance(value, torch.Tensor):
                continue
            if key == "step":
                if value.numel() != 1:
                    return f"the state of {name}: step has {value.numel()} values, not one"
            elif tuple(value.shape) != tuple(param.shape):
                return f"the state of {name}: {key} has shape {tuple(value.shape)}, the parameter {tuple(param.shape)}"
    return None


def cosine_with_warmup(warmup_steps: int, total_steps: int):
    """LR multiplier: linear warm-up from ~0 to 1, then cosine decay to 0 at `total_steps`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: RunConfig, total_steps: int):
    """None for a constant LR (nothing to step in the hot loop), else a torch LR scheduler."""
    if cfg.schedule == "cosine":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(cfg.warmup_steps, total_steps))
    if cfg.schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=cfg.lr, total_steps=max(total_steps, 2), cycle_momentum=cfg.optimizer == "sgd"
        )
    return None
