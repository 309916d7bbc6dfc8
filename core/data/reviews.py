"""Synthetic lesson reviews with planted sentiment cues, negation and label noise (seeded). The Bayes posterior
is exact: log-odds = logit(positive_rate) + (positive - negative cues) * logit(agreement); its accuracy and ROC
AUC are the ceilings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POSITIVE = tuple(
    "great clear helpful excellent engaging useful fun inspiring practical brilliant enjoyable perfect insightful "
    "friendly recommended".split()
)
NEGATIVE = tuple(
    "boring confusing useless slow unclear outdated frustrating poor buggy tedious disappointing messy dull wrong "
    "overpriced".split()
)
NEUTRAL = tuple(
    "the lesson course video quiz module teacher it was this and a of to python math section exercise examples "
    "content topic week explained pace project notes chapter instructor lecture really very so but also with for on "
    "my we in is after first second part about data homework slides audio questions answers beginner advanced level "
    "time".split()
)
NEGATOR = "not"  # the most common negator
# repeated entries are drawn more often
NEGATORS = (NEGATOR, *"not not never didn't wasn't isn't doesn't don't can't won't didn’t wasn’t isn’t".split())
INTENSIFIERS = ("very", "really", "that", "so", "particularly", "too", "quite", "exactly", "overly", "at all")
PUNCTUATION = (",", ".", "!")
SYLLABLES = tuple(
    "ba ce di fo gu ka le mi no pu ra se ti vo zu bra cle dro fli gra plo sta tre vin mor lex tan quo rel sol".split()
)
ZIPF_EXPONENT = 1.1


@dataclass
class Reviews:
    """Review texts, observed labels (0/1) and the exact posterior P(label = 1 | text)."""

    text: pa.Array
    label: np.ndarray
    posterior: np.ndarray


@lru_cache(maxsize=4)
def lexicon(rare_words: int) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(neutral, positive, negative) word lists: common words, then long tails of pseudo-words."""
    words = [a + b + suffix for suffix in ("", "ic", "ous", "ent", "y") for a in SYLLABLES for b in SYLLABLES]
    words = list(dict.fromkeys(w for w in words if w not in set(NEUTRAL + POSITIVE + NEGATIVE)))
    order = np.random.default_rng(12345).permutation(len(words))
    tail = [words[i] for i in order]
    if 4 * rare_words > len(tail):
        raise ValueError(f"rare_words must be at most {len(tail) // 4}")
    pos, neg, neutral = tail[:rare_words], tail[rare_words : 2 * rare_words], tail[2 * rare_words : 4 * rare_words]
    return NEUTRAL + tuple(neutral), POSITIVE + tuple(pos), NEGATIVE + tuple(neg)


def _zipf_draw(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** ZIPF_EXPONENT
    return np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(size)).clip(max=n - 1)


def generate_reviews(
    rows: int,
    seed: int,
    positive_rate: float = 0.6,
    cue_rate: float = 0.15,
    agreement: float = 0.8,
    label_noise: float = 0.05,
    negation: float = 0.25,
    rare_words: int = 1000,
) -> Reviews:
    """`rows` synthetic reviews; see the module docstring for the planted structure."""
    rng = np.random.default_rng([seed, 5])
    neutral, positive, negative = lexicon(rare_words)
    y = (rng.random(rows) < positive_rate).astype(np.int64)
    phrases = np.exp(rng.normal(np.log(16), 0.6, rows)).round().astype(np.int64).clip(3, 150)
    row = np.repeat(np.arange(rows), phrases)
    n = len(row)
    cue = rng.random(n) < cue_rate
    effective = np.where(rng.random(n) < agreement, y[row], 1 - y[row])  # 1 = positive
    negated = cue & (rng.random(n) < negation)
    surface = np.where(negated, 1 - effective, effective)
    # Intensifiers before the cue word: 0, 1 or 2 when negated ("not really that clear"), else 0 or 1.
    gap = np.where(negated, (rng.random(n)[:, None] < (0.5, 0.15)).sum(1), cue & (rng.random(n) < 0.2))
    last = np.r_[row[1:] != row[:-1], True]
    # Punctuation after a phrase: 0 none, 1 ",", 2 ".", 3 "!"; every review ends with "." or "!".
    mark = np.where(
        last, 2 + (rng.random(n) < 0.3), (np.searchsorted([0.08, 0.18, 0.2], rng.random(n), side="right") + 1) % 4
    )
    width = negated + gap + 1 + (mark > 0)
    first = np.cumsum(width) - width
    # Vocabulary: neutral words, positive, negative, negators, intensifiers, punctuation; then all of them
    # capitalised (a sentence's first word), then upper-cased (a shouted cue).
    n_neu, n_pos, n_neg = len(neutral), len(positive), len(negative)
    base_neg = n_neu + n_pos + n_neg
    base_int = base_neg + len(NEGATORS)
    base_punct = base_int + len(INTENSIFIERS)
    words = neutral + positive + negative + NEGATORS + INTENSIFIERS + PUNCTUATION
    size = len(words)
    tokens = np.empty(int(width.sum()), dtype=np.int64)
    tokens[first[negated]] = base_neg + rng.integers(0, len(NEGATORS), int(negated.sum()))
    gap_units = np.repeat(np.arange(n), gap)
    within = np.arange(len(gap_units)) - np.repeat(np.cumsum(gap) - gap, gap)
    tokens[first[gap_units] + negated[gap_units] + within] = base_int + rng.integers(
        0, len(INTENSIFIERS), len(gap_units)
    )
    word = np.empty(n, dtype=np.int64)  # Zipf draws only where each lexicon is used (the costly part)
    positive_cue, negative_cue = cue & (surface == 1), cue & (surface == 0)
    word[positive_cue] = n_neu + _zipf_draw(rng, int(positive_cue.sum()), n_pos)
    word[negative_cue] = n_neu + n_pos + _zipf_draw(rng, int(negative_cue.sum()), n_neg)
    word[~cue] = _zipf_draw(rng, int((~cue).sum()), n_neu)
    shout = cue & ~negated & (rng.random(n) < 0.03)
    word_at = first + negated + gap
    tokens[word_at] = word + np.where(shout, 2 * size, 0)
    punct = np.flatnonzero(mark > 0)
    tokens[word_at[punct] + 1] = base_punct + mark[punct] - 1
    # Capitalise the first word of each review and each word after "." or "!".
    starts = np.zeros(len(tokens), dtype=bool)
    starts[first[np.r_[True, row[1:] != row[:-1]]]] = True
    starts[1:] |= (tokens[:-1] == base_punct + 1) | (tokens[:-1] == base_punct + 2)
    starts &= tokens < size
    tokens[starts] += size
    per_row = np.bincount(row, weights=width, minlength=rows).astype(np.int64)
    vocab = pa.array(words + tuple(w[0].upper() + w[1:] for w in words) + tuple(w.upper() for w in words))
    offsets = pa.array(np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32))
    text = pc.binary_join(pa.ListArray.from_arrays(offsets, vocab.take(pa.array(tokens))), " ")
    text = pc.replace_substring_regex(text, r" ([,.!])", r"\1")
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
