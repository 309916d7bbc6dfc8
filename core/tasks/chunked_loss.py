"""Softmax cross-entropy over a large catalogue without materialising the (positions x catalogue) logits: chunk
by chunk, each chunk's gradient folded into the hidden states' and the table's, so backward only scales them.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 26  # logits per chunk: 256 MB in float32, enough rows to keep the GPU busy
# No floor on a chunk's positions by default (slower on the CPU: benchmarks/large_catalogue.py); `min_rows` sets one.
MIN_CHUNK_ROWS = 1


def compute_dtype(device_type: str, fallback: torch.dtype) -> torch.dtype:
    """The dtype autocast would run a matmul in here (the hidden states may be float32 after a LayerNorm)."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else fallback


class _ChunkedSoftmaxCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, table, targets, dtype, chunk_rows):
        need_hidden, need_table = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        h_all = hidden.to(dtype)
        w = table.to(dtype)
        valid = targets >= 0
        count = valid.sum().clamp(min=1).to(torch.float32)
        loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(h_all) if need_hidden else None
        grad_table = torch.zeros(table.shape, dtype=torch.float32, device=table.device) if need_table else None
        tiny = torch.finfo(torch.float32).tiny
        for start in range(0, hidden.shape[0], chunk_rows):
            h = h_all[start : start + chunk_rows]
            t = targets[start : start + chunk_rows]
            keep = valid[start : start + chunk_rows].unsqueeze(1)
            index = t.clamp(min=0).unsqueeze(1)
            # one fused kernel from the compute-dtype logits to float32 probabilities: few passes over the block
            probs = torch.softmax(h @ w.t(), dim=1, dtype=torch.float32)
            picked = probs.gather(1, index)
            loss_sum += (-torch.log(picked.clamp(min=tiny)) * keep).sum()
            if grad_hidden is None and grad_table is None:
                continue
            probs.scatter_add_(1, index, torch.full_like(picked, -1.0))  # softmax - one-hot target
            g = probs.to(dtype)
            del probs
            # Ignored positions contribute nothing: masking the small (rows x d) factors is cheaper than the block.
            if grad_hidden is not None:
                grad_hidden[start : start + chunk_rows] = (g @ w) * keep
            if grad_table is not None:
                grad_table += (g.t() @ (h * keep)).float()
        ctx.save_for_backward(
            grad_hidden if grad_hidden is not None else count, grad_table if grad_table is not None else count, count
        )
        ctx.hidden_dtype = hidden.dtype
        return loss_sum / count

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_table, count = ctx.saved_tensors
        scale = grad_output.float() / count
        out_hidden = (grad_hidden.float() * scale).to(ctx.hidden_dtype) if ctx.needs_input_grad[0] else None
        out_table = grad_table * scale if ctx.needs_input_grad[1] else None
        return out_hidden, out_table, None, None, None


def chunked_softmax_cross_entropy(
    hidden: torch.Tensor,
    table: torch.Tensor,
    targets: torch.Tensor,
    chunk_elements: int = CHUNK_ELEMENTS,
    min_rows: int = MIN_CHUNK_ROWS,
) -> torch.Tensor:
    """`F.cross_entropy((hidden @ table.t()).float(), targets, ignore_index=-1)` in a fraction of the memory."""
    dtype = compute_dtype(hidden.device.type, torch.promote_types(hidden.dtype, table.dtype))
    rows = chunk_rows(table.shape[0], chunk_elements, min_rows)
    return _ChunkedSoftmaxCrossEntropy.apply(hidden, table, targets, dtype, rows)


def chunk_rows(catalogue: int, chunk_elements: int = CHUNK_ELEMENTS, min_rows: int = MIN_CHUNK_ROWS) -> int:
    """Positions per chunk of the loss: the memory budget's share of the catalogue, at least `min_rows`."""
    return max(min_rows, 1, chunk_elements // max(1, catalogue))


def compact_positions(
    hidden: torch.Tensor, targets: torch.Tensor, bound: int, ignore: int = -1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The positions whose target is not `ignore`, moved to the front of `bound` rows without a host sync: (hidden,
    targets, overflow), overflow a 0-d bool tensor; the rows after them repeat row 0 with target `ignore`."""
    valid = targets != ignore
    running = torch.cumsum(valid, 0)  # real positions up to and including each one
    slot = torch.arange(1, bound + 1, device=targets.device, dtype=running.dtype)
    source = torch.searchsorted(running, slot).clamp(max=max(targets.shape[0] - 1, 0))  # i-th real position
    count = running[-1] if targets.shape[0] else torch.zeros((), dtype=running.dtype, device=targets.device)
    filled = slot <= count
    return (hidden.index_select(0, source), torch.where(filled, targets.index_select(0, source), ignore), count > bound)
