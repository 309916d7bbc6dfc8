"""A tokenizer that needs no download: lower-cased word unigrams and bigrams hashed (CRC32) into fixed buckets,
0 padding. With `negation_scope` k > 0, the k words after a negator in its clause get a negated unigram.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

CLAUSE_END = r"[.,;:!?()\[\]{}\"“”…]+"  # punctuation that ends a negation's scope
BOUNDARY = "|"  # stands for a clause end between splitting and hashing; never a word
WORD_SPLIT = r"[^\p{L}\p{N}\p{M}_'|]+"  # words keep apostrophes ("don't"); everything else separates
NEGATORS = frozenset({"not", "no", "never", "nor", "neither", "without", "cannot", "hardly", "nothing", "none"})
NEGATED_SALT = np.uint64(0x2545F491)  # a negated word's hash: the word's, xor this


def word_lists(text: pa.ChunkedArray | pa.Array, boundaries: bool = False) -> pa.ListArray:
    """Normalised, lower-cased word lists per row (`boundaries`: clause ends kept as BOUNDARY)."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    text = pc.utf8_lower(pc.utf8_normalize(text, "NFKC"))
    text = pc.replace_substring(text, "’", "'")  # typographic apostrophe
    if boundaries:
        text = pc.replace_substring_regex(text, CLAUSE_END, f" {BOUNDARY} ")
    words = pc.split_pattern_regex(text, WORD_SPLIT if boundaries else WORD_SPLIT.replace(BOUNDARY, ""))
    flat = pc.utf8_trim(pc.list_flatten(words), "'")  # 'quoted' -> quoted
    keep = pc.not_equal(flat, "")
    rows = pc.list_parent_indices(words).to_numpy()[keep.to_numpy(zero_copy_only=False)]
    counts = np.bincount(rows, minlength=len(text))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(keep))


def word_hashes(words: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A stable 32-bit hash of every word, and whether each word is a negator."""
    encoded = pc.dictionary_encode(words)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    distinct = encoded.dictionary.to_pylist()
    table = np.array([zlib.crc32(w.encode("utf-8")) for w in distinct], dtype=np.uint64)
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    hashes = table[indices] if len(table) else np.zeros(0, np.uint64)
    negator = np.array([w in NEGATORS or w.endswith("n't") for w in distinct], dtype=bool)
    return hashes, negator[indices] if len(negator) else np.zeros(0, bool)


def negated_positions(is_negator: np.ndarray, is_boundary: np.ndarray, row_start: np.ndarray, scope: int) -> np.ndarray:
    """Which words of a flat word sequence lie within `scope` words after a negator of their clause."""
    index = np.arange(len(is_negator))
    last_negator = np.maximum.accumulate(np.where(is_negator, index, -1)) if len(index) else index
    last_stop = np.maximum.accumulate(np.where(is_boundary | row_start, index, -1)) if len(index) else index
    gap = index - last_negator
    return (last_negator >= 0) & (last_negator >= last_stop) & (gap >= 1) & (gap <= scope) & ~is_boundary


def hashed_tokens(
    text: pa.ChunkedArray | pa.Array, buckets: int, max_tokens: int, negation_scope: int = 0
) -> torch.Tensor:
    """(rows, max_tokens) int32 bucket ids 1..buckets-1 of unigrams and bigrams, 0 = padding."""
    lists = word_lists(text, boundaries=negation_scope > 0)
    flat = lists.flatten()
    hashes, negator = word_hashes(flat)
    offsets = lists.offsets.to_numpy().astype(np.int64)
    unigram = hashes
    if negation_scope > 0:
        row_start = np.zeros(len(flat), dtype=bool)
        row_start[offsets[:-1][np.diff(offsets) > 0]] = True
        boundary = pc.equal(flat, BOUNDARY).to_numpy(zero_copy_only=False)
        negated = negated_positions(negator, boundary, row_start, negation_scope)
        unigram = np.where(negated, hashes ^ NEGATED_SALT, hashes)[~boundary]
        hashes = hashes[~boundary]
        rows_all = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(rows_all[~boundary], minlength=len(lists)))])
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(hashes)) - offsets[rows]
    spread = np.uint64(buckets - 1)
    out = np.zeros((len(lengths), max_tokens), dtype=np.int32)
    uni_slot = np.maximum(2 * position - 1, 0)  # layout w0, w1, w0w1, w2, w1w2, ...
    keep = uni_slot < max_tokens
    out[rows[keep], uni_slot[keep]] = (unigram[keep] % spread + np.uint64(1)).astype(np.int32)
    second = np.flatnonzero(position > 0)  # the second word of each bigram
    # Mix the two word hashes so (a, b) and (b, a) land in different buckets.
    mixed = (hashes[second - 1] * np.uint64(0x9E3779B1) + hashes[second] * np.uint64(0x85EBCA77)) ^ np.uint64(0xB5)
    bi_slot = 2 * position[second]
    keep = bi_slot < max_tokens
    out[rows[second][keep], bi_slot[keep]] = (mixed[keep] % spread + np.uint64(1)).astype(np.int32)
    return torch.from_numpy(out)
