"""The part of an export's serve.py (core/runs/serve.py's module doc says what it holds) for a task served by
FeatureServing (core/tasks/feature_serving.py): a row holds each of the manifest's inputs by name, a list (nested
as its shape; in CSV its JSON, or numbers apart) or a number, rows padded with the input's pad to the longest; a
row of numbers may be x1..xF (or f1..fF) instead -> the manifest's serving.outputs (y, or y1..yO; p0..pC-1 and
predicted for probabilities; y as nested lists for a wider output). Standard library only.
"""

from __future__ import annotations

import json
import re

ALIASES: dict = {}  # the row columns' other names, as amp-console predict reads them: none


def _normal(name):
    return re.sub(r"[\s_-]+", "", str(name)).lower()


class Serving:
    """The manifest's inputs from rows, the model's outputs as answers."""

    copied = ()  # row columns copied to the answer

    def __init__(self, served, kit):
        self.served, self.kit = served, kit
        self.inputs = served.manifest["inputs"]
        shape = self.inputs[0]["shape"]
        one_row = len(self.inputs) == 1 and len(shape) == 2 and self.inputs[0]["dtype"] == "float32"
        self.width = shape[1] if one_row and isinstance(shape[1], int) else None  # a row of numbers
        serving = served.manifest.get("serving") or {}
        self.names = [str(name) for name in serving.get("outputs") or ["y"]]
        self.probabilities = bool(serving.get("probabilities"))
        self.columns = (["y"] if self.names == ["y (JSON)"] else self.names) + (
            ["predicted"] if self.probabilities else []
        )

    def predict(self, inputs, k):
        """The outputs per input: a row of numbers (one row alone is a batch of one), or {input name: value}."""
        if isinstance(inputs[0], dict):
            inputs = [self.row_input({_normal(key): v for key, v in x.items()}) for x in inputs]
        if self.width is not None:
            rows = self.kit.numbers([inputs] if not self.kit.is_list(inputs[0]) else inputs, self.width, "row")
            return self.served.run(rows, "float32")
        rows = inputs
        batch = []
        for spec in self.inputs:
            values, pad = [row[spec["name"]] for row in rows], spec.get("pad")
            longest, level = [], values
            for _ in spec["shape"][1:]:
                longest.append(max(len(v) for v in level))
                level = [item for v in level for item in v]
            if pad is None and longest and any(_lengths(v) != _lengths(values[0]) for v in values):
                raise ValueError(f"{spec['name']}: rows of different lengths, and the model has no pad for it")
            batch.append([_padded(v, longest, pad) for v in values])
        return self.served.run(batch)

    def row_input(self, values):
        """{input name: its checked value} of a row's columns (a row of numbers: its list of numbers)."""
        if self.width is not None and not self.kit.is_list(values.get("x")):
            prefix = "f" if "f1" in values and "x1" not in values else "x"
            return [self.kit.number(values, f"{prefix}{i}") for i in range(1, self.width + 1)]
        if self.width is not None:
            return self._value(self.inputs[0], values["x"])
        out = {}
        for spec in self.inputs:
            name = spec["name"]
            if _normal(name) not in values:
                raise self.kit.RowError(f"no {name} column")
            out[name] = self._value(spec, values[_normal(name)])
        return out

    def _value(self, spec, value):
        name = spec["name"]
        if isinstance(value, str) and spec["shape"][1:]:
            try:
                value = json.loads(value)
            except ValueError:
                value = value.replace(",", " ").split()
        return self._check(value, spec["shape"][1:], name, spec["dtype"] == "int64")

    def _check(self, value, dims, name, whole):
        kit = self.kit
        if not dims:
            number = kit.number({name: value}, name)
            if whole and number != int(number):
                raise kit.RowError(f"{name} {kit.shown(value)} is not a whole number")
            return int(number) if whole else number
        if not kit.is_list(value):
            raise kit.RowError(f"{name} is {kit.kind(value)}, not a list")
        if (isinstance(dims[0], int) and len(value) != dims[0]) or not len(value):
            raise kit.RowError(f"{name}: {len(value)} values where the model reads {dims[0]}")
        return [self._check(v, dims[1:], name, whole) for v in value]

    def answer(self, result):
        if self.names == ["y (JSON)"]:
            return {"y": result}
        answer = {name: self.kit.finite(value) for name, value in zip(self.names, result)}
        if self.probabilities:
            answer["predicted"] = max(range(len(result)), key=result.__getitem__)
        return answer


def _lengths(value):
    return [len(value), *(_lengths(value[0]) if value and isinstance(value[0], list) else [])]


def _padded(value, longest, pad):
    if not longest:
        return value
    inner = [_padded(v, longest[1:], pad) for v in value]
    return inner + [_full(longest[1:], pad)] * (longest[0] - len(inner))


def _full(dims, pad):
    return pad if not dims else [_full(dims[1:], pad) for _ in range(dims[0])]
