"""Device-side accumulators for what a log interval reports, read back with one host sync."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .distributed import DistContext, all_reduce_mean


@dataclass(frozen=True)
class IntervalReadout:
    """What one log interval accumulated, as host numbers (averaged over ranks)."""

    loss: float  # mean of the finite micro-batch losses; NaN when none was finite
    skipped: int  # optimizer steps the GradScaler skipped in this interval
    tokens: float  # non-padding tokens this rank processed in the interval


class StepAccumulator:
    """Running loss, finite count, skipped steps and tokens, kept on the device so the step never syncs."""

    def __init__(self, device: torch.device, count_only_finite: bool):
        self.count_only_finite = count_only_finite
        self._loss = torch.zeros((), device=device)
        self._finite = torch.zeros((), device=device)
        self._counted = 0  # micro-batches added outside fp16: all count, so a host int avoids a device op
        self._skipped = torch.zeros((), device=device)
        self._tokens = torch.zeros((), device=device)

    def add_loss(self, loss: torch.Tensor) -> None:
        """fp16: overflowing micro-steps are skipped by the scaler, so they stay out of the mean."""
        if self.count_only_finite:
            finite = torch.isfinite(loss)
            self._loss += torch.where(finite, loss.float(), 0.0)
            self._finite += finite
        else:
            self._loss += loss.float()
            self._counted += 1

    def add_skipped(self, grad_norm: torch.Tensor) -> None:
        """Count a step whose gradient norm is inf/NaN: exactly the steps GradScaler skips."""
        self._skipped += ~torch.isfinite(grad_norm)

    def add_tokens(self, tokens: torch.Tensor) -> None:
        self._tokens += (tokens != 0).sum()

    def read(self, dist: DistContext) -> IntervalReadout:
        """Average over ranks and read back: the one host sync of a log interval. Resets the interval sums."""
        finite_sum = self._finite + self._counted
        sums = torch.stack([self._loss, finite_sum, self._skipped.float(), self._tokens.float()])
        loss_sum, finite, skipped, tokens = all_reduce_mean(sums, dist).tolist()
        self._counted = 0
        self._loss.zero_()
        self._finite.zero_()
        self._skipped.zero_()
        self._tokens.zero_()
        return IntervalReadout(loss=loss_sum / finite if finite else float("nan"),
                               skipped=int(round(skipped)), tokens=tokens)
