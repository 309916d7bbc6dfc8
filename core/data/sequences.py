"""User interaction sequences -> left-padded windows for a causal sequence model, with leave-last-out splits
(SASRec's protocol: 100 unseen negatives per evaluation row; see docs/data.md).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from core.data.importers import Column, contiguous_ids, encode_ids, id_vocabulary

FILE_ORDER_HINT = (
    "if each user's lines are in time order (SASRec's `user item` files), say so with -o "
    "file_order=true (the recommender's option File order)"
)
INTERACTION_COLUMNS = [
    Column("user_id", "id"),
    Column("item_id", "id"),
    Column("timestamp", "number", hint=FILE_ORDER_HINT),
    Column("event", "label", required=False, choices=("click", "complete")),
]
# file_order: the lines' order is the time order; a timestamp column, if any, is not read
FILE_ORDER_COLUMNS = [c for c in INTERACTION_COLUMNS if c.name != "timestamp"]


def group_lengths(user: np.ndarray) -> np.ndarray:
    """Run lengths of a sorted user-id array (one entry per user, in order)."""
    if len(user) == 0:
        return np.zeros(0, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(user)) + 1
    return np.diff(np.concatenate([[0], bounds, [len(user)]]))


def training_windows(items: np.ndarray, starts: np.ndarray, lengths: np.ndarray, max_len: int) -> dict:
    """Windows of (input, next-item target) pairs from each user's items[starts : starts + lengths]."""
    transitions = np.maximum(lengths - 1, 0)
    chunks = -(-transitions // max_len)
    rows = int(chunks.sum())
    seq = np.zeros((rows, max_len), dtype=np.int64)
    target = np.zeros((rows, max_len), dtype=np.int64)
    owner = np.repeat(np.arange(len(lengths)), transitions)
    first_row = np.cumsum(chunks) - chunks
    first_transition = np.cumsum(transitions) - transitions
    step = np.arange(int(transitions.sum()), dtype=np.int64) - np.repeat(first_transition, transitions)
    back = transitions[owner] - 1 - step  # transitions after this one: 0 for the user's latest
    row = first_row[owner] + back // max_len
    col = max_len - 1 - back % max_len
    src = starts[owner] + step
    seq[row, col] = items[src]
    target[row, col] = items[src + 1]
    return {"seq": torch.from_numpy(seq), "target": torch.from_numpy(target)}


def history_windows(items: np.ndarray, starts: np.ndarray, ends: np.ndarray, max_len: int) -> torch.Tensor:
    """The last `max_len` items of items[starts:ends] per user, left-padded with 0: shape (users, max_len)."""
    index = ends[:, None] - max_len + np.arange(max_len)
    valid = index >= starts[:, None]
    return torch.from_numpy(np.where(valid, items[np.clip(index, 0, None)], 0))


def sampled_negatives(targets: np.ndarray, n_items: int, count: int, seed: int) -> torch.Tensor:
    """`count` items per row drawn uniformly (with replacement) from the catalogue 1..n_items minus the target."""
    rng = np.random.default_rng([seed, 7])
    draw = rng.integers(1, n_items, (len(targets), count))  # n_items - 1 choices, then skip over the target
    return torch.from_numpy(draw + (draw >= targets[:, None]))


def unseen_negatives(
    items: np.ndarray, starts: np.ndarray, ends: np.ndarray, targets: np.ndarray, n_items: int, count: int, seed: int
) -> torch.Tensor:
    """(rows, count) items drawn uniformly from 1..n_items minus the user's items[starts:ends] and the target."""
    # each user's sorted excluded items e_0 < e_1 < ... give a_j = e_j - 1 - j allowed items below e_j, so the
    # k-th allowed item is k + 1 + #{j : a_j <= k}: one binary search over all users' a_j
    rows = len(targets)
    lengths = ends - starts
    owner = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    flat = items[np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))]
    span = np.int64(n_items + 1)
    keys = np.unique(np.concatenate([owner * span + flat, np.arange(rows, dtype=np.int64) * span + targets]))
    key_row, excluded = keys // span, keys % span
    per_row = np.bincount(key_row, minlength=rows)
    first = np.cumsum(per_row) - per_row
    rank = np.arange(len(keys)) - first[key_row]
    below = key_row * span + (excluded - 1 - rank)  # sorted: a_j grows within a row, rows are span apart
    allowed = n_items - per_row
    rng = np.random.default_rng([seed, 7])
    k = np.floor(rng.random((rows, count)) * np.maximum(allowed, 1)[:, None]).astype(np.int64)
    k = np.minimum(k, np.maximum(allowed, 1)[:, None] - 1)
    found = np.searchsorted(below, np.arange(rows, dtype=np.int64)[:, None] * span + k, side="right")
    draw = k + 1 + found - first[:, None]
    if (allowed == 0).any():
        fallback = sampled_negatives(targets, n_items, count, seed).numpy()
        draw = np.where((allowed == 0)[:, None], fallback, draw)
    return torch.from_numpy(draw)


def sequence_splits(user: np.ndarray, items: np.ndarray, n_items: int, max_len: int, negatives: int, seed: int):
    """train / val / test dicts from items (1-based) sorted by user then time; see the module docstring."""
    lengths = group_lengths(user)
    starts = np.cumsum(lengths) - lengths
    held = np.where(lengths >= 3, 2, 0)  # users with < 3 interactions only train
    train = training_windows(items, starts, lengths - held, max_len)
    evaluated = np.flatnonzero(held)
    user_start, user_end = starts[evaluated], starts[evaluated] + lengths[evaluated]
    val, test = (  # val predicts s_{n-1}, test predicts s_n
        _evaluation_rows(items, user_start, user_end - back, user_end, n_items, max_len, negatives, seed + back)
        for back in (2, 1)
    )
    return train, val, test


