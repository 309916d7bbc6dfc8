"""The ranking task's losses (option `loss`: LambdaLoss NDCG-Loss2++, ApproxNDCG, listwise softmax
cross-entropy and pairwise RankNet) and its metrics (NDCG@k, MRR), over candidate lists (Q, W) with label -1
marking padding; all float32."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

TOP_K = 10


def listwise_softmax_loss(scores: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Cross-entropy between softmax(scores) and the query's normalised gains; queries with no gain skip."""
    valid = label >= 0
    log_p = F.log_softmax(scores.float().masked_fill(~valid, float("-inf")), dim=1)
    gains = _gains(label)
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


def _gains(label: torch.Tensor) -> torch.Tensor:
    return (2.0 ** label.clamp(min=0).float() - 1.0) * (label >= 0)


def _gains_and_ideal_dcg(label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gains = _gains(label)
    ideal = gains.sort(dim=1, descending=True).values
    discount = 1.0 / torch.log2(torch.arange(gains.shape[1], device=gains.device, dtype=torch.float32) + 2.0)
    return gains, (ideal * discount).sum(1)


LAMBDA_MU = 10.0  # weight of NDCG-Loss2's term in NDCG-Loss2++ (Wang et al. 2018; allRank's default)


def lambda_loss(scores: torch.Tensor, label: torch.Tensor, mu: float = LAMBDA_MU) -> torch.Tensor:
    """LambdaLoss NDCG-Loss2++ (Wang et al., CIKM 2018): the logistic loss of every pair label_i > label_j,
    weighted by the NDCG their order is worth at the current ranking; averaged over queries with a relevant
    candidate."""
    with torch.autocast(scores.device.type, enabled=False):
        scores = scores.float()
        valid = label >= 0
        gains, idcg = _gains_and_ideal_dcg(label)
        g = gains / idcg.clamp(min=1e-12).unsqueeze(1)
        order = scores.detach().masked_fill(~valid, float("-inf")).argsort(dim=1, descending=True)
        positions = torch.arange(1, label.shape[1] + 1, device=label.device).expand_as(order)
        rank = torch.empty_like(order).scatter_(1, order, positions).float()  # 1-based
        inv_d = 1.0 / torch.log2(1.0 + rank)
        gap = (rank.unsqueeze(2) - rank.unsqueeze(1)).abs().clamp(min=1.0)
        delta = 1.0 / torch.log2(1.0 + gap) - 1.0 / torch.log2(2.0 + gap)
        weight = (g.unsqueeze(2) - g.unsqueeze(1)).abs() * (
            (inv_d.unsqueeze(2) - inv_d.unsqueeze(1)).abs() + mu * delta
        )
        better = (label.unsqueeze(2) > label.unsqueeze(1)) & valid.unsqueeze(1)
        margin = scores.unsqueeze(2) - scores.unsqueeze(1)
        pair = torch.where(better, F.softplus(-margin) * weight, 0.0)
        used = (idcg > 0).float()
        return pair.sum() / used.sum().clamp(min=1.0)


def approx_ndcg_loss(scores: torch.Tensor, label: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """ApproxNDCG (Qin et al. 2010): 1 - NDCG with smooth ranks 1 + sum_j sigmoid(alpha (s_j - s_i))."""
    with torch.autocast(scores.device.type, enabled=False):
        scores = scores.float()
        valid = label >= 0
        gains, idcg = _gains_and_ideal_dcg(label)
        above = torch.sigmoid(alpha * (scores.unsqueeze(1) - scores.unsqueeze(2)))  # [q, i, j]: j above i
        above = above * valid.unsqueeze(1).float()
        rank = 1.0 + above.sum(2) - 0.5 * valid.float()  # the diagonal term (j = i) is sigmoid(0)
        dcg = (gains / torch.log2(1.0 + rank)).sum(1)
        used = idcg > 0
        per_query = 1.0 - dcg / idcg.clamp(min=1e-12)
        return (per_query * used).sum() / used.sum().clamp(min=1)


LOSSES = {
    "listwise": listwise_softmax_loss,
    "ranknet": ranknet_loss,
    "lambda": lambda_loss,
    "approxndcg": approx_ndcg_loss,
}


def ranking_metrics(
    scores: torch.Tensor, label: torch.Tensor, k: int = TOP_K
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sums over queries of NDCG@k and reciprocal rank, and the queries with a relevant candidate."""
    real = label >= 0
    rows = torch.arange(label.shape[0], device=label.device).unsqueeze(1).expand_as(label)
    return flat_ranking_metrics(rows[real], scores[real], label[real], k)


def flat_ranking_metrics(
    qid: torch.Tensor, scores: torch.Tensor, label: torch.Tensor, k: int = TOP_K
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ranking_metrics for candidates given one by one (1-D `qid`, `scores`, `label`, no padding)."""
    per_query = query_curves(qid, scores, label, k)
    used = per_query["has_relevant"]
    return per_query["ndcg"][used, -1].sum(), per_query["rr"][used].sum(), used.sum()


def _within_query(qid: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each candidate's 0-based rank within its query by `key` descending, and its query's group."""
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


def query_curves(qid: torch.Tensor, scores: torch.Tensor, label: torch.Tensor, most: int) -> dict[str, torch.Tensor]:
    """Per query (candidates in order, which breaks ties): NDCG@k for k = 1..`most`, reciprocal rank,
    candidates, and whether it has a relevant candidate. Gain 2^label - 1."""
    device = qid.device
    if qid.numel() == 0:
        return {
            "ndcg": torch.zeros(0, most, device=device),
            "rr": torch.zeros(0, device=device),
            "size": torch.zeros(0, dtype=torch.int64, device=device),
            "has_relevant": torch.zeros(0, dtype=torch.bool, device=device),
        }
    gains = 2.0 ** label.clamp(min=0).float() - 1.0
    ranked, group = _within_query(qid, scores.float())
    ideal, _ = _within_query(qid, gains)
    n_queries = int(group.max()) + 1
    discount = 1.0 / torch.log2(torch.arange(most, device=device, dtype=torch.float32) + 2.0)

    def cumulative(rank: torch.Tensor) -> torch.Tensor:
        top = rank < most
        dcg = torch.zeros(n_queries, most, device=device)
        dcg.index_put_((group[top], rank[top]), gains[top] * discount[rank[top]], accumulate=True)
        return dcg.cumsum(1)

    dcg, idcg = cumulative(ranked), cumulative(ideal)
    big = torch.full((n_queries,), label.numel(), dtype=torch.int64, device=device)
    first = big.scatter_reduce(0, group, torch.where(label > 0, ranked, label.numel()), reduce="amin")
    return {
        "ndcg": dcg / idcg.clamp(min=1e-12),
        "rr": 1.0 / (first.float() + 1.0),
        "size": torch.bincount(group, minlength=n_queries),
        "has_relevant": idcg[:, -1] > 0,
    }


def ndcg_at(labels_in_order, k: int = TOP_K) -> float | None:
    """NDCG@k of one list of true labels in the order shown; None when no candidate is relevant."""
    label = torch.as_tensor(np.asarray(labels_in_order, dtype=np.float64), dtype=torch.float32)
    shown = -torch.arange(label.shape[0], dtype=torch.float32)  # descending: the order shown
    ndcg, _rr, relevant = flat_ranking_metrics(torch.zeros(label.shape[0], dtype=torch.int64), shown, label, k)
    return float(ndcg) if int(relevant) else None
