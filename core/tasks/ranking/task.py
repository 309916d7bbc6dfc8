"""Search ranking: an MLP scores each (query, lesson) feature vector; lessons of a query are ranked by score.

A split holds candidate lists `features` (R, W, F) and `label` (R, W), -1 padding; a query longer than W spans
several lists and the split gains `qid` (R,). Metrics: NDCG@10 and MRR; baseline random order; ceiling the
hidden relevance (synthetic data).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from core.data.importers import Column, contiguous_ids, require_rows
from core.data.splits import SPLITS, SplitTables, carve, read_splits, seeded_thirds
from core.data.synthetic import generate_ranking, ranking_table
from core.errors import DataError
from core.tasks.base import EvalParts, Task, TaskData, TaskOption, bucket_rows, iter_slices
from core.tasks.ranking.losses import LOSSES, TOP_K, flat_ranking_metrics, query_curves, ranking_metrics
from core.tasks.serving import TaskServing

RANKING_COLUMNS = [
    Column("query_id", "id"),
    Column("doc_id", "id"),
    Column("label", "int", minimum=0, why="labels are relevance grades 0, 1, 2, ..."),
]


NORMALIZE = ("asinh", "quantile", "standard", "none")  # also written out in RankingTask's options
FIT_ROWS = 200_000  # candidates the normaliser's statistics are fit on, at most (a seeded sample beyond)
QUANTILES = 256  # knots per column of the quantile normaliser (normalize=quantile)


def quantile_gauss(x: torch.Tensor, knots: torch.Tensor, portable: bool = False) -> torch.Tensor:
    """x (..., F) -> the normal quantile of each value's rank among its column's `knots` (rank-Gauss). `portable`
    uses only ops ONNX has: searchsorted as counts of comparisons (serving batches are small: (F, N, K)
    booleans), ndtri as sqrt(2) erfinv(2u - 1); the export's verification compares it with the original."""
    k = knots.shape[1]
    flat = x.reshape(-1, x.shape[-1]).t().contiguous()  # (F, N)
    if portable:
        lo = (knots.unsqueeze(1) < flat.unsqueeze(-1)).sum(-1)  # first knot >= x
        hi = (knots.unsqueeze(1) <= flat.unsqueeze(-1)).sum(-1)  # first knot > x
    else:
        lo = torch.searchsorted(knots, flat)
        hi = torch.searchsorted(knots, flat, right=True)
    below = knots.gather(1, (lo - 1).clamp(0, k - 1))
    above = knots.gather(1, lo.clamp(0, k - 1))
    between = (lo - 1).float() + (flat - below) / (above - below).clamp(min=1e-30)
    position = torch.where(hi > lo, (lo + hi - 1).float() / 2, between).clamp(0, k - 1)
    u = (position + 0.5) / k
    z = math.sqrt(2.0) * _erfinv(2 * u - 1) if portable else torch.special.ndtri(u)
    return z.t().reshape(x.shape)


