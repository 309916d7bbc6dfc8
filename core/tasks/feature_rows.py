"""The part of an export's serve.py (core/runs/serve.py's module doc says what it holds) for a task served by
FeatureServing (core/tasks/feature_serving.py): a row's x1..xF (or f1..fF) -> the manifest's serving.outputs
(y, or y1..yO; p0..pC-1 and predicted for probabilities). Standard library only.
"""

from __future__ import annotations

ALIASES: dict = {}  # the row columns' other names, as amp-console predict reads them: none


class Serving:
    """Rows of numbers as the model's input, the model's outputs as answers."""

    copied = ()  # row columns copied to the answer

    def __init__(self, served, kit):
        self.served, self.kit = served, kit
        self.width = served.width()
        serving = served.manifest.get("serving") or {}
        self.names = [str(name) for name in serving.get("outputs") or ["y"]]
        self.probabilities = bool(serving.get("probabilities"))
        self.columns = self.names + (["predicted"] if self.probabilities else [])

    def predict(self, inputs, k):
        """The outputs per row (a list of numbers each; one row alone is a batch of one)."""
        rows = self.kit.numbers([inputs] if not self.kit.is_list(inputs[0]) else inputs, self.width, "row")
        return self.served.run(rows, "float32")

    def row_input(self, values):
        prefix = "f" if "f1" in values and "x1" not in values else "x"
        return [self.kit.number(values, f"{prefix}{i}") for i in range(1, self.width + 1)]

    def answer(self, result):
        answer = {name: self.kit.finite(value) for name, value in zip(self.names, result)}
        if self.probabilities:
            answer["predicted"] = max(range(len(result)), key=result.__getitem__)
        return answer
