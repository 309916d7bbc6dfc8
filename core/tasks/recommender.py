"""Lesson recommender: a SASRec-style causal transformer over each user's lesson sequence.

Model: item + learned position embeddings, pre-norm blocks (causal self-attention, GELU feed-forward),
a final LayerNorm; scores are dot products with the (tied) item embeddings. Loss: full softmax
cross-entropy over the catalogue (computed a chunk of positions at a time, see core.tasks.chunked_loss), or a
sampled softmax (shared uniform negatives) for large catalogues.

Evaluation is leave-last-out (see core.data.sequences): HR@10 / NDCG@10 of the held-out item ranked
against the **full catalogue** (`*_full`) and against 100 sampled negatives (`*_sampled100`, the variant
many papers report; it is much higher). Items already in the history are not removed: in the planted
data lessons repeat, and the ceiling assumes they may.

The ceiling (synthetic data) is the *expected* HR/NDCG of the Bayes-optimal ranking given each evaluated
user's last item (core.data.synthetic.TrackChain.expected_metrics). A measured value on U users scatters
around its expectation by about sqrt(p (1 - p) / U), so a well-trained model can land slightly above it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.data.importers import require_rows
from core.data.sequences import read_interactions, sequence_splits
from core.data.synthetic import generate_interactions, make_track_chain
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices
from core.tasks.chunked_loss import chunked_softmax_cross_entropy

TOP_K = 10
EVAL_NEGATIVES = 100


class CausalBlock(nn.Module):
    """Pre-norm transformer block: x + attn(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, L, D) -> (B, L, D); position t attends to positions <= t."""
        b, length, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # is_causal without an explicit mask keeps SDPA on its fused (flash) kernels on every device.
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(attn.transpose(1, 2).reshape(b, length, d)))
        return x + self.drop(self.ffn(self.norm2(x)))


class SASRec(nn.Module):
    """Next-item transformer. Item 0 is padding; `forward` returns hidden states (B, L, d_model)."""

    def __init__(self, n_items: int, d_model: int, layers: int, heads: int, max_len: int, dropout: float):
        super().__init__()
        self.items = nn.Embedding(n_items + 1, d_model, padding_idx=0)
        self.positions = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(CausalBlock(d_model, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        nn.init.normal_(self.items.weight, std=d_model**-0.5)
        nn.init.normal_(self.positions.weight, std=0.02)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        """Item ids (B, L), left-padded with 0 -> hidden states (B, L, d_model); position t sees items <= t."""
        length = seq.shape[1]
        real = seq > 0
        x = self.items(seq) * self.items.embedding_dim**0.5 + self.positions.weight[:length]
        # As in SASRec, padding positions are zeroed after every block (the "timeline mask") rather than
        # masked out of attention: a key-padding mask would push SDPA off its fused kernels, and histories
        # are left-padded, so a real position only ever sees padding before the user's first lesson.
        timeline = real.unsqueeze(-1).to(x.dtype)
        x = self.drop(x) * timeline
        for block in self.blocks:
            x = block(x) * timeline
        return self.norm(x)

    def scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores of every item 1..n for hidden states (..., D) -> (..., n). Column j is item j + 1."""
        return hidden @ self.items.weight[1:].t()


