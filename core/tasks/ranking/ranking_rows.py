"""The ranking task's part of an export's serve.py (core/runs/serve.py's module doc says what it holds): a row's
f1..fN, with query_id, doc_id and label optional and copied -> score (the fitted normalisation is inside the
model). Standard library only.
"""

from __future__ import annotations

ALIASES = {"queryid": ("qid", "query"), "docid": ("did",)}  # amp-console predict's, compared as normal names


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
