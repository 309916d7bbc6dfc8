"""Search ranking: an MLP scores each (query, lesson) feature vector; lessons of a query are ranked by score.

A split holds whole queries: `features` (Q, D, F) and `label` (Q, D) with label -1 marking padding, so a
batch is a set of queries sliced like any other tensor. Loss: listwise softmax cross-entropy against the
gain distribution (2^label - 1) of each query, or pairwise RankNet. Metrics per query, averaged over
queries with at least one relevant (label > 0) lesson: NDCG@10 (gain 2^label - 1) and MRR of the first
relevant lesson. Baseline: random order (mean over 5 seeded shuffles). Ceiling (synthetic data): ranking
by the hidden noiseless relevance, on the same split.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from core.data.importers import Column, contiguous_ids, read_table, require_rows
from core.data.synthetic import generate_ranking
from core.errors import DataError
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices

TOP_K = 10
RANKING_COLUMNS = [Column("query_id", "id"), Column("doc_id", "id"),
                   Column("label", "int", minimum=0, why="labels are relevance grades 0, 1, 2, ...")]


class ScoringMLP(nn.Module):
    """Feature vector (..., F) -> relevance score (...)."""

    def __init__(self, features: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        parts: list[nn.Module] = []
        width = features
        for _ in range(layers):
            parts += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        parts.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores for every feature vector; any leading shape, e.g. (queries, docs, F) -> (queries, docs)."""
        return self.net(x).squeeze(-1)


def ranking_metrics(scores: torch.Tensor, label: torch.Tensor,
                    k: int = TOP_K) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sums over queries of NDCG@k and reciprocal rank, and the number of queries with a relevant doc.

    scores, label: (Q, D); label -1 marks padding (ranked last). Queries without a relevant doc are left out.
    """
    scores = scores.float().masked_fill(label < 0, float("-inf"))
    gains = (2.0 ** label.clamp(min=0).float() - 1.0) * (label >= 0)
    depth = min(k, label.shape[1])
    discount = 1.0 / torch.log2(torch.arange(depth, device=label.device, dtype=torch.float32) + 2.0)
    ranked = gains.gather(1, scores.argsort(dim=1, descending=True, stable=True))
    ideal = gains.sort(dim=1, descending=True).values[:, :depth]
    idcg = (ideal * discount).sum(1)
    has_relevant = idcg > 0
    ndcg = (ranked[:, :depth] * discount).sum(1) / idcg.clamp(min=1e-12)
    relevant = ranked > 0
    first = torch.where(relevant.any(1), relevant.float().argmax(1), 0)
    rr = 1.0 / (first.float() + 1.0)
    return (ndcg * has_relevant).sum(), (rr * has_relevant).sum(), has_relevant.sum()


def listwise_softmax_loss(scores: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Cross-entropy between softmax(scores) and the query's normalised gains; queries with no gain skip."""
    valid = label >= 0
    log_p = F.log_softmax(scores.float().masked_fill(~valid, float("-inf")), dim=1)
    gains = (2.0 ** label.clamp(min=0).float() - 1.0) * valid
    total = gains.sum(1, keepdim=True)
    per_query = -(gains / total.clamp(min=1e-12) * log_p.masked_fill(~valid, 0.0)).sum(1)
    used = (total.squeeze(1) > 0).float()
    return (per_query * used).sum() / used.sum().clamp(min=1.0)


