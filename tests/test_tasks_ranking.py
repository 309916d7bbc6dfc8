"""Ranking: metrics by hand, losses, query padding, and training that beats random order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.config import RunConfig
from core.engine.trainer import train
from core.tasks import create_task
from core.tasks.ranking.losses import listwise_softmax_loss, ranknet_loss
from core.tasks.ranking.task import flat_ranking_metrics, list_width, pack_queries, ranking_metrics

SMALL = {"queries": 1500, "docs": 16, "features": 8}


def test_metrics_match_hand_computation():
    scores = torch.tensor([[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]])
    label = torch.tensor([[0, 2, 1, -1], [0, 0, 0, 0]])  # second query has no relevant doc: left out
    ndcg, rr, count = ranking_metrics(scores, label)
    dcg = 3 / np.log2(3) + 1 / np.log2(4)
    idcg = 3 / np.log2(2) + 1 / np.log2(3)
    assert int(count) == 1
    assert float(ndcg) == pytest.approx(dcg / idcg, rel=1e-5) and float(rr) == pytest.approx(0.5)


def test_padding_is_never_ranked_or_paired():
    label = torch.tensor([[1, 0, -1]])
    padded_high = torch.tensor([[0.0, 1.0, 99.0]])
    ndcg, rr, _ = ranking_metrics(padded_high, label)
    assert float(rr) == pytest.approx(0.5)  # the padded doc did not take rank 1
    assert torch.isfinite(listwise_softmax_loss(padded_high, label))
    good = ranknet_loss(torch.tensor([[1.0, 0.0, -50.0]]), label)
    bad = ranknet_loss(torch.tensor([[0.0, 1.0, -50.0]]), label)
    assert good < bad


def test_pack_queries_groups_rows_by_query():
    query = np.array([1, 0, 1, 1])
    packed, _ = pack_queries(
        query, {"x": np.arange(8, dtype=np.float32).reshape(4, 2), "label": np.array([3, 2, 1, 0])}, 3
    )
    x, y = packed["x"], packed["label"]
    assert y.tolist() == [[2, -1, -1], [3, 1, 0]]
    assert x[1, 1].tolist() == [4.0, 5.0]


def test_list_width_bounds_padding_and_splits_only_when_needed():
    assert list_width(np.full(100, 20)) == 20  # uniform queries: whole, as before
    assert list_width(np.array([20_000] + [1] * 6_000)) == 8  # padding to 20,000 would be 6,001 x 20,000 cells
    assert list_width(np.array([5_000] * 10)) == 256  # no query list longer than MAX_LIST
    sizes = np.array([3_000] + [1] * 50_000)
    width = list_width(sizes)
    assert (-(-sizes // width) * width).sum() <= 4 * sizes.sum()


@pytest.mark.parametrize("width", [2, 3, 5])
def test_evaluation_of_split_queries_equals_ranking_them_whole(width):
    rng = np.random.default_rng(4)
    query = rng.integers(0, 40, 600)
    label = rng.integers(0, 4, 600) * (rng.random(600) < 0.4)
    scores = rng.normal(size=600).astype(np.float32)  # no ties: splitting shuffles a query's candidates
    whole, _ = pack_queries(query, {"score": scores, "label": label}, width=int(np.bincount(query).max()))
    expected = ranking_metrics(torch.from_numpy(whole["score"]), torch.from_numpy(whole["label"]))
    lists, qid = pack_queries(query, {"score": scores, "label": label}, width=width)
    assert lists["label"].shape[1] == width and len(qid) > 40
    real = lists["label"] >= 0
    got = flat_ranking_metrics(
        torch.from_numpy(np.broadcast_to(qid[:, None], real.shape)[real]),
        torch.from_numpy(lists["score"][real]),
        torch.from_numpy(lists["label"][real]),
    )
    for a, b in zip(got, expected, strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-6)
    tied = torch.from_numpy(whole["score"]).round(decimals=1)  # ties: both break them by position in the query
    real = whole["label"] >= 0
    qids = np.broadcast_to(np.arange(len(whole["label"]))[:, None], real.shape)[real]
    got = flat_ranking_metrics(
        torch.from_numpy(qids), tied[torch.from_numpy(real)], torch.from_numpy(whole["label"][real])
    )
    for a, b in zip(got, ranking_metrics(tied, torch.from_numpy(whole["label"])), strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-6)


@pytest.mark.parametrize(
    "precision,loss",
    [("fp32", "lambda"), ("bf16", "lambda"), ("fp32", "listwise"), ("fp32", "ranknet"), ("fp32", "approxndcg")],
)
def test_default_hyperparameters_beat_random_order(tmp_path, precision, loss):
    options = {**SMALL, "loss": loss}
    data = create_task("ranking", options).load_data("", 0)
    assert data.ceiling["ndcg@10"] > data.baseline["ndcg@10"] + 0.3
    events = []
    config = RunConfig.for_task(
        "ranking", task_options=options, precision=precision, device="cpu", max_steps=60, out_dir=str(tmp_path)
    )
    ended = train(config, sink=events.append)
    assert ended.status == "completed", ended.message
    assert events[0].autocast_dtype == ("bfloat16" if precision == "bf16" else "float32")
    # 8 noisy views of the hidden factors cap what any model reaches well below the ceiling (about 0.72)
    assert ended.metrics["ndcg@10"] > data.baseline["ndcg@10"] + 0.15, (ended.metrics, data.baseline)
    assert ended.metrics["mrr"] > data.baseline["mrr"]


def test_trains_from_a_parquet_file(tmp_path):
    from core.cli.data import synthetic_table
    from core.data.importers import write_table

    path = write_table(synthetic_table("ranking", 2000, seed=1), tmp_path / "rank.parquet")
    data = create_task("ranking").load_data(str(path), 0)
    assert data.info["features"] == 136 and set(data.info) == {"features", "docs_per_query", "normalizer"}
    assert data.ceiling == {}
    ended = train(
        RunConfig.for_task(
            "ranking", data=str(path), device="cpu", max_steps=3, batch_size=8, out_dir=str(tmp_path / "run")
        )
    )
    assert ended.status == "completed", ended.message


def test_split_queries_evaluate_the_same_when_shared_out_by_slices(tmp_path):
    from core.engine.evaluation import rank_slice
    from core.tasks.base import EvalParts

    rows = [f"big,d{i},{i % 3},{(i * 7919) % 101 / 10},{i % 5}\n" for i in range(3000)]
    rows += [f"q{i},d{j},{(i + j) % 2},{j / 3},{i % 4}\n" for i in range(300) for j in range(1 + i % 3)]
    path = tmp_path / "skewed.csv"
    path.write_text("query_id,doc_id,label,f1,f2\n" + "".join(rows))
    task = create_task("ranking")
    for seed in range(4):
        data = task.load_data(str(path), seed)
        split = data.val if "qid" in data.val else data.test if "qid" in data.test else None
        if split is not None:
            break
    assert split is not None and split["label"].shape[1] < 3000
    torch.manual_seed(0)
    model = task.build_model(data.info).eval()  # no dropout: both evaluations score alike
    with torch.no_grad():
        whole = task.evaluate(model, split, 64)
        parts = [task.evaluate_parts(model, rank_slice(split, rank, 3), 64) for rank in range(3)]
    joined = EvalParts(sums={}, values={k: torch.cat([p.values[k] for p in parts]) for k in parts[0].values})
    assert task.metrics(joined) == pytest.approx(whole)
    assert 0.0 < whole["ndcg@10"] <= 1.0
