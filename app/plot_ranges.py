"""View ranges for live plots that change rarely, so the axes are not re-laid-out on every redraw.

pyqtgraph's auto-range rescans every curve's data and, whenever the range moves (every frame while a run
grows), regenerates both axes' ticks and labels in Python. On the GUI thread that Python competes with the
trainer for the GIL. Instead the x range is the run's whole span (known from RunStarted) and the y range only
moves when data leaves it, or when the data fills less than a third of it; the extremes come from
`Series.ymin/ymax`, which are kept on append (no buffer scans).
"""

from __future__ import annotations

import math

Y_PAD = 0.08  # fraction of the data span added above and below when the y range moves


class StableRange:
    """The y range of one plot; `update(lo, hi)` says whether it must move (and where to)."""

    def __init__(self, log: bool = False):
        self.log = log
        self.lo: float | None = None
        self.hi: float | None = None
        self.manual = False  # the user zoomed or panned: leave this plot alone until the next run

    def reset(self) -> None:
        self.lo = self.hi = None
        self.manual = False

    def update(self, lo: float, hi: float) -> tuple[float, float] | None:
        """The new (lo, hi) view range for data spanning [lo, hi], or None when the current one still fits."""
        if self.manual or not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        if self.log:
            if hi <= 0:
                return None
            lo, hi = math.log10(max(lo, hi * 1e-12, 1e-300)), math.log10(hi)
        span = hi - lo
        if self.lo is not None and self.lo <= lo and hi <= self.hi and span >= (self.hi - self.lo) / 3:
            return None
        pad = span * Y_PAD if span > 0 else max(abs(hi) * 0.1, 0.5 if self.log else 1e-3)
        self.lo, self.hi = lo - pad, hi + pad
        return self.lo, self.hi


def nice_x_end(step: int) -> int:
    """An x range end for a run of unknown length: grows in 1-2-5 steps so it moves rarely."""
    end = 10
    while end < step:
        for factor in (2, 2.5, 2):
            end = int(end * factor)
            if end >= step:
                break
    return end
