"""The tiny task's part of an export's serve.py (core/runs/serve.py): points in, class probabilities out.
Copied into every tiny export beside serve.py, which loads it by the manifest's `serving_module`; standard
library and torch only (it imports nothing of AMP Console). The interface is serve.py's (see its module doc):
`forward(weights, options, kit)` and `Serving(served, kit)`.

A row: x1..xN (or f1..fN) -> p0..pC-1 (class probabilities), predicted.
"""

from __future__ import annotations

ALIASES = {}  # the row columns' other names, as amp-console predict reads them: none


def forward(weights, options, kit):
    """The exported computation over the safetensors weights, in plain torch (eval mode): x (B, F) -> (B, C)."""
    import torch.nn.functional as F

    def run(x):
        hidden = F.relu(F.linear(x.float(), weights["fc1.weight"], weights["fc1.bias"]))
        return F.linear(hidden, weights["fc2.weight"], weights["fc2.bias"]).softmax(-1)

    return run


class Serving:
    """Points as the model's input, class probabilities as answers."""

    copied = ()  # row columns copied to the answer

    def __init__(self, served, kit):
        self.served, self.kit = served, kit
        self.width = served.width()
        classes = (served.manifest.get("serving") or {}).get("classes", 2)
        self.columns = [f"p{c}" for c in range(classes)] + ["predicted"]

    def predict(self, inputs, k):
        """Class probabilities per point (a list of numbers; one point alone is a batch of one)."""
        points = self.kit.numbers([inputs] if not self.kit.is_list(inputs[0]) else inputs, self.width, "point")
        return self.served.run(points, "float32")

    def row_input(self, values):
        prefix = "f" if "f1" in values and "x1" not in values else "x"
        return [self.kit.number(values, f"{prefix}{i}") for i in range(1, self.width + 1)]

    def answer(self, result):
        answer = {f"p{c}": self.kit.finite(p) for c, p in enumerate(result)}
        answer["predicted"] = max(range(len(result)), key=result.__getitem__)
        return answer
