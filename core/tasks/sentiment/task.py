"""Review sentiment: a fastText-style classifier over hashed n-grams (small MLP head), per-bucket weights fit
on the training split. Metrics: accuracy and ROC AUC; baseline the majority class; ceiling the Bayes posterior
(synthetic data). Defaults from benchmarks/quality_sentiment.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn
from torch.nn import functional as F

from core.data.importers import Column, require_rows
from core.data.reviews import generate_reviews, reviews_table
from core.data.splits import carve, read_splits, seeded_thirds
from core.data.tokenizer import hashed_tokens
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, confusion_section, iter_slices
from core.tasks.serving import TaskServing

POSITIVE_LABELS = ("1", "positive", "pos", "true")
NEGATIVE_LABELS = ("0", "negative", "neg", "false")
REVIEW_COLUMNS = [Column("text", "text"), Column("label", "label", choices=POSITIVE_LABELS + NEGATIVE_LABELS)]


def duplicate_counts(tokens: torch.Tensor, portable: bool = False) -> torch.Tensor:
    """How often each entry's id occurs in its row (B, T), by a sort per row: no Python loop, no host sync.
    `portable` compares ids pairwise, (B, T, T), as ONNX has no searchsorted."""
    if portable:
        return (tokens.unsqueeze(2) == tokens.unsqueeze(1)).sum(-1)
    ordered = tokens.sort(dim=1).values.contiguous()
    flat = tokens.contiguous()
    return torch.searchsorted(ordered, flat, right=True) - torch.searchsorted(ordered, flat)


def document_frequency(tokens: torch.Tensor, buckets: int) -> torch.Tensor:
    """(buckets,) number of rows each bucket id occurs in (padding 0 included; it is never used)."""
    if tokens.numel() == 0:
        return torch.zeros(buckets, dtype=torch.int64)
    ordered = tokens.sort(dim=1).values
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return torch.bincount(ordered[first].long(), minlength=buckets)


def fit_bucket_weights(tokens: torch.Tensor, buckets: int, idf: bool = True, min_df: int = 1) -> torch.Tensor:
    """Every bucket's weight: smoothed idf (1 without `idf`), 0 below `min_df` rows and for padding."""
    df = document_frequency(tokens, buckets)
    weights = torch.log((1 + tokens.shape[0]) / (1 + df.double())) + 1 if idf else torch.ones(buckets).double()
    weights[df < min_df] = 0.0
    weights[0] = 0.0
    return weights.float()


