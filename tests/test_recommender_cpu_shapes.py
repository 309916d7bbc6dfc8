"""Issue 43: on the CPU the recommender's loss sees few distinct shapes (oneDNN caches a primitive per shape)."""

from __future__ import annotations

import pytest
import torch

from core.tasks import create_task
from core.tasks.recommender import task as recommender
from core.tasks.recommender.task import BUCKETS_PER_OCTAVE, position_bucket

SMALL = {"items": 200, "track_len": 10, "interactions": 6_000, "mean_len": 12, "max_len": 40, "d_model": 16}


def test_position_bucket_is_a_coarse_ladder_just_above_the_count():
    sizes = {position_bucket(n, 6400) for n in range(6401)}
    assert len(sizes) <= 1 + 8 + BUCKETS_PER_OCTAVE * 13  # 0, the small counts 1..8, 8 a doubling up to 2**13
    for n in range(1, 6401):
        size = position_bucket(n, 6400)
        assert n <= size <= min(6400, n + n // BUCKETS_PER_OCTAVE)
    assert position_bucket(6000, 6100) == 6100 and position_bucket(0, 10) == 0


@pytest.mark.parametrize("loss", ["full", "sampled"])
def test_random_batches_reach_the_output_matmul_in_few_shapes_with_the_exact_loss(monkeypatch, loss):
    """Over many random batches the output matmul sees a handful of row counts (one per rung of the ladder the
    real counts span, not one per count), and each loss equals the loss over just the real positions."""
    task = create_task("recommender", {**SMALL, "loss": loss, "sampled_negatives": 50, "dropout": 0.0})
    data = task.load_data("", 0)
    model = task.build_model(data.info)
    seen = []
    full, sampled = recommender.chunked_softmax_cross_entropy, task._sampled_softmax
    monkeypatch.setattr(recommender, "chunked_softmax_cross_entropy", lambda h, *a: seen.append(h.shape) or full(h, *a))
    monkeypatch.setattr(task, "_sampled_softmax", lambda m, h, t: seen.append(h.shape) or sampled(m, h, t))
    generator, counts = torch.Generator().manual_seed(0), set()
    for _ in range(60):
        rows = torch.randperm(data.train["seq"].shape[0], generator=generator)[:32]
        batch = {k: v[rows] for k, v in data.train.items()}
        torch.manual_seed(1)  # the sampled softmax draws the same negatives both times
        got = task.loss(model, batch)
        hidden = model(batch["seq"]).flatten(0, 1)
        target = batch["target"].flatten() - 1
        real = (target >= 0).nonzero().squeeze(1)
        counts.add(len(real))
        torch.manual_seed(1)
        if loss == "full":
            want = full(hidden[real], model.items.weight[1:], target[real])
        else:
            want = sampled(model, hidden[real], target[real] + 1)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    shapes = {s[0] for s in seen[::2]}  # task.loss's calls; every second one is the exact path's
    octaves = max(counts).bit_length() - (min(counts) - 1).bit_length() + 1
    assert len(counts) > 25 and len(shapes) <= BUCKETS_PER_OCTAVE * octaves and len(shapes) <= len(counts) // 3
