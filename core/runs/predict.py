"""Use a trained model: `load_predictor(run or checkpoint)` gives a Predictor that answers in the data's own
terms, shared by `amp-console predict` (core.runs.file_predict), the window's preview panel and the export checks.

- sentiment: P(positive) of review texts, tokenized exactly as the run's task tokenizes its data
  (SentimentTask._tokens: the same hashing, negation scope and max_tokens), and `explain`: the words whose
  removal moves P(positive) most;
- recommender: the top-k next lessons for a history of lesson ids *in the data's own ids* (the run's vocabulary:
  the model's item k is vocabulary entry k - 1; synthetic data has ids 0..n-1), already-seen lessons excluded
  (or marked), ids the model does not know reported and dropped before scoring;
- ranking: a score per candidate from its raw features (the model's ScoringMLP normalises them itself, with
  the statistics fit on the run's training split and saved as buffers);
- tiny: class probabilities of 10-number points;
- the window's Model preview: `preview_answer` and its kin answer one input of the kind the task's serving
  declares (core.tasks.serving.PreviewSpec), through the methods above.

The model is rebuilt from the checkpoint alone (task options, data_info and vocabulary, as export_checkpoint
does), loaded through core.engine.checkpoints.load_checkpoint (weights_only, CRC, structure, finite weights).
It runs in float32 on the predictor's one torch.device (default: the CPU: one request at a time is what the
window asks), in eval mode under torch.inference_mode, without autocast: inference of a few rows gains
nothing from it, and fp32 gives the same answers as an fp32 export. A lock makes the methods safe to call from
a worker thread while another thread holds the predictor.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from core.engine.run_record import run_checkpoint
from core.errors import CheckpointError, ConfigError, DataError

if TYPE_CHECKING:
    from core.tasks.serving import PreviewSpec, ServingShape

SENTIMENT_ROWS = 4096  # texts tokenized and scored at a time
RANK_ROWS = 65536  # candidates scored at a time
RECOMMEND_ROWS = 256  # histories scored at a time (the transformer's activations grow with it; no faster at 1024
# on 2 cores); fewer for a catalogue whose score matrix would be large
HOST = torch.device("cpu")  # where answers are read from (numpy reads host memory), whatever the model's device


@dataclass
class Recommendation:
    items: list  # top-k lesson ids in the data's own ids (the run's vocabulary; synthetic data: 0..n-1)
    scores: list[float]  # the model's scores, same order, descending
    seen: list[bool]  # whether each item is already in the given history (only True when exclude_seen=False)
    unknown: list  # ids of the given history that the model does not know (dropped before scoring)


@dataclass
class Query:
    query_id: object
    doc_ids: list
    features: np.ndarray  # (n, F) float32, raw (the model normalises)
    labels: np.ndarray | None  # (n,) true relevance grades when known


@dataclass
class RecommendedBatch:
    """recommend's answer for many histories at once, as arrays (what the CLI writes without a Python object
    per user): `items` (B, k) model ids (1-based, 0 where a row has fewer than k candidates), `scores` (B, k),
    `seen` (B, k), and `known` (B,): how many of each history's ids the model knows (0: nothing to score)."""

    items: np.ndarray
    scores: np.ndarray
    seen: np.ndarray
    known: np.ndarray


