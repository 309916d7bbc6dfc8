"""Optimizers and learning-rate schedules from a RunConfig."""

from __future__ import annotations

import math

import torch
from torch import nn

from core.config import RunConfig

_FUSED_DEVICES = ("cuda", "xpu", "mps")


def build_optimizer(model: nn.Module, cfg: RunConfig, device: torch.device) -> torch.optim.Optimizer:
    """SGD with momentum, Adam or AdamW; fused kernels on accelerators, foreach (the default) elsewhere."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = {"fused": True} if device.type in _FUSED_DEVICES else {}
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **fused)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)


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
