"""Ranking: metrics by hand, losses, query padding, and training that beats random order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.config import RunConfig
from core.tasks import create_task
from core.tasks.ranking import listwise_softmax_loss, pad_queries, ranking_metrics, ranknet_loss
from core.engine.trainer import train

SMALL = {"queries": 1500, "docs": 16, "features": 8}


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


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


def test_pad_queries_groups_rows_by_query():
    query = np.array([1, 0, 1, 1])
    x, y = pad_queries(query, np.arange(8, dtype=np.float32).reshape(4, 2), np.array([3, 2, 1, 0]))
    assert y.tolist() == [[2, -1, -1], [3, 1, 0]]
    assert x[1, 1].tolist() == [4.0, 5.0]


@pytest.mark.parametrize("precision,loss", [("fp32", "listwise"), ("bf16", "listwise"), ("fp32", "ranknet")])
def test_default_hyperparameters_beat_random_order(tmp_path, precision, loss):
    options = {**SMALL, "loss": loss}
    data = create_task("ranking", options).load_data("", 0)
    assert data.ceiling["ndcg@10"] > data.baseline["ndcg@10"] + 0.3
    events = []
    config = RunConfig.for_task("ranking", task_options=options, precision=precision, device="cpu",
                                max_steps=60, out_dir=str(tmp_path))
    ended = train(config, sink=events.append)
    assert ended.status == "completed", ended.message
    assert events[0].autocast_dtype == ("bfloat16" if precision == "bf16" else "float32")
    assert ended.metrics["ndcg@10"] > data.baseline["ndcg@10"] + 0.25, (ended.metrics, data.baseline)
    assert ended.metrics["mrr"] > data.baseline["mrr"]


def test_trains_from_a_parquet_file(tmp_path):
    from core.cli.data import synthetic_table
    from core.data.importers import write_table

    path = write_table(synthetic_table("ranking", 2000, seed=1), tmp_path / "rank.parquet")
    data = create_task("ranking").load_data(str(path), 0)
    assert data.info == {"features": 16, "docs_per_query": 20} and data.ceiling == {}
    ended = train(RunConfig.for_task("ranking", data=str(path), device="cpu", max_steps=3, batch_size=8,
                                     out_dir=str(tmp_path / "run")))
    assert ended.status == "completed", ended.message