@dataclass
class Predictor:
    task: str
    checkpoint: Path
    step: int
    epoch: int
    metrics: dict
    config: dict
    device: torch.device
    model: torch.nn.Module = field(repr=False)
    task_object: object = field(repr=False)
    data_info: dict = field(default_factory=dict)
    vocabulary: dict = field(default_factory=dict, repr=False)
    notes: list = field(default_factory=list)  # e.g. "the run kept no best checkpoint: its last one"

    def __post_init__(self):
        self._lock = threading.Lock()
        self._ids: np.ndarray | None = None  # recommender: the data's id of model item k at [k - 1]
        self._id_strings: pa.Array | None = None  # the same ids as strings, to look inputs up in
        self._whole_strings: pa.Array | None = None  # the same, a whole number written as 12.0 as 12

    # ---- what the model reads (the task's serving part, core.tasks.serving) ---------------------------------
    @cached_property
    def serving(self):
        """The task's serving part (core.tasks.serving.TaskServing); None when the task is not served."""
        return self.task_object.serving()

    @property
    def lock(self) -> threading.Lock:
        """Held while the model computes (a serving part's answers take it too)."""
        return self._lock

    def __getattr__(self, name: str):
        """An answer the task's serving part defines itself (a name in its `answers` that is a method of it,
        called with this predictor first), e.g. FeatureServing's predict_rows."""
        if name.startswith("_") or "task_object" not in self.__dict__:
            raise AttributeError(name)
        serving = self.serving
        method = getattr(type(serving), name, None) if serving is not None else None
        if name not in getattr(serving, "answers", ()) or not callable(method):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return functools.partial(getattr(serving, name), self)

    @cached_property
    def shape(self) -> ServingShape:
        """What the model reads: catalogue size, history window, feature count (0 where the task has none)."""
        from core.tasks.serving import ServingShape

        serving = self.serving
        return serving.shape(self.model) if serving is not None else ServingShape()

    @property
    def n_items(self) -> int:
        """recommender: the catalogue size."""
        return self.shape.n_items

    @property
    def max_len(self) -> int:
        """recommender: the longest history the model reads (its last max_len known lessons)."""
        return self.shape.max_len

    @property
    def n_features(self) -> int:
        """ranking: feature columns (f1..fN, in this order); tiny: 10."""
        return self.shape.n_features

    def _need(self, method: str) -> None:
        """A ConfigError unless this task's serving answers `method`, naming the task that does."""
        serving = self.task_object.serving_class()
        if serving is not None and method in serving.answers:
            return
        from core.tasks import TASKS

        wanted = next(
            (
                name
                for name, cls in TASKS.items()
                if (other := cls.serving_class()) is not None and method in other.answers
            ),
            "another",
        )
        raise ConfigError("task", f"{self.checkpoint} is a {self.task} model: {method} needs a {wanted} checkpoint")

    # ---- the Model preview: one input of the kind the task's serving declares (core.tasks.serving.PreviewSpec)
    @cached_property
    def preview(self) -> PreviewSpec | None:
        """What the window's preview shows for this task (None: no preview page)."""
        serving = self.task_object.serving_class()
        return None if serving is None else serving.preview

    def _preview_spec(self) -> PreviewSpec:
        if self.preview is None:
            raise ConfigError("task", f"{self.checkpoint}: the {self.task} task declares no preview")
        return self.preview

    def preview_examples(self) -> list:
        """Examples of the preview's input from the run's data (see PreviewSpec); [] when the task has none."""
        spec = self._preview_spec()
        if spec.examples is None:
            return []
        return list(getattr(self, spec.examples)(spec.example_limit))

    def preview_answer(self, value, **options):
        """The answer to one input of the preview's input kind, as plain values of its output kind: a float
        (score), a list of floats (class_probabilities; ranked_list over feature_rows: a score per row) or the
        answer method's own object (ranked_list over an id_sequence: a Recommendation of spec.top_k)."""
        spec = self._preview_spec()
        answer = getattr(self, spec.answer)
        kind = spec.input_kind
        if kind == "text":
            out = answer([str(value)], **options)[0]
        elif kind == "feature_row":
            out = answer(np.asarray([value], dtype=np.float32), **options)[0]
        elif kind == "feature_rows":
            out = answer(np.asarray(value, dtype=np.float32), **options)
        else:  # id_sequence
            out = answer(list(value), k=spec.top_k, **options)
        if spec.output_kind == "score":
            return float(out)
        if isinstance(out, np.ndarray):
            return [float(v) for v in out]
        return out

    def preview_explain(self, text: str) -> list[tuple[str, float]]:
        """text: (word, effect) of the words that moved the answer most (the spec's `explain` method)."""
        spec = self._preview_spec()
        if spec.explain is None:
            return []
        return [(str(w), float(e)) for w, e in getattr(self, spec.explain)(text)]

    def preview_quality(self, labels_in_order) -> tuple[str, float | None] | None:
        """ranked_list: (name, value) of the order shown against its true labels (TaskServing.preview_quality)."""
        serving = self.serving
        return None if serving is None else serving.preview_quality(labels_in_order)

    # ---- sentiment -------------------------------------------------------------------------------------------
    def sentiment(self, texts: list[str]) -> list[float]:
        """P(positive) of each text (a single string is one text, not one per character)."""
        self._need("sentiment")
        if isinstance(texts, str):
            texts = [texts]
        return self.sentiment_array(pa.array([str(t) for t in texts], pa.string())).tolist()

    def sentiment_array(self, texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """P(positive) (float64) of a string array, SENTIMENT_ROWS at a time."""
        self._need("sentiment")
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        out = np.empty(len(texts), dtype=np.float64)
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), SENTIMENT_ROWS):
                tokens = self.task_object._tokens(texts.slice(start, SENTIMENT_ROWS))
                logits = self.model(tokens.to(self.device)).float()
                out[start : start + len(tokens)] = torch.softmax(logits, dim=1)[:, 1].double().to(HOST).numpy()
        return out

    def explain(self, text: str, top: int = 8) -> list[tuple[str, float]]:
        """The words that pushed P(positive) most: (word, P(text) - P(text without that word)), by |effect|.
        A positive effect means the word pushed towards positive. Every occurrence of the word is removed,
        clause ends stay (so a negator's scope is kept as the tokenizer reads it); words are as the tokenizer
        reads them (lower-cased, normalised)."""
        from core.data.tokenizer import BOUNDARY, word_lists

        self._need("explain")
        words = word_lists(pa.array([str(text)], pa.string()), boundaries=True)[0].as_py() or []
        distinct = list(dict.fromkeys(w for w in words if w != BOUNDARY))
        if not distinct:
            return []

        def joined(kept: list[str]) -> str:
            return " ".join("." if w == BOUNDARY else w for w in kept)

        variants = [joined(words)] + [joined([w for w in words if w != word]) for word in distinct]
        p = self.sentiment_array(pa.array(variants, pa.string()))
        effects = [(word, float(p[0] - p[i + 1])) for i, word in enumerate(distinct)]
        effects.sort(key=lambda item: -abs(item[1]))
        return effects[: max(0, int(top))]

    # ---- recommender -----------------------------------------------------------------------------------------
    def _vocabulary(self) -> tuple[np.ndarray, pa.Array]:
        if self._ids is None:
            ids = self.vocabulary.get("item_id")
            if ids is None:  # synthetic data: the data's ids are 0..n-1, the model's item k is id k - 1
                values = np.arange(self.n_items, dtype=np.int64)
            elif isinstance(ids, torch.Tensor):
                values = ids.numpy().astype(np.int64)
            else:
                values = np.array([str(v) for v in ids], dtype=object)
            if len(values) != self.n_items:
                raise CheckpointError(
                    f"{self.checkpoint}: bad checkpoint: its vocabulary has {len(values):,} "
                    f"lesson ids but the model {self.n_items:,} lessons"
                )
            self._id_strings = pa.array([str(v) for v in values.tolist()], pa.string())
            self._ids = values
        return self._ids, self._id_strings

    def item_codes(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The model's item id (1..n) of each of the data's lesson ids (given as strings or numbers), 0 for
        an id the model does not know. Vectorised (one hash lookup over the array)."""
        _, strings = self._vocabulary()
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        if not pa.types.is_string(ids.type) and not pa.types.is_large_string(ids.type):
            ids = pc.cast(ids, pa.string())
        ids = pc.utf8_trim_whitespace(ids)
        index = pc.index_in(ids, value_set=strings)
        if index.null_count > ids.null_count:  # misses: 12.0 names lesson 12 (a float column, pandas' NaN-able ints)
            if self._whole_strings is None:
                self._whole_strings = _whole(strings)
            index = pc.coalesce(index, pc.index_in(_whole(ids), value_set=self._whole_strings))
        return pc.fill_null(pc.add(index, 1), 0).to_numpy(zero_copy_only=False).astype(np.int64)

    def item_ids(self, codes: np.ndarray) -> np.ndarray:
        """The data's lesson ids of model item ids (1..n)."""
        ids, _ = self._vocabulary()
        return ids[np.asarray(codes, dtype=np.int64) - 1]

    def recommend(self, history: list, k: int = 10, exclude_seen: bool = True) -> Recommendation:
        """The top-k next lessons after `history` (the data's lesson ids, oldest first)."""
        self._need("recommend")
        return self.recommend_many([history], k, exclude_seen)[0]

    def recommend_many(self, histories: list[list], k: int = 10, exclude_seen: bool = True) -> list[Recommendation]:
        """recommend for each history, scored together in batches. A history of which the model knows no
        lesson gets no items (its unknown ids say why). A history given as a string is its ids separated by
        spaces or commas (as `amp-console predict` reads a history column), not one id per character."""
        self._need("recommend_many")
        histories = [split_history(h) if isinstance(h, str) else h for h in histories]
        lengths = np.array([len(h) for h in histories], dtype=np.int64)
        flat = pa.array([str(item) for h in histories for item in h], pa.string())
        codes = self.item_codes(flat)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        batch = self.recommend_codes(codes, offsets, k, exclude_seen)
        ids, _ = self._vocabulary()
        out = []
        for row, history in enumerate(histories):
            start = offsets[row]
            unknown = [item for j, item in enumerate(history) if codes[start + j] == 0]
            real = batch.items[row] > 0
            out.append(
                Recommendation(
                    items=ids[batch.items[row][real] - 1].tolist(),
                    scores=[float(s) for s in batch.scores[row][real]],
                    seen=[bool(s) for s in batch.seen[row][real]],
                    unknown=unknown,
                )
            )
        return out

    def recommend_codes(
        self, codes: np.ndarray, offsets: np.ndarray, k: int = 10, exclude_seen: bool = True
    ) -> RecommendedBatch:
        """recommend over histories given as model item ids: history b is codes[offsets[b]:offsets[b + 1]]
        (0 = an unknown id, skipped). Each history's last max_len known lessons are read, left-padded as in
        training; with `exclude_seen` every known lesson of the whole history is excluded."""
        from core.tasks.recommender.task import score_rows

        self._need("recommend")
        if k < 1:
            raise ConfigError("k", f"{k}: ask for at least 1 recommendation")
        offsets = np.asarray(offsets, dtype=np.int64)
        codes = np.asarray(codes, dtype=np.int64)
        rows = len(offsets) - 1
        k = min(int(k), self.n_items)
        owner = np.repeat(np.arange(rows), np.diff(offsets))
        known = codes > 0
        kept_owner, kept = owner[known], codes[known]
        known_count = np.bincount(kept_owner, minlength=rows).astype(np.int64)
        known_start = np.cumsum(known_count) - known_count
        position = np.arange(len(kept)) - known_start[kept_owner]  # 0-based within the row's known ids
        back = known_count[kept_owner] - 1 - position  # 0 for the latest
        length = self.max_len
        window = back < length
        seq = np.zeros((rows, length), dtype=np.int64)
        seq[kept_owner[window], length - 1 - back[window]] = kept[window]
        items = np.zeros((rows, k), dtype=np.int64)
        scores = np.full((rows, k), np.nan, dtype=np.float32)
        seen = np.zeros((rows, k), dtype=bool)
        step = score_rows(self.n_items, RECOMMEND_ROWS)
        with self._lock, torch.inference_mode():
            for start in range(0, rows, step):
                end = min(rows, start + step)
                batch = torch.from_numpy(seq[start:end]).to(self.device)
                score = self.model.scores(self.model(batch)[:, -1].float()).float()
                lo, hi = np.searchsorted(kept_owner, [start, end])
                row = torch.from_numpy(kept_owner[lo:hi] - start).to(self.device)
                col = torch.from_numpy(kept[lo:hi] - 1).to(self.device)
                history = torch.zeros_like(score, dtype=torch.bool).index_put_(
                    (row, col), torch.ones_like(row, dtype=torch.bool)
                )
                if exclude_seen:
                    score = score.masked_fill(history, float("-inf"))
                value, index = score.topk(k, dim=1)
                was_seen = history.gather(1, index)
                value, index, was_seen = value.to(HOST).numpy(), index.to(HOST).numpy(), was_seen.to(HOST).numpy()
                real = np.isfinite(value) & (known_count[start:end] > 0)[:, None]
                items[start:end] = np.where(real, index + 1, 0)
                scores[start:end] = np.where(real, value, np.nan)
                seen[start:end] = was_seen & real
        return RecommendedBatch(items=items, scores=scores, seen=seen, known=known_count)

    def example_users(self, limit: int = 200) -> list[tuple[object, list]]:
        """(user id, lesson ids in time order) of the first `limit` users of the run's data: its training file
        (in the file's own ids), or its synthetic data regenerated with the run's seed (ids 0..n-1)."""
        self._need("example_users")
        opts, seed = self.task_object.opts, int(self.config.get("seed", 0))
        if not self.config.get("data"):
            from core.data.synthetic import generate_interactions, make_track_chain

            chain = make_track_chain(opts["items"], opts["track_len"], opts["follow"], 1.0, seed)
            raw = generate_interactions(chain, opts["interactions"], opts["mean_len"], seed)
            end = int(np.searchsorted(raw["user"], limit))
            users, items = raw["user"][:end], raw["item"][:end]
            return [(int(u), items[users == u].tolist()) for u in np.unique(users)]
        from core.data.importers import contiguous_ids
        from core.data.sequences import INTERACTION_COLUMNS

        table = self._read_data(INTERACTION_COLUMNS)
        code, _ = contiguous_ids(table.column("user_id"))  # users in order of first appearance
        rows = np.flatnonzero(code < limit)
        order = rows[np.lexsort((table.column("timestamp").to_numpy()[rows], code[rows]))]
        user_ids = table.column("user_id").take(pa.array(order)).to_pylist()
        item_ids = table.column("item_id").take(pa.array(order)).to_pylist()
        out: dict = {}
        for user, item in zip(user_ids, item_ids):
            out.setdefault(user, []).append(item)
        return list(out.items())

    def _read_data(self, columns, prefix: str | None = None) -> pa.Table:
        """The run's training data (its training file when splits were given)."""
        from core.config import RunConfig
        from core.data.splits import DataSource, read_splits

        cfg = RunConfig.from_dict(self.config, source=str(self.checkpoint))
        read = read_splits(DataSource.from_config(cfg), columns, prefix_columns=prefix)
        return read.tables.get("train", read.tables.get("all"))

    # ---- ranking ---------------------------------------------------------------------------------------------
    def rank(self, features: np.ndarray) -> np.ndarray:
        """(n, F) raw features (f1..fF, the run's column order) -> (n,) scores (float32)."""
        self._need("rank")
        x = self._matrix(features, "features")
        out = np.empty(len(x), dtype=np.float32)
        with self._lock, torch.inference_mode():
            for start in range(0, len(x), RANK_ROWS):
                chunk = torch.from_numpy(x[start : start + RANK_ROWS]).to(self.device)
                out[start : start + len(chunk)] = self.model(chunk).float().to(HOST).numpy()
        return out

    def rows(self, values, what: str) -> np.ndarray:
        """`values` as an (n, n_features) float32 array of finite numbers (one row alone is a batch of one);
        DataError naming the first row and number that is not."""
        return self._matrix(values, what)

    def _matrix(self, values, what: str) -> np.ndarray:
        try:
            wide = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{what}: not numbers: {exc}") from None
        with np.errstate(over="ignore"):
            x = wide.astype(np.float32)
        if x.ndim == 1 and x.shape[0] == self.n_features:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise DataError(
                f"{what}: the {self.task} model takes {self.n_features} numbers per row, got an array "
                f"of shape {tuple(x.shape)}"
            )
        bad = np.argwhere(~np.isfinite(x))
        if len(bad):  # NaN, inf, or beyond float32 (1e39): the model's answer would be NaN or meaningless
            row, column = (int(v) for v in bad[0])
            value = wide.reshape(x.shape)[row, column]
            raise DataError(f"{what}: row {row}, number {column + 1} ({value:g}) is not a finite float32 number")
        return np.ascontiguousarray(x)

    def example_queries(self, limit: int = 200) -> list[Query]:
        """Up to `limit` queries of the run's data, with their candidates' raw features and true grades: its
        test split (the same queries as the run's, from the same seeded split), else its validation split."""
        self._need("example_queries")
        from core.data.importers import contiguous_ids

        seed, opts = int(self.config.get("seed", 0)), self.task_object.opts
        if not self.config.get("data"):
            from core.data.synthetic import generate_ranking

            data = generate_ranking(opts["queries"], opts["docs"], opts["features"], opts["noise"], seed)
            query, features, label = data.query, data.features, data.label
            raw_query = query
            doc = np.arange(len(query)) - np.searchsorted(query, query)  # position within its query
            whole = True
        else:
            from core.tasks.ranking.task import RANKING_COLUMNS

            table, whole = self._read_test_table(RANKING_COLUMNS)
            names = [n for n in table.column_names if n not in ("query_id", "doc_id", "label")]
            features = np.stack([table.column(n).to_numpy().astype(np.float32) for n in names], axis=1)
            label = table.column("label").to_numpy().astype(np.int64)
            query, _ = contiguous_ids(table.column("query_id"))
            raw_query = np.array(table.column("query_id").to_pylist(), dtype=object)
            doc = np.array(table.column("doc_id").to_pylist(), dtype=object)
        if whole:  # one data set: the seeded 80 / 10 / 10 split of queries, as the run made it
            n = int(query.max()) + 1 if len(query) else 0
            perm = np.random.default_rng([seed, 8]).permutation(n)
            chosen = perm[int(0.9 * n) :]
        else:
            chosen = np.unique(query)
        out = []
        for code in chosen[:limit]:
            rows = np.flatnonzero(query == code)
            qid = raw_query[rows[0]]
            out.append(
                Query(
                    query_id=qid.item() if isinstance(qid, np.generic) else qid,
                    doc_ids=[d.item() if isinstance(d, np.generic) else d for d in doc[rows]],
                    features=np.ascontiguousarray(features[rows], dtype=np.float32),
                    labels=label[rows].astype(np.int64),
                )
            )
        return out

    def _read_test_table(self, columns) -> tuple[pa.Table, bool]:
        """The run's given test (else validation) table, or its one data set (True: split it as the run did)."""
        from core.config import RunConfig
        from core.data.splits import DataSource, read_splits

        cfg = RunConfig.from_dict(self.config, source=str(self.checkpoint))
        read = read_splits(DataSource.from_config(cfg), columns, prefix_columns="f")
        for name in ("test", "val"):
            if name in read.tables:
                return read.tables[name], False
        return read.tables.get("all", read.tables.get("train")), "all" in read.tables

    # ---- tiny ------------------------------------------------------------------------------------------------
    def classify(self, x: np.ndarray) -> np.ndarray:
        """tiny: (n, 10) points -> (n, 2) class probabilities (float32)."""
        self._need("classify")
        x = self._matrix(x, "x")
        with self._lock, torch.inference_mode():
            logits = self.model(torch.from_numpy(x).to(self.device)).float()
            return torch.softmax(logits, dim=1).to(HOST).numpy()

    def example_inputs(self, limit: int = 20) -> np.ndarray:
        """tiny: the first `limit` validation points of the run's synthetic data (regenerated with its seed)."""
        from core.tasks.tiny.task import make_tiny_data

        self._need("example_inputs")
        opts = self.task_object.opts
        x, _ = make_tiny_data(opts["samples"], opts["label_noise"], int(self.config.get("seed", 0)))
        cut = int(0.8 * len(x))
        return x[cut : cut + limit].numpy().astype(np.float32)


def split_history(text: str) -> list[str]:
    """A history written as text: ids separated by spaces or commas, brackets around them ignored."""
    import re

    return [part for part in re.split(r"[\s,]+", text.strip(" \t\r\n[](),")) if part]


def _whole(ids: pa.Array) -> pa.Array:
    """Ids with a whole number written as a float ("12.0", "12.") written as an integer ("12")."""
    return pc.replace_substring_regex(ids, r"^([-+]?\d+)\.0*$", r"\1")


def load_predictor(source: str | Path, which: str = "best", device: str | None = None) -> Predictor:
    """A Predictor for the checkpoint `source` names: a checkpoint file, or a run folder (see run_checkpoint).
    Bad files are one CheckpointError line; `device` (default cpu) a DeviceError when it is not here."""
    from core.engine.checkpoints import load_checkpoint, rebuild_model

    if which not in ("best", "last"):
        raise ConfigError("which", f"{which!r}: choose best or last")
    path = Path(source).expanduser()
    notes: list[str] = []
    if path.is_dir():
        path, notes = run_checkpoint(path, which)
    elif not path.exists():
        raise CheckpointError(f"{source}: no such checkpoint file or run folder")
    if device:
        from core.devices import device_info, torch_device

        where = torch_device(device_info(device))
    else:
        where = HOST
    state = load_checkpoint(path)
    config = state["config"]
    task, model = rebuild_model(state, path)
    model = model.float().to(where).eval()
    return Predictor(
        task=state["task"],
        checkpoint=path,
        step=state["step"],
        epoch=state["epoch"],
        metrics=dict(state["metrics"]),
        config=dict(config),
        device=where,
        model=model,
        task_object=task,
        data_info=dict(state.get("data_info") or {}),
        vocabulary=dict(state.get("vocabulary") or {}),
        notes=notes,
    )
