"""A tokenizer that needs no download: lower-cased word unigrams and bigrams hashed into fixed buckets.

Columnar all the way: pyarrow lower-cases and splits the whole text column, each *distinct* word is hashed
once (CRC32, stable across runs and machines, unlike Python's salted `hash`), and bigram ids are combined
from their two word hashes with numpy. Row i becomes [w0, w1, w0w1, w2, w1w2, ...] truncated to
`max_tokens` and padded with 0 (bucket 0 is reserved for padding).
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

WORD_SPLIT = r"[^\w']+"  # words keep apostrophes ("don't"); everything else separates


def word_lists(text: pa.ChunkedArray | pa.Array) -> pa.ListArray:
    """Lower-cased word lists per row (empty strings from leading/trailing separators dropped)."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    words = pc.split_pattern_regex(pc.utf8_lower(text), WORD_SPLIT)
    flat = pc.list_flatten(words)
    keep = pc.not_equal(flat, "")
    rows = pc.list_parent_indices(words).to_numpy()[keep.to_numpy(zero_copy_only=False)]
    counts = np.bincount(rows, minlength=len(text))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(keep))


def word_hashes(words: pa.Array) -> np.ndarray:
    """Stable 32-bit hash of every word (each distinct word hashed once)."""
    encoded = pc.dictionary_encode(words)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    table = np.array([zlib.crc32(w.encode("utf-8")) for w in encoded.dictionary.to_pylist()], dtype=np.uint64)
    return table[encoded.indices.to_numpy(zero_copy_only=False)] if len(table) else np.zeros(0, np.uint64)


def hashed_tokens(text: pa.ChunkedArray | pa.Array, buckets: int, max_tokens: int) -> torch.Tensor:
    """(rows, max_tokens) int32 bucket ids 1..buckets-1 of unigrams and bigrams, 0 = padding.

    int32 (EmbeddingBag takes it) halves the largest tensor of a big review file."""
    lists = word_lists(text)
    flat = lists.flatten()
    offsets = lists.offsets.to_numpy().astype(np.int64)
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(flat)) - offsets[rows]
    hashes = word_hashes(flat)
    spread = np.uint64(buckets - 1)
    out = np.zeros((len(lengths), max_tokens), dtype=np.int32)
    uni_slot = np.maximum(2 * position - 1, 0)  # layout w0, w1, w0w1, w2, w1w2, ...
    keep = uni_slot < max_tokens
    out[rows[keep], uni_slot[keep]] = (hashes[keep] % spread + np.uint64(1)).astype(np.int32)
    second = np.flatnonzero(position > 0)  # the second word of each bigram
    # Mix the two word hashes so (a, b) and (b, a) land in different buckets.
    mixed = (hashes[second - 1] * np.uint64(0x9E3779B1) + hashes[second] * np.uint64(0x85EBCA77)) ^ np.uint64(0xB5)
    bi_slot = 2 * position[second]
    keep = bi_slot < max_tokens
    out[rows[second][keep], bi_slot[keep]] = (mixed[keep] % spread + np.uint64(1)).astype(np.int32)
    return torch.from_numpy(out)
