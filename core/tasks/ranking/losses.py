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


def _gains(label: torch.Tensor) -> torch.Tensor:
    return (2.0 ** label.clamp(min=0).float() - 1.0) * (label >= 0)


def _ideal_dcg(gains: torch.Tensor) -> torch.Tensor:
    ideal = gains.sort(dim=1, descending=True).values
    discount = 1.0 / torch.log2(torch.arange(gains.shape[1], device=gains.device, dtype=torch.float32) + 2.0)
    return (ideal * discount).sum(1)


LAMBDA_MU = 10.0  # weight of NDCG-Loss2's term in NDCG-Loss2++ (Wang et al. 2018; allRank's default)


def lambda_loss(scores: torch.Tensor, label: torch.Tensor, mu: float = LAMBDA_MU) -> torch.Tensor:
    """LambdaLoss NDCG-Loss2++ (Wang et al., CIKM 2018): the logistic loss of every pair label_i > label_j of a
    query, weighted by how much NDCG their order is worth at the current ranking (ranks by the detached
    scores): |G_i - G_j| x (|1/D(r_i) - 1/D(r_j)| + mu |1/D(|r_i - r_j|) - 1/D(|r_i - r_j| + 1)|), G = gain /
    ideal DCG, D(r) = log2(1 + r), r 1-based. Summed per query, averaged over queries with a relevant
    candidate. Float32 whatever the autocast; padding (label -1) neither pairs nor takes a rank above a real
    candidate."""
    with torch.autocast(scores.device.type, enabled=False):
        scores = scores.float()
        valid = label >= 0
        gains = _gains(label)
        idcg = _ideal_dcg(gains)
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
    """ApproxNDCG (Qin et al. 2010): 1 - NDCG with each rank replaced by a smooth one, 1 + sum over the
    other real candidates j of sigmoid(alpha (s_j - s_i)); averaged over queries with a relevant candidate.
    Float32 whatever the autocast; padding neither ranks nor counts."""
    with torch.autocast(scores.device.type, enabled=False):
        scores = scores.float()
        valid = label >= 0
        gains = _gains(label)
        idcg = _ideal_dcg(gains)
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


def ndcg_at(labels_in_order, k: int = TOP_K) -> float | None:
    """NDCG@k of one list of true labels in the order shown (ranking_metrics, as evaluation counts it: gain
    2^label - 1); None when no candidate is relevant (every order is as good as any other)."""
    label = torch.as_tensor(np.asarray(labels_in_order, dtype=np.float64), dtype=torch.float32)[None, :]
    if label.shape[1] == 0:
        return None
    shown = -torch.arange(label.shape[1], dtype=torch.float32)[None, :]  # descending: the order shown
    ndcg, _rr, relevant = ranking_metrics(shown, label, k)
    return float(ndcg) if int(relevant) else None
