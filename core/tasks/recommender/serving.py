"""The recommender's serving part (core.tasks.serving): histories of model item ids in (the manifest's vocabulary
maps the data's lesson ids to them), scores over the catalogue out. Its answers take histories in the data's own
lesson ids (the run's vocabulary: the model's item k is entry k - 1; synthetic data has ids 0..n-1): the top-k
next lessons, those of the history excluded (or marked), ids the model does not know reported and dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn

from core.errors import CheckpointError, ConfigError
from core.tasks.recommender.files import RecommenderFileScorer
from core.tasks.recommender.recommender_rows import WHOLE_ID, split_history
from core.tasks.serving import Input, PreviewSpec, ServingShape, TaskServing, tensor_entry

RECOMMEND_ROWS = 256  # histories scored at a time (the transformer's activations grow with it); fewer for a
# catalogue whose score matrix would be large


@dataclass
class Recommendation:
    items: list  # top-k lesson ids in the data's own ids (the run's vocabulary; synthetic data: 0..n-1)
    scores: list[float]  # the model's scores, same order, descending
    seen: list[bool]  # whether each item is already in the given history (only True when exclude_seen=False)
    unknown: list  # ids of the given history that the model does not know (dropped before scoring)


@dataclass
class RecommendedBatch:
    """recommend_codes' answer for many histories, as arrays: `items` (B, k) model ids (1-based, 0 where a row
    has fewer than k candidates), `scores` (B, k), `seen` (B, k), and `known` (B,): how many of each history's
    ids the model knows (0: nothing to score)."""

    items: np.ndarray
    scores: np.ndarray
    seen: np.ndarray
    known: np.ndarray


class RecommenderServing(nn.Module):
    """Left-padded model item ids (B, max_len) int64 -> scores over the catalogue (B, n_items) float32; column
    j is model id j + 1 (0 is padding)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model: Any = model

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        hidden = self.model(seq)[:, -1]
        return self.model.scores(hidden).float()


