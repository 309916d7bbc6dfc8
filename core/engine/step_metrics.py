"""Device-side accumulators for what a log interval reports, read back with one host sync."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.engine.distributed import DistContext, all_reduce_mean

_FOLD_EVERY = 256  # pending per-step scalars are folded this often: a huge log interval holds no more


def gradient_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The total L2 norm of the gradients, on the device: what clip_grad_norm_ returns, without its scaling pass."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(()) if not params else torch.zeros((), device=params[0].device)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


@dataclass(frozen=True)
class IntervalReadout:
    """What one log interval accumulated, as host numbers (averaged over ranks)."""

    loss: float  # mean of the finite micro-batch losses; NaN when none was finite
    skipped: int  # optimizer steps the GradScaler skipped in this interval
    tokens: float  # non-padding tokens this rank processed in the interval


class StepAccumulator:
    """Losses, skipped steps and tokens of a log interval, kept on the device so the step never syncs: the hot
    loop only appends detached scalars to lists (cheaper than an in-place add), reduced when folded or read."""

    def __init__(self, device: torch.device, count_only_finite: bool):
        self.count_only_finite = count_only_finite
        self._losses: list[torch.Tensor] = []
        self._norms: list[torch.Tensor] = []
        self._token_counts: list[torch.Tensor] = []
        self._sums = torch.zeros(4, device=device)  # loss sum, finite count, skipped steps, tokens
        self._folded = False  # whether _sums holds anything since the last read

    def add_loss(self, loss: torch.Tensor) -> None:
        self._losses.append(loss)
        if len(self._losses) >= _FOLD_EVERY:
            self._fold()

    def add_skipped(self, grad_norm: torch.Tensor) -> None:
        """Remember a step's gradient norm: an inf/NaN norm is exactly a step GradScaler skips."""
        self._norms.append(grad_norm)
        if len(self._norms) >= _FOLD_EVERY:
            self._fold()

    def add_tokens(self, tokens: torch.Tensor) -> None:
        self._token_counts.append((tokens != 0).sum())

    def _fold(self) -> None:
        """Reduce the pending scalars into the running sums (device ops only, no sync)."""
        self._folded = True
        if self._losses:
            losses = torch.stack(self._losses).float()
            if self.count_only_finite:  # fp16: overflowing micro-steps are skipped, keep them out of the mean
                finite = torch.isfinite(losses)
                self._sums[0] += torch.where(finite, losses, 0.0).sum()
                self._sums[1] += finite.sum()
            else:
                self._sums[0] += losses.sum()
                self._sums[1] += len(self._losses)
            self._losses.clear()
        if self._norms:
            self._sums[2] += (~torch.isfinite(torch.stack(self._norms))).sum()
            self._norms.clear()
        if self._token_counts:
            self._sums[3] += torch.stack(self._token_counts).sum()
            self._token_counts.clear()

    def read(self, dist: DistContext) -> IntervalReadout:
        """Average over ranks and read back: the one host sync of a log interval. Resets the interval sums."""
        if not (dist.enabled or self._folded or self._norms or self._token_counts or self.count_only_finite):
            # The usual case (one process, losses only, nothing folded yet): two ops and one read instead of
            # folding into the sums, reading those and zeroing them (a dozen ops, at a log interval of 1 each step).
            losses, count = self._losses, len(self._losses)
            # .item() gives a Python float for any dtype; a sum of several is taken in float32
            total = (
                (losses[0].item() if count == 1 else torch.stack(losses).sum(dtype=torch.float32).item())
                if count
                else 0.0
            )
            losses.clear()
            return IntervalReadout(loss=total / count if count else float("nan"), skipped=0, tokens=0.0)
        self._fold()
        loss_sum, finite, skipped, tokens = all_reduce_mean(self._sums, dist).tolist()
        self._sums.zero_()
        self._folded = False
        return IntervalReadout(
            loss=loss_sum / finite if finite else float("nan"), skipped=int(round(skipped)), tokens=tokens
        )
