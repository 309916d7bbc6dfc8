"""Recommender evaluation protocols on hand-built cases with known answers, the padding-free loss (same value
and gradients as over the padded batch, no host read in the step), bounded evaluation memory, exact resume."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from core.config import RunConfig
from core.data.sequences import sequence_splits, unseen_negatives
from core.engine.trainer import Trainer, train
from core.tasks import create_task
from core.tasks.chunked_loss import chunked_softmax_cross_entropy, compact_positions
from core.tasks.recommender.task import ranking_report, remove_seen

# Users with short histories and a long window: most training positions are padding, so the loss drops them.
PADDED = {
    "items": 200,
    "track_len": 10,
    "interactions": 6_000,
    "mean_len": 12,
    "max_len": 40,
    "d_model": 16,
    "layers": 1,
    "heads": 2,
}


def hand_split():
    """Two users over a catalogue of 6 items. User 0: 1 2 3 4 5 (val target 4, test target 5); user 1:
    6 2 6 6 (a repeat: val target 6 was seen before, test target 6 too)."""
    user = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1])
    items = np.array([1, 2, 3, 4, 5, 6, 2, 6, 6])
    return items, sequence_splits(user, items, 6, max_len=3, negatives=50, seed=0)


def test_history_spans_cover_everything_before_the_target_not_only_the_window():
    items, (_, val, test) = hand_split()

    def spans(split):
        return [items[s:e].tolist() for s, e in zip(split["history_start"], split["history_end"])]

    assert spans(val) == [[1, 2, 3], [6, 2]] and spans(test) == [[1, 2, 3, 4], [6, 2, 6]]
    assert test["seq"].tolist() == [[2, 3, 4], [6, 2, 6]]  # the model reads max_len 3; filtering sees all


def test_sampled_negatives_exclude_everything_the_user_interacted_with():
    items, (_, val, test) = hand_split()
    for split in (val, test):
        assert set(split["negatives"][0].tolist()) == {6}  # user 0 saw 1..5: only 6 is left
        assert set(split["negatives"][1].tolist()) <= {1, 3, 4, 5}  # user 1 saw 6 and 2
        assert set(split["negatives"][1].tolist()) == {1, 3, 4, 5}  # 50 draws reach all four
    # Uniform over the allowed items, on a larger case: never a seen item or the target.
    rng = np.random.default_rng(0)
    n, rows = 50, 400
    lengths = rng.integers(1, 40, rows)
    flat = rng.integers(1, n + 1, int(lengths.sum()))
    starts = np.cumsum(lengths) - lengths
    targets = rng.integers(1, n + 1, rows)
    neg = unseen_negatives(flat, starts, starts + lengths, targets, n, 100, seed=1).numpy()
    for r in range(rows):
        seen = set(flat[starts[r] : starts[r] + lengths[r]].tolist()) | {int(targets[r])}
        assert not seen & set(neg[r].tolist()) and neg[r].min() >= 1 and neg[r].max() <= n
    counts = np.bincount(neg[0], minlength=n + 1)[1:]
    allowed = [i for i in range(1, n + 1) if i not in set(flat[: lengths[0]].tolist()) | {int(targets[0])}]
    assert (counts > 0).sum() >= 0.8 * min(len(allowed), 100) and counts[np.array(allowed) - 1].sum() == 100


def test_a_user_who_saw_the_whole_catalogue_falls_back_to_the_catalogue_minus_the_target():
    neg = unseen_negatives(np.array([1, 2, 3]), np.array([0]), np.array([3]), np.array([2]), 3, 20, seed=0)
    assert set(neg[0].tolist()) <= {1, 3}


def test_three_protocols_on_a_hand_built_scorer():
    """Scores are fixed: item i scores 10 - i for user 0 (1 is best), and item i scores i for user 1 (6 best)."""
    items, (_, val, _) = hand_split()
    val = {**val, "negatives": torch.tensor([[6] * 3, [1, 3, 5]])}  # fixed negatives: 3 per row

    def score(batch):
        base = torch.arange(1, 7, dtype=torch.float64)
        rows = [10 - base if t == 4 else base for t in batch["target"].tolist()]
        return torch.stack(rows)

    report = ranking_report(score, val, 1, torch.from_numpy(items))
    assert ranking_report(score, val, 2, torch.from_numpy(items)) == report
    # User 0, target 4: unfiltered 1, 2, 3 rank above it (rank 3); filtered 1, 2, 3 are seen and removed
    # (rank 0); sampled against 6, 6, 6 (scores 4 < 6): rank 0.
    # User 1, target 6 (a repeat): best everywhere, and it is not removed although seen: rank 0 in all three.
    ndcg = lambda rank: 1 / np.log2(rank + 2)  # noqa: E731
    assert report["hr@10_full_unfiltered"] == 1.0 and report["hr@10_full_filtered"] == 1.0
    assert report["ndcg@10_full_unfiltered"] == pytest.approx((ndcg(3) + 1) / 2)
    assert report["ndcg@10_full_filtered"] == pytest.approx(1.0)
    assert report["ndcg@10_sampled100_unseen"] == pytest.approx(1.0)


def test_remove_seen_sets_exactly_the_history_to_minus_infinity():
    items, (_, _, test) = hand_split()
    scores = remove_seen(torch.zeros(2, 6), test, torch.from_numpy(items))
    assert torch.isinf(scores).tolist() == [
        [True, True, True, True, False, False],
        [False, True, False, False, False, True],
    ]


def test_evaluation_is_the_same_at_any_batch_size_and_over_slices():
    """Memory: a batch's histories and (rows x catalogue) scores at a time; slices (DDP ranks) join up."""
    task = create_task("recommender", PADDED)
    data = task.load_data("", 0)
    model = task.build_model(data.info).eval()
    with torch.no_grad():
        whole = task.evaluate(model, data.val, 4096)
        small = task.metrics(task.evaluate_parts(model, data.val, 1))  # evaluates at least 512 rows at once
        half = data.val["target"].shape[0] // 2
        parts = [
            task.evaluate_parts(model, {k: v[s] for k, v in data.val.items()}, 64)
            for s in (slice(0, half), slice(half, None))
        ]
    joined = {k: torch.cat([parts[0].values[k], parts[1].values[k]]) for k in parts[0].values}
    summed = task.metrics(type(parts[0])(sums={}, values=joined))
    flips = 2.0 / data.val["target"].shape[0]  # float matmuls of other shapes may swap a near-tie or two
    for name, value in whole.items():
        assert small[name] == pytest.approx(value, abs=flips) and summed[name] == pytest.approx(value, abs=flips)

    def exact(batch):  # integer scores, the same at any batch size
        n = data.info["n_items"]
        return ((batch["seq"][:, -1:] * 7 + torch.arange(n)) % 13).double()

    by_one = ranking_report(exact, data.val, 1, task.history)
    assert ranking_report(exact, data.val, 7, task.history) == pytest.approx(by_one, abs=1e-8)
    assert ranking_report(exact, data.val, 100_000, task.history) == pytest.approx(by_one, abs=1e-8)
    assert set(whole) == {
        f"{m}@10_{p}" for m in ("hr", "ndcg") for p in ("full_filtered", "full_unfiltered", "sampled100_unseen")
    }


