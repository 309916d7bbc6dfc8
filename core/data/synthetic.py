"""Synthetic interactions and ranking data with planted structure (seeded), whose Bayes-optimal metrics are
known: the tasks' ceilings (docs/data.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import ConfigError

EVENTS = ("click", "complete")


@dataclass
class TrackChain:
    """The planted next-lesson process (item ids 0..n_items-1 here; tasks shift them by one for padding)."""

    n_items: int
    track_len: int
    follow: float
    jump_probs: np.ndarray  # q, shape (n_items,)

    def successor(self, items: np.ndarray) -> np.ndarray:
        """The next lesson of each item's track (wrapping round at the end of the track)."""
        base = (items // self.track_len) * self.track_len
        return base + (items - base + 1) % self.track_len

    def expected_metrics(self, current: np.ndarray, negatives: int = 100, k: int = 10) -> dict[str, float]:
        """Expected HR@k / NDCG@k of the Bayes-optimal ranking (sampled: Binomial(negatives, r / (n - 1)) above)."""
        n, f = self.n_items, self.follow
        order = np.argsort(-self.jump_probs, kind="stable")
        qs = self.jump_probs[order]
        rank_in_q = np.empty(n, dtype=np.int64)
        rank_in_q[order] = np.arange(n)
        succ_rank = rank_in_q[self.successor(current)]
        ranks = np.arange(n + 1)
        out = {}
        variants = (("full", *_full_gains(ranks, k)), (f"sampled{negatives}", *_sampled_gains(ranks, n, negatives, k)))
        for suffix, hit, gain in variants:
            for name, g in (("hr", hit), ("ndcg", gain)):
                # Succ(i) ranks first; an item at q-position j ranks j+1 if before succ(i) in q, else j.
                before = np.concatenate([[0.0], np.cumsum(qs * g[1:])])  # sum_{j<m} q_j g(j+1)
                after = np.cumsum((qs * g[:-1])[::-1])[::-1]  # sum_{j>=m} q_j g(j)
                after = np.concatenate([after, [0.0]])
                p_succ = f + (1 - f) * qs[succ_rank]
                value = p_succ * g[0] + (1 - f) * (before[succ_rank] + after[succ_rank + 1])
                out[f"{name}@{k}_{suffix}"] = float(value.mean())
        return out

    def check(self) -> None:
        """The formula above assumes succ(i) is always the most likely next item."""
        if self.follow < (1 - self.follow) * float(self.jump_probs.max()):
            raise ConfigError("task_options.follow", f"{self.follow} is too low for the popularity skew")


def _full_gains(ranks: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    hit = (ranks < k).astype(np.float64)
    return hit, hit / np.log2(ranks + 2.0)


def _sampled_gains(ranks: np.ndarray, n: int, negatives: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    p = np.clip(ranks / max(n - 1, 1), 0.0, 1.0)
    hit = np.zeros(len(ranks))
    gain = np.zeros(len(ranks))
    with np.errstate(divide="ignore", invalid="ignore"):
        pmf = (1.0 - p) ** negatives
        for above in range(k):  # Binomial pmf by recurrence, for 0..k-1 negatives ranked above the target
            hit += pmf
            gain += pmf / np.log2(above + 2.0)
            pmf = np.nan_to_num(pmf * (negatives - above) / (above + 1) * p / (1.0 - p))
    return hit, gain


def make_track_chain(n_items: int, track_len: int, follow: float, zipf: float, seed: int) -> TrackChain:
    """A TrackChain with Zipf(`zipf`) jump popularity over a seeded permutation of the catalogue."""
    if n_items % track_len:
        raise ConfigError("task_options.track_len", f"{track_len} must divide the catalogue size {n_items}")
    rng = np.random.default_rng([seed, 1])
    weights = 1.0 / np.arange(1, n_items + 1) ** zipf
    q = np.empty(n_items)
    q[rng.permutation(n_items)] = weights / weights.sum()
    chain = TrackChain(n_items, track_len, follow, q)
    chain.check()
    return chain


def sequence_lengths(rows: int, mean_len: int, seed: int, min_len: int = 3) -> np.ndarray:
    """Per-user sequence lengths (min_len + Poisson) adding up to exactly `rows`."""
    rng = np.random.default_rng([seed, 2])
    users = int(rows / mean_len * 1.2) + 16
    lengths = min_len + rng.poisson(max(mean_len - min_len, 0), users)
    while lengths.sum() < rows:
        lengths = np.concatenate([lengths, lengths])
    ends = np.cumsum(lengths)
    keep = int(np.searchsorted(ends, rows)) + 1
    lengths = lengths[:keep].copy()
    lengths[-1] -= ends[keep - 1] - rows
    return lengths[lengths > 0]


def generate_interactions(chain: TrackChain, rows: int, mean_len: int, seed: int) -> dict[str, np.ndarray]:
    """`rows` interactions sorted by user then time: user, item (0-based), timestamp (s), event (0/1 codes)."""
    rng = np.random.default_rng([seed, 3])
    lengths = sequence_lengths(rows, mean_len, seed)
    n = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    user = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    jump = rng.random(n, dtype=np.float32) >= chain.follow
    jump[starts] = True
    positions = np.arange(n, dtype=np.int64)
    last_jump = np.maximum.accumulate(np.where(jump, positions, 0))
    target = np.zeros(n, dtype=np.int64)
    cdf = np.cumsum(chain.jump_probs)
    target[jump] = np.minimum(np.searchsorted(cdf, rng.random(int(jump.sum()))), chain.n_items - 1)
    origin = target[last_jump]
    base = (origin // chain.track_len) * chain.track_len
    item = base + (origin - base + positions - last_jump) % chain.track_len
    del target, origin, base, jump, last_jump
    gaps = rng.integers(30, 3600, n, dtype=np.int64)  # seconds between lessons
    clock = np.cumsum(gaps)
    first = rng.integers(1_700_000_000, 1_700_000_000 + 90 * 86400, len(lengths), dtype=np.int64)
    timestamp = clock - np.repeat(clock[starts] - first, lengths)
    event = (rng.random(n, dtype=np.float32) < 0.6).astype(np.int8)  # 1 = complete, 0 = click
    return {"user": user, "item": item, "timestamp": timestamp, "event": event}


def interactions_table(data: dict[str, np.ndarray]):
    """The interactions as the file format users supply: user_id, item_id, timestamp, event."""
    import pyarrow as pa

    events = pa.DictionaryArray.from_arrays(pa.array(data["event"]), pa.array(EVENTS))
    return pa.table({"user_id": data["user"], "item_id": data["item"], "timestamp": data["timestamp"], "event": events})


@dataclass
class RankingData:
    """Synthetic ranking rows (one per query-document pair) and the hidden relevance that ranks best."""

    query: np.ndarray  # (rows,) query ids, grouped
    features: np.ndarray  # (rows, n_features) float32
    label: np.ndarray  # (rows,) graded 0..4
    relevance: np.ndarray  # (rows,) noiseless hidden relevance s


GRADE_SHARES = (0.5, 0.3, 0.13, 0.05, 0.02)  # grades 0..4, about the shares of MSLR-WEB30K
# Kinds of the columns after the first few (_COLUMN_PLAN) and their shares, as in LETOR-like data.
_KIND_SHARES = {
    "score": 0.22,
    "count": 0.2,
    "lognormal": 0.1,
    "ratio": 0.1,
    "flag": 0.08,
    "constant": 0.08,
    "sparse": 0.08,
    "noise": 0.08,
    "query": 0.06,
}
_COLUMN_PLAN = (
    ("score", 0),
    ("score", 1),
    ("lognormal", 2),
    ("count", 0),
    ("ratio", 3),
    ("length", 4),
    ("flag", 5),
    ("query", 0),
    ("count", 1),
    ("sparse", 0),
)


def query_sizes(queries: int, docs: int, rng: np.random.Generator) -> np.ndarray:
    """Candidates per query: log-normal around `docs`, 2 to 3 x docs, adding up to queries x docs."""
    if docs <= 2:
        return np.full(queries, docs, dtype=np.int64)
    weights = np.minimum(rng.lognormal(0.0, 0.7, queries), 3.0 * docs / max(docs - 2, 1))
    spare = queries * (docs - 2)
    share = weights / weights.sum() * spare
    sizes = np.floor(share).astype(np.int64)
    rest = spare - int(sizes.sum())
    sizes[np.argsort(sizes - share, kind="stable")[:rest]] += 1  # the largest remainders take one more
    return sizes + 2


def generate_ranking(queries: int, docs: int, n_features: int, noise: float, seed: int) -> RankingData:
    """`queries` queries of about `docs` candidates with LETOR-shaped features from hidden factors; grades 0..4
    from a hidden relevance plus noise (`noise` x its std) in GRADE_SHARES; ranking by it is Bayes-optimal."""
    rng = np.random.default_rng([seed, 4])
    sizes = query_sizes(queries, docs, rng)
    query = np.repeat(np.arange(queries, dtype=np.int64), sizes)
    rows = len(query)
    u = rng.standard_normal((6, rows))
    q_len = 1.0 + rng.poisson(2.0, queries)
    q_pop = rng.lognormal(3.0, 1.5, queries)
    q_difficulty = rng.normal(0.0, 0.6, queries)
    relevance = (
        u[0]
        + 0.6 * u[1]
        + 0.5 * np.tanh(u[2])
        + 0.4 * u[0] * u[2]
        + 0.3 * u[3]
        - 0.8 * np.maximum(u[5] - 1.0, 0.0)
        + 0.15 * (q_len[query] - 3.0) * u[1]
        + q_difficulty[query]
    )
    observed = relevance + noise * relevance.std() * rng.standard_normal(rows)
    cuts = np.quantile(observed, np.cumsum(GRADE_SHARES)[:-1])
    label = np.searchsorted(cuts, observed).astype(np.int64)

    kinds = list(_KIND_SHARES)
    shares = np.array(list(_KIND_SHARES.values()))
    plan = list(_COLUMN_PLAN[:n_features])
    extra = n_features - len(plan)
    if extra > 0:
        drawn = rng.choice(len(kinds), size=extra, p=shares / shares.sum())
        plan += [(kinds[k], int(s)) for k, s in zip(drawn, rng.integers(0, 4, extra))]  # factors u0..u3
    length = np.exp(6.0 + 0.8 * u[4])  # words in the document: hundreds to thousands
    columns = {  # kind -> its column from a noisy view of a factor (signal) and the factor's index (source)
        "score": lambda signal, source: np.logaddexp(0.0, 1.5 * signal) * 10.0 ** rng.integers(0, 3),
        "count": lambda signal, source: rng.poisson(np.exp(0.8 * signal) * length / 1000.0 * rng.uniform(0.5, 20.0)),
        "lognormal": lambda signal, source: np.exp(1.5 * signal + rng.uniform(0.0, 6.0)),
        "ratio": lambda signal, source: 1.0 / (1.0 + np.exp(-signal)),
        "flag": lambda signal, source: signal > rng.uniform(0.5, 1.5),
        "length": lambda signal, source: np.round(length),
        "query": lambda signal, source: (q_len if source % 2 == 0 else q_pop)[query],
        "constant": lambda signal, source: np.full(rows, float(rng.choice([0.0, 1.0, 7.5]))),
        "sparse": lambda signal, source: np.where(rng.random(rows) < 0.02, np.exp(signal + 2.0), 0.0),
        "noise": lambda signal, source: rng.standard_normal(rows) * 10.0 ** rng.integers(-2, 4),  # a scale of its own
    }
    x = np.empty((rows, n_features), dtype=np.float32)
    for j, (kind, source) in enumerate(plan):
        signal = u[source] + rng.uniform(1.0, 2.5) * rng.standard_normal(rows)
        x[:, j] = columns[kind](signal, source)
    return RankingData(query, x, label, relevance.astype(np.float32))


def ranking_table(data: RankingData):
    """The ranking rows as the file format users supply: query_id, doc_id, label, f1..fn."""
    import pyarrow as pa

    docs = np.arange(len(data.query)) % max(1, int(np.bincount(data.query).max()))
    columns = {"query_id": data.query, "doc_id": docs, "label": data.label}
    columns.update({f"f{i + 1}": data.features[:, i] for i in range(data.features.shape[1])})
    return pa.table(columns)
