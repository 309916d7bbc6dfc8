"""The ranking task's part of an export's serve.py (core/runs/serve.py): each query's candidates as raw features
in, a score per candidate out (the fitted normalisation inside the model). Copied into every ranking export
beside serve.py, which loads it by the manifest's `serving_module`; standard library and torch only (it imports
nothing of AMP Console). The interface is serve.py's (see its module doc): `forward(weights, options, kit)` and
`Serving(served, kit)`.

A row: f1..fN, with query_id, doc_id and label optional and copied -> score.
"""

from __future__ import annotations

ALIASES = {"queryid": ("qid", "query"), "docid": ("did",)}  # amp-console predict's, compared as normal names


def forward(weights, options, kit):
    """The exported computation over the safetensors weights, in plain torch: features (B, N, F) -> scores (B, N)."""
    import torch

    w = weights

    def run(x):
        x = x.float()
        if "norm.knots" in w:
            knots = w["norm.knots"]
            k = knots.shape[1]
            flat = x.reshape(-1, x.shape[-1]).t().contiguous()
            lo = torch.searchsorted(knots, flat)
            hi = torch.searchsorted(knots, flat, right=True)
            below = knots.gather(1, (lo - 1).clamp(0, k - 1))
            above = knots.gather(1, lo.clamp(0, k - 1))
            between = (lo - 1).float() + (flat - below) / (above - below).clamp(min=1e-30)
            position = torch.where(hi > lo, (lo + hi - 1).float() / 2, between).clamp(0, k - 1)
            y = torch.special.ndtri((position + 0.5) / k).t().reshape(x.shape)
        else:
            y = (x - w["norm.center"]) / w["norm.scale"]
            y = torch.where(w["norm.curve"] > 0, torch.asinh(y), y)
        y = (y - w["norm.mean"]) / w["norm.std"]
        return kit.mlp(w, y, "net.").squeeze(-1)

    return run


class Serving:
    """Candidates' features as the model's input, their scores as answers."""

    copied = ("query_id", "doc_id", "label")  # row columns copied to the answer
    columns = ["score"]

    def __init__(self, served, kit):
        self.served, self.kit = served, kit
        self.width = served.width()

    def predict(self, inputs, k):
        """A score per candidate: one query's candidates (N, F) -> N scores, queries (Q, N, F) -> (Q, N); one
        candidate's features alone are a query of one candidate."""
        kit = self.kit
        if not kit.is_list(inputs[0]):  # one candidate's features: one query of one candidate
            inputs = [inputs]
        if not kit.is_list(inputs[0][0]):  # (N, F): one query's N candidates
            return self.served.run([kit.numbers(inputs, self.width, "candidate")], "float32")[0]
        queries = [kit.numbers(q, self.width, f"query {i}: candidate") for i, q in enumerate(inputs)]
        if len({len(q) for q in queries}) > 1:
            raise ValueError(
                "the queries of one batch need the same number of candidates (or predict each query on its own)"
            )
        return self.served.run(queries, "float32")

    def row_input(self, values):
        return [self.kit.number(values, f"f{i}") for i in range(1, self.width + 1)]

    def answer(self, result):
        return {"score": self.kit.finite(result)}