# Giles' polynomials in w = -log(1 - y^2): for w < 5 in w - 2.5, beyond in sqrt(w) - 3; highest power first
_ERFINV_CENTRAL: tuple[float, ...] = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087)
_ERFINV_CENTRAL += (-0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL: tuple[float, ...] = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773)
_ERFINV_TAIL += (-0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erfinv(y: torch.Tensor) -> torch.Tensor:
    """Inverse error function, M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
    single precision (relative error ~4e-7 inside (-1, 1))."""
    w = -torch.log((1.0 - y) * (1.0 + y))

    def polynomial(x: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
        out = torch.full_like(y, coefficients[0])
        for c in coefficients[1:]:
            out = c + out * x
        return out

    central, tail = polynomial(w - 2.5, _ERFINV_CENTRAL), polynomial(torch.sqrt(w.clamp(min=5.0)) - 3.0, _ERFINV_TAIL)
    return torch.where(w < 5.0, central, tail) * y


IDENTITY = {"center": 0.0, "scale": 1.0, "curve": 0.0, "mean": 0.0, "std": 1.0}  # FeatureNormalizer's buffers


class FeatureNormalizer(nn.Module):
    """Per-column feature transform fit on the training split, held as buffers (fit_normalizer)."""

    center: torch.Tensor  # the buffers below
    scale: torch.Tensor
    curve: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    knots: torch.Tensor

    def __init__(self, features: int, quantiles: int = 0):
        super().__init__()
        for name, value in IDENTITY.items():
            self.register_buffer(name, torch.full((features,), value))
        if quantiles:
            self.register_buffer("knots", torch.zeros(features, quantiles))

    def forward(self, x: torch.Tensor, portable: bool = False) -> torch.Tensor:
        if hasattr(self, "knots"):
            y = quantile_gauss(x.float(), self.knots, portable)
        else:
            y = (x.float() - self.center) / self.scale
            y = torch.where(self.curve > 0, torch.asinh(y), y)
        return (y - self.mean) / self.std


def fit_normalizer(features: np.ndarray, method: str, seed: int = 0) -> dict[str, list]:
    """FeatureNormalizer's statistics for training `features` (N, F) under `method`, as plain lists."""
    if method not in NORMALIZE:
        raise ValueError(f"normalize: {method!r} is not one of {', '.join(NORMALIZE)}")
    n, width = features.shape
    identity = {name: [value] * width for name, value in IDENTITY.items()}
    if method == "none" or n == 0:
        return {**identity, "knots": [[0.0] * QUANTILES] * width} if method == "quantile" else identity
    if n > FIT_ROWS:
        features = features[np.sort(np.random.default_rng([seed, 12]).choice(n, FIT_ROWS, replace=False))]
    x = features.astype(np.float64)
    finite = np.isfinite(x).all(0)
    if not finite.all():
        column = int(np.flatnonzero(~finite)[0])
        raise DataError(f"feature column f{column + 1} holds NaN or infinite values: fill or drop them first")
    if method == "quantile":
        knots = np.ascontiguousarray(np.quantile(x, np.linspace(0.0, 1.0, QUANTILES), axis=0).T, dtype=np.float32)
        y = quantile_gauss(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(knots)).double().numpy()
        mean, std = y.mean(0), y.std(0)
        std = np.where(std <= 1e-6, 1.0, std)
        return {
            **identity,
            "mean": [float(v) for v in mean.astype(np.float32)],
            "std": [float(v) for v in std.astype(np.float32)],
            "knots": knots.tolist(),
        }
    if method == "standard":
        center, scale, curve = x.mean(0), x.std(0), np.zeros(width)
    else:
        low, center, high = np.quantile(x, [0.25, 0.5, 0.75], axis=0)
        deviation = np.abs(x - center).mean(0)
        scale = np.where(high > low, (high - low) / 1.349, np.where(deviation > 0, deviation, x.std(0)))
        curve = np.ones(width)
    # centre and scale rounded to float32, the buffers' type, before the rest is fit on them
    center = center.astype(np.float32).astype(np.float64)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32).astype(np.float64)
    y = (x - center) / scale
    y = np.where(curve > 0, np.arcsinh(y), y)
    mean, std = y.mean(0), y.std(0)
    constant = std <= 1e-12 * np.maximum(1.0, np.abs(mean))
    std = np.where(constant, 1.0, std)
    stats = {"center": center, "scale": scale, "curve": curve, "mean": mean, "std": std}
    return {k: [float(v) for v in np.asarray(value, dtype=np.float32)] for k, value in stats.items()}


class ScoringMLP(nn.Module):
    """Feature vector (..., F) -> relevance score (...): normaliser, `input_dropout`, an MLP."""

    def __init__(
        self,
        features: int,
        hidden: int,
        layers: int,
        dropout: float,
        normalizer: dict[str, list[float]] | None = None,
        input_dropout: float = 0.0,
        quantiles: int = 0,
    ):
        super().__init__()
        self.norm = FeatureNormalizer(features, quantiles)
        self.input_drop = nn.Dropout(input_dropout)
        if normalizer:
            for name, values in normalizer.items():
                getattr(self.norm, name).copy_(torch.tensor(values, dtype=torch.float32))
        parts: list[nn.Module] = []
        width = features
        for _ in range(layers):
            parts += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        parts.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores for every feature vector; any leading shape, e.g. (queries, docs, F) -> (queries, docs)."""
        return self.net(self.input_drop(self.norm(x))).squeeze(-1)


MAX_LIST = 256  # candidates per list at most: the RankNet loss holds batch x W x W pairs
PADDING_BUDGET = 4  # padded cells per real candidate, at most


def list_width(sizes: np.ndarray) -> int:
    """Row width W for queries of `sizes` candidates: the longest query when padding to it costs at most
    PADDING_BUDGET cells per candidate within MAX_LIST, else the widest power of two (>= 2) within both."""
    longest, total = int(sizes.max()), int(sizes.sum())
    if longest <= MAX_LIST and len(sizes) * longest <= PADDING_BUDGET * total:
        return longest
    width = min(MAX_LIST, 1 << (longest - 1).bit_length())
    while width > 2 and int((-(-sizes // width) * width).sum()) > PADDING_BUDGET * total:
        width //= 2
    return min(width, longest)


def pack_queries(
    query: np.ndarray, arrays: dict[str, np.ndarray], width: int | None = None, seed: int = 0
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Candidates -> lists (R, W, ...) padded ("label" with -1) and each row's query (R,)."""
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


def split_queries(query: np.ndarray, arrays: dict[str, np.ndarray], seed: int) -> tuple[list[dict], list[int]]:
    """80 / 10 / 10 split of whole queries by a seeded permutation (see queries_splits)."""
    return queries_splits(query, arrays, seeded_thirds(int(query.max()) + 1, seed, 8), seed)


def queries_splits(query: np.ndarray, arrays: dict[str, np.ndarray], parts, seed: int) -> tuple[list[dict], list[int]]:
    """One packed split per entry of `parts` (the query codes it holds), and each split's longest query."""
    n = int(query.max()) + 1 if len(query) else 0
    splits, longest = [], []
    for part, chosen in enumerate(parts):
        position = np.full(n, -1, dtype=np.int64)
        position[chosen] = np.arange(len(chosen))  # queries keep the permutation's order
        keep = np.flatnonzero(position[query] >= 0)
        if len(keep) == 0:
            empty = {k: torch.from_numpy(np.zeros((0, 1, *v.shape[1:]), dtype=v.dtype)) for k, v in arrays.items()}
            splits.append(empty)
            longest.append(0)
            continue
        codes = position[query[keep]]
        packed, qid = pack_queries(codes, {k: v[keep] for k, v in arrays.items()}, seed=seed + part)
        split = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in packed.items()}
        sizes = np.bincount(codes)
        if len(qid) > len(sizes):  # some query spans rows: evaluation groups them by qid
            split["qid"] = torch.from_numpy(qid)
        splits.append(split)
        longest.append(int(sizes.max()))
    return splits, longest


