"""Bounded numpy buffers for live plots, decimated on ingest: a `Series` hands out at most `budget` points, the
recent raw and older ones folded into min/max buckets (spikes and gaps survive). No Qt.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_BUDGET = 4096
MIN_BUDGET = 64
_PIECE = 1 << 20  # extend() folds at most this many points at once, bounding its temporaries

# Rows of the bucket table, shape (5, buckets): where the minimum is, where the maximum is, the first non-finite.
_XLO, _YLO, _XHI, _YHI, _XNAN = range(5)


def _summarise(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """The bucket table of the rows of `xs`/`ys`: first minimum, first maximum, first non-finite value."""
    rows = np.arange(len(ys))
    finite = np.isfinite(ys)
    low = np.where(finite, ys, np.inf)
    high = np.where(finite, ys, -np.inf)
    i_lo = low.argmin(axis=1)  # argmin/argmax pick the first of equal values: batching cannot change the pick
    i_hi = high.argmax(axis=1)
    any_finite = finite.any(axis=1)
    bad = ~finite
    table = np.empty((5, len(ys)))
    table[_XLO] = np.where(any_finite, xs[rows, i_lo], np.nan)
    table[_YLO] = low[rows, i_lo]
    table[_XHI] = np.where(any_finite, xs[rows, i_hi], np.nan)
    table[_YHI] = high[rows, i_hi]
    table[_XNAN] = np.where(bad.any(axis=1), xs[rows, bad.argmax(axis=1)], np.nan)
    return table


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Buckets `a` followed by buckets `b` (same shapes) as one bucket each; ties keep `a`'s (the earlier) point."""
    out = a.copy()
    lower = b[_YLO] < a[_YLO]
    out[_XLO] = np.where(lower, b[_XLO], a[_XLO])
    out[_YLO] = np.where(lower, b[_YLO], a[_YLO])
    higher = b[_YHI] > a[_YHI]
    out[_XHI] = np.where(higher, b[_XHI], a[_XHI])
    out[_YHI] = np.where(higher, b[_YHI], a[_YHI])
    out[_XNAN] = np.where(np.isnan(a[_XNAN]), b[_XNAN], a[_XNAN])
    return out


def _merge_pairs(table: np.ndarray) -> np.ndarray:
    """Buckets 0+1, 2+3, ...: the table at twice the width (an odd last bucket stays as it is)."""
    if table.shape[1] % 2:
        empty = np.array([[np.nan], [np.inf], [np.nan], [-np.inf], [np.nan]])
        table = np.concatenate([table, empty], axis=1)
    return _combine(table[:, 0::2], table[:, 1::2])


def _as_floats(values) -> np.ndarray:
    """A 1-D float64 array; None becomes NaN."""
    array = np.asarray(values)
    if array.dtype == object:
        array = np.array([np.nan if v is None else v for v in array.ravel()], dtype=np.float64)
    return np.ascontiguousarray(array, dtype=np.float64).ravel()


