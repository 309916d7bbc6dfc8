"""The recommender's file scorer for `predict`: a `history` column of lesson ids per user, or the training
interactions grouped per user -> user_id (or line), rank, item_id, score, k rows per user in the data's ids.
"""

from __future__ import annotations

from core.data.row_checks import Checks, as_text, ids, numbers, shown_value
from core.errors import DataError
from core.tasks.recommender.recommender_rows import HISTORY_EDGES
from core.tasks.serving import CommandOption, FileScorer


class RecommenderFileScorer(FileScorer):
    """Histories are scored a batch at a time; interactions are grouped per user and scored at the end."""

    unit = "users"
    input_columns = ("history", "user_id", "item_id", "timestamp")
    command_options = (
        CommandOption(
            "--k", "recommender: lessons recommended per user (default 10)", 10, 1, "ask for at least 1 recommendation"
        ),
        CommandOption(
            "--include-seen",
            "recommender: lessons already in the history may be recommended (a `seen` column says so)",
        ),
    )

    def __init__(self, predictor, reader, options):
        import numpy as np
        import pyarrow as pa

        super().__init__(predictor, reader, options)
        self.k, self.exclude_seen = self.option("k"), not self.option("include_seen")
        self.unknown = 0  # lesson ids the model does not know (dropped)
        self.history = reader.find("history", ("histories", "lessons", "items", "sequence"))
        self.user = reader.find("user_id")
        if self.history is None:
            why = (
                "a recommender reads a `history` column of lesson ids separated by spaces (one row per user), "
                "or interactions: user_id, item_id, timestamp"
            )
            if self.user is None and reader.find("item_id") is None:
                reader.require("history", why)
            self.user = reader.require("user_id", why)
            self.item = reader.require("item_id", why)
            self.time = reader.require("timestamp", why)
            reader.use([self.user, self.item, self.time])
            self._codes: dict = {}
            size = 1024
            self._items = np.zeros((size, predictor.max_len), dtype=np.int64)
            self._times = np.full((size, predictor.max_len), -np.inf)
            self._first_line = np.zeros(size, dtype=np.int64)
            self._users: list = []
            # every (user, lesson) seen, as user * (n_items + 1) + lesson: a lesson seen before the window is
            # still seen (excluded, as predict's histories, the preview and serve.py exclude it)
            self._seen: list = []
            self._seen_rows = 0
        else:
            reader.use([self.history, *([self.user] if self.user else [])])
        ids_type = pa.string() if isinstance(predictor.vocabulary.get("item_id"), list) else pa.int64()
        first = ("user_id", reader.id_type(self.user)) if self.user else (self.line_column, pa.int64())
        self.schema = pa.schema(
            [first, ("rank", pa.int32()), ("item_id", ids_type), ("score", pa.float32())]
            + ([("seen", pa.bool_())] if not self.exclude_seen else [])
        )

    def describe(self) -> str:
        shape = "histories" if self.history else "interactions grouped per user"
        return f"reading {self.reader.path} ({shape}), top {self.k}" + (
            ", seen lessons excluded" if self.exclude_seen else ", seen lessons kept"
        )

    def notes(self) -> list[str]:
        return [f"{self.unknown:,} lesson ids the model does not know were left out"] if self.unknown else []

    def score(self, batch, lines, report):
        if self.history is None:
            self._gather(batch, lines, report)
            return []
        return self._score_histories(batch, lines, report)

    def _score_histories(self, batch, lines, report):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        history = batch.column(self.history)
        checks = Checks(batch.num_rows)
        t = history.type
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            # a Parquet list of lesson ids per user: the ids as they are, as text (the vocabulary's form)
            try:
                words = pc.cast(history, pa.list_(pa.string()))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise DataError(
                    f"{self.reader.path}: column {self.history!r} holds {t} values, not lists of lesson ids"
                ) from None
            empty = pc.fill_null(pc.equal(pc.list_value_length(words), 0), True)
            checks.add(empty.to_numpy(zero_copy_only=False), lambda i: f"{self.history} is empty")
            words = pc.if_else(empty, pa.scalar([], pa.list_(pa.string())), words)
        else:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                history = as_text(history, self.history, self.reader.path)
            # ids separated by spaces, or by commas as a list written out ("[12, 7, 40]", "12,7,40"): "12," is
            # lesson 12, not an unknown id that would leave the history short of it
            history = pc.utf8_trim(history, characters=HISTORY_EDGES)
            ids(history, self.history, checks)
            words = pc.split_pattern_regex(pc.fill_null(history, ""), r"[\s,]+")
        user = ids(batch.column(self.user), self.user, checks) if self.user else None
        flat = pc.list_flatten(words)
        offsets = words.offsets.to_numpy().astype(np.int64) - int(words.offsets[0].as_py())
        codes = self.predictor.item_codes(flat) if len(flat) else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(batch.num_rows), np.diff(offsets))
        known = np.bincount(owner, weights=codes > 0, minlength=batch.num_rows) > 0
        nothing = ~known & ~checks.bad

        def unknown_ids(i: int) -> str:
            shown = flat.slice(offsets[i], min(3, offsets[i + 1] - offsets[i])).to_pylist()
            more = "..." if offsets[i + 1] - offsets[i] > 3 else ""
            return f"{self.history} has no lesson the model knows ({', '.join(map(repr, shown))}{more})"

        checks.add(nothing, unknown_ids)
        good = self._good(batch, lines, checks, report)
        self.unknown += int(((codes == 0) & ~checks.bad[owner]).sum()) if len(codes) else 0
        for rows in self._slices(good):
            parts = [codes[offsets[r] : offsets[r + 1]] for r in rows]
            lengths = np.array([len(p) for p in parts], dtype=np.int64)
            flat_codes = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            answer = self.predictor.recommend_codes(
                flat_codes, np.concatenate([[0], np.cumsum(lengths)]), self.k, self.exclude_seen
            )
            who = user.take(pa.array(rows)) if user is not None else pa.array(lines[rows])
            yield self._table(who, answer)

    def _table(self, who, answer):
        import numpy as np
        import pyarrow as pa

        real = answer.items > 0
        row, rank = np.nonzero(real)
        self.scored += int((answer.known > 0).sum())
        columns = {
            self.schema.names[0]: who.take(pa.array(row)),
            "rank": pa.array((rank + 1).astype(np.int32)),
            "item_id": pa.array(
                self.predictor.item_ids(answer.items[row, rank]), type=self.schema.field("item_id").type
            ),
            "score": pa.array(answer.scores[row, rank]),
        }
        if not self.exclude_seen:
            columns["seen"] = pa.array(answer.seen[row, rank])
        return pa.table(columns, schema=self.schema)

    def _gather(self, batch, lines, report) -> None:
        """Fold a batch of interactions into each user's last max_len known lessons by time."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        checks = Checks(batch.num_rows)
        user = ids(batch.column(self.user), self.user, checks)
        item = ids(batch.column(self.item), self.item, checks)
        when = numbers(batch.column(self.time), self.time, checks, dtype="float64", dates=True)
        good = self._good(batch, lines, checks, report)
        if not len(good):
            return
        taken = pa.array(good)
        user, when, lines = user.take(taken), when[good], lines[good]
        if not (pa.types.is_string(user.type) or pa.types.is_large_string(user.type)):
            user = as_text(user, self.user, self.reader.path)
        encoded = pc.dictionary_encode(user)
        index = encoded.indices.to_numpy(zero_copy_only=False)
        first = np.unique(index, return_index=True)[1]  # each user's first row (the dictionary's order)
        values = zip(encoded.dictionary.to_pylist(), first)
        code = np.array([self._code(value, int(lines[row])) for value, row in values], dtype=np.int64)[index]
        items = self.predictor.item_codes(item.take(taken))
        known = items > 0
        self.unknown += int((~known).sum())
        code, when, items = code[known], when[known], items[known]
        if not len(code):
            return
        self._remember(code * (self.predictor.n_items + 1) + items)  # --include-seen marks them seen
        length = self.predictor.max_len
        users = np.unique(code)
        held = self._items[users] > 0
        old_user = np.repeat(users, held.sum(1))
        all_user = np.concatenate([old_user, code])
        all_time = np.concatenate([self._times[users][held], when])
        all_item = np.concatenate([self._items[users][held], items])
        order = np.lexsort((all_time, all_user))  # stable: the held (earlier) lessons first among equal times
        all_user, all_time, all_item = all_user[order], all_time[order], all_item[order]
        ends = np.searchsorted(all_user, all_user, side="right")
        back = ends - 1 - np.arange(len(all_user))  # 0 = the user's latest
        keep = back < length
        self._items[users], self._times[users] = 0, -np.inf
        self._items[all_user[keep], length - 1 - back[keep]] = all_item[keep]
        self._times[all_user[keep], length - 1 - back[keep]] = all_time[keep]

    def _code(self, value, line: int) -> int:
        import numpy as np

        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self._users)
            self._users.append(value)
            if code >= len(self._items):  # grow by half: users x max_len (+ seen pairs) is this format's memory
                grow = len(self._items) // 2 + 1
                self._items = np.concatenate([self._items, np.zeros((grow, self._items.shape[1]), np.int64)])
                self._times = np.concatenate([self._times, np.full((grow, self._times.shape[1]), -np.inf)])
                self._first_line = np.concatenate([self._first_line, np.zeros(grow, np.int64)])
            self._first_line[code] = line
        return code

    def finish(self, report):
        import numpy as np
        import pyarrow as pa

        if self.history is not None:
            return
        count = len(self._users)
        users = pa.array(self._users, type=pa.string()).cast(self.schema.field(0).type)
        empty = np.flatnonzero((self._items[:count] == 0).all(1))
        why = "(first seen here): none of its lessons is known to the model"
        report.add([(int(self._first_line[u]), f"user {shown_value(self._users[u])} {why}") for u in empty])
        step = max(1, self.options.batch_size)
        length = self.predictor.max_len
        seen = self._seen_pairs()
        width = self.predictor.n_items + 1
        seen_user, seen_item = seen // width, seen % width
        for start in range(0, count, step):
            end = min(count, start + step)
            rows = end - start
            # each user's lessons seen before its window first (any order), then the window in time order: the
            # model reads the last max_len known ones, every one is excluded
            lo, hi = np.searchsorted(seen_user, [start, end])
            owner, item = seen_user[lo:hi] - start, seen_item[lo:hi]
            full = (self._items[start:end] > 0).all(1)  # a window not full holds all the user's lessons already:
            owner, item = owner[full[owner]], item[full[owner]]  # nothing before it (would be read as history)
            extra = np.bincount(owner, minlength=rows).astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(extra + length)])
            codes = np.zeros(int(offsets[-1]), dtype=np.int64)
            codes[offsets[owner] + np.arange(len(owner)) - (np.cumsum(extra) - extra)[owner]] = item
            window = offsets[:-1, None] + extra[:, None] + np.arange(length)[None, :]
            codes[window.reshape(-1)] = self._items[start:end].reshape(-1)
            answer = self.predictor.recommend_codes(codes, offsets, self.k, self.exclude_seen)
            yield self._table(users.slice(start, rows), answer)

    def _remember(self, keys) -> None:
        import numpy as np

        self._seen.append(keys)
        self._seen_rows += len(keys)
        if self._seen_rows > 4 * (1 << 20):  # folded to the distinct pairs now and then: memory ~ distinct pairs
            self._seen = [np.unique(np.concatenate(self._seen))]
            self._seen_rows = len(self._seen[0])

    def _seen_pairs(self):
        import numpy as np

        return np.unique(np.concatenate(self._seen)) if self._seen else np.zeros(0, dtype=np.int64)