def _flat(split: dict[str, torch.Tensor], scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query, score, label) of the real candidates of a split, in row order."""
    label = split["label"]
    real = label >= 0
    rows = split["qid"] if "qid" in split else torch.arange(label.shape[0], device=label.device)
    return rows.unsqueeze(1).expand_as(label)[real], scores[real], label[real]


REPORT_K = 20  # the report's NDCG@k curves run k = 1..REPORT_K
QUERY_SIZE_BUCKETS = (1, 5, 10, 20, 50, 100, 500)  # the report's candidates-per-query buckets


def ranking_arrays(table, path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A read table's query codes 0..Q-1, (rows, F) float32 features and labels; `path` names it in errors."""
    names = [n for n in table.column_names if n not in ("query_id", "doc_id", "label")]
    if not names:
        raise DataError(f"{path}: line 1: no feature columns (expected f1, f2, ...)")
    label = table.column("label").to_numpy()
    query, _ = contiguous_ids(table.column("query_id"))
    features = np.stack([table.column(n).to_numpy().astype(np.float32) for n in names], axis=1)
    return query, features, label


def given_query_splits(read: SplitTables, seed: int) -> tuple[list[Any], list[int]]:
    """Packed train / val / test splits from given split tables, query ids per split."""
    arrays = {name: ranking_arrays(table, read.origins[name]) for name, table in read.tables.items()}
    width = arrays["train"][1].shape[1]
    for name, (_, features, _) in arrays.items():
        if features.shape[1] != width:
            raise DataError(
                f"{read.origins[name]}: {features.shape[1]} feature columns, but the training data "
                f"({read.origins['train']}) has {width}"
            )
    splits, longest = {}, {}
    if "val" not in arrays:
        query, features, label = arrays.pop("train")
        keep, carved = carve(int(query.max()) + 1, seed, 8)
        (splits["train"], splits["val"]), (longest["train"], longest["val"]) = queries_splits(
            query, {"features": features, "label": label}, (keep, carved), seed
        )
    for part, (name, (query, features, label)) in enumerate(arrays.items()):
        (splits[name],), (longest[name],) = queries_splits(
            query, {"features": features, "label": label}, (np.arange(int(query.max()) + 1),), seed + 3 * part
        )
    return [splits["train"], splits["val"], splits.get("test")], [longest.get(n, 0) for n in SPLITS]


