"""The live plots' axes: labels that never run together, counts as 50k, small values as 5e-5 (pyqtgraph)."""

from __future__ import annotations

import math

import pyqtgraph as pg

LABEL_GAP = 5  # pixels between two labels at least


def step_label(value: float) -> str:
    """A tick label for a step count: '0', '750', '1.5k', '50k', '1.2M'."""
    magnitude = abs(value)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if magnitude >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.4g}"


def compact_label(value: float, spacing: float) -> str:
    """A tick label with the digits its spacing needs, no trailing zeros: 0.0001 (not 0.0001000), 1e-5, 0.00015."""
    if abs(value) < spacing * 1e-6 or spacing <= 0:
        return "0"
    digits = max(1, math.floor(math.log10(abs(value))) - math.floor(math.log10(spacing) + 1e-9) + 1)
    mantissa, _, exponent = f"{value:.{digits}g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def _next_spacing(spacing: float) -> float:
    exponent = math.floor(math.log10(spacing))
    mantissa = spacing / 10**exponent
    for step in (2.0, 2.5, 5.0, 10.0):
        if step > mantissa * (1 + 1e-9):
            return step * 10**exponent
    return 20.0 * 10**exponent


class SpacedAxis(pg.AxisItem):
    """An axis whose major labels never run together: each gets its width (or height) plus a gap."""

    def labels_for(self, values, scale, spacing) -> list[str]:
        """The labels of a linear axis (a subclass's own format; a log axis keeps pyqtgraph's)."""
        return super().tickStrings(values, scale, spacing)

    def tickStrings(self, values, scale, spacing):
        return super().tickStrings(values, scale, spacing) if self.logMode else self.labels_for(values, scale, spacing)

    def tickSpacing(self, minVal, maxVal, size):
        levels = super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if not levels or span == 0 or size <= 0 or (self.logMode and self.orientation not in ("left", "right")):
            return levels
        metrics = pg.QtGui.QFontMetrics(self.style.get("tickFont") or self.font())
        if self.orientation in ("left", "right"):
            widest = metrics.height()
        else:
            ends = self.labels_for([minVal, maxVal, (minVal + maxVal) / 2], 1.0, levels[0][0])
            widest = max(metrics.horizontalAdvance(text) for text in ends)
        spacing = levels[0][0]
        while spacing * size / span < widest + LABEL_GAP and spacing < span:
            # a log axis's values are decades: its labels stay on whole powers of ten
            spacing = math.floor(spacing) + 1.0 if self.logMode else _next_spacing(spacing)
        if spacing == levels[0][0]:
            return levels
        minor = [level for level in levels[1:] if level[0] < spacing]
        return [(spacing, 0), *minor[:1]]


class CountAxis(SpacedAxis):
    """An axis of counts, labelled 750, 50k, 1.5M."""

    def labels_for(self, values, scale, spacing) -> list[str]:
        return [step_label(v * scale) for v in values]


class CompactAxis(SpacedAxis):
    """An axis of small values (a learning rate), labelled 0.0001, 5e-5, never 0.0001000."""

    def labels_for(self, values, scale, spacing) -> list[str]:
        return [compact_label(v * scale, spacing * scale) for v in values]


class StepAxis(CountAxis):
    """A bottom axis of optimizer steps, labelled 50k, 1.5M."""
