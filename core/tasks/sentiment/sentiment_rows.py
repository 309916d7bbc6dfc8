"""The sentiment task's part of an export's serve.py (core/runs/serve.py's module doc says what it holds): a row's
text -> p_positive, predicted ("positive" or "negative"), the text hashed as the run hashed it, by the
tokenizer of core/data/tokenizer.py in pure Python. Standard library only: it imports nothing of AMP Console.
"""

from __future__ import annotations

import re
import unicodedata
import zlib

ALIASES = {"text": ("sentence", "review", "reviewtext", "content")}  # amp-console predict's, as normal names


class Serving:
    """Review texts as the model's input (hashed token ids), P(positive) as answers."""

    copied = ()  # row columns copied to the answer
    columns = ["p_positive", "predicted"]

    def __init__(self, served, kit):
        self.served, self.kit = served, kit
        self.tokenizer = served.manifest["serving"]["tokenizer"]

    def predict(self, inputs, k):
        """P(positive) per review text."""
        bad = [i for i, text in enumerate(inputs) if not isinstance(text, str)]
        if bad:
            raise TypeError(f"input {bad[0]}: a review is a string, not {type(inputs[bad[0]]).__name__}")
        t = self.tokenizer
        ids = hashed_tokens(inputs, t["buckets"], t["max_tokens"], t["negation_scope"])
        return self.served.run(ids, "int64")

    def row_input(self, values):
        text = values.get("text")
        if not isinstance(text, str):
            raise self.kit.RowError(
                "no text column" if text is None else f"text is {self.kit.kind(text)}, not a string"
            )
        if not text.strip():
            raise self.kit.RowError("text is empty")
        return text

    def answer(self, result):
        return {"p_positive": self.kit.finite(result), "predicted": "positive" if result >= 0.5 else "negative"}


# The tokenizer the model was trained with (core/data/tokenizer.py), in pure Python: identical ids for text
# whose characters this Python's Unicode database knows (unicodedata.unidata_version: 14.0 on Python 3.11);
# characters assigned by a later Unicode version than the one there may be split or normalised differently.
CLAUSE_END = re.compile(r"[.,;:!?()\[\]{}\"“”…]+")
BOUNDARY = "|"
NEGATORS = frozenset({"not", "no", "never", "nor", "neither", "without", "cannot", "hardly", "nothing", "none"})
NEGATED_SALT = 0x2545F491
MASK64 = (1 << 64) - 1


def _lower(text):
    """Per-code-point (simple) lower-casing, as Arrow's utf8_lower: no final-sigma rule, U+0130 -> 'i'."""
    out = []
    for c in text:
        low = c.lower()
        out.append(low if len(low) == 1 else ("i" if c == "\u0130" else low))
    return "".join(out)


def _is_word_char(c, boundaries):
    return unicodedata.category(c)[0] in "LNM" or c in "_'" or (boundaries and c == BOUNDARY)


def words(text, boundaries=False):
    """A text's normalised, lower-cased words; with `boundaries`, clause ends as BOUNDARY entries."""
    text = _lower(unicodedata.normalize("NFKC", text)).replace("\u2019", "'")
    if boundaries:
        text = CLAUSE_END.sub(f" {BOUNDARY} ", text)
    out, current = [], []
    for c in text + " ":
        if _is_word_char(c, boundaries):
            current.append(c)
        elif current:
            word = "".join(current).strip("'")
            if word:
                out.append(word)
            current = []
    return out


def _row_ids(text, buckets, max_tokens, negation_scope):
    ws = words(text, boundaries=negation_scope > 0)
    last_negator = last_stop = -1
    kept, negated = [], []
    for i, w in enumerate(ws):
        boundary = negation_scope > 0 and w == BOUNDARY
        if boundary or i == 0:
            last_stop = i
        if w in NEGATORS or w.endswith("n't"):
            last_negator = i
        gap = i - last_negator
        if not boundary:
            kept.append(zlib.crc32(w.encode("utf-8")))
            negated.append(
                negation_scope > 0 and last_negator >= 0 and last_negator >= last_stop and 1 <= gap <= negation_scope
            )
    spread = buckets - 1
    row = [0] * max_tokens
    for p, h in enumerate(kept):
        slot = max(2 * p - 1, 0)
        if slot >= max_tokens:
            break
        row[slot] = ((h ^ NEGATED_SALT) if negated[p] else h) % spread + 1
        if p > 0 and 2 * p < max_tokens:
            mixed = ((kept[p - 1] * 0x9E3779B1 + h * 0x85EBCA77) & MASK64) ^ 0xB5
            row[2 * p] = mixed % spread + 1
    return row


def hashed_tokens(texts, buckets, max_tokens, negation_scope=0):
    """(rows, max_tokens) bucket ids of unigrams and bigrams, 0 = padding, as lists of ints."""
    return [_row_ids(text, buckets, max_tokens, negation_scope) for text in texts]
