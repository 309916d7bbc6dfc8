"""View ranges for live plots that change rarely, so pyqtgraph does not re-lay the axes out on every redraw: x
grows in a few steps per decade; y moves only when data leaves it or fills less than a third of it.
"""

from __future__ import annotations

import math

Y_PAD = 0.08  # fraction of the data span added above and below when the y range moves
FLAT = 1e-6  # a span below this fraction of the values' size is drawn as flat (float noise is not a trend)
AUTO_LOG_RATIO = 1e3  # an `auto_log` range turns logarithmic once its positive data spans this many times


class StableRange:
    """The y range of one plot; `update(lo, hi)` says whether it must move, and where to."""

    def __init__(self, log: bool = False, auto_log: bool = False, zero_based: bool = False):
        self.initial_log = log
        self.auto_log = auto_log
        self.zero_based = zero_based
        self.default = (0.0, 6.0) if log else (0.0, 1.0)  # what an empty plot shows
        self.reset()

    def reset(self) -> None:
        self.log = self.initial_log
        self.lo: float | None = None
        self.hi: float | None = None
        self.manual = False  # the user zoomed or panned: leave this plot alone until the next run

    def update(self, lo: float, hi: float) -> tuple[float, float] | None:
        """The new (lo, hi) view range for data spanning [lo, hi], or None when the current one still fits."""
        if self.manual or not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        if self.auto_log and not self.log and lo > 0 and hi / lo >= AUTO_LOG_RATIO:
            self.log = True
            self.lo = self.hi = None  # a new scale: fit afresh
        if self.log:
            if hi <= 0:
                return None
            lo, hi = math.log10(max(lo, hi * 1e-12, 1e-300)), math.log10(hi)
        elif self.zero_based:
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        span = hi - lo
        if self.lo is not None and self.lo <= lo and hi <= self.hi and span >= (self.hi - self.lo) / 3:
            return None
        if span > FLAT * max(abs(lo), abs(hi)):
            pad_lo = pad_hi = span * Y_PAD
        else:
            pad_lo = pad_hi = max(abs(hi) * 0.1, 0.5 if self.log else 1e-3)
        if self.zero_based and not self.log and lo == 0.0:
            pad_lo = 0.0  # the axis starts at 0 itself
        self.lo, self.hi = lo - pad_lo, hi + pad_hi
        return self.lo, self.hi


X_STEPS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.5)  # x range ends per decade: 10, 15, 20, 30, 50, 75, 100, ...
X_HEADROOM = 1.1  # the range ends at least this far past the newest step when it moves


def x_end_for(step: int, total_steps: int = 0) -> int:
    """The end of the x range when the newest point is at `step`: the first of 10, 15, 20, 30, 50, 75, 100, ... at least
    X_HEADROOM past it; never past a known `total_steps`, and the whole run once within a fifth of it."""
    want = max(10.0, step * X_HEADROOM)
    decade = 10 ** max(1, math.floor(math.log10(want)))
    end = next((int(decade * f) for f in (*X_STEPS, 10.0) if decade * f >= want), int(decade * 10))
    return total_steps if total_steps > 0 and end >= 0.8 * total_steps else end
