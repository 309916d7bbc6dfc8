"""The ranking task's serving part (core.tasks.serving): raw candidate features in, a score per candidate out,
the model's fitted normaliser inside the deployable module; its file scorer for `predict`; its answers `rank`
and `example_queries` (the run's test queries, split as the run split them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from core.data.formats import normalise_name
from core.data.row_checks import Checks, feature_matrix, ids, numbers, shown_names
from core.data.synthetic import generate_ranking
from core.errors import DataError
from core.tasks.ranking.losses import ndcg_at
from core.tasks.serving import FileScorer, Input, PreviewSpec, ServingShape, TaskServing, feature_rows, tensor_entry

RANK_ROWS = 65536  # candidates scored at a time


@dataclass
class Query:
    query_id: object
    doc_ids: list
    features: np.ndarray  # (n, F) float32, raw (the model normalises)
    labels: np.ndarray | None  # (n,) true relevance grades when known


class RankingServing(nn.Module):
    """Raw features (B, N, F) float32 -> scores (B, N) float32; the model's fitted normaliser is inside and
    stays float32 whatever the weights' dtype (its quantile knots would not survive bf16)."""

    def __init__(self, model: nn.Module, onnx_friendly: bool = False):
        super().__init__()
        self.model: Any = model
        self.onnx_friendly = onnx_friendly

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        norm = self.model.norm
        y = norm(features.float(), portable=True) if self.onnx_friendly else norm(features.float())
        dtype = self.model.net[0].weight.dtype
        return self.model.net(y.to(dtype)).squeeze(-1).float()


class RankingFileScorer(FileScorer):
    """`predict` over candidates: query_id, doc_id, f1..fN (label optional, copied) -> query_id, doc_id, score."""

    unit = "candidates"
    input_columns = ("query_id", "doc_id", "label")

    def __init__(self, predictor, reader, options):
        super().__init__(predictor, reader, options)
        why = "a ranking model scores candidates given as query_id, doc_id, f1..fN"
        self.query = reader.require("query_id", why)
        self.doc = reader.require("doc_id", why)
        self.label = reader.find("label")
        width = predictor.n_features
        features = [reader.find(f"f{i}") for i in range(1, width + 1)]
        missing = [f"f{i}" for i, c in enumerate(features, 1) if c is None]
        if missing:
            raise DataError(
                f"{reader.path}: no column {missing[0]!r} (the ranking model reads {width} features, "
                f"f1..f{width}); {reader.columns_note()}"
            )
        named = [normalise_name(c) for c in reader.columns]
        more = [
            c for c, n in zip(reader.columns, named) if n.startswith("f") and n[1:].isdigit() and int(n[1:]) > width
        ]
        if more:
            raise DataError(
                f"{reader.path}: the ranking model reads {width} features (f1..f{width}) but the file "
                f"also has {shown_names(more)}: a model trained on other features?"
            )
        self.features = features
        reader.use([self.query, self.doc, *features, *([self.label] if self.label else [])])
        types = {name: reader.id_type(name) for name in (self.query, self.doc)}
        fields = [("query_id", types[self.query]), ("doc_id", types[self.doc]), ("score", pa.float32())]
        self.schema = pa.schema(fields + ([("label", pa.int64())] if self.label else []))

    def score(self, batch, lines, report):
        checks = Checks(batch.num_rows)
        query, doc = ids(batch.column(self.query), self.query, checks), ids(batch.column(self.doc), self.doc, checks)
        x = feature_matrix(batch, self.features, checks)
        label = None
        if self.label:  # copied when it is a whole number, else left empty (the model does not read it)
            ignored = Checks(batch.num_rows)
            values = numbers(batch.column(self.label), self.label, ignored, dtype="float64")
            # a whole number within int64 (1e30 would wrap to -2**63): others are left empty
            whole = ~ignored.bad & (values == np.round(values)) & (np.abs(values) < 2.0**63)
            label = pa.array(np.where(whole, values, 0).astype(np.int64), mask=~whole)
        good = self._good(batch, lines, checks, report)
        for rows in self._slices(good):
            taken = pa.array(rows)
            columns = {
                "query_id": query.take(taken),
                "doc_id": doc.take(taken),
                "score": pa.array(self.predictor.rank(x[rows])),
            }
            if label is not None:
                columns["label"] = label.take(taken)
            self.scored += len(rows)
            yield pa.table(columns, schema=self.schema)