def test_baseline_uses_the_same_protocols_and_the_ceiling_only_the_one_it_is_computed_for():
    data = create_task("recommender", PADDED).load_data("", 0)
    assert set(data.baseline) == {
        f"{m}@10_{p}" for m in ("hr", "ndcg") for p in ("full_filtered", "full_unfiltered", "sampled100_unseen")
    }
    assert set(data.ceiling) == {"hr@10_full_unfiltered", "ndcg@10_full_unfiltered"}
    assert data.baseline["hr@10_full_filtered"] >= data.baseline["hr@10_full_unfiltered"]  # fewer above


# ---- the padding-free loss


def test_compacted_positions_give_the_padded_loss_and_gradients_over_several_chunks():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(60, 8, generator=g, requires_grad=True)
    table = torch.randn(31, 8, generator=g, requires_grad=True)
    targets = torch.randint(0, 31, (60,), generator=g)
    targets[torch.rand(60, generator=g) < 0.6] = -1
    real = int((targets >= 0).sum())
    want = chunked_softmax_cross_entropy(hidden, table, targets, chunk_elements=31 * 7)
    want.backward()
    want_grads = hidden.grad.clone(), table.grad.clone()
    hidden.grad = table.grad = None
    for bound in (real, real + 5):
        h, t, overflow = compact_positions(hidden, targets, bound)
        assert h.shape == (bound, 8) and not overflow and (t[:real] >= 0).all() and (t[real:] == -1).all()
        got = chunked_softmax_cross_entropy(h, table, t, chunk_elements=31 * 7)
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(hidden.grad, want_grads[0], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(table.grad, want_grads[1], rtol=1e-5, atol=1e-7)
        hidden.grad = table.grad = None
    assert compact_positions(hidden, targets, real - 1)[2]  # a bound too small is flagged


@pytest.mark.parametrize("count_on_host", [True, False], ids=["exact", "bound"])
@pytest.mark.parametrize("loss", ["full", "sampled"])
def test_task_loss_without_padding_equals_the_padded_loss(loss, count_on_host):
    """Both ways of dropping padding (the exact count on the CPU, the host's bound elsewhere) give the loss
    and gradients of the padded batch."""
    task = create_task("recommender", {**PADDED, "loss": loss, "sampled_negatives": 50, "dropout": 0.0})
    task.count_on_host = count_on_host
    data = task.load_data("", 0)
    batch = {k: v[5:37] for k, v in data.train.items()}
    rows, width = batch["seq"].shape
    assert task.loss_bounds[rows] < 0.7 * rows * width  # the bound really drops padding here
    model = task.build_model(data.info)

    def run(bounds):
        task.loss_bounds = bounds
        model.zero_grad()
        torch.manual_seed(3)  # the sampled softmax draws the same negatives both times
        value = task.loss(model, batch)
        value.backward()
        return value.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    bounds = task.loss_bounds
    got, got_grads = run(bounds)
    want, want_grads = run(None)  # no bound: the loss runs over every position, padding ignored
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-5, atol=1e-7, msg=name)


