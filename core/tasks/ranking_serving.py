"""The ranking task's serving part (core.tasks.serving): raw candidate features in, a score per candidate out,
the model's fitted normaliser inside the deployable module."""

from __future__ import annotations

import math

import torch
from torch import nn

from core.tasks.serving import ServingShape, TaskServing


class RankingServing(nn.Module):
    """Raw features (B, N, F) float32 -> scores (B, N) float32; the model's fitted normaliser is inside and
    stays float32 whatever the weights' dtype (its quantile knots would not survive bf16)."""

    def __init__(self, model: nn.Module, onnx_friendly: bool = False):
        super().__init__()
        self.model = model
        self.onnx_friendly = onnx_friendly

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        norm = self.model.norm
        if self.onnx_friendly and hasattr(norm, "knots"):
            y = (_quantile_gauss_portable(features.float(), norm.knots) - norm.mean) / norm.std
        else:
            y = norm(features.float())
        dtype = self.model.net[0].weight.dtype
        return self.model.net(y.to(dtype)).squeeze(-1).float()


def _quantile_gauss_portable(x: torch.Tensor, knots: torch.Tensor) -> torch.Tensor:
    """core.tasks.ranking.quantile_gauss with ops ONNX has: searchsorted as counts of comparisons (serving
    batches are small: (B*N, F, K) booleans), ndtri as sqrt(2) erfinv(2u - 1) by Giles' single-precision
    approximation (ONNX has Erf but no Erfinv). The export's verification compares it with the original."""
    k = knots.shape[1]
    flat = x.reshape(-1, x.shape[-1]).unsqueeze(-1)  # (R, F, 1)
    lo = (knots.unsqueeze(0) < flat).sum(-1)  # first knot >= x, as searchsorted(left)
    hi = (knots.unsqueeze(0) <= flat).sum(-1)  # first knot > x, as searchsorted(right)
    x2 = flat.squeeze(-1)
    table = knots.unsqueeze(0).expand(x2.shape[0], -1, -1)
    below = table.gather(2, (lo - 1).clamp(0, k - 1).unsqueeze(-1)).squeeze(-1)
    above = table.gather(2, lo.clamp(0, k - 1).unsqueeze(-1)).squeeze(-1)
    between = (lo - 1).float() + (x2 - below) / (above - below).clamp(min=1e-30)
    position = torch.where(hi > lo, (lo + hi - 1).float() / 2, between).clamp(0, k - 1)
    u = (position + 0.5) / k
    z = math.sqrt(2.0) * _erfinv(2 * u - 1)
    return z.reshape(x.shape)


def _erfinv(y: torch.Tensor) -> torch.Tensor:
    """Inverse error function, M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
    single precision (relative error ~4e-7 inside (-1, 1))."""
    w = -torch.log((1.0 - y) * (1.0 + y))
    w1 = w - 2.5
    p1 = torch.full_like(y, 2.81022636e-08)
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        p1 = c + p1 * w1
    w2 = torch.sqrt(w.clamp(min=5.0)) - 3.0
    p2 = torch.full_like(y, -0.000200214257)
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        p2 = c + p2 * w2
    return torch.where(w < 5.0, p1, p2) * y


class RankingTaskServing(TaskServing):
    """Each query's candidates as raw features in (any number of candidates), their scores out."""

    input_name, output_name = "features", "scores"
    dynamic_dims = ("batch", "candidates")
    answers = ("rank", "example_queries")

    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        return RankingServing(model, onnx_friendly=fmt == "onnx")

    def weights(self, model: nn.Module) -> nn.Module:
        return model.net  # the normaliser stays float32

    def sample_inputs(self, model: nn.Module, rows: int, seed: int) -> torch.Tensor:
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

    def manifest(self, model: nn.Module, state: dict, sample: torch.Tensor) -> dict:
        features = int(model.norm.mean.shape[0])
        return {"inputs": [{"name": self.input_name, "shape": ["batch", "candidates", features], "dtype": "float32",
                            "meaning": "raw (un-normalised) features of each query's candidates"}],
                "outputs": [{"name": self.output_name, "shape": ["batch", "candidates"], "dtype": "float32",
                             "meaning": "relevance scores: rank a query's candidates by descending score"}],
                "serving": {"features": features, "feature_order": [f"f{i + 1}" for i in range(features)],
                            "normalization": f"{self.opts['normalize']}, fit on the training split; inside the "
                                             "model: give raw features"}}

    def shape(self, model: nn.Module) -> ServingShape:
        return ServingShape(n_features=int(model.norm.mean.shape[0]))
