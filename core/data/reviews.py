"""Synthetic lesson reviews with planted sentiment cues, negation and label noise (vectorised, seeded).

Each review has a hidden sentiment y ~ Bernoulli(positive_rate) and 6..24 words. Each word is, with
probability `cue_rate`, a sentiment cue whose *effective* polarity agrees with y with probability
`agreement`; a quarter of cues are negated ("not boring" is a positive cue), so only a model that sees
bigrams reads them right. Other words are neutral filler (Zipf). The observed label is y flipped with
probability `label_noise`.

Given the text, the Bayes posterior is exact: log-odds = logit(positive_rate) + (positive cues - negative
cues) * log(agreement / (1 - agreement)), and P(label = 1 | text) = noise + (1 - 2 noise) P(y = 1 | text).
The ceiling accuracy is the expected accuracy of thresholding that at 1/2; the ceiling ROC AUC is the
AUC of that posterior against the observed labels of the same split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POSITIVE = ("great", "clear", "helpful", "excellent", "engaging", "useful", "fun", "inspiring", "practical",
            "brilliant", "enjoyable", "perfect", "insightful", "friendly", "recommended")
NEGATIVE = ("boring", "confusing", "useless", "slow", "unclear", "outdated", "frustrating", "poor", "buggy",
            "tedious", "disappointing", "messy", "dull", "wrong", "overpriced")
NEUTRAL = ("the", "lesson", "course", "video", "quiz", "module", "teacher", "it", "was", "this", "and", "a", "of",
           "to", "python", "math", "section", "exercise", "examples", "content", "topic", "week", "explained",
           "pace", "project", "notes", "chapter", "instructor", "lecture", "really", "very", "so", "but", "also",
           "with", "for", "on", "my", "we", "in", "is", "after", "first", "second", "part", "about", "data",
           "homework", "slides", "audio", "questions", "answers", "beginner", "advanced", "level", "time")
NEGATOR = "not"


@dataclass
class Reviews:
    """Review texts, observed labels (0/1) and the exact posterior P(label = 1 | text)."""

    text: pa.Array
    label: np.ndarray
    posterior: np.ndarray


def generate_reviews(rows: int, seed: int, positive_rate: float = 0.6, cue_rate: float = 0.15,
                     agreement: float = 0.8, label_noise: float = 0.05, negation: float = 0.25) -> Reviews:
    """`rows` synthetic reviews; see the module docstring for the planted structure."""
    rng = np.random.default_rng([seed, 5])
    y = (rng.random(rows) < positive_rate).astype(np.int64)
    lengths = rng.integers(6, 25, rows)
    row = np.repeat(np.arange(rows), lengths)
    n = len(row)
    cue = rng.random(n) < cue_rate
    effective = np.where(rng.random(n) < agreement, y[row], 1 - y[row])  # 1 = positive
    negated = cue & (rng.random(n) < negation)
    surface = np.where(negated, 1 - effective, effective)
    n_pos, n_neg, n_neutral = len(POSITIVE), len(NEGATIVE), len(NEUTRAL)
    # Vocabulary ids: neutral words, then positive cues, then negative cues, then "not".
    cue_word = np.where(surface == 1, n_neutral, n_neutral + n_pos) + rng.integers(0, n_pos, n)
    zipf = 1.0 / np.arange(1, n_neutral + 1)
    filler = np.searchsorted(np.cumsum(zipf / zipf.sum()), rng.random(n)).clip(max=n_neutral - 1)
    word = np.where(cue, cue_word, filler)
    # A negated cue becomes two tokens: "not", word.
    width = 1 + negated.astype(np.int64)
    first = np.cumsum(width) - width
    tokens = np.empty(int(width.sum()), dtype=np.int64)
    tokens[first] = np.where(negated, n_neutral + n_pos + n_neg, word)
    tokens[first[negated] + 1] = word[negated]
    per_row = np.bincount(row, weights=width, minlength=rows).astype(np.int64)
    vocab = pa.array(NEUTRAL + POSITIVE + NEGATIVE + (NEGATOR,))
    offsets = pa.array(np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32))
    text = pc.binary_join(pa.ListArray.from_arrays(offsets, vocab.take(pa.array(tokens))), " ")
    signed = np.where(cue, 2 * effective - 1, 0)
    balance = np.bincount(row, weights=signed, minlength=rows)
    log_odds = np.log(positive_rate / (1 - positive_rate)) + balance * np.log(agreement / (1 - agreement))
    posterior = 1.0 / (1.0 + np.exp(-log_odds))
    flip = rng.random(rows) < label_noise
    label = np.where(flip, 1 - y, y)
    return Reviews(text, label, label_noise + (1 - 2 * label_noise) * posterior)


def reviews_table(reviews: Reviews) -> pa.Table:
    """The reviews as the file format users supply: text, label ("positive" / "negative")."""
    names = pa.array(["negative", "positive"])
    return pa.table({"text": reviews.text, "label": names.take(pa.array(reviews.label))})