class RankingTask(Task):
    name = "ranking"
    description = "Search ranking: MLP over normalised (query, lesson) features, LambdaLoss (NDCG@10, MRR)"
    options = (
        TaskOption("hidden", 128, "hidden units per layer", 1, 65536),
        TaskOption("layers", 2, "hidden layers", 1, 32),
        TaskOption("dropout", 0.2, "dropout after each hidden layer", 0.0, 0.9),
        TaskOption("input_dropout", 0.0, "dropout on the normalised features (training only)", 0.0, 0.9),
        TaskOption(
            "loss",
            "lambda",
            "lambda (LambdaLoss NDCG-Loss2++), approxndcg, listwise softmax or pairwise RankNet",
            choices=("lambda", "approxndcg", "listwise", "ranknet"),
        ),
        TaskOption(
            "normalize",
            "quantile",
            "feature normalisation fit on the training split, then standardise: "
            "quantile (each column's rank mapped to a normal quantile), asinh "
            "(robust centre and scale, signed log), standard, or none",
            choices=("asinh", "quantile", "standard", "none"),
        ),  # NORMALIZE, as a literal (see catalog)
        TaskOption("queries", 4000, "synthetic: queries", 20, 100_000_000, synthetic=True),
        TaskOption("docs", 20, "synthetic: candidate lessons per query, on average", 2, 10_000, synthetic=True),
        TaskOption("features", 136, "synthetic: features per (query, lesson)", 2, 4096, synthetic=True),
        TaskOption(
            "noise", 0.5, "synthetic: label noise (std, relative to the relevance's std)", 0.0, 10.0, synthetic=True
        ),
    )
    # chosen against LightGBM's lambdarank with benchmarks/quality_ranking.py
    defaults = {"lr": 3e-3, "batch_size": 16, "epochs": 5, "optimizer": "adamw", "schedule": "cosine"}
    primary_metric = "ndcg@10"
    validation_unit = "queries"
    synthetic_file = True

    def synthetic_table(self, rows: int, seed: int):
        """`rows` (query, document) pairs of whole queries, in the ranking file format."""
        docs = self.opts["docs"]
        table = ranking_table(generate_ranking(-(-rows // docs), docs, self.opts["features"], self.opts["noise"], seed))
        return table.slice(0, rows)

    @classmethod
    def serving_class(cls) -> type[TaskServing]:
        from core.tasks.ranking.serving import RankingTaskServing

        return RankingTaskServing

    ranking_arrays = staticmethod(ranking_arrays)  # serving.py reaches it here: importing this module is a circle

    def example_table(self, data_path: str):
        """The table the preview's example queries come from: the given test (else validation) split, or the
        one data set (True: its test queries are split off as load_data splits them), else the training data."""
        read = read_splits(self.data_source(data_path), RANKING_COLUMNS, prefix_columns="f")
        given = [read.tables[n] for n in ("test", "val") if n in read.tables]
        if given:
            return given[0], False
        return read.tables["all" if "all" in read.tables else "train"], "all" in read.tables

    @staticmethod
    def test_queries(n: int, seed: int) -> np.ndarray:
        """The query codes of the test split of `n` queries, as load_data splits one data set."""
        return seeded_thirds(n, seed, 8)[2]

    def load_data(self, data_path: str, seed: int) -> TaskData:
        o = self.opts
        notes: list[str] = []
        if data_path:
            read = read_splits(
                self.data_source(data_path), RANKING_COLUMNS, prefix_columns="f", carved="10% of the training queries"
            )
            notes = list(read.notes)
            if read.given:  # given splits, used as given (see core.data.splits)
                (train, val, test), longest = given_query_splits(read, seed)
                require_rows(data_path, val, "validation", "give validation data, or at least 2 training queries")
            else:
                query, features, label = ranking_arrays(read.tables["all"], data_path)
                (train, val, test), longest = split_queries(query, {"features": features, "label": label}, seed)
                require_rows(data_path, val, "validation", "at least 10 queries are needed (10% validate)")
            ceiling = {}
        else:
            # features (float32), the relevance (float64 while generated) and labels, then their packed copy
            self.check_synthetic_size(
                o["queries"] * o["docs"] * (o["features"] * 4 * 2 + 8 + 8 + 8 + 48), ("queries", "docs", "features")
            )
            data = generate_ranking(o["queries"], o["docs"], o["features"], o["noise"], seed)
            arrays = {"features": data.features, "label": data.label, "relevance": data.relevance}
            (train, val, test), longest = split_queries(data.query, arrays, seed)
            oracle = val.pop("relevance")  # the hidden relevance stays out of what the model sees
            train.pop("relevance"), test.pop("relevance")
            ceiling = self._report(oracle, val)
        gen = torch.Generator().manual_seed(seed)
        draws = [self._report(torch.rand(val["label"].shape, generator=gen), val) for _ in range(5)]
        baseline = {key: float(np.mean([d[key] for d in draws])) for key in draws[0]}
        width = int(train["features"].shape[1])
        real = train["features"][train["label"] >= 0].numpy()  # the training split's candidates, no padding
        info = {
            "features": int(train["features"].shape[2]),
            "docs_per_query": width,
            "normalizer": fit_normalizer(real, o["normalize"], seed),
        }
        if "qid" in train:
            notes.append(
                f"ranking: queries of up to {longest[0]:,} candidates train as lists of {width} of "
                "their candidates (memory stays within a few times the data); evaluation ranks "
                "every query whole"
            )
            train.pop("qid")  # training needs only the lists
        return TaskData(train=train, val=val, test=test, info=info, ceiling=ceiling, baseline=baseline, notes=notes)

    def validation_units(self, split: dict[str, torch.Tensor]) -> int:
        """The queries with a relevant candidate: those the metrics average over."""
        relevant = (split["label"] > 0).any(dim=1)
        return int(torch.unique(split["qid"][relevant]).numel()) if "qid" in split else int(relevant.sum())

    @staticmethod
    def _report(scores: torch.Tensor, split: dict[str, torch.Tensor]) -> dict[str, float]:
        ndcg, rr, count = flat_ranking_metrics(*_flat(split, scores))
        n = max(int(count), 1)
        return {f"ndcg@{TOP_K}": float(ndcg) / n, "mrr": float(rr) / n}

    def build_model(self, info: dict) -> nn.Module:
        o = self.opts
        return ScoringMLP(
            info.get("features", o["features"]),
            o["hidden"],
            o["layers"],
            o["dropout"],
            info.get("normalizer"),
            o["input_dropout"],
            QUANTILES if o["normalize"] == "quantile" else 0,
        )

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return LOSSES[self.opts["loss"]](model(batch["features"]), batch["label"])

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        device = split["label"].device
        if "qid" in split:  # a query spans rows: hand every candidate on, metrics() ranks each query whole
            slices = iter_slices(split, max(batch_size, 1024))
            flat = [_flat(batch, model(batch["features"]).float()) for batch in slices]
            qid, score, label = (
                torch.cat([part[i] for part in flat]) if flat else torch.zeros(0, device=device) for i in range(3)
            )
            return EvalParts(sums={}, values={"qid": qid.long(), "score": score.float(), "label": label.long()})
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        for batch in iter_slices(split, max(batch_size, 1024)):
            sums += torch.stack(ranking_metrics(model(batch["features"]), batch["label"])).double()
        return EvalParts(sums=dict(zip(("ndcg", "rr", "count"), sums.unbind(), strict=True)))

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        if "qid" in parts.values:
            ndcg, rr, rows = flat_ranking_metrics(parts.values["qid"], parts.values["score"], parts.values["label"])
            parts = EvalParts(sums={"ndcg": ndcg, "rr": rr, "count": rows})
        count = max(float(parts.sums["count"]), 1.0)
        return {f"ndcg@{TOP_K}": float(parts.sums["ndcg"]) / count, "mrr": float(parts.sums["rr"]) / count}

    def report(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> dict:
        """NDCG@k for k = 1..REPORT_K and MRR, overall and by candidates per query (QUERY_SIZE_BUCKETS)."""
        label = split["label"]
        scores = [model(batch["features"]).float() for batch in iter_slices(split, max(batch_size, 1024))]
        score = torch.cat(scores) if scores else torch.zeros(label.shape, device=label.device)
        per_query = query_curves(*_flat(split, score), REPORT_K)
        used = per_query["has_relevant"]
        ndcg, rr, size = per_query["ndcg"][used].double(), per_query["rr"][used].double(), per_query["size"][used]
        n = int(used.sum())
        ks = list(range(1, REPORT_K + 1))

        def means(chosen: torch.Tensor) -> tuple[list[float], float]:
            count = max(int(chosen.sum()), 1)
            return (ndcg[chosen].sum(0) / count).tolist(), float(rr[chosen].sum()) / count

        overall, mrr = means(torch.ones_like(size, dtype=torch.bool))
        series = [{"name": "all", "label": f"all queries ({n:,})", "values": overall, "emphasis": "main"}]

        def bucket_values(chosen: torch.Tensor) -> dict:
            curve, bucket_mrr = means(chosen)
            return {"ndcg": curve, "values": {f"ndcg@{TOP_K}": curve[TOP_K - 1], "mrr": bucket_mrr}}

        buckets = bucket_rows(size, QUERY_SIZE_BUCKETS, bucket_values)
        for b in buckets:
            shown = f"{b['label']} candidates ({b['count']:,})"
            series.append({"name": b["label"], "label": shown, "values": b["ndcg"], "emphasis": "faint"})
        return {
            "curves": [{"title": "NDCG by k", "metric": "ndcg", "y_label": "NDCG@k", "ks": ks, "series": series}],
            "mrr": mrr,
            "queries": n,
            "queries_without_relevant": int(used.shape[0]) - n,
            "buckets": {
                "title": f"By candidates per query (k = {TOP_K})",
                "by": "candidates per query",
                "unit": "queries",
                "k": TOP_K,
                "total": n,
                "rows": buckets,
                "series": [
                    {"name": f"ndcg@{TOP_K}", "label": f"NDCG@{TOP_K}", "curve": "all"},
                    {"name": "mrr", "label": "MRR"},
                ],
            },
        }
