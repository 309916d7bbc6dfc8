"""torch.compile and activation checkpointing for a run (RunConfig.compile, compile_mode, activation_checkpointing).

Compile wraps the model (not the task's loss) after `.to(device)` and before DDP; its first pass runs before the
clock starts, so the compile time is reported apart; a failing compiler leaves the run eager, saying why.
Activation checkpointing wraps the blocks a task names in place, so their state-dict keys are unchanged.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import cast

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from core.engine.checkpoints import capture_rng, restore_rng

_REASON_CHARS = 200


def one_line(exc: BaseException) -> str:
    """The first line (shortened) of the error at the root of `exc`: dynamo wraps a backend's failure in
    BackendCompilerFailed."""
    seen = {id(exc)}
    while (inner := getattr(exc, "inner_exception", None) or exc.__cause__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """`torch.compile(model, mode=mode)`: a wrapper sharing the model's parameters (its state-dict keys carry
    an `_orig_mod.` prefix; checkpoints.unwrap_model takes it off). Raises where torch.compile itself refuses."""
    return cast(nn.Module, torch.compile(model, mode=mode))  # an OptimizedModule for a module


def warm_up(model: nn.Module, first_pass: Callable[[nn.Module], None]) -> float:
    """Run `first_pass(model)` (a forward and backward) and undo what it did to the RNG states, buffers and
    gradients; its seconds."""
    rng = capture_rng()
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    started = time.perf_counter()
    try:
        first_pass(model)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter() - started
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        for param in model.parameters():
            param.grad = None
        restore_rng(rng)


def compile_for_run(
    model: nn.Module, mode: str, first_pass: Callable[[nn.Module], None], log: Callable[[str], None]
) -> tuple[nn.Module, float | None]:
    """The compiled model and its compile seconds, or the model itself and None after saying (through `log`,
    one line) why it runs eager."""
    try:
        # A fresh start: the graphs of earlier runs in this process (the GUI, a sweep's modes) would otherwise
        # count against dynamo's recompile limit, past which it silently runs eager.
        torch._dynamo.reset()
        compiled = compile_model(model, mode)
        seconds = warm_up(compiled, first_pass)
    except Exception as exc:
        with contextlib.suppress(Exception):
            torch._dynamo.reset()  # drop whatever half-built state the failed attempt left
        log(f"compile: torch.compile failed ({one_line(exc)}); running eager")
        return model, None
    log(
        f"compile: compiled (mode {mode}) in {seconds:.1f} s, before the clock started: samples/s is the "
        f"steady-state speed"
    )
    return compiled, seconds


def frames_compiled() -> int:
    """How many frames dynamo has compiled (or recompiled) in this process; a run's steady state adds none."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


# ----------------------------------------------------------------- activation checkpointing
class _Checkpointed:
    """A block's forward run through torch.utils.checkpoint while training with gradients, plain otherwise
    (evaluation has no backward to recompute for)."""

    def __init__(self, block: nn.Module, forward: Callable):
        self.block = block
        self.forward = forward

    def __call__(self, *args, **kwargs):
        if self.block.training and torch.is_grad_enabled():
            return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)
        return self.forward(*args, **kwargs)


def checkpoint_blocks(blocks: list[nn.Module]) -> int:
    """Wrap each block's forward in place; how many were wrapped now (one wrapped before is left as it is)."""
    wrapped = 0
    for block in blocks:  # by identity: a user's block may be unhashable
        if not is_checkpointed(block):
            block.forward = _Checkpointed(block, block.forward)
            wrapped += 1
    return wrapped


def is_checkpointed(block: nn.Module) -> bool:
    return isinstance(block.__dict__.get("forward"), _Checkpointed)


def checkpointable_blocks(task, model: nn.Module) -> list[nn.Module]:
    """The blocks to recompute: the task's `checkpointed_blocks(model)`, else the model's own
    `checkpointed_blocks()`, else none (a block: any module whose forward takes and returns tensors)."""
    from core.engine.checkpoints import unwrap_model

    chooser = getattr(task, "checkpointed_blocks", None)
    if callable(chooser):
        return list(chooser(model) or [])
    own = getattr(unwrap_model(model), "checkpointed_blocks", None)
    return list(own() or []) if callable(own) else []


def apply_activation_checkpointing(task, model: nn.Module) -> str:
    """Checkpoint the blocks checkpointable_blocks names; the one-line note for the run."""
    blocks = checkpointable_blocks(task, model)
    if not blocks:
        return (
            f"activation checkpointing: task {task.name} names no blocks to checkpoint (a task's "
            f"checkpointed_blocks(model) or the model's checkpointed_blocks()); training without it"
        )
    checkpoint_blocks(blocks)
    kinds = ", ".join(dict.fromkeys(type(b).__name__ for b in blocks))
    return (
        f"activation checkpointing: {len(blocks)} block{'s' if len(blocks) != 1 else ''} ({kinds}) recompute "
        f"their activations in the backward pass"
    )


def prepare(
    model: nn.Module, cfg, task, plan, batches, epoch: int
) -> tuple[nn.Module, list[str], float | None, int | None]:
    """Activation checkpointing and torch.compile for a run of `cfg`, on the device-placed model before DDP, its
    first pass on the first batch of `epoch`: (the model to wrap, the notes for RunStarted, the compile's seconds
    and frames_compiled() after the warm-up, both None when eager)."""
    notes = [apply_activation_checkpointing(task, model)] if cfg.activation_checkpointing else []
    if not cfg.compile:
        return model, notes, None, None
    from core.engine.precision import matmul_precision

    def first_pass(compiled: nn.Module) -> None:
        batch = batches.batch(batches.order(epoch), 0)
        with matmul_precision(plan), plan.autocast():
            loss = task.loss(compiled, batch)
        loss.backward()

    compiled, seconds = compile_for_run(model, cfg.compile_mode, first_pass, notes.append)
    return compiled, notes, seconds, frames_compiled()  # what the warm-up compiled: training should add nothing