def _evaluation_rows(items, starts, ends, seen_end, n_items, max_len, negatives, seed, target=None) -> dict:
    """Rows predicting `target` (else items[ends]) from the history items[starts:ends]."""
    target = items[ends] if target is None else target
    return {
        "seq": history_windows(items, starts, ends, max_len),
        "target": torch.from_numpy(target),
        "history_start": torch.from_numpy(starts.astype(np.int64)),
        "history_end": torch.from_numpy(ends.astype(np.int64)),
        "negatives": unseen_negatives(items, starts, seen_end, target, n_items, negatives, seed),
    }


def encode_interactions(tables: dict[str, pa.Table]) -> dict[str, dict]:
    """Interaction tables (one per split) -> per split user codes and item ids 1..n, codes shared."""
    names = list(tables)
    sizes = [tables[n].num_rows for n in names]
    users = _same_type([tables[n].column("user_id") for n in names])
    items = _same_type([tables[n].column("item_id") for n in names])
    user, n_users = contiguous_ids(pa.chunked_array(users))
    item, raw_items = encode_ids(pa.chunked_array(items), start=1)
    bounds = np.cumsum([0, *sizes])
    out = {}
    shared = {"n_items": len(raw_items), "n_users": n_users, "item_ids": id_vocabulary(raw_items)}
    for k, name in enumerate(names):
        u, i = user[bounds[k] : bounds[k + 1]], item[bounds[k] : bounds[k + 1]]
        if "timestamp" in tables[name].column_names:
            order = np.lexsort((tables[name].column("timestamp").to_numpy(), u))  # stable: ties keep file order
        else:
            order = np.argsort(u, kind="stable")  # file order within each user
        out[name] = {"user": u[order], "item": i[order], **shared}
    return out


def _same_type(columns: list[pa.ChunkedArray]) -> list[pa.Array]:
    """Id columns of several files as chunks of one type (text when they differ: ids are compared as written)."""
    if len({c.type for c in columns}) > 1:
        columns = [pc.cast(c, pa.string()) for c in columns]
    return [chunk for c in columns for chunk in c.chunks]


def given_sequence_splits(
    parts: dict[str, dict], n_items: int, max_len: int, negatives: int, seed: int
) -> tuple[dict, dict, dict | None, np.ndarray, list[str]]:
    """train / val / test splits, the flat item array and notes from interactions given per split: a user's
    target is their first val (test) event; without val data the last training event validates."""
    train, val, notes = parts["train"], parts.get("val"), []
    if val is None:  # each user's last training event validates (users with >= 2 train on the rest)
        lengths = group_lengths(train["user"])
        last = np.cumsum(lengths)[lengths >= 2] - 1
        held = np.zeros(len(train["user"]), dtype=bool)
        held[last] = True
        val = {"user": train["user"][held], "item": train["item"][held]}
        train = {"user": train["user"][~held], "item": train["item"][~held]}
    n_users = int(parts["train"]["n_users"])
    t_lengths = group_lengths(train["user"])
    t_starts = np.cumsum(t_lengths) - t_lengths
    windows = training_windows(train["item"], t_starts, t_lengths, max_len)
    # the flat item array: training histories, then training + validation histories (for test)
    both_user = np.concatenate([train["user"], val["user"]])
    order = np.argsort(both_user, kind="stable")  # within a user: training events, then validation events
    flat = np.concatenate([train["item"], np.concatenate([train["item"], val["item"]])[order]])
    spans = []
    for user_array, offset in ((train["user"], 0), (both_user[order], len(train["item"]))):
        start = np.full(n_users, -1, dtype=np.int64)
        end = np.full(n_users, -1, dtype=np.int64)
        lengths = group_lengths(user_array)
        codes = user_array[np.cumsum(lengths) - lengths] if len(lengths) else np.zeros(0, dtype=np.int64)
        start[codes] = offset + np.cumsum(lengths) - lengths
        end[codes] = offset + np.cumsum(lengths)
        spans.append((start, end))
    train_users = np.zeros(n_users, dtype=bool)
    train_users[train["user"]] = True
    evaluated: list[dict[str, torch.Tensor] | None] = []
    for name, part, (start, end), back in (("validation", val, spans[0], 2), ("test", parts.get("test"), spans[1], 1)):
        if part is None:
            evaluated.append(None)
            continue
        users, first = np.unique(part["user"], return_index=True)  # sorted by user then time: the first event
        known = train_users[users]
        if (~known).any():
            skipped = int((~known).sum())
            notes.append(
                f"recommender: {skipped:,} user{'s' if skipped > 1 else ''} of the {name} data "
                f"{'have' if skipped > 1 else 'has'} no training history: skipped"
            )
        users, target = users[known], part["item"][first[known]]
        starts, ends = start[users], end[users]
        evaluated.append(_evaluation_rows(flat, starts, ends, ends, n_items, max_len, negatives, seed + back, target))
    assert evaluated[0] is not None  # val is always there (taken from train when not given)
    return windows, evaluated[0], evaluated[1], flat, notes