def ranknet_loss(scores: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Mean logistic loss over all pairs (i, j) of a query with label_i > label_j (padding never pairs)."""
    scores = scores.float()
    better = (label.unsqueeze(2) > label.unsqueeze(1)) & (label.unsqueeze(1) >= 0)
    margin = scores.unsqueeze(2) - scores.unsqueeze(1)
    pair_loss = F.softplus(-margin) * better
    return pair_loss.sum() / better.sum().clamp(min=1)


def pad_queries(query: np.ndarray, features: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (query code, features, label) -> (Q, D, F) features and (Q, D) labels, label -1 as padding."""
    order = np.argsort(query, kind="stable")
    query, features, label = query[order], features[order], label[order]
    sizes = np.bincount(query)
    n_queries, depth = len(sizes), int(sizes.max())
    slot = np.arange(len(query)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    x = np.zeros((n_queries, depth, features.shape[1]), dtype=np.float32)
    y = np.full((n_queries, depth), -1, dtype=np.int64)
    x[query, slot] = features
    y[query, slot] = label
    return x, y


def split_queries(arrays: dict[str, np.ndarray], seed: int) -> tuple[dict, dict, dict]:
    """80 / 10 / 10 split of whole queries by a seeded permutation, as torch tensors."""
    n = len(next(iter(arrays.values())))
    perm = np.random.default_rng([seed, 8]).permutation(n)
    cut1, cut2 = int(0.8 * n), int(0.9 * n)
    parts = (perm[:cut1], perm[cut1:cut2], perm[cut2:])
    return tuple({k: torch.from_numpy(np.ascontiguousarray(v[p])) for k, v in arrays.items()} for p in parts)


def read_ranking(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """query codes, (rows, F) float32 features f1..fn, labels (non-negative ints) from file(s)."""
    table = read_table(path, RANKING_COLUMNS, prefix_columns="f")
    names = [n for n in table.column_names if n not in ("query_id", "doc_id", "label")]
    if not names:
        raise DataError(f"{path}: line 1: no feature columns (expected f1, f2, ...)")
    label = table.column("label").to_numpy()
    query, _ = contiguous_ids(table.column("query_id"))
    features = np.stack([table.column(n).to_numpy().astype(np.float32) for n in names], axis=1)
    return query, features, label


class RankingTask(Task):
    name = "ranking"
    description = "Search ranking: MLP over (query, lesson) features, listwise softmax loss (NDCG@10, MRR)"
    options = (
        TaskOption("hidden", 64, "hidden units per layer", 1, 65536),
        TaskOption("layers", 2, "hidden layers", 1, 32),
        TaskOption("dropout", 0.0, "dropout after each hidden layer", 0.0, 0.9),
        TaskOption("loss", "listwise", "listwise softmax or pairwise RankNet", choices=("listwise", "ranknet")),
        TaskOption("queries", 4000, "synthetic: queries", 20, 100_000_000),
        TaskOption("docs", 20, "synthetic: candidate lessons per query", 2, 10_000),
        TaskOption("features", 16, "synthetic: features per (query, lesson)", 2, 4096),
        TaskOption("noise", 0.5, "synthetic: label noise (std, relative to the relevance's std)", 0.0, 10.0),
    )
    defaults = {"lr": 3e-3, "batch_size": 64, "epochs": 4, "optimizer": "adamw"}
    primary_metric = "ndcg@10"

    def load_data(self, data_path: str, seed: int) -> TaskData:
        o = self.opts
        if data_path:
            query, features, label = read_ranking(data_path)
            x, y = pad_queries(query, features, label)
            train, val, test = split_queries({"features": x, "label": y}, seed)
            require_rows(data_path, val, "validation", "at least 10 queries are needed (10% validate)")
            ceiling = {}
        else:
            data = generate_ranking(o["queries"], o["docs"], o["features"], o["noise"], seed)
            shape = (o["queries"], o["docs"])
            arrays = {"features": data.features.reshape(*shape, -1), "label": data.label.reshape(shape),
                      "relevance": data.relevance.reshape(shape)}
            train, val, test = split_queries(arrays, seed)
            oracle = val.pop("relevance")  # the hidden relevance stays out of what the model sees
            train.pop("relevance"), test.pop("relevance")
            ceiling = self._report(oracle, val)
        gen = torch.Generator().manual_seed(seed)
        draws = [self._report(torch.rand(val["label"].shape, generator=gen), val) for _ in range(5)]
        baseline = {key: float(np.mean([d[key] for d in draws])) for key in draws[0]}
        info = {"features": int(train["features"].shape[2]), "docs_per_query": int(train["features"].shape[1])}
        return TaskData(train=train, val=val, test=test, info=info, ceiling=ceiling, baseline=baseline)

    @staticmethod
    def _report(scores: torch.Tensor, split: dict[str, torch.Tensor]) -> dict[str, float]:
        ndcg, rr, count = ranking_metrics(scores, split["label"])
        n = max(int(count), 1)
        return {f"ndcg@{TOP_K}": float(ndcg) / n, "mrr": float(rr) / n}

    def build_model(self, info: dict) -> nn.Module:
        o = self.opts
        return ScoringMLP(info.get("features", o["features"]), o["hidden"], o["layers"], o["dropout"])

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        scores = model(batch["features"])
        if self.opts["loss"] == "ranknet":
            return ranknet_loss(scores, batch["label"])
        return listwise_softmax_loss(scores, batch["label"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        sums = torch.zeros(3, dtype=torch.float64, device=split["label"].device)
        for batch in iter_slices(split, max(batch_size, 1024)):
            sums += torch.stack(ranking_metrics(model(batch["features"]), batch["label"])).double()
        return EvalParts(sums=dict(zip(("ndcg", "rr", "count"), sums.unbind(), strict=True)))

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        count = max(float(parts.sums["count"]), 1.0)
        return {f"ndcg@{TOP_K}": float(parts.sums["ndcg"]) / count, "mrr": float(parts.sums["rr"]) / count}