class Series:
    """An (x, y) series drawn from at most `budget` points: recent ones raw, older ones as min/max buckets."""

    def __init__(self, capacity: int = 256, budget: int = DEFAULT_BUDGET):
        if budget < MIN_BUDGET:
            raise ValueError(f"budget must be at least {MIN_BUDGET} points, got {budget}")
        self.budget = budget
        self._keep = budget // 8  # raw points left after a fold
        self._chunk = budget // 8  # raw points folded at once: a fold every `chunk` appends
        # each bucket draws up to 3 points (min, max, gap); an even count, so pairs merge evenly
        self._max_buckets = (budget - self._keep - self._chunk) // 6 * 2
        self._initial_capacity = max(1, min(capacity, self._keep + self._chunk))
        self.clear()

    def append(self, x: float, y: float | None) -> None:
        if self._n == len(self._x):
            self._grow(self._n + 1)
        self._x[self._n] = x
        self._y[self._n] = np.nan if y is None else y
        self._n += 1
        self._count += 1
        self._drawn = None
        if y is not None and math.isfinite(y):
            if y < self.ymin:
                self.ymin = y
            if y > self.ymax:
                self.ymax = y
        if self._n == self._keep + self._chunk:
            self._fold(self._x[: self._chunk], self._y[: self._chunk])
            self._new_raw(self._x[self._chunk : self._n], self._y[self._chunk : self._n])

    def extend(self, xs, ys) -> None:
        """Append many points (None in `ys` is a gap): the same result as appending them one by one, vectorised."""
        xs, ys = _as_floats(xs), _as_floats(ys)
        if len(xs) != len(ys):
            raise ValueError(f"extend got {len(xs)} x values and {len(ys)} y values")
        for start in range(0, len(xs), _PIECE):
            self._ingest(xs[start : start + _PIECE], ys[start : start + _PIECE])

    def _ingest(self, xs: np.ndarray, ys: np.ndarray) -> None:
        finite = ys[np.isfinite(ys)]
        if len(finite):
            self.ymin = min(self.ymin, float(finite.min()))
            self.ymax = max(self.ymax, float(finite.max()))
        self._count += len(xs)
        self._drawn = None
        total = self._n + len(xs)
        # append() folds `chunk` points whenever `keep + chunk` are raw: fold as many as it would have
        folded = self._chunk * max(0, (total - self._keep) // self._chunk)
        if not folded:
            if total > len(self._x):
                self._grow(total)
            self._x[self._n : total] = xs
            self._y[self._n : total] = ys
            self._n = total
            return
        all_x = np.concatenate([self._x[: self._n], xs])
        all_y = np.concatenate([self._y[: self._n], ys])
        self._fold(all_x[:folded], all_y[:folded])
        self._new_raw(all_x[folded:], all_y[folded:])

    def _grow(self, needed: int) -> None:
        capacity = len(self._x)
        while capacity < needed:
            capacity *= 2
        self._new_raw(self._x[: self._n], self._y[: self._n], min(capacity, self._keep + self._chunk))

    def _new_raw(self, xs: np.ndarray, ys: np.ndarray, capacity: int = 0) -> None:
        """Fresh raw buffers (full size by default) holding xs/ys: the old ones may be drawn from, never rewritten."""
        self._x = np.empty(capacity or self._keep + self._chunk, dtype=np.float64)
        self._y = np.empty(capacity or self._keep + self._chunk, dtype=np.float64)
        self._n = len(xs)
        self._x[: self._n] = xs
        self._y[: self._n] = ys

    def _fold(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Move the oldest raw points into the buckets, doubling the bucket width first when they would not fit."""
        folded = self._folded + len(xs)
        width = self._width
        while -(-folded // width) > self._max_buckets:
            width *= 2
        table = self._table
        while self._width < width:
            table = _merge_pairs(table)
            self._width *= 2
        start = 0
        if table.shape[1]:
            fill = self._folded - (table.shape[1] - 1) * width
            if fill < width:
                start = min(width - fill, len(xs))
                top_up = _summarise(xs[None, :start], ys[None, :start])
                table = np.concatenate([table[:, :-1], _combine(table[:, -1:], top_up)], axis=1)
        parts = [table]
        full = (len(xs) - start) // width
        if full:
            end = start + full * width
            parts.append(_summarise(xs[start:end].reshape(full, width), ys[start:end].reshape(full, width)))
            start = end
        if start < len(xs):
            parts.append(_summarise(xs[None, start:], ys[None, start:]))
        self._table = np.concatenate(parts, axis=1) if len(parts) > 1 else table
        self._folded = folded
        self._bucket_points = None

    def __len__(self) -> int:
        """Points appended since the last clear (what was logged), not how many are drawn (`stored`)."""
        return self._count

    @property
    def stored(self) -> int:
        """How many points `x`/`y` hold: at most `budget`."""
        return len(self.x)

    @property
    def width(self) -> int:
        """Appended points per bucket (1 until the buckets first run out)."""
        return self._width

    @property
    def capacity(self) -> int:
        """Size of the raw (recent points) buffer: doubles from `capacity` up to `budget // 4`."""
        return len(self._x)

    @property
    def nbytes(self) -> int:
        """Bytes of numpy data this series holds (buffers, buckets and the arrays last handed out)."""
        held = [self._x, self._y, self._table, *(self._drawn or ()), *(self._bucket_points or ())]
        return sum({id(a): a.nbytes for a in held}.values())

    @property
    def x(self) -> np.ndarray:
        return self._arrays()[0]

    @property
    def y(self) -> np.ndarray:
        return self._arrays()[1]

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._table.shape[1]:  # nothing folded yet: views of the raw buffer, as before decimation
            return self._x[: self._n], self._y[: self._n]
        if self._drawn is None:
            if self._bucket_points is None:  # changes only on a fold: every `chunk` appends
                self._bucket_points = self._draw_buckets()
            bx, by = self._bucket_points
            self._drawn = np.concatenate([bx, self._x[: self._n]]), np.concatenate([by, self._y[: self._n]])
        return self._drawn

    def _draw_buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """Each bucket's minimum, maximum and gap, in x order; a point that is both minimum and maximum once."""
        t = self._table
        nb = t.shape[1]
        px = np.stack([t[_XLO], t[_XHI], t[_XNAN]], axis=1)
        py = np.stack([t[_YLO], t[_YHI], np.full(nb, np.nan)], axis=1)
        keep = ~np.isnan(px)
        keep[:, 1] &= ~((t[_XHI] == t[_XLO]) & (t[_YHI] == t[_YLO]))  # a one-point or flat bucket: once
        order = np.argsort(np.where(keep, px, np.inf), axis=1, kind="stable")  # each bucket in x order
        px = np.take_along_axis(px, order, axis=1)
        py = np.take_along_axis(py, order, axis=1)
        keep = np.take_along_axis(keep, order, axis=1)
        return px[keep], py[keep]

    def last(self) -> float | None:
        """The latest appended value (NaN for a gap), None when empty."""
        return float(self._y[self._n - 1]) if self._n else None

    def clear(self) -> None:
        self._new_raw(np.empty(0), np.empty(0), self._initial_capacity)  # _n: the raw points
        self._count = 0  # appended points
        self._table = np.empty((5, 0))
        self._width = 1
        self._folded = 0
        self._drawn: tuple[np.ndarray, np.ndarray] | None = None  # what x/y last handed out
        self._bucket_points: tuple[np.ndarray, np.ndarray] | None = None  # the buckets' part of it
        self.ymin = np.inf  # finite extremes kept on ingest, so a redraw never scans the buffers for a range
        self.ymax = -np.inf


class SmoothedSeries(Series):
    """The bias-corrected exponential moving average of what is appended; a None/NaN/inf is a gap."""

    def __init__(self, weight: float = 0.9, capacity: int = 256, budget: int = DEFAULT_BUDGET):
        self.weight = weight
        super().__init__(capacity, budget)

    def append(self, x: float, y: float | None) -> None:
        if y is None or not np.isfinite(y):
            super().append(x, np.nan)
            return
        self._ema_count += 1
        self._ema = self.weight * self._ema + (1.0 - self.weight) * y
        super().append(x, self._ema / (1.0 - self.weight**self._ema_count))

    def _ingest(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """`extend` smooths as `append` does, up to float rounding (~1e-15 relative)."""
        finite = np.isfinite(ys)
        values = ys[finite]
        smoothed = np.full(len(ys), np.nan)
        if len(values):
            emas = _ema(values, self.weight, self._ema)
            counts = self._ema_count + np.arange(1, len(values) + 1, dtype=np.float64)
            smoothed[finite] = emas / (1.0 - self.weight**counts)
            self._ema = float(emas[-1])
            self._ema_count += len(values)
        super()._ingest(xs, smoothed)

    def clear(self) -> None:
        super().clear()
        self._ema = 0.0
        self._ema_count = 0


def _ema(values: np.ndarray, weight: float, start: float, block: int = 128) -> np.ndarray:
    """e[t] = weight * e[t-1] + (1 - weight) * values[t] from e[-1] = start, block-wise."""
    n = len(values)
    blocks = -(-n // block)
    padded = np.zeros(blocks * block)
    padded[:n] = values
    i = np.arange(block)
    lag = i[:, None] - i[None, :]
    decay = np.where(lag >= 0, weight ** np.maximum(lag, 0), 0.0) * (1.0 - weight)
    local = padded.reshape(blocks, block) @ decay.T  # the average as if each block started from 0
    carries = np.empty(blocks)
    carry = start
    tail = weight**block
    for b in range(blocks):
        carries[b] = carry
        carry = local[b, -1] + tail * carry
    out = local + carries[:, None] * weight ** (i + 1)[None, :]
    return out.reshape(-1)[:n]