class BagClassifier(nn.Module):
    """Weighted bag of hashed n-gram embeddings (`bucket_weight`, `sublinear` tf, pooled by `pooling`) ->
    optional hidden layer -> 2 logits; `token_dropout` drops whole tokens while training."""

    bucket_weight: torch.Tensor  # a buffer

    def __init__(
        self,
        buckets: int,
        dim: int,
        hidden: int,
        dropout: float,
        pooling: str = "mean",
        sublinear: bool = True,
        token_dropout: float = 0.0,
        bucket_weight: torch.Tensor | None = None,
    ):
        super().__init__()
        self.bag = nn.EmbeddingBag(buckets, dim, mode="sum", padding_idx=0)
        self.pooling, self.sublinear, self.token_dropout = pooling, sublinear, token_dropout
        weights = torch.ones(buckets) if bucket_weight is None else bucket_weight.float().clone()
        weights[0] = 0.0
        self.register_buffer("bucket_weight", weights)
        head: list[nn.Module] = [nn.Dropout(dropout)]
        if hidden:
            head += [nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout)]
        head.append(nn.Linear(hidden or dim, 2))
        self.head = nn.Sequential(*head)
        nn.init.normal_(self.bag.weight, std=0.1)

    def token_weights(self, tokens: torch.Tensor, portable: bool = False) -> torch.Tensor:
        weights = self.bucket_weight[tokens.long()]
        if self.sublinear:
            counts = duplicate_counts(tokens, portable).clamp(min=1).float()
            weights = weights * (1 + torch.log(counts)) / counts
        if self.training and self.token_dropout > 0:
            weights = weights * (torch.rand_like(weights) >= self.token_dropout)
        return weights

    def forward(self, tokens: torch.Tensor, portable: bool = False) -> torch.Tensor:
        """Padded bucket ids (B, T) -> class logits (B, 2); `portable`: ONNX's ops only (duplicate_counts)."""
        return self.logits(tokens, self.token_weights(tokens, portable))

    def logits(self, tokens: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Class logits (B, 2) of tokens (B, T) pooled with per-token `weights` (B, T)."""
        pooled = self.bag(tokens, per_sample_weights=weights.to(self.bag.weight.dtype))
        if self.pooling == "mean":
            norm = weights.sum(1)
        elif self.pooling == "sqrt":
            norm = (weights > 0).sum(1).float().sqrt()
        elif self.pooling == "l2":
            norm = weights.square().sum(1).sqrt()
        else:
            norm = torch.ones_like(weights[:, 0])
        return self.head(pooled / norm.clamp(min=1e-6).unsqueeze(1).to(pooled.dtype))


ROC_POINTS = 200  # points of the report's ROC curve at most (the exact curve has one per distinct score)
HISTOGRAM_BINS = 10


def roc_curve(scores: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact ROC curve (fpr, tpr, threshold); empty tensors when a class is absent."""
    scores, positive = scores.double(), labels.bool()
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        empty = torch.zeros(0, dtype=torch.float64, device=scores.device)
        return empty, empty, empty
    order = scores.argsort(descending=True)
    ordered, hits = scores[order], positive[order].double()
    last = torch.ones_like(ordered, dtype=torch.bool)  # the last row of each run of tied scores
    last[:-1] = ordered[1:] != ordered[:-1]
    tp, fp = hits.cumsum(0)[last], (1 - hits).cumsum(0)[last]
    zero = torch.zeros(1, dtype=torch.float64, device=scores.device)
    return (
        torch.cat([zero, fp / n_neg]),
        torch.cat([zero, tp / n_pos]),
        torch.cat([zero + float("inf"), ordered[last]]),
    )


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve (tied scores count half); 0.5 when one class is absent."""
    fpr, tpr, _ = roc_curve(scores, labels)
    return float(torch.trapezoid(tpr, fpr)) if len(fpr) else 0.5


def thin_curve(x: torch.Tensor, y: torch.Tensor, points: int) -> torch.Tensor:
    """Indices of at most `points` points of a monotone curve, spread along x + y, ends kept."""
    n = x.shape[0]
    if n <= points:
        return torch.arange(n, device=x.device)
    along = (x + y).contiguous()
    levels = torch.linspace(float(along[0]), float(along[-1]), points - 2, dtype=along.dtype, device=x.device)
    chosen = torch.searchsorted(along, levels).clamp(max=n - 1)
    ends = torch.tensor([0, n - 1], device=x.device)
    return torch.unique(torch.cat([chosen, ends]))


def split_indices(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row numbers of the seeded 80 / 10 / 10 train / validation / test split (benchmarks split by them too)."""
    train, val, test = (torch.from_numpy(p) for p in seeded_thirds(n, seed, 9))
    return train, val, test


def split_rows(arrays: dict[str, torch.Tensor], seed: int) -> list[dict]:
    """The rows of split_indices."""
    return [{k: v[p] for k, v in arrays.items()} for p in split_indices(len(arrays["label"]), seed)]


class SentimentTask(Task):
    name = "sentiment"
    description = "Review sentiment: hashed words, negated words and bigrams, EmbeddingBag + MLP (accuracy, ROC AUC)"
    options = (
        TaskOption("dim", 8, "embedding width", 2, 4096),
        TaskOption("hidden", 32, "hidden units of the head; 0 = linear head", 0, 65536),
        TaskOption("dropout", 0.1, "dropout in the head", 0.0, 0.9),
        TaskOption("buckets", 1 << 19, "hash buckets for words, negated words and bigrams", 16, 1 << 26),
        TaskOption("max_tokens", 256, "tokens kept per review (words and bigrams interleaved)", 2, 100_000),
        TaskOption(
            "negation_scope",
            3,
            "words after a negator (not, never, didn't, ...) in the same clause read as negated; 0 = off",
            0,
            100,
        ),
        TaskOption(
            "weighting",
            "none",
            "token weights: tfidf (sublinear tf x idf fit on the training split) or none",
            choices=("tfidf", "none"),
        ),
        TaskOption(
            "pooling",
            "mean",
            "weighted sum of embeddings divided by: the weights' sum (mean), the "
            "square root of the token count (sqrt), their L2 norm (l2) or 1 (sum)",
            choices=("mean", "sqrt", "l2", "sum"),
        ),
        TaskOption(
            "min_df",
            1,
            "buckets found in fewer training reviews than this are ignored (1: those never seen in training)",
            1,
            1_000_000,
        ),
        TaskOption("token_dropout", 0.0, "fraction of a review's tokens dropped at each training step", 0.0, 0.9),
        TaskOption("reviews", 20_000, "synthetic: reviews generated", 100, 100_000_000, synthetic=True),
        TaskOption("label_noise", 0.05, "synthetic: fraction of labels flipped", 0.0, 0.5, synthetic=True),
    )
    # chosen with benchmarks/quality_sentiment.py
    defaults = {"lr": 1e-2, "batch_size": 64, "epochs": 2, "optimizer": "adamw", "schedule": "cosine"}
    primary_metric = "accuracy"
    tokens_key = "tokens"  # throughput can count hashed words + bigrams (non-zero ids), not just reviews
    synthetic_file = True

    def synthetic_table(self, rows: int, seed: int):
        """`rows` synthetic reviews with their labels, in the reviews file format."""
        return reviews_table(generate_reviews(rows, seed))

    @classmethod
    def serving_class(cls) -> type[TaskServing]:
        from core.tasks.sentiment.serving import SentimentTaskServing

        return SentimentTaskServing

    def load_data(self, data_path: str, seed: int) -> TaskData:
        o = self.opts
        notes: list[str] = []
        oracle = None
        if data_path:
            read = read_splits(self.data_source(data_path), REVIEW_COLUMNS)
            tables, notes = read.tables, read.notes
            if not read.given:  # one data set: the seeded 80 / 10 / 10 split
                train, val, test = split_rows(self._rows(tables.pop("all")), seed)
                require_rows(data_path, val, "validation", "at least 10 reviews are needed (10% validate)")
            else:  # given splits, used as given (see core.data.splits)
                train, val, test = self._given_splits(tables, seed)
                require_rows(data_path, val, "validation", "give validation data, or at least 2 training reviews")
        else:
            # the hashed (reviews, max_tokens) int32 matrix, and ~30 words a review while generating
            self.check_synthetic_size(o["reviews"] * (o["max_tokens"] * 4 + 30 * 8 * 4), ("reviews", "max_tokens"))
            reviews = generate_reviews(o["reviews"], seed, label_noise=o["label_noise"])
            oracle = torch.from_numpy(reviews.posterior)
            arrays = {
                "tokens": self.tokens(reviews.text),
                "label": torch.from_numpy(reviews.label),
                "posterior": oracle,
            }
            train, val, test = split_rows(arrays, seed)
        # idf and min_df from the training rows alone; build_model puts them in the model (a buffer: saved)
        self.bucket_weight = fit_bucket_weights(train["tokens"], o["buckets"], o["weighting"] == "tfidf", o["min_df"])
        ceiling = {}
        if oracle is not None:
            posterior = val.pop("posterior")
            train.pop("posterior"), test.pop("posterior")
            expected = torch.maximum(posterior, 1 - posterior).mean()
            ceiling = {"accuracy": float(expected), "roc_auc": roc_auc(posterior, val["label"])}
        majority = int(train["label"].float().mean() >= 0.5)
        baseline = {"accuracy": float((val["label"] == majority).float().mean()), "roc_auc": 0.5}
        info = {"buckets": o["buckets"], "positive_rate": float(train["label"].float().mean())}
        return TaskData(train=train, val=val, test=test, info=info, ceiling=ceiling, baseline=baseline, notes=notes)

    def tokens(self, text) -> torch.Tensor:
        """Texts (a string array) as the model reads them: hashed bucket ids (n, max_tokens)."""
        o = self.opts
        return hashed_tokens(text, o["buckets"], o["max_tokens"], o["negation_scope"])

    def _rows(self, table: pa.Table) -> dict[str, torch.Tensor]:
        """A read table's texts as tokens and its 0/1 labels."""
        label = pc.is_in(table.column("label"), value_set=pa.array(POSITIVE_LABELS)).to_numpy(zero_copy_only=False)
        return {"tokens": self.tokens(table.column("text")), "label": torch.from_numpy(label.astype(np.int64))}

    def _given_splits(self, tables: dict, seed: int) -> tuple[dict, dict, Any]:
        """Each given split's rows; without a validation split, 10% of the training rows."""
        splits = {name: self._rows(table) for name, table in tables.items()}
        if "val" not in splits:
            keep, carved = (torch.from_numpy(i) for i in carve(len(splits["train"]["label"]), seed, 9))
            train = splits["train"]
            splits["train"], splits["val"] = ({k: v[i] for k, v in train.items()} for i in (keep, carved))
        return splits["train"], splits["val"], splits.get("test")

    def build_model(self, info: dict) -> nn.Module:
        """The classifier, with the bucket weights load_data fit."""
        o = self.opts
        weights = getattr(self, "bucket_weight", None)
        buckets = info.get("buckets", o["buckets"])
        return BagClassifier(
            buckets,
            o["dim"],
            o["hidden"],
            o["dropout"],
            pooling=o["pooling"],
            sublinear=o["weighting"] == "tfidf",
            token_dropout=o["token_dropout"],
            bucket_weight=weights if weights is not None and len(weights) == buckets else None,
        )

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
        return EvalParts(
            sums={"loss": total_loss, "correct": correct, "rows": rows},
            values={"margin": torch.cat(margins), "label": label},
        )

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        n = max(float(parts.sums["rows"]), 1.0)
        return {
            "loss": float(parts.sums["loss"]) / n,
            "accuracy": float(parts.sums["correct"]) / n,
            "roc_auc": roc_auc(parts.values["margin"], parts.values["label"]),
        }

    def report(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> dict:
        """Confusion matrix, precision / recall / F1, ROC curve and AUC, calibration histograms."""
        label = split["label"]
        margin = self.evaluate_parts(model, split, batch_size).values["margin"]
        predicted = margin > 0  # argmax: a tie goes to class 0 (negative), as accuracy counts it
        positive = label.bool()
        tp, fp = int((predicted & positive).sum()), int((predicted & ~positive).sum())
        fn = int((~predicted & positive).sum())
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        accuracy = (tp + int((~predicted & ~positive).sum())) / max(int(label.shape[0]), 1)
        fpr, tpr, threshold = roc_curve(margin, label)
        keep = thin_curve(fpr, tpr, ROC_POINTS)
        probability = torch.sigmoid(threshold[keep])  # P(positive) = softmax(logits)[1] = sigmoid(margin)
        p = torch.sigmoid(margin.double())
        bins = (p * HISTOGRAM_BINS).long().clamp(0, HISTOGRAM_BINS - 1)
        by_class = [torch.bincount(bins[positive == c], minlength=HISTOGRAM_BINS) for c in (False, True)]
        count = by_class[0] + by_class[1]
        mean_p = torch.zeros(HISTOGRAM_BINS, dtype=torch.float64, device=p.device).index_add_(0, bins, p)
        return {
            "confusion": confusion_section(label, predicted, ["negative", "positive"]),
            "threshold": 0.5,
            "classification": {"accuracy": accuracy, "precision": precision, "recall": recall, "f1": f1},
            "roc": {
                "fpr": fpr[keep].tolist(),
                "tpr": tpr[keep].tolist(),
                "threshold": [
                    None if math.isinf(t) else q for t, q in zip(threshold[keep].tolist(), probability.tolist())
                ],
                "auc": roc_auc(margin, label),
                "points_exact": int(fpr.shape[0]),
            },
            "histogram": {
                "title": "P(positive) by actual class",
                "edges": [i / HISTOGRAM_BINS for i in range(HISTOGRAM_BINS + 1)],
                "series": [{"name": name, "counts": c.tolist()} for name, c in zip(("negative", "positive"), by_class)],
                "mean_predicted": [float(m) / c if c else None for m, c in zip(mean_p.tolist(), count.tolist())],
                "observed_rate": [pos / c if c else None for pos, c in zip(by_class[1].tolist(), count.tolist())],
            },
        }
