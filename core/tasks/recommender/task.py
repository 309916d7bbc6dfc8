"""Lesson recommender: a SASRec-style causal transformer over each user's lesson sequence.

Loss: the full softmax (chunked) or a sampled one (`auto` picks by SAMPLED_LOSS_ABOVE). Evaluation is
leave-last-out under three protocols (docs/data.md, "Recommender metrics"); baseline popularity; ceiling the
Bayes-optimal ranking (synthetic data).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from core.data.importers import require_rows
from core.data.sequences import (
    FILE_ORDER_COLUMNS,
    INTERACTION_COLUMNS,
    encode_interactions,
    given_sequence_splits,
    sequence_splits,
)
from core.data.splits import read_splits
from core.data.synthetic import TrackChain, generate_interactions, interactions_table, make_track_chain
from core.errors import ConfigError
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, bucket_rows, iter_slices
from core.tasks.chunked_loss import chunked_softmax_cross_entropy, compact_positions
from core.tasks.serving import SAMPLE_ROWS, TaskServing, listed

TOP_K = 10
EVAL_NEGATIVES = 100
EVAL_SCORES = 1 << 26  # evaluation scores (rows x catalogue) held at once: 256 MB in float32


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
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
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
        # SASRec's timeline mask: padding zeroed after every block, not masked out of attention (that would
        # push SDPA off its fused kernels); histories are left-padded.
        timeline = real.unsqueeze(-1).to(x.dtype)
        x = self.drop(x) * timeline
        for block in self.blocks:
            x = block(x) * timeline
        return self.norm(x)

    def checkpointed_blocks(self) -> list[nn.Module]:
        """The transformer blocks that activation checkpointing recomputes (see core.engine.compiling)."""
        return list(self.blocks)

    def scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores of every item 1..n for hidden states (..., D) -> (..., n). Column j is item j + 1."""
        return hidden @ self.items.weight[1:].t()


COUNT_BLOCK = 1 << 22  # scores compared at a time (rows x a block of columns): temporaries of ~36 MB


