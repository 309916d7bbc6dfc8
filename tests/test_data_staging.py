"""Host-resident training data reaches the device through pinned double-buffered staging, one batch ahead:
the same batches in the same order as a direct gather, wherever the epoch is entered (exact resume)."""

from __future__ import annotations

import pytest
import torch

from core.data.batching import EpochBatches, HostStaging


def split_of(rows: int = 103) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {
        "x": torch.randn(rows, 5, generator=gen),
        "y": torch.randint(0, 7, (rows,), generator=gen),
        "seq": torch.randint(0, 50, (rows, 4, 2), generator=gen),
    }


def pair(split, **kw):
    direct = EpochBatches(split, 8, seed=11, device=torch.device("cpu"), staged=False, **kw)
    staged = EpochBatches(split, 8, seed=11, device=torch.device("cpu"), staged=True, **kw)
    return direct, staged


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1)])
def test_staged_batches_equal_direct_ones_in_order_over_epochs(world_size, rank):
    split = split_of()
    direct, staged = pair(split, rank=rank, world_size=world_size)
    assert staged.staging is not None and direct.staging is None
    for epoch in range(3):
        order_d, order_s = direct.order(epoch), staged.order(epoch)
        kept = []
        for index in range(direct.batches_per_epoch):
            got = staged.batch(order_s, index)
            assert same(got, direct.batch(order_d, index))
            kept.append((index, got))
        for index, got in kept:  # a batch handed out stays intact while later ones are staged into the buffers
            assert same(got, direct.batch(order_d, index))


def test_entering_mid_epoch_and_skipping_ahead_give_the_asked_batch():
    split = split_of()
    direct, staged = pair(split)
    order_d, order_s = direct.order(4), staged.order(4)
    for index in (5, 6, 2, 9, 10, 0):  # a resume enters mid-epoch; out-of-order asks drop the prefetched one
        assert same(staged.batch(order_s, index), direct.batch(order_d, index))
    last = direct.batches_per_epoch - 1
    assert same(staged.batch(order_s, last), direct.batch(order_d, last))
    assert staged.staging.ahead is None  # nothing is staged past the end of an epoch's order


def test_the_next_batch_is_started_before_it_is_asked_for():
    split = split_of()
    staged = EpochBatches(split, 8, seed=0, device=torch.device("cpu"), staged=True)
    order = staged.order(0)
    staged.batch(order, 0)
    ahead = staged.staging.ahead
    assert ahead is not None and ahead[0] is order and ahead[1] == 1
    second = staged.batch(order, 1)
    assert second is ahead[2]  # the prefetched batch itself, not a fresh gather


def test_no_streams_on_the_cpu_and_buffers_are_batch_shaped():
    split = split_of()
    stager = HostStaging(split, 8, torch.device("cpu"))
    assert stager.engine is None and stager.copy_stream is None
    assert [tuple(b["seq"].shape) for b in stager.buffers] == [(8, 4, 2), (8, 4, 2)]
    assert stager.buffers[0]["y"].dtype == torch.int64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: pinned staging and a copy stream")
def test_on_cuda_the_staging_is_pinned_and_batches_match():
    split = {k: v.pin_memory() for k, v in split_of(4096).items()}
    device = torch.device("cuda")
    staged = EpochBatches(split, 64, seed=1, device=device)
    assert staged.staging is not None and staged.staging.buffers[0]["x"].is_pinned()
    order = staged.order(0)
    for index in range(staged.batches_per_epoch):
        got = staged.batch(order, index)
        rows = order[index]
        assert all(torch.equal(got[k].cpu(), split[k][rows]) for k in split)
