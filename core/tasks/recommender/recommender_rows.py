"""The recommender's part of an export's serve.py (core/runs/serve.py's module doc says what it holds): a row's
history (lesson ids separated by spaces or commas, or a JSON list), user_id optional and copied -> items,
scores: the top --k lessons, those of the history excluded (none when it has no lesson the model knows). CSV
output has a row per recommended lesson (rank, item_id, score). Standard library only.
"""

from __future__ import annotations

import operator
import re

ALIASES = {"history": ("histories", "lessons", "items", "sequence"), "userid": ("user", "uid")}  # predict's
HISTORY_EDGES = " \t\r\n[](),"  # trimmed from a history before it is split into ids
WHOLE_ID = re.compile(r"^([-+]?\d+)\.0*$")  # an id written as a float: 12.0 names lesson 12


class Serving:
    """Histories as the model's input (a window of model ids), the top-k lessons as answers."""

    copied = ("user_id",)  # row columns copied to the answer
    columns = ["items", "scores"]

    def __init__(self, served, kit):
        self.served, self.kit = served, kit
        self.max_len = served.manifest["serving"]["max_len"]
        vocabulary = served.manifest["serving"]["vocabulary"]
        # looked up by text, so 5000 and "5000" name the same lesson (ids read from a file are text)
        self.model_id = {str(lesson): k + 1 for k, lesson in enumerate(vocabulary)}
        for k, lesson in enumerate(vocabulary):  # 12.0 is lesson 12 too (unless "12.0" is an id itself)
            self.model_id.setdefault(lesson_key(lesson), k + 1)
        self.lesson = vocabulary

    def predict(self, inputs, k):
        """The top-k (lesson id, score) per history (a list of ids, or a string of ids separated by spaces or
        commas); one history of ids alone is a batch of one."""
        given = k
        try:  # any integer (numpy's too), not a bool or a float
            k = operator.index(k) if not isinstance(k, bool) else None
        except TypeError:
            k = None
        if k is None or k < 1:
            raise ValueError(f"k={given!r}: ask for at least 1 recommendation (a whole number)")
        if not any(self.kit.is_list(h) or isinstance(h, str) for h in inputs):  # one history of ids
            inputs = [inputs]
        return self._recommend([split_history(h) if isinstance(h, str) else list(h) for h in inputs], k)

    def _recommend(self, histories, k):
        batch, seen = [], []
        for history in histories:
            known = (self.model_id.get(lesson_key(i)) for i in history)
            ids = [k for k in known if k is not None]  # lessons the model never saw in training: skipped
            window = ids[-self.max_len :]
            batch.append([0] * (self.max_len - len(window)) + window)
            seen.append(set(ids))
        scores = self.served.run_array(batch, "int64")
        k = min(k, scores.shape[1])
        for row, used in enumerate(seen):  # every lesson of the history is excluded, not just the window's
            scores[row, [j - 1 for j in used]] = float("-inf")
        if hasattr(scores, "topk"):  # a torch tensor (model.pt2, model.safetensors)
            values, order = scores.topk(k, dim=1)
        else:  # a numpy array (model.onnx)
            order = (-scores).argsort(axis=1, kind="stable")[:, :k]
            values = scores[[[r] for r in range(len(order))], order]
        out = []
        for used, row_values, row_order in zip(seen, values.tolist(), order.tolist()):
            # no lesson of the history is known: nothing to go on (as amp-console predict answers), not the
            # model's guess for an empty history
            out.append(
                [(self.lesson[j], v) for j, v in zip(row_order, row_values) if v != float("-inf")] if used else []
            )
        return out

    def row_input(self, values):
        """A row's lesson ids: text split as predict splits its history column, or a JSON list."""
        kit, value = self.kit, values.get("history")
        if value is None:
            raise kit.RowError("no history column (lesson ids separated by spaces)")
        if isinstance(value, str):
            ids = split_history(value)
        elif isinstance(value, list):
            bad = [v for v in value if isinstance(v, bool) or not isinstance(v, (str, int, float))]
            if bad:
                raise kit.RowError(f"history holds {kit.kind(bad[0])}, not a lesson id")
            ids = value
        else:
            raise kit.RowError(f"history is {kit.kind(value)}: give lesson ids separated by spaces, or a list")
        if not ids:
            raise kit.RowError("history is empty")
        return ids

    def answer(self, result):
        return {"items": [lesson for lesson, _score in result], "scores": [self.kit.finite(s) for _l, s in result]}

    def csv_columns(self, copied):
        return ["line", *copied, "rank", "item_id", "score"]

    def csv_rows(self, line, answer, columns):
        head = [line] + [answer.get(c, "") for c in columns[1:-3]]
        return [
            head + [rank, item, score] for rank, (item, score) in enumerate(zip(answer["items"], answer["scores"]), 1)
        ]


def split_history(text):
    """A history written as text: ids separated by spaces or commas, brackets around them ignored
    ("12 7 40", "12,7,40", "[12, 7, 40]"), as `amp-console predict` reads its history column."""
    return [part for part in re.split(r"[\s,]+", text.strip(HISTORY_EDGES)) if part]


def lesson_key(lesson):
    """A lesson id as the vocabulary is looked up: its text, a whole number written as a float (12.0, "12.0",
    from a float column) as the integer."""
    if isinstance(lesson, float) and lesson.is_integer():
        return str(int(lesson))
    return WHOLE_ID.sub(r"\1", str(lesson).strip())
