"""The recommender's chunked full-catalogue loss equals plain cross-entropy, in value and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core.tasks.chunked_loss import chunked_softmax_cross_entropy


def reference(hidden, table, targets):
    return F.cross_entropy((hidden @ table.t()).float(), targets, ignore_index=-1)


def make(n=37, d=8, v=53, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, requires_grad=True)
    table = torch.randn(v, d, generator=g, requires_grad=True)
    targets = torch.randint(0, v, (n,), generator=g)
    targets[::5] = -1  # padding positions are ignored
    return hidden, table, targets


@pytest.mark.parametrize("chunk_elements", [53 * 4, 53 * 37, 1 << 26])  # several chunks, exactly one, default
def test_value_and_gradients_match_cross_entropy_in_float32(chunk_elements):
    hidden, table, targets = make()
    loss = chunked_softmax_cross_entropy(hidden, table, targets, chunk_elements=chunk_elements, min_rows=1)
    (loss * 3).backward()  # a scaled loss (grad accumulation, GradScaler) scales the gradients
    got = (loss.detach(), hidden.grad.clone(), table.grad.clone())
    hidden.grad = table.grad = None
    want = reference(hidden, table, targets)
    (want * 3).backward()
    torch.testing.assert_close(got[0], want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1], hidden.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got[2], table.grad, rtol=1e-4, atol=1e-6)


def test_bf16_autocast_matches_and_keeps_parameter_gradients_float32():
    hidden, table, targets = make(n=64, d=16, v=101, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = chunked_softmax_cross_entropy(hidden, table, targets, chunk_elements=101 * 10, min_rows=1)
    loss.backward()
    assert loss.dtype == torch.float32 and table.grad.dtype == torch.float32 and hidden.grad.dtype == torch.float32
    got = (loss.detach(), hidden.grad.clone(), table.grad.clone())
    hidden.grad = table.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = reference(hidden, table, targets)
    want.backward()
    torch.testing.assert_close(got[0], want.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got[1], hidden.grad, rtol=5e-2, atol=5e-3)
    torch.testing.assert_close(got[2], table.grad, rtol=5e-2, atol=5e-3)


def test_all_positions_ignored_gives_zero_loss_and_gradients():
    hidden, table, targets = make()
    targets[:] = -1
    loss = chunked_softmax_cross_entropy(hidden, table, targets, chunk_elements=100, min_rows=1)
    loss.backward()
    assert loss.item() == 0.0 and hidden.grad.abs().sum() == 0 and table.grad.abs().sum() == 0


def test_no_gradients_wanted_still_gives_the_loss():
    hidden, table, targets = make()
    with torch.no_grad():
        loss = chunked_softmax_cross_entropy(hidden, table, targets, chunk_elements=100, min_rows=1)
        want = reference(hidden, table, targets)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)


def test_chunk_rows_follow_the_memory_budget_with_an_optional_floor():
    from core.tasks.chunked_loss import CHUNK_ELEMENTS, chunk_rows

    assert chunk_rows(1000) == CHUNK_ELEMENTS // 1000  # the budget's share of the catalogue
    assert chunk_rows(1_000_000) * 1_000_000 <= CHUNK_ELEMENTS
    assert chunk_rows(1_000_000, min_rows=256) == 256
    assert chunk_rows(10**12) == 1  # never zero rows