class RecommenderTaskServing(TaskServing):
    """Histories of model item ids in, scores over the catalogue out (see the module doc)."""

    output_name = "scores"
    rows_module = "recommender_rows.py"  # serve.py's part for the task (core.tasks.serving)
    answers = ("recommend", "recommend_many", "recommend_codes", "example_users", "item_codes", "item_ids")
    file_scorer = RecommenderFileScorer
    preview = PreviewSpec(
        "id_sequence",
        "ranked_list",
        answer="recommend",
        examples="example_users",
        noun="user",
        item="lesson",
        hint="or type lesson ids, oldest first: 3, 17, 42",
        top_k=10,
    )

    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        return RecommenderServing(model)

    def inputs(self, model: Any) -> tuple[Input, ...]:
        history = "model item ids of the history, oldest first, left-padded with 0"
        return (Input("seq", "int64", (model.positions.num_embeddings,), meaning=history),)

    def manifest(self, model: Any, state: dict, sample: torch.Tensor) -> dict:
        n_items, max_len = model.items.num_embeddings - 1, model.positions.num_embeddings
        vocabulary = (state.get("vocabulary") or {}).get("item_id")
        if vocabulary is None:  # synthetic data: the data's item i is the model's i + 1
            ids, source = list(range(n_items)), "synthetic data: lesson ids 0..n-1"
        else:
            ids = vocabulary.tolist() if isinstance(vocabulary, torch.Tensor) else list(vocabulary)
            source = "the training data's lesson ids"
        scores = "next-lesson scores; column j is model id j + 1"
        return {
            "outputs": [tensor_entry(self.output_name, ["batch", n_items], "float32", scores)],
            "serving": {
                "max_len": max_len,
                "padding": "left, id 0",
                "n_items": n_items,
                "vocabulary": ids,
                "vocabulary_source": source,
                "vocabulary_meaning": "model id k (k >= 1) is lesson vocabulary[k - 1]; 0 is padding",
            },
        }

    def shape(self, model: Any) -> ServingShape:
        return ServingShape(n_items=int(model.items.num_embeddings - 1), max_len=int(model.positions.num_embeddings))

    # ---- the answers (called with the predictor first: core.runs.predict)
    def _vocabulary(self, predictor) -> tuple[np.ndarray, pa.Array]:
        """The data's id of model item k at [k - 1], and the same ids as strings (cached: one per predictor)."""
        if getattr(self, "_ids", None) is None:
            ids = predictor.vocabulary.get("item_id")
            if ids is None:  # synthetic data: the data's ids are 0..n-1, the model's item k is id k - 1
                values = np.arange(predictor.n_items, dtype=np.int64)
            elif isinstance(ids, torch.Tensor):
                values = ids.numpy().astype(np.int64)
            else:
                values = np.array([str(v) for v in ids], dtype=object)
            if len(values) != predictor.n_items:
                raise CheckpointError(
                    f"{predictor.checkpoint}: bad checkpoint: its vocabulary has {len(values):,} "
                    f"lesson ids but the model {predictor.n_items:,} lessons"
                )
            self._strings = pa.array([str(v) for v in values.tolist()], pa.string())
            self._whole_strings = _whole(self._strings)
            self._ids = values
        return self._ids, self._strings

    def item_codes(self, predictor, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The model's item id (1..n) of each of the data's lesson ids (strings or numbers), 0 for an id the
        model does not know; 12.0 names lesson 12 (a float column). One hash lookup over the array."""
        _, strings = self._vocabulary(predictor)
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        if not pa.types.is_string(ids.type) and not pa.types.is_large_string(ids.type):
            ids = pc.cast(ids, pa.string())
        ids = pc.utf8_trim_whitespace(ids)
        index = pc.index_in(ids, value_set=strings)
        if index.null_count > ids.null_count:
            index = pc.coalesce(index, pc.index_in(_whole(ids), value_set=self._whole_strings))
        return pc.fill_null(pc.add(index, 1), 0).to_numpy(zero_copy_only=False).astype(np.int64)

    def item_ids(self, predictor, codes: np.ndarray) -> np.ndarray:
        """The data's lesson ids of model item ids (1..n)."""
        ids, _ = self._vocabulary(predictor)
        return ids[np.asarray(codes, dtype=np.int64) - 1]

    def recommend(self, predictor, history: list | str, k: int = 10, exclude_seen: bool = True) -> Recommendation:
        """The top-k next lessons after `history` (the data's lesson ids, oldest first)."""
        return self.recommend_many(predictor, [history], k, exclude_seen)[0]

    def recommend_many(
        self, predictor, histories: list, k: int = 10, exclude_seen: bool = True
    ) -> list[Recommendation]:
        """recommend for each history, scored together. A history of which the model knows no lesson gets no
        items (its unknown ids say why); one given as a string is its ids separated by spaces or commas."""
        histories = [split_history(h) if isinstance(h, str) else h for h in histories]
        lengths = np.array([len(h) for h in histories], dtype=np.int64)
        codes = self.item_codes(predictor, pa.array([str(item) for h in histories for item in h], pa.string()))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        batch = self.recommend_codes(predictor, codes, offsets, k, exclude_seen)
        ids, _ = self._vocabulary(predictor)
        out = []
        for row, history in enumerate(histories):
            start, real = offsets[row], batch.items[row] > 0
            out.append(
                Recommendation(
                    items=ids[batch.items[row][real] - 1].tolist(),
                    scores=[float(s) for s in batch.scores[row][real]],
                    seen=[bool(s) for s in batch.seen[row][real]],
                    unknown=[item for j, item in enumerate(history) if codes[start + j] == 0],
                )
            )
        return out

    def recommend_codes(
        self, predictor, codes: np.ndarray, offsets: np.ndarray, k: int = 10, exclude_seen: bool = True
    ) -> RecommendedBatch:
        """recommend over histories of model item ids: history b is codes[offsets[b]:offsets[b + 1]] (0 = an
        unknown id, skipped). Each history's last max_len known lessons are read, left-padded as in training;
        with `exclude_seen` every known lesson of the whole history is excluded."""
        if k < 1:
            raise ConfigError("k", f"{k}: ask for at least 1 recommendation")
        offsets = np.asarray(offsets, dtype=np.int64)
        codes = np.asarray(codes, dtype=np.int64)
        rows, n_items, length = len(offsets) - 1, predictor.n_items, predictor.max_len
        k = min(int(k), n_items)
        owner = np.repeat(np.arange(rows), np.diff(offsets))
        known = codes > 0
        kept_owner, kept = owner[known], codes[known]
        known_count = np.bincount(kept_owner, minlength=rows).astype(np.int64)
        known_start = np.cumsum(known_count) - known_count
        position = np.arange(len(kept)) - known_start[kept_owner]  # 0-based within the row's known ids
        back = known_count[kept_owner] - 1 - position  # 0 for the latest
        window = back < length
        seq = np.zeros((rows, length), dtype=np.int64)
        seq[kept_owner[window], length - 1 - back[window]] = kept[window]
        items = np.zeros((rows, k), dtype=np.int64)
        scores = np.full((rows, k), np.nan, dtype=np.float32)
        seen = np.zeros((rows, k), dtype=bool)
        step, model, device = self.task.score_rows(n_items, RECOMMEND_ROWS), predictor.model, predictor.device
        with predictor.lock, torch.inference_mode():
            for start in range(0, rows, step):
                end = min(rows, start + step)
                score = model.scores(model(torch.from_numpy(seq[start:end]).to(device))[:, -1].float()).float()
                lo, hi = np.searchsorted(kept_owner, [start, end])
                row = torch.from_numpy(kept_owner[lo:hi] - start).to(device)
                col = torch.from_numpy(kept[lo:hi] - 1).to(device)
                history = torch.zeros_like(score, dtype=torch.bool).index_put_(
                    (row, col), torch.ones_like(row, dtype=torch.bool)
                )
                if exclude_seen:
                    score = score.masked_fill(history, float("-inf"))
                value, index = score.topk(k, dim=1)
                was_seen = history.gather(1, index).cpu().numpy()
                value, index = value.cpu().numpy(), index.cpu().numpy()
                real = np.isfinite(value) & (known_count[start:end] > 0)[:, None]
                items[start:end] = np.where(real, index + 1, 0)
                scores[start:end] = np.where(real, value, np.nan)
                seen[start:end] = was_seen & real
        return RecommendedBatch(items=items, scores=scores, seen=seen, known=known_count)

    def example_users(self, predictor, limit: int = 200) -> list[tuple[object, list]]:
        """(user id, lesson ids in time order) of the first `limit` users of the run's data: its training file
        (in the file's own ids), or its synthetic data regenerated with the run's seed (ids 0..n-1)."""
        seed, path = int(predictor.config.get("seed", 0)), predictor.config.get("data") or ""
        if not path:
            _, raw = self.task.synthetic_interactions(self.opts["interactions"], seed)
            end = int(np.searchsorted(raw["user"], limit))
            users, items = raw["user"][:end], raw["item"][:end]
            return [(int(u), items[users == u].tolist()) for u in np.unique(users)]
        from core.data.importers import contiguous_ids
        from core.data.sequences import FILE_ORDER_COLUMNS, INTERACTION_COLUMNS
        from core.data.splits import read_splits

        file_order = bool(self.opts.get("file_order"))  # the lines' order is the time order, as in training
        read = read_splits(self.task.data_source(path), FILE_ORDER_COLUMNS if file_order else INTERACTION_COLUMNS)
        table = read.tables["train" if "train" in read.tables else "all"]
        code, _ = contiguous_ids(table.column("user_id"))  # users in order of first appearance
        rows = np.flatnonzero(code < limit)
        time = np.arange(len(code)) if file_order else table.column("timestamp").to_numpy()
        order = rows[np.lexsort((time[rows], code[rows]))]
        user_ids = table.column("user_id").take(pa.array(order)).to_pylist()
        item_ids = table.column("item_id").take(pa.array(order)).to_pylist()
        out: dict = {}
        for user, item in zip(user_ids, item_ids):
            out.setdefault(user, []).append(item)
        return list(out.items())


def _whole(ids: pa.Array) -> pa.Array:
    """Ids with a whole number written as a float ("12.0", "12.") written as an integer ("12")."""
    return pc.replace_substring_regex(ids, WHOLE_ID.pattern, r"\1")