def count_at_least(scores: torch.Tensor, target_scores: torch.Tensor) -> torch.Tensor:
    """Per row, how many of `scores` (B, C) are >= its target score (B,), a block of columns at a time."""
    target = target_scores.unsqueeze(1)
    columns = max(1, COUNT_BLOCK // max(1, scores.shape[0]))
    if scores.shape[1] <= columns:
        return (scores >= target).sum(dim=1)
    total = torch.zeros(scores.shape[0], dtype=torch.int64, device=scores.device)
    for start in range(0, scores.shape[1], columns):
        total += (scores[:, start : start + columns] >= target).sum(dim=1)
    return total


def score_rows(n_items: int, most: int) -> int:
    """Evaluation rows scored at once so that their (rows, catalogue) float32 scores stay within EVAL_SCORES."""
    return max(1, min(most, EVAL_SCORES // max(1, n_items)))


PROTOCOLS = ("full_filtered", "full_unfiltered", f"sampled{EVAL_NEGATIVES}_unseen")


def remove_seen(scores: torch.Tensor, batch: dict[str, torch.Tensor], history: torch.Tensor) -> torch.Tensor:
    """Set to -inf, in place, each row's scores of the items in its history (column j is item j + 1)."""
    start, end = batch["history_start"], batch["history_end"]
    lengths = (end - start).clamp(min=0)
    total = int(lengths.sum())  # evaluation, not the training step: one read per batch
    if total == 0:
        return scores
    row = torch.repeat_interleave(torch.arange(len(lengths), device=scores.device), lengths, output_size=total)
    offset = torch.cumsum(lengths, 0) - lengths
    position = start[row] + torch.arange(total, device=scores.device) - offset[row]
    scores[row, history[position].long() - 1] = float("-inf")
    return scores


def held_out_ranks(
    score_fn, split: dict[str, torch.Tensor], batch_size: int, history: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per row of `split`, the 0-based rank of its held-out item under each of PROTOCOLS (ties count against
    it) for `score_fn(batch) -> (B, n_items)`; `history` is the flat item array the split indexes."""
    device = split["target"].device
    history = history.to(device)
    ranks: dict[str, list] = {p: [torch.zeros(0, dtype=torch.int64, device=device)] for p in PROTOCOLS}
    for batch in iter_slices(split, batch_size):
        scores = score_fn(batch).float()
        if not scores.is_contiguous():  # e.g. an expanded row of popularity counts: seen items are set in place
            scores = scores.contiguous()
        target = (batch["target"] - 1).unsqueeze(1)
        target_scores = scores.gather(1, target).squeeze(1)
        # Sampled: the target against its negatives (drawn outside the user's history, so nothing to remove).
        sampled = torch.cat([scores.gather(1, batch["negatives"] - 1), target_scores.unsqueeze(1)], dim=1)
        ranks[PROTOCOLS[2]].append(count_at_least(sampled, target_scores) - 1)
        ranks["full_unfiltered"].append(count_at_least(scores, target_scores) - 1)  # the target among `scores`
        remove_seen(scores, batch, history).scatter_(1, target, target_scores.unsqueeze(1))  # a repeat stays
        ranks["full_filtered"].append(count_at_least(scores, target_scores) - 1)
    return {p: torch.cat(r) for p, r in ranks.items()}


def rank_curves(ranks: torch.Tensor, most: int) -> tuple[list[float], list[float]]:
    """HR@k and NDCG@k for k = 1..`most` from 0-based ranks; a rank of -1 (a NaN score) is a miss."""
    n = max(int(ranks.shape[0]), 1)
    ranks = torch.where(ranks >= 0, ranks, most).clamp(max=most)
    counts = torch.bincount(ranks, minlength=most + 1)[:most].double()
    gain = 1.0 / torch.log2(torch.arange(most, dtype=torch.float64, device=ranks.device) + 2.0)
    return (counts.cumsum(0) / n).tolist(), ((counts * gain).cumsum(0) / n).tolist()


def ranking_metrics(ranks: dict[str, torch.Tensor], protocols: tuple[str, ...] = PROTOCOLS) -> dict[str, float]:
    """hr@10_<protocol> and ndcg@10_<protocol> for each of `protocols`, from held_out_ranks."""
    metrics = {}
    for p in protocols:
        hit, ndcg = rank_curves(ranks[p], TOP_K)
        metrics[f"hr@{TOP_K}_{p}"], metrics[f"ndcg@{TOP_K}_{p}"] = hit[-1], ndcg[-1]
    return metrics


def ranking_report(
    score_fn, split: dict[str, torch.Tensor], batch_size: int, history: torch.Tensor
) -> dict[str, float]:
    """HR@10 / NDCG@10 under the three PROTOCOLS for `score_fn(batch) -> (B, n_items)` float scores."""
    return ranking_metrics(held_out_ranks(score_fn, split, batch_size, history))


REPORT_K = 50  # the report's HR@k / NDCG@k curves run k = 1..REPORT_K
HISTORY_BUCKETS = (1, 5, 10, 20, 50)  # the report's user-history-length buckets: 1-4, 5-9, 10-19, 20-49, 50+
PROTOCOL_LABELS = {
    "full_filtered": "full catalogue, seen removed (primary)",
    "full_unfiltered": "full catalogue, seen kept",
    f"sampled{EVAL_NEGATIVES}_unseen": f"sampled: {EVAL_NEGATIVES} unseen negatives",
}


def loss_position_bounds(target: torch.Tensor) -> np.ndarray:
    """bounds[b]: the most real positions any b rows of a training split hold (host-side)."""
    real = np.sort((target > 0).sum(1).numpy())[::-1]
    return np.concatenate([[0], np.cumsum(real)]).astype(np.int64)


BUCKETS_PER_OCTAVE = 8


def position_bucket(count: int, most: int) -> int:
    """`count` rounded up to a multiple of 1/16 of the next power of two, capped at `most`: few distinct shapes,
    as oneDNN caches a primitive and its scratchpad per shape."""
    step = max(1, (1 << max(count - 1, 0).bit_length()) // (2 * BUCKETS_PER_OCTAVE))
    return min(-(-count // step) * step, most)


SAMPLED_LOSS_ABOVE = 10_000
"""loss=auto trains a catalogue of more lessons than this with the sampled softmax, a smaller one with the full
softmax: the size above which the sampled loss's quicker steps buy the better model in the same wall time
(benchmarks/README.md, Large catalogues). The `loss` option's help names the same figure."""


def chosen_loss(loss: str, n_items: int) -> str:
    """The loss a run trains with; "auto": sampled above SAMPLED_LOSS_ABOVE lessons, else full."""
    if loss != "auto":
        return loss
    return "sampled" if n_items > SAMPLED_LOSS_ABOVE else "full"


def auto_loss_note(n_items: int, negatives: int) -> str:
    """The run's log line saying what loss=auto chose for a catalogue of `n_items` lessons, and why."""
    if chosen_loss("auto", n_items) == "sampled":
        return (
            f"recommender: loss=auto trains with the sampled softmax ({negatives:,} shared negatives): "
            f"{n_items:,} lessons is more than {SAMPLED_LOSS_ABOVE:,}; loss=full for the full softmax"
        )
    return (
        f"recommender: loss=auto trains with the full softmax: {n_items:,} lessons is at most "
        f"{SAMPLED_LOSS_ABOVE:,}; loss=sampled for the sampled softmax"
    )


class RecommenderTask(Task):
    name = "recommender"
    description = "Lesson recommender: SASRec-style causal transformer, next-lesson prediction (HR/NDCG@10)"
    options = (
        TaskOption("d_model", 64, "embedding / hidden width", 8, 4096),
        TaskOption("layers", 2, "transformer blocks", 1, 48),
        TaskOption("heads", 2, "attention heads (must divide d_model)", 1, 64),
        TaskOption("max_len", 50, "longest history the model reads (training window length)", 2, 4096),
        TaskOption("dropout", 0.1, "dropout on embeddings, attention and feed-forward", 0.0, 0.9),
        TaskOption(
            "loss",
            "auto",
            "full softmax over the catalogue, sampled softmax (shared negatives), or auto: "
            "sampled above 10,000 lessons, else full (the run's log says which)",
            choices=("auto", "full", "sampled"),
        ),
        TaskOption("sampled_negatives", 1024, "negatives shared by a batch for the sampled softmax", 1, 1_000_000),
        TaskOption(
            "file_order",
            False,
            "a data file's lines are in time order: each user's history is their lines "
            "top to bottom, and no timestamp column is read (SASRec's `user item` "
            "files)",
        ),
        TaskOption(
            "items", 1000, "synthetic: catalogue size (a multiple of track_len)", 10, 10_000_000, synthetic=True
        ),
        TaskOption("track_len", 20, "synthetic: lessons per track", 2, 100_000, synthetic=True),
        TaskOption(
            "follow", 0.7, "synthetic: probability the next lesson follows the track", 0.3, 0.99, synthetic=True
        ),
        TaskOption("interactions", 100_000, "synthetic: interactions generated", 1000, 1_000_000_000, synthetic=True),
        TaskOption("mean_len", 50, "synthetic: mean interactions per user", 4, 100_000, synthetic=True),
    )
    defaults = {"lr": 3e-3, "batch_size": 128, "epochs": 6, "optimizer": "adamw", "weight_decay": 0.0}
    saved_defaults = {"loss": "full"}  # runs saved before loss=auto was the default trained with the full softmax
    primary_metric = "ndcg@10_full_filtered"
    tokens_key = "seq"
    validation_unit = "users"  # one evaluation row per user
    synthetic_file = True

    def synthetic_table(self, rows: int, seed: int):
        """`rows` interactions of the planted lesson tracks, in the interactions file format."""
        return interactions_table(self.synthetic_interactions(rows, seed)[1])

    @classmethod
    def serving_class(cls) -> type[TaskServing]:
        from core.tasks.recommender.serving import RecommenderTaskServing

        return RecommenderTaskServing

    score_rows = staticmethod(score_rows)  # for the serving part

    def synthetic_interactions(self, interactions: int, seed: int) -> tuple[TrackChain, dict]:
        """The planted lesson tracks and `interactions` of their interactions (user, item 0..n-1, time)."""
        o = self.opts
        chain = make_track_chain(o["items"], o["track_len"], o["follow"], 1.0, seed)
        return chain, generate_interactions(chain, interactions, o["mean_len"], seed)

    def load_data(self, data_path: str, seed: int) -> TaskData:
        o = self.opts
        vocabulary: dict = {}
        notes: list[str] = []
        read = None
        if data_path:
            columns = FILE_ORDER_COLUMNS if o["file_order"] else INTERACTION_COLUMNS
            read = read_splits(
                self.data_source(data_path), columns, carved="each user's last training event (users with 2 or more)"
            )
            parts = encode_interactions(read.tables)
            raw = parts["train" if read.given else "all"]
            user, items, n_items = raw["user"], raw["item"], raw["n_items"]
            vocabulary = {"item_id": raw["item_ids"]}  # the model's item k is item_ids[k - 1]; 0 is padding
            ceiling: dict = {}
            notes = list(read.notes)
            if o["file_order"]:
                notes.append("recommender: each user's history is their lines in file order (file_order)")
        else:
            # user, item and time per interaction, then the (input, target) windows: int64 each
            self.check_synthetic_size(o["interactions"] * 8 * 5 + o["items"] * 8, ("interactions", "items"))
            chain, raw = self.synthetic_interactions(o["interactions"], seed)
            user, items, n_items = raw["user"], raw["item"] + 1, o["items"]
        if read is not None and read.given:  # later interactions given per split (see given_sequence_splits)
            train, val, test, history, more = given_sequence_splits(parts, n_items, o["max_len"], EVAL_NEGATIVES, seed)
            interactions = sum(len(p["item"]) for p in parts.values())
            notes += more
            require_rows(data_path, val, "validation", "no user of the validation data has a training history")
            require_rows(data_path, train, "training", "no user has 2 training interactions to learn a step from")
        else:
            train, val, test = sequence_splits(user, items, n_items, o["max_len"], EVAL_NEGATIVES, seed)
            history, interactions = items, len(items)
        if read is not None and not read.given:
            require_rows(data_path, val, "leave-last-out", "no user has the 3 interactions needed to hold out 2")
            require_rows(data_path, train, "training", "no user has 2 interactions left to train on")
        if not data_path:
            previous = val["seq"][:, -1].numpy() - 1  # the item just before the held-out one
            expected = chain.expected_metrics(previous, EVAL_NEGATIVES, TOP_K)
            # the planted ceiling ranks the whole catalogue, seen items kept: only that protocol has one
            ceiling = {f"{m}@{TOP_K}_full_unfiltered": expected[f"{m}@{TOP_K}_full"] for m in ("hr", "ndcg")}
        # The flat item array the evaluation rows' history_start / history_end index (int32 when it fits).
        self.history = torch.from_numpy(history.astype(np.int32 if n_items < 2**31 else np.int64))
        self.loss_bounds = loss_position_bounds(train["target"])
        counts = torch.bincount(train["target"].flatten(), minlength=n_items + 1)[1:].double()
        baseline = ranking_report(
            lambda b: counts.float().expand(b["target"].shape[0], -1), val, score_rows(n_items, 4096), self.history
        )
        if o["loss"] == "auto":  # said once, as the run starts (TaskData.notes)
            notes.append(auto_loss_note(int(n_items), o["sampled_negatives"]))
        info = {
            "n_items": int(n_items),
            "users_evaluated": int(val["target"].shape[0]),
            "interactions": int(interactions),
        }
        return TaskData(train, val, test, info, ceiling=ceiling, baseline=baseline, vocabulary=vocabulary, notes=notes)

    def settled_options(self, info: dict) -> dict:
        """loss=auto as the loss it chose for this catalogue (the run's config records it; see Task)."""
        if self.opts["loss"] != "auto":
            return {}
        return {"loss": chosen_loss("auto", int(info.get("n_items", self.opts["items"])))}

    def build_model(self, info: dict) -> nn.Module:
        o = self.opts
        if o["d_model"] % o["heads"]:
            raise ConfigError("task_options.heads", f"{o['heads']} heads must divide d_model {o['d_model']}")
        return SASRec(
            info.get("n_items", o["items"]), o["d_model"], o["layers"], o["heads"], o["max_len"], o["dropout"]
        )

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = model(batch["seq"]).flatten(0, 1)
        target = batch["target"].flatten() - 1  # -1: padding
        hidden, target, overflow = self.drop_padding(hidden, target, batch["seq"].shape[0])
        sasrec = _unwrap(model)
        if chosen_loss(self.opts["loss"], sasrec.items.num_embeddings - 1) == "full":
            # scores against the whole catalogue, a chunk of positions at a time
            loss = chunked_softmax_cross_entropy(hidden, sasrec.items.weight[1:], target)  # SASRec.scores' table
        else:
            loss = self._sampled_softmax(sasrec, hidden, target + 1)
        if overflow is not None:  # a batch fuller than the bound (not from this training split): NaN, not a
            loss = loss + torch.where(overflow, float("nan"), 0.0)  # quietly smaller loss; no host sync
        return loss

    def drop_padding(
        self, hidden: torch.Tensor, target: torch.Tensor, rows: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """hidden (N, d) and targets (N,) -> the real positions first, and the overflow flag (None when counted on
        the host, in a position_bucket; elsewhere the bound of loss_position_bounds, without a device wait)."""
        bounds = getattr(self, "loss_bounds", None)
        if bounds is None:
            return hidden, target, None
        exact = self.count_on_host if self.count_on_host is not None else hidden.device.type == "cpu"
        if exact:  # a ladder of sizes, not the count itself: see position_bucket
            size = position_bucket(int((target >= 0).sum()), target.shape[0])
            return *compact_positions(hidden, target, size)[:2], None
        if rows >= len(bounds):
            return hidden, target, None
        bound = int(bounds[rows])  # numpy, on the host: no device sync
        return (hidden, target, None) if bound >= target.shape[0] else compact_positions(hidden, target, bound)

    # None where the batch is on the host (the CPU): its real positions are counted; else a bound sizes them
    count_on_host: bool | None = None

    def _sampled_softmax(self, model: SASRec, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Softmax over the true next item and uniform negatives shared across the batch."""
        n_items = model.items.num_embeddings - 1
        negatives = torch.randint(1, n_items + 1, (self.opts["sampled_negatives"],), device=target.device)
        # One gather of the targets' and the negatives' rows: its backward is one scatter into the table.
        rows = model.items.weight[torch.cat([target, negatives])]
        positive = (hidden * rows[: target.shape[0]]).sum(-1, keepdim=True)
        negative = hidden @ rows[target.shape[0] :].t()
        negative = negative.masked_fill(negatives == target.unsqueeze(-1), float("-inf"))
        logits = torch.cat([positive, negative], dim=-1).float()
        per_position = F.cross_entropy(logits, torch.zeros_like(target), reduction="none")
        real = (target > 0).float()
        return (per_position * real).sum() / real.sum().clamp(min=1.0)

    def _ranks(self, model: Any, split: dict[str, torch.Tensor], batch_size: int) -> dict[str, torch.Tensor]:
        """held_out_ranks of the model's float32 scores, EVAL_SCORES of them at a time."""
        history = getattr(self, "history", None)
        if history is None:
            raise RuntimeError("the recommender evaluates after load_data (it keeps the users' histories)")
        if history.device != split["target"].device:  # moved once per device, kept for the next evaluation
            self.history = history = history.to(split["target"].device)

        def score(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            hidden = model(batch["seq"])[:, -1]
            with torch.autocast(hidden.device.type, enabled=False):
                return model.scores(hidden.float())

        return held_out_ranks(score, split, score_rows(model.items.num_embeddings, max(batch_size, 512)), history)

    def evaluate_parts(self, model: Any, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        return EvalParts(sums={}, values=self._ranks(model, split, batch_size))

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        return ranking_metrics(parts.values)

    def samples(self, model: nn.Module, data: TaskData) -> list[dict[str, str]]:
        """The top TOP_K unseen lessons for the first validation users, from the data at hand, in one batch."""
        ids, sasrec = data.vocabulary.get("item_id"), _unwrap(model)
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        device = next(sasrec.parameters()).device
        rows = {key: data.val[key][:SAMPLE_ROWS].to(device) for key in ("seq", "history_start", "history_end")}
        hidden, self.history = sasrec(rows["seq"])[:, -1], self.history.to(device)  # kept there, as _ranks does
        with torch.autocast(device.type, enabled=False):
            scores = remove_seen(sasrec.scores(hidden.float()), rows, self.history)
        top = (scores.topk(min(TOP_K, scores.shape[1]), dim=1).indices + 1).tolist()
        bounds = zip(rows["history_start"].tolist(), rows["history_end"].tolist())
        histories = [self.history[start:end].tolist() for start, end in bounds]
        lesson = (lambda code: code - 1) if ids is None else (lambda code: ids[code - 1])
        return [
            {
                "input": f"user {row + 1}: {len(h)} lessons, last {listed([lesson(c) for c in h[-3:]])}",
                "answer": listed([lesson(c) for c in top[row]]),
            }
            for row, h in enumerate(histories)
        ]

    def report(self, model: Any, split: dict[str, torch.Tensor], batch_size: int) -> dict:
        """HR@k and NDCG@k curves per protocol, and HR@10 / NDCG@10 by history length."""
        ranks = self._ranks(model, split, batch_size)
        curves = {p: rank_curves(r, REPORT_K) for p, r in ranks.items()}
        ks = list(range(1, REPORT_K + 1))
        order = ("full_filtered", PROTOCOLS[2], "full_unfiltered")  # the primary first, then the sampled
        plots = []
        for i, (metric, title) in enumerate((("hr", "Hit rate"), ("ndcg", "NDCG"))):
            series = [
                {"name": p, "label": PROTOCOL_LABELS[p], "values": curves[p][i], "emphasis": emphasis}
                for p, emphasis in zip(order, ("main", "normal", "faint"))
            ]
            y_label = f"{metric.upper()}@k"
            plots.append({"title": f"{title} by k", "metric": metric, "y_label": y_label, "ks": ks, "series": series})
        length = split["history_end"] - split["history_start"]

        def bucket_values(chosen: torch.Tensor) -> dict:
            return {"values": ranking_metrics({p: ranks[p][chosen] for p in order}, order)}

        buckets = bucket_rows(length, HISTORY_BUCKETS, bucket_values)
        return {
            "curves": plots,
            "protocols": {p: PROTOCOL_LABELS[p] for p in order},
            "buckets": {
                "title": f"By user history length (k = {TOP_K})",
                "by": "interactions before the held-out lesson",
                "unit": "users",
                "k": TOP_K,
                "total": int(length.shape[0]),
                "rows": buckets,
                "series": [
                    {"name": f"{m}@{TOP_K}_{p}", "label": f"{m.upper()}@{TOP_K} {short}", "curve": p}
                    for p, short in (("full_filtered", "full"), (PROTOCOLS[2], "sampled"))
                    for m in ("hr", "ndcg")
                ],
            },
        }


def _unwrap(model: nn.Module) -> Any:
    """The SASRec inside a DDP / compile wrapper (the loss needs its item table)."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)
