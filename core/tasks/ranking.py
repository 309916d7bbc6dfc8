"""Search ranking: an MLP scores each (query, lesson) feature vector; lessons of a query are ranked by score.

A split holds candidate lists: `features` (R, W, F) and `label` (R, W) with label -1 marking padding, so a
batch is a set of lists sliced like any other tensor. A list is a whole query, padded to the split's width W,
unless padding every query to the longest would cost more than PADDING_BUDGET cells per candidate (one query
of 20,000 candidates among thousands of one-candidate queries) or the longest exceeds MAX_LIST: then W is
smaller and a longer query is split into lists of W of its candidates (shuffled, so each list is a random
subset), memory stays within a few times the data, and the split gains `qid` (R,), the query of each row, so
that evaluation still ranks each query's candidates all together (exact NDCG@10 and MRR).

Loss: listwise softmax cross-entropy against the
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


MAX_LIST = 256  # candidates per list at most: the RankNet loss holds batch x W x W pairs
PADDING_BUDGET = 4  # padded cells per real candidate, at most


def list_width(sizes: np.ndarray) -> int:
    """Row width W for queries of `sizes` candidates: the longest query when padding every query to it costs
    at most PADDING_BUDGET cells per candidate and it is within MAX_LIST, else the widest power of two
    (>= 2) within both (W = 2 always fits: it pads a query by one cell at most)."""
    longest, total = int(sizes.max()), int(sizes.sum())
    if longest <= MAX_LIST and len(sizes) * longest <= PADDING_BUDGET * total:
        return longest
    width = min(MAX_LIST, 1 << (longest - 1).bit_length())
    while width > 2 and int((-(-sizes // width) * width).sum()) > PADDING_BUDGET * total:
        width //= 2
    return min(width, longest)


def pack_queries(query: np.ndarray, arrays: dict[str, np.ndarray], width: int | None = None,
                 seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Candidates (query code 0..Q-1 per candidate, and per-candidate arrays) -> lists of `width` (default
    list_width) candidates: each array shaped (R, W, ...), "label" padded with -1 and the rest with 0; and the
    query of each row (R,), rows in query-code order. A query longer than W takes several rows, its candidates
    shuffled (seeded) first so each row is a random subset of them."""
    sizes = np.bincount(query)
    width = width or list_width(sizes[sizes > 0])
    order = np.arange(len(query))
    if width < sizes.max():
        order = np.random.default_rng([seed, 11]).permutation(len(query))
    order = order[np.argsort(query[order], kind="stable")]
    query = query[order]
    rows_of = -(-sizes // width)
    first_row = np.cumsum(rows_of) - rows_of
    slot = np.arange(len(query)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    row, col = first_row[query] + slot // width, slot % width
    n_rows = int(rows_of.sum())
    packed = {}
    for name, values in arrays.items():
        out = np.full((n_rows, width, *values.shape[1:]), -1 if name == "label" else 0, dtype=values.dtype)
        out[row, col] = values[order]
        packed[name] = out
    return packed, np.repeat(np.arange(len(sizes)), rows_of)


def pad_queries(query: np.ndarray, features: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (query code, features, label) -> (Q, D, F) features and (Q, D) labels, label -1 as padding:
    every query whole, padded to the longest (small inputs; load_data packs with pack_queries)."""
    sizes = np.bincount(query)
    packed, _ = pack_queries(query, {"features": features, "label": label}, width=int(sizes.max()))
    return packed["features"], packed["label"]


def split_queries(query: np.ndarray, arrays: dict[str, np.ndarray], seed: int) -> tuple[list[dict], list[int]]:
    """80 / 10 / 10 split of whole queries by a seeded permutation, each split packed into lists (see
    pack_queries) as torch tensors, with `qid` where a query spans several rows; and each split's
    longest query. `query`: code 0..Q-1 of each candidate; `arrays`: per-candidate values."""
    n = int(query.max()) + 1
    perm = np.random.default_rng([seed, 8]).permutation(n)
    cut1, cut2 = int(0.8 * n), int(0.9 * n)
    splits, longest = [], []
    for part, chosen in enumerate((perm[:cut1], perm[cut1:cut2], perm[cut2:])):
        position = np.full(n, -1, dtype=np.int64)
        position[chosen] = np.arange(len(chosen))  # queries keep the permutation's order
        keep = np.flatnonzero(position[query] >= 0)
        if len(keep) == 0:
            empty = {k: torch.from_numpy(np.zeros((0, 1, *v.shape[1:]), dtype=v.dtype)) for k, v in arrays.items()}
            splits.append(empty), longest.append(0)
            continue
        codes = position[query[keep]]
        packed, qid = pack_queries(codes, {k: v[keep] for k, v in arrays.items()}, seed=seed + part)
        split = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in packed.items()}
        sizes = np.bincount(codes)
        if len(qid) > len(sizes):  # some query spans rows: evaluation groups them by qid
            split["qid"] = torch.from_numpy(qid)
        splits.append(split), longest.append(int(sizes.max()))
    return splits, longest


def flat_ranking_metrics(qid: torch.Tensor, scores: torch.Tensor, label: torch.Tensor,
                         k: int = TOP_K) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ranking_metrics for candidates given one by one (1-D `qid`, `scores`, `label`, no padding; each query's
    candidates in their order, which breaks ties as ranking_metrics does): every query ranked whole."""
    if qid.numel() == 0:
        zero = torch.zeros((), device=qid.device)
        return zero, zero, zero.long()
    gains = 2.0 ** label.clamp(min=0).float() - 1.0
    ranked, group = _within_query(qid, scores.float())
    ideal, _ = _within_query(qid, gains)
    n_queries = int(group.max()) + 1
    discount = torch.where(ranked < k, 1.0 / torch.log2(ranked.float() + 2.0), 0.0)
    ideal_discount = torch.where(ideal < k, 1.0 / torch.log2(ideal.float() + 2.0), 0.0)
    dcg = torch.zeros(n_queries, device=qid.device).index_add_(0, group, gains * discount)
    idcg = torch.zeros(n_queries, device=qid.device).index_add_(0, group, gains * ideal_discount)
    has_relevant = idcg > 0
    big = torch.full((n_queries,), label.numel(), dtype=torch.int64, device=qid.device)
    first = big.scatter_reduce(0, group, torch.where(label > 0, ranked, label.numel()), reduce="amin")
    rr = 1.0 / (first.float() + 1.0)
    ndcg = dcg / idcg.clamp(min=1e-12)
    return (ndcg * has_relevant).sum(), (rr * has_relevant).sum(), has_relevant.sum()


def _within_query(qid: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each candidate: its 0-based rank within its query by `key` descending (ties keep the given order),
    and its query's group number 0..G-1."""
    order = torch.sort(key, descending=True, stable=True).indices
    order = order[torch.sort(qid[order], stable=True).indices]
    sorted_q = qid[order]
    new_group = torch.ones_like(sorted_q, dtype=torch.bool)
    new_group[1:] = sorted_q[1:] != sorted_q[:-1]
    group_sorted = new_group.long().cumsum(0) - 1
    starts = torch.nonzero(new_group).squeeze(1)
    rank_sorted = torch.arange(len(order), device=qid.device) - starts[group_sorted]
    rank, group = torch.empty_like(rank_sorted), torch.empty_like(group_sorted)
    rank[order], group[order] = rank_sorted, group_sorted
    return rank, group


def _flat(split: dict[str, torch.Tensor], scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(qid, score, label) of the real (not padding) candidates of a split with `qid`, in row order."""
    label = split["label"]
    real = label >= 0
    qid = split["qid"].unsqueeze(1).expand_as(label)
    return qid[real], scores[real], label[real]


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
            (train, val, test), longest = split_queries(query, {"features": features, "label": label}, seed)
            require_rows(data_path, val, "validation", "at least 10 queries are needed (10% validate)")
            ceiling = {}
        else:
            # features (float32), the relevance (float64 while generated) and labels, then their packed copy
            self.check_synthetic_size(o["queries"] * o["docs"] * (o["features"] * 4 * 2 + 8 + 8 + 8),
                                      ("queries", "docs", "features"))
            data = generate_ranking(o["queries"], o["docs"], o["features"], o["noise"], seed)
            query = np.repeat(np.arange(o["queries"]), o["docs"])
            arrays = {"features": data.features.reshape(len(query), -1), "label": data.label.reshape(-1),
                      "relevance": data.relevance.reshape(-1)}
            (train, val, test), longest = split_queries(query, arrays, seed)
            oracle = val.pop("relevance")  # the hidden relevance stays out of what the model sees
            train.pop("relevance"), test.pop("relevance")
            ceiling = self._report(oracle, val)
        gen = torch.Generator().manual_seed(seed)
        draws = [self._report(torch.rand(val["label"].shape, generator=gen), val) for _ in range(5)]
        baseline = {key: float(np.mean([d[key] for d in draws])) for key in draws[0]}
        width = int(train["features"].shape[1])
        info = {"features": int(train["features"].shape[2]), "docs_per_query": width}
        notes = []
        if "qid" in train:
            notes.append(f"ranking: queries of up to {longest[0]:,} candidates train as lists of {width} of "
                         "their candidates (memory stays within a few times the data); evaluation ranks "
                         "every query whole")
            train.pop("qid")  # training needs only the lists
        return TaskData(train=train, val=val, test=test, info=info, ceiling=ceiling, baseline=baseline,
                        notes=notes)

    @staticmethod
    def _report(scores: torch.Tensor, split: dict[str, torch.Tensor]) -> dict[str, float]:
        if "qid" in split:
            ndcg, rr, count = flat_ranking_metrics(*_flat(split, scores))
        else:
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
        device = split["label"].device
        if "qid" in split:  # a query spans rows: hand every candidate on, metrics() ranks each query whole
            slices = iter_slices(split, max(batch_size, 1024))
            flat = [_flat(batch, model(batch["features"]).float()) for batch in slices]
            qid, score, label = (torch.cat([part[i] for part in flat]) if flat else torch.zeros(0, device=device)
                                 for i in range(3))
            return EvalParts(sums={}, values={"qid": qid.long(), "score": score.float(), "label": label.long()})
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        for batch in iter_slices(split, max(batch_size, 1024)):
            sums += torch.stack(ranking_metrics(model(batch["features"]), batch["label"])).double()
        return EvalParts(sums=dict(zip(("ndcg", "rr", "count"), sums.unbind(), strict=True)))

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        if "qid" in parts.values:
            ndcg, rr, count = flat_ranking_metrics(parts.values["qid"], parts.values["score"], parts.values["label"])
            parts = EvalParts(sums={"ndcg": ndcg, "rr": rr, "count": count})
        count = max(float(parts.sums["count"]), 1.0)
        return {f"ndcg@{TOP_K}": float(parts.sums["ndcg"]) / count, "mrr": float(parts.sums["rr"]) / count}
