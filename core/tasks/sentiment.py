"""Review sentiment: a fastText-style classifier (mean of hashed unigram + bigram embeddings, small MLP head).

Text is tokenized with core.data.tokenizer (no download), so a split is just a padded (N, max_tokens)
matrix of bucket ids plus labels. Metrics: accuracy and ROC AUC. Baseline: the training set's majority
class (AUC 0.5). Ceiling (synthetic data): the exact Bayes posterior of core.data.reviews.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn
from torch.nn import functional as F

from core.data.importers import Column, read_table, require_rows
from core.data.reviews import generate_reviews
from core.data.tokenizer import hashed_tokens
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices

POSITIVE_LABELS = ("1", "positive", "pos", "true")
NEGATIVE_LABELS = ("0", "negative", "neg", "false")
REVIEW_COLUMNS = [Column("text", "text"), Column("label", "label", choices=POSITIVE_LABELS + NEGATIVE_LABELS)]


class BagClassifier(nn.Module):
    """EmbeddingBag (mean, padding 0 ignored) -> optional hidden layer -> 2 logits."""

    def __init__(self, buckets: int, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.bag = nn.EmbeddingBag(buckets, dim, mode="mean", padding_idx=0)
        head: list[nn.Module] = [nn.Dropout(dropout)]
        if hidden:
            head += [nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout)]
        head.append(nn.Linear(hidden or dim, 2))
        self.head = nn.Sequential(*head)
        nn.init.normal_(self.bag.weight, std=0.1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Padded bucket ids (B, T) -> class logits (B, 2)."""
        return self.head(self.bag(tokens))


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney U, tied scores get average ranks); 0.5 when one class is absent."""
    scores = scores.double()
    order = scores.argsort()
    _, inverse, counts = torch.unique_consecutive(scores[order], return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    ranks = torch.empty_like(scores)
    ranks[order] = ((ends - counts + 1 + ends) / 2)[inverse]
    positives = labels.bool()
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def read_reviews(path: str) -> tuple[pa.ChunkedArray, np.ndarray]:
    """Texts and 0/1 labels from file(s); labels may be 0/1, true/false, pos/neg or positive/negative."""
    table = read_table(path, REVIEW_COLUMNS)
    label = pc.is_in(table.column("label"), value_set=pa.array(POSITIVE_LABELS))
    return table.column("text"), label.to_numpy(zero_copy_only=False).astype(np.int64)


def split_rows(arrays: dict[str, torch.Tensor], seed: int) -> tuple[dict, dict, dict]:
    """80 / 10 / 10 split of rows by a seeded permutation."""
    n = len(next(iter(arrays.values())))
    perm = torch.from_numpy(np.random.default_rng([seed, 9]).permutation(n))
    cut1, cut2 = int(0.8 * n), int(0.9 * n)
    parts = (perm[:cut1], perm[cut1:cut2], perm[cut2:])
    return tuple({k: v[p] for k, v in arrays.items()} for p in parts)


class SentimentTask(Task):
    name = "sentiment"
    description = "Review sentiment: hashed word + bigram EmbeddingBag classifier (accuracy, ROC AUC)"
    options = (
        TaskOption("dim", 32, "embedding width", 2, 4096),
        TaskOption("hidden", 32, "hidden units of the head; 0 = linear head", 0, 65536),
        TaskOption("dropout", 0.1, "dropout in the head", 0.0, 0.9),
        TaskOption("buckets", 1 << 16, "hash buckets for words and bigrams", 16, 1 << 26),
        TaskOption("max_tokens", 96, "tokens kept per review (words and bigrams interleaved)", 2, 100_000),
        TaskOption("reviews", 20_000, "synthetic: reviews generated", 100, 100_000_000),
        TaskOption("label_noise", 0.05, "synthetic: fraction of labels flipped", 0.0, 0.5),
    )
    # Two epochs with cosine decay: hashed bigrams of filler words let the model memorise after that.
    defaults = {"lr": 1e-2, "batch_size": 128, "epochs": 2, "optimizer": "adamw", "schedule": "cosine"}
    primary_metric = "accuracy"
    tokens_key = "tokens"  # throughput can count hashed words + bigrams (non-zero ids), not just reviews

    def load_data(self, data_path: str, seed: int) -> TaskData:
        o = self.opts
        if data_path:
            text, label = read_reviews(data_path)
            oracle = None
        else:
            # the hashed (reviews, max_tokens) int64 matrix, and ~24 words a review while generating
            self.check_synthetic_size(o["reviews"] * (o["max_tokens"] * 8 + 24 * 8 * 4), ("reviews", "max_tokens"))
            reviews = generate_reviews(o["reviews"], seed, label_noise=o["label_noise"])
            text, label, oracle = reviews.text, reviews.label, torch.from_numpy(reviews.posterior)
        arrays = {"tokens": hashed_tokens(text, o["buckets"], o["max_tokens"]), "label": torch.from_numpy(label)}
        if oracle is not None:
            arrays["posterior"] = oracle
        train, val, test = split_rows(arrays, seed)
        if data_path:
            require_rows(data_path, val, "validation", "at least 10 reviews are needed (10% validate)")
        ceiling = {}
        if oracle is not None:
            posterior = val.pop("posterior")
            train.pop("posterior"), test.pop("posterior")
            expected = torch.maximum(posterior, 1 - posterior).mean()
            ceiling = {"accuracy": float(expected), "roc_auc": roc_auc(posterior, val["label"])}
        majority = int(train["label"].float().mean() >= 0.5)
        baseline = {"accuracy": float((val["label"] == majority).float().mean()), "roc_auc": 0.5}
        info = {"buckets": o["buckets"], "positive_rate": float(train["label"].float().mean())}
        return TaskData(train=train, val=val, test=test, info=info, ceiling=ceiling, baseline=baseline)

    def build_model(self, info: dict) -> nn.Module:
        o = self.opts
        return BagClassifier(info.get("buckets", o["buckets"]), o["dim"], o["hidden"], o["dropout"])

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(batch["tokens"]).float(), batch["label"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        label = split["label"]
        total_loss = torch.zeros((), dtype=torch.float64, device=label.device)
        correct = torch.zeros((), dtype=torch.float64, device=label.device)
        margins = [torch.zeros(0, device=label.device)]
        for batch in iter_slices(split, max(batch_size, 4096)):
            logits = model(batch["tokens"]).float()
            total_loss += F.cross_entropy(logits, batch["label"], reduction="sum").double()
            correct += (logits.argmax(1) == batch["label"]).sum().double()
            margins.append(logits[:, 1] - logits[:, 0])
        rows = torch.tensor(float(label.shape[0]), dtype=torch.float64, device=label.device)
        # ROC AUC ranks all rows together: it needs every row's margin, not a sum.
        return EvalParts(sums={"loss": total_loss, "correct": correct, "rows": rows},
                         values={"margin": torch.cat(margins), "label": label})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        n = max(float(parts.sums["rows"]), 1.0)
        return {"loss": float(parts.sums["loss"]) / n, "accuracy": float(parts.sums["correct"]) / n,
                "roc_auc": roc_auc(parts.values["margin"], parts.values["label"])}