def rank_metrics(scores: torch.Tensor, target_scores: torch.Tensor,
                 k: int = TOP_K) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row hit@k and NDCG@k of a target with `target_scores` (B,) among candidate `scores` (B, C).

    Ties count against the target (pessimistic), so a constant scorer gets no free hits.
    """
    above = (scores >= target_scores.unsqueeze(1)).sum(dim=1) - 1  # minus the target itself when included
    hit = above < k
    return hit.float(), torch.where(hit, 1.0 / torch.log2(above.float() + 2.0), 0.0)


RANKING_SUMS = ("hr_full", "ndcg_full", "hr_sampled", "ndcg_sampled")


def ranking_sums(score_fn, split: dict[str, torch.Tensor], batch_size: int) -> dict[str, torch.Tensor]:
    """Sums over rows of hit@10 / NDCG@10, full and sampled-100, for `score_fn(batch) -> (B, n_items)` scores."""
    sums = torch.zeros(4, dtype=torch.float64, device=split["target"].device)
    for batch in iter_slices(split, batch_size):
        scores = score_fn(batch).float()
        target = batch["target"] - 1
        target_scores = scores.gather(1, target.unsqueeze(1)).squeeze(1)
        # Full-catalogue ranking counts the target itself in `scores`; the sampled one does not, so add it.
        full = rank_metrics(scores, target_scores)
        negatives = torch.cat([scores.gather(1, batch["negatives"] - 1), target_scores.unsqueeze(1)], dim=1)
        sampled = rank_metrics(negatives, target_scores)
        sums += torch.stack([m.sum().double() for m in (*full, *sampled)])
    return dict(zip(RANKING_SUMS, sums.unbind(), strict=True))


def ranking_means(sums: dict[str, torch.Tensor], rows: float) -> dict[str, float]:
    """HR@10 / NDCG@10, full and sampled-100, from `ranking_sums` over `rows` rows."""
    n = max(rows, 1.0)
    s = f"sampled{EVAL_NEGATIVES}"
    return {f"hr@{TOP_K}_full": float(sums["hr_full"]) / n, f"ndcg@{TOP_K}_full": float(sums["ndcg_full"]) / n,
            f"hr@{TOP_K}_{s}": float(sums["hr_sampled"]) / n, f"ndcg@{TOP_K}_{s}": float(sums["ndcg_sampled"]) / n}


def ranking_report(score_fn, split: dict[str, torch.Tensor], batch_size: int) -> dict[str, float]:
    """HR@10 / NDCG@10, full and sampled-100, for `score_fn(batch) -> (B, n_items)` float scores."""
    return ranking_means(ranking_sums(score_fn, split, batch_size), float(split["target"].shape[0]))


class RecommenderTask(Task):
    name = "recommender"
    description = "Lesson recommender: SASRec-style causal transformer, next-lesson prediction (HR/NDCG@10)"
    options = (
        TaskOption("d_model", 64, "embedding / hidden width", 8, 4096),
        TaskOption("layers", 2, "transformer blocks", 1, 48),
        TaskOption("heads", 2, "attention heads (must divide d_model)", 1, 64),
        TaskOption("max_len", 50, "longest history the model reads (training window length)", 2, 4096),
        TaskOption("dropout", 0.1, "dropout on embeddings, attention and feed-forward", 0.0, 0.9),
        TaskOption("loss", "full", "full softmax over the catalogue, or sampled softmax", choices=("full", "sampled")),
        TaskOption("sampled_negatives", 1024, "negatives shared by a batch for the sampled softmax", 1, 1_000_000),
        TaskOption("items", 1000, "synthetic: catalogue size (a multiple of track_len)", 10, 10_000_000),
        TaskOption("track_len", 20, "synthetic: lessons per track", 2, 100_000),
        TaskOption("follow", 0.7, "synthetic: probability the next lesson follows the track", 0.3, 0.99),
        TaskOption("interactions", 100_000, "synthetic: interactions generated", 1000, 1_000_000_000),
        TaskOption("mean_len", 50, "synthetic: mean interactions per user", 4, 100_000),
    )
    defaults = {"lr": 3e-3, "batch_size": 128, "epochs": 6, "optimizer": "adamw", "weight_decay": 0.0}
    primary_metric = "ndcg@10_full"
    tokens_key = "seq"

    def load_data(self, data_path: str, seed: int) -> TaskData:
        o = self.opts
        vocabulary: dict = {}
        if data_path:
            raw = read_interactions(data_path)
            user, items, n_items = raw["user"], raw["item"], raw["n_items"]
            vocabulary = {"item_id": raw["item_ids"]}  # the model's item k is item_ids[k - 1]; 0 is padding
            ceiling: dict = {}
        else:
            # user, item and time per interaction, then the (input, target) windows: int64 each
            self.check_synthetic_size(o["interactions"] * 8 * 5 + o["items"] * 8, ("interactions", "items"))
            chain = make_track_chain(o["items"], o["track_len"], o["follow"], 1.0, seed)
            raw = generate_interactions(chain, o["interactions"], o["mean_len"], seed)
            user, items, n_items = raw["user"], raw["item"] + 1, o["items"]
        train, val, test = sequence_splits(user, items, n_items, o["max_len"], EVAL_NEGATIVES, seed)
        if data_path:
            require_rows(data_path, val, "leave-last-out", "no user has the 3 interactions needed to hold out 2")
            require_rows(data_path, train, "training", "no user has 2 interactions left to train on")
        if not data_path:
            previous = val["seq"][:, -1].numpy() - 1  # the item just before the held-out one
            ceiling = chain.expected_metrics(previous, EVAL_NEGATIVES, TOP_K)
        counts = torch.bincount(train["target"].flatten(), minlength=n_items + 1)[1:].double()
        baseline = ranking_report(lambda b: counts.expand(b["target"].shape[0], -1), val, 4096)
        info = {"n_items": int(n_items), "users_evaluated": int(val["target"].shape[0]),
                "interactions": int(len(items))}
        return TaskData(train=train, val=val, test=test, info=info, ceiling=ceiling, baseline=baseline,
                        vocabulary=vocabulary)

    def build_model(self, info: dict) -> nn.Module:
        o = self.opts
        if o["d_model"] % o["heads"]:
            from core.errors import ConfigError

            raise ConfigError("task_options.heads", f"{o['heads']} heads must divide d_model {o['d_model']}")
        return SASRec(info.get("n_items", o["items"]), o["d_model"], o["layers"], o["heads"], o["max_len"],
                      o["dropout"])

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = model(batch["seq"])
        target = batch["target"]
        if self.opts["loss"] == "full":  # scores against the whole catalogue, a chunk of positions at a time
            table = _unwrap(model).items.weight[1:]  # what SASRec.scores multiplies by
            return chunked_softmax_cross_entropy(hidden.flatten(0, 1), table, (target - 1).flatten())
        return self._sampled_softmax(_unwrap(model), hidden, target)

    def _sampled_softmax(self, model: SASRec, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Softmax over the true next item and negatives shared across the batch (uniform, so no logQ term);
        a negative equal to the true item is masked out."""
        n_items = model.items.num_embeddings - 1
        negatives = torch.randint(1, n_items + 1, (self.opts["sampled_negatives"],), device=target.device)
        table = model.items.weight
        positive = (hidden * table[target]).sum(-1, keepdim=True)
        negative = hidden @ table[negatives].t()
        negative = negative.masked_fill(negatives == target.unsqueeze(-1), float("-inf"))
        logits = torch.cat([positive, negative], dim=-1).float()
        per_position = F.cross_entropy(logits.flatten(0, 1), torch.zeros_like(target).flatten(), reduction="none")
        real = (target > 0).flatten().float()
        return (per_position * real).sum() / real.sum().clamp(min=1.0)

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        def score(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            hidden = model(batch["seq"])[:, -1]
            # Score in float32: bf16 ties across a large catalogue would blur the ranks.
            with torch.autocast(hidden.device.type, enabled=False):
                return model.scores(hidden.float())

        # Cap the (rows, catalogue) score matrix at 2^26 floats (256 MB) so huge catalogues still evaluate.
        rows = max(1, min(max(batch_size, 512), (1 << 26) // model.items.num_embeddings))
        target = split["target"]
        count = torch.tensor(float(target.shape[0]), dtype=torch.float64, device=target.device)
        return EvalParts(sums={**ranking_sums(score, split, rows), "rows": count})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        return ranking_means(parts.sums, float(parts.sums["rows"]))


def _unwrap(model: nn.Module) -> nn.Module:
    """The SASRec inside a DDP / compile wrapper (the loss needs its item table)."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)

