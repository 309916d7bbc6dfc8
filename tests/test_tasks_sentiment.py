"""Sentiment: tokenizer, AUC, planted posterior, and training that beats the majority class."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from core.config import RunConfig
from core.data.reviews import generate_reviews
from core.data.tokenizer import hashed_tokens
from core.engine.trainer import Trainer, train
from core.tasks import create_task
from core.tasks.sentiment.task import roc_auc

SMALL = {"reviews": 6000}


def test_tokenizer_is_stable_lowercased_and_orders_bigrams():
    text = pa.array(["Not great, really!", "not GREAT really", "great not", ""])
    tokens = hashed_tokens(text, 1 << 20, 8)
    assert tokens[0].tolist() == tokens[1].tolist()  # case and punctuation do not matter
    assert (tokens[0, :5] > 0).all() and (tokens[0, 5:] == 0).all()  # not, great, not_great, really, great_really
    assert tokens[2, 2] != tokens[0, 2]  # "great not" is not "not great"
    assert (tokens[3] == 0).all()
    assert tokens[0, 0] == hashed_tokens(pa.array(["not"]), 1 << 20, 1)[0, 0]  # CRC32: same ids every run


def test_roc_auc_matches_pairwise_definition_with_ties():
    scores = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4])
    labels = torch.tensor([0, 0, 1, 1, 1])
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p in scores[labels == 1] for n in scores[labels == 0]]
    assert roc_auc(scores, labels) == pytest.approx(np.mean(pairs))
    assert roc_auc(scores, torch.zeros(5, dtype=torch.long)) == 0.5


def test_planted_posterior_is_calibrated():
    reviews = generate_reviews(40_000, seed=2)
    confident = reviews.posterior > 0.8
    assert reviews.label[confident].mean() == pytest.approx(reviews.posterior[confident].mean(), abs=0.02)
    assert "not" in " ".join(reviews.text.slice(0, 200).to_pylist()).split()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_default_hyperparameters_beat_the_majority_class(tmp_path, precision):
    events = []
    config = RunConfig.for_task(
        "sentiment", task_options=SMALL, precision=precision, device="cpu", out_dir=str(tmp_path)
    )
    trainer = Trainer(config, sink=events.append)
    ended = trainer.run()
    data = trainer.data  # the run's own load: its baseline and ceiling
    assert data.ceiling["accuracy"] > data.baseline["accuracy"] + 0.1
    assert ended.status == "completed", ended.message
    assert events[0].autocast_dtype == ("bfloat16" if precision == "bf16" else "float32")
    assert ended.metrics["accuracy"] > data.baseline["accuracy"] + 0.07, (ended.metrics, data.baseline)
    assert ended.metrics["roc_auc"] > 0.7


def test_trains_from_a_csv_with_word_labels(tmp_path):
    path = tmp_path / "reviews.csv"
    rows = (
        ["text,label"]
        + [f'"a great, clear lesson {i}",positive' for i in range(40)]
        + [f'"boring and confusing {i}",Negative' for i in range(40)]
    )
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = create_task("sentiment").load_data(str(path), 0)
    assert data.info["positive_rate"] == pytest.approx(0.5, abs=0.1) and data.ceiling == {}
    ended = train(
        RunConfig.for_task(
            "sentiment", data=str(path), device="cpu", batch_size=8, max_steps=20, out_dir=str(tmp_path / "run")
        )
    )
    assert ended.status == "completed" and ended.metrics["accuracy"] == 1.0
