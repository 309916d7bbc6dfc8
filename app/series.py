"""Growing numpy buffers for live plots: amortised O(1) appends, views without copies. No Qt here."""

from __future__ import annotations

import math

import numpy as np


class Series:
    """An (x, y) series whose storage doubles when full, so a million appends cost ~20 reallocations."""

    def __init__(self, capacity: int = 256):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self._n = 0
        self.ymin = np.inf  # finite extremes kept on append, so a redraw never scans the buffer for a range
        self.ymax = -np.inf

    def __len__(self) -> int:
        return self._n

    def append(self, x: float, y: float) -> None:
        if self._n == len(self._x):
            self._grow()
        self._x[self._n] = x
        self._y[self._n] = np.nan if y is None else y
        self._n += 1
        if y is not None and math.isfinite(y):
            if y < self.ymin:
                self.ymin = y
            if y > self.ymax:
                self.ymax = y

    def _grow(self) -> None:
        capacity = 2 * len(self._x)
        for name in ("_x", "_y"):
            old = getattr(self, name)
            new = np.empty(capacity, dtype=old.dtype)
            new[: self._n] = old[: self._n]
            setattr(self, name, new)

    @property
    def capacity(self) -> int:
        return len(self._x)

    @property
    def x(self) -> np.ndarray:
        return self._x[: self._n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self._n]

    def last(self) -> float | None:
        return float(self._y[self._n - 1]) if self._n else None

    def clear(self) -> None:
        self._n = 0
        self.ymin = np.inf
        self.ymax = -np.inf


class SmoothedSeries(Series):
    """A series of the exponential moving average of what is appended (bias-corrected, like TensorBoard)."""

    def __init__(self, weight: float = 0.9, capacity: int = 256):
        super().__init__(capacity)
        self.weight = weight
        self._ema = 0.0
        self._count = 0

    def append(self, x: float, y: float) -> None:
        if y is None or not np.isfinite(y):
            super().append(x, np.nan)
            return
        self._count += 1
        self._ema = self.weight * self._ema + (1.0 - self.weight) * y
        super().append(x, self._ema / (1.0 - self.weight**self._count))

    def clear(self) -> None:
        super().clear()
        self._ema = 0.0
        self._count = 0