def test_on_the_cpu_the_loss_runs_over_the_real_positions_in_a_bucketed_buffer(monkeypatch):
    """By default, on the CPU (where counting waits for nothing), the full softmax sees the real positions in a buffer
    of the next bucket size (few distinct shapes for oneDNN's cache), not the host's bound (here the whole batch)."""
    from core.tasks.recommender import task as recommender

    task = create_task("recommender", PADDED)
    data = task.load_data("", 0)
    model = task.build_model(data.info)
    batch = {k: v[:32] for k, v in data.train.items()}
    seen, original = [], recommender.chunked_softmax_cross_entropy

    def spy(hidden, table, targets, *a, **k):
        seen.append((hidden.shape[0], int((targets >= 0).sum())))
        return original(hidden, table, targets, *a, **k)

    monkeypatch.setattr(recommender, "chunked_softmax_cross_entropy", spy)
    task.loss(model, batch).backward()
    real = int((batch["target"] > 0).sum())
    assert seen == [(recommender.position_bucket(real, batch["target"].numel()), real)]
    assert real <= seen[0][0] < batch["target"].numel()


def test_a_batch_fuller_than_the_bound_gives_nan_not_a_quietly_smaller_loss():
    task = create_task("recommender", PADDED)
    task.count_on_host = False  # the bound, as on an accelerator (on the CPU the count is exact)
    data = task.load_data("", 0)
    model = task.build_model(data.info)
    full = {"seq": torch.randint(1, 201, (4, 40)), "target": torch.randint(1, 201, (4, 40))}
    task.loss_bounds = task.loss_bounds.copy()
    task.loss_bounds[4] = 100  # fewer than the 160 real positions
    assert torch.isnan(task.loss(model, full))


@pytest.mark.parametrize("loss", ["auto", "sampled"])
def test_the_loss_reads_nothing_back_from_the_device(monkeypatch, loss):
    """Where the batch is not on the host, the bound comes from the host and compaction is fixed-size: no
    .item(), bool() or int() of a tensor; auto's choice reads the catalogue's size from the model's shape."""
    import core

    task = create_task("recommender", {**PADDED, "loss": loss, "sampled_negatives": 50})
    task.count_on_host = False  # as on an accelerator
    data = task.load_data("", 0)
    model = task.build_model(data.info)
    batch = {k: v[:32] for k, v in data.train.items()}
    core_dir = str(Path(core.__file__).parent)
    reads = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero"):
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _original=original, _name=name, **k):
            if sys._getframe(1).f_code.co_filename.startswith(core_dir):
                reads.append(_name)
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    task.loss(model, batch).backward()
    assert reads == []


def test_resume_is_exact_with_the_padding_free_loss(tmp_path):
    options = {**PADDED, "dropout": 0.1}
    common = dict(task_options=options, device="cpu", batch_size=16, log_interval=2, eval_interval=0)
    straight = train(RunConfig.for_task("recommender", max_steps=8, out_dir=str(tmp_path / "a"), **common))
    first = train(RunConfig.for_task("recommender", max_steps=4, out_dir=str(tmp_path / "b"), **common))
    resumed = Trainer(
        RunConfig.for_task("recommender", max_steps=8, out_dir=str(tmp_path / "c"), **common),
        resume_from=first.checkpoint,
    ).run()
    assert straight.status == resumed.status == "completed", (straight.message, resumed.message)
    assert resumed.final_loss == straight.final_loss
    assert resumed.metrics == straight.metrics


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: its sync debug mode raises on a sync")
def test_the_padding_free_loss_makes_no_cuda_sync():
    task = create_task("recommender", PADDED)
    data = task.load_data("", 0)
    model = task.build_model(data.info).cuda()
    batch = {k: v[:32].cuda() for k, v in data.train.items()}
    task.loss(model, batch).backward()  # warm-up: lazy initialisation may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        task.loss(model, batch).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_counting_by_column_blocks_equals_the_whole_comparison(monkeypatch):
    from core.tasks.recommender import task as recommender

    gen = torch.Generator().manual_seed(5)
    scores = torch.randint(0, 7, (6, 1001), generator=gen).float()  # many ties: >= must count them
    target = scores[:, 3].clone()
    whole = (scores >= target.unsqueeze(1)).sum(dim=1)
    monkeypatch.setattr(recommender, "COUNT_BLOCK", 6 * 64)  # 64 columns a block, the last one short
    assert torch.equal(recommender.count_at_least(scores, target), whole)


def test_evaluation_rows_keep_the_scores_within_the_budget():
    from core.tasks.recommender.task import EVAL_SCORES, score_rows

    assert score_rows(1000, 4096) == 4096  # a small catalogue: the asked batch
    assert score_rows(1_000_000, 4096) * 1_000_000 <= EVAL_SCORES  # 1M items: 67 rows, 256 MB of scores
    assert score_rows(10**9, 512) == 1  # never zero rows