class RankingTaskServing(TaskServing):
    """Each query's candidates as raw features in (any number of candidates), their scores out."""

    output_name = "scores"
    rows_module = "ranking_rows.py"  # serve.py's part for the task (core.tasks.serving)
    answers = ("rank", "example_queries")
    file_scorer = RankingFileScorer
    preview = PreviewSpec(
        "feature_rows", "ranked_list", answer="rank", examples="example_queries", noun="query", item="lesson", top_k=10
    )

    def preview_quality(self, labels_in_order) -> tuple[str, float | None]:
        """NDCG@k of the candidates in the order shown, as the task's evaluation measures it."""
        k = self.preview.top_k
        return f"NDCG@{k}", ndcg_at(labels_in_order, k)

    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        return RankingServing(model, onnx_friendly=fmt == "onnx")

    def weights(self, model: Any) -> nn.Module:
        return model.net  # the normaliser stays float32

    def sample_inputs(self, model: Any, rows: int, seed: int) -> torch.Tensor:
        """(rows // 4 queries, 6 candidates, F) features spread over the normaliser's knots or statistics."""
        gen = torch.Generator().manual_seed(seed)
        norm = model.norm
        features = norm.mean.shape[0]
        shape = (max(rows // 4, 2), 6, features)
        if hasattr(norm, "knots"):
            k = norm.knots.shape[1]
            pick = torch.randint(0, k, shape, generator=gen)
            base = norm.knots.t()[pick, torch.arange(features)]
            return base + 0.01 * torch.randn(shape, generator=gen) * norm.knots.std(1)
        return norm.center + norm.scale * torch.randn(shape, generator=gen)

    def inputs(self, model: Any) -> tuple[Input, ...]:
        raw = "raw (un-normalised) features of each query's candidates"
        return (Input("features", "float32", ("candidates", int(model.norm.mean.shape[0])), meaning=raw),)

    def manifest(self, model: Any, state: dict, sample: torch.Tensor) -> dict:
        features = int(model.norm.mean.shape[0])
        scores = "relevance scores: rank a query's candidates by descending score"
        return {
            "outputs": [tensor_entry(self.output_name, ["batch", "candidates"], "float32", scores)],
            "serving": {
                "features": features,
                "feature_order": [f"f{i + 1}" for i in range(features)],
                "normalization": f"{self.opts['normalize']}, fit on the training split; inside the "
                "model: give raw features",
            },
        }

    def shape(self, model: Any) -> ServingShape:
        return ServingShape(n_features=int(model.norm.mean.shape[0]))

    # ---- the answers (called with the predictor first: core.runs.predict)
    def rank(self, predictor, features) -> np.ndarray:
        """(n, F) raw features (f1..fF, the run's column order) -> (n,) scores (float32)."""
        x = feature_rows(features, predictor.n_features, "features", predictor.task)
        out = np.empty(len(x), dtype=np.float32)
        with predictor.lock, torch.inference_mode():
            for start in range(0, len(x), RANK_ROWS):
                chunk = torch.from_numpy(x[start : start + RANK_ROWS]).to(predictor.device)
                out[start : start + len(chunk)] = predictor.model(chunk).float().cpu().numpy()
        return out

    def example_queries(self, predictor, limit: int = 200) -> list[Query]:
        """Up to `limit` queries of the run's data with their candidates' raw features and true grades: its
        test split (the same queries as the run's), else its validation split."""
        seed, opts, path = int(predictor.config.get("seed", 0)), self.opts, predictor.config.get("data") or ""
        if not path:
            data = generate_ranking(opts["queries"], opts["docs"], opts["features"], opts["noise"], seed)
            query, features, label = data.query, data.features, data.label
            raw_query: np.ndarray = query
            doc = np.arange(len(query)) - np.searchsorted(query, query)  # position within its query
            whole = True
        else:
            table, whole = self.task.example_table(path)
            query, features, label = self.task.ranking_arrays(table, path)
            raw_query = np.array(table.column("query_id").to_pylist(), dtype=object)
            doc = np.array(table.column("doc_id").to_pylist(), dtype=object)
        n = int(query.max()) + 1 if len(query) else 0
        chosen = self.task.test_queries(n, seed) if whole else np.unique(query)  # one data set: its test split
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
