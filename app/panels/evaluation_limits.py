"""An evaluation report cut down to what the window draws in bounded time (no Qt: run it on a worker):
`bounded_report(report)` keeps the sections and shapes within the MAX_ limits; `more` says what was left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_METRICS = 12
MAX_FIGURES = 12
MAX_CURVES = 4
MAX_SERIES = 8
MAX_POINTS = 2000
MAX_CLASSES = 20
MAX_BUCKETS = 40
MAX_BAR_SERIES = 8
MAX_BINS = 200
MAX_HISTOGRAM_SERIES = 4
MAX_TEXT = 80
TEXT_FIELDS = ("task", "split", "precision", "device", "checkpoint", "created", "primary_metric")
LEFT_OUT = {  # a kind of thing left out, as the view names it (else as the kind)
    "figures": "classification figures",
    "curves": "curve plots",
    "series": "lines",
    "bars": "bar series",
}


@dataclass
class BoundedReport:
    report: dict  # the sections, cut down
    more: dict = field(default_factory=dict)  # what was left out: {"metrics": n, ...}

    def left_out(self) -> list[str]:
        """'… and 99,988 more lines', one line per kind of thing left out but metrics."""
        return [
            f"… and {count:,} more {LEFT_OUT.get(kind, kind)}"
            for kind, count in self.more.items()
            if count and kind != "metrics"
        ]


def as_dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value) -> list:
    return value if isinstance(value, list) else []


def short_text(value, keep: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= keep else text[: keep - 1] + "…"


def finite(value) -> float | None:
    """A finite float, or None (a missing, null or non-numeric entry, or a number no float holds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of thousands of digits
        return None
    return number if math.isfinite(number) else None


def _number(value) -> float:
    return finite(value) or 0.0


def every_nth(values: list, limit: int = MAX_POINTS) -> list:
    """At most `limit` of `values`, evenly spaced, first and last kept (lists of one length keep the same positions)."""
    count = len(values)
    if count <= limit:
        return values
    step = -(-(count - 1) // (limit - 2))
    picked = values[::step]
    if (count - 1) % step:
        picked.append(values[-1])
    return picked


class _Bounder:
    def __init__(self):
        self.more: dict = {}

    def cap(self, kind: str, items, limit: int):
        left = len(items) - limit
        if left > 0:
            self.more[kind] = self.more.get(kind, 0) + left
            return items[:limit] if isinstance(items, list) else dict(list(items.items())[:limit])
        return items

    def report(self, report: dict) -> dict:
        out = {}
        for key, value in report.items():
            if key in TEXT_FIELDS and isinstance(value, str):
                out[key] = short_text(value, 400)
            elif key in ("roc", "confusion", "curves", "buckets", "histogram", "metrics", "classification"):
                continue
            elif isinstance(value, (int, float, bool)) or value is None:
                out[key] = value
        primary = report.get("primary_metric")
        metrics = as_dict(report.get("metrics"))
        if len(metrics) > MAX_METRICS:  # the primary metric first, then the file's order
            keys = ([primary] if primary in metrics else []) + [k for k in metrics if k != primary]
            metrics = {k: metrics[k] for k in keys}
        out["metrics"] = {short_text(k): v for k, v in self.cap("metrics", metrics, MAX_METRICS).items()}
        if "classification" in report:
            out["classification"] = {
                short_text(k): v for k, v in self.cap("figures", as_dict(report["classification"]), MAX_FIGURES).items()
            }
        for name in ("roc", "confusion", "curves", "buckets", "histogram"):
            if name in report:
                section = report[name]
                out[name] = getattr(self, name)(section) if isinstance(section, (dict, list)) else section
        return out

    def roc(self, roc):
        roc = as_dict(roc)
        fpr, tpr = as_list(roc.get("fpr")), as_list(roc.get("tpr"))
        if len(fpr) != len(tpr):  # drawn as nothing, as before: keep it small
            return {**roc, "fpr": fpr[:2], "tpr": tpr[:1]}
        return {"auc": roc.get("auc"), "threshold": roc.get("threshold"), "fpr": every_nth(fpr), "tpr": every_nth(tpr)}

    def confusion(self, confusion):
        confusion = as_dict(confusion)
        labels, matrix = as_list(confusion.get("labels")), as_list(confusion.get("matrix"))
        if len(labels) <= MAX_CLASSES:
            return {"labels": [short_text(x) for x in labels], "matrix": matrix}
        if len(matrix) != len(labels) or any(len(as_list(row)) != len(labels) for row in matrix):
            return {"labels": labels[:1], "matrix": []}  # not square: the view's one line says so
        totals = [sum(_number(c) for c in row) for row in matrix]
        self.more["classes"] = len(labels) - MAX_CLASSES
        return {
            "labels": [short_text(x) for x in labels[:MAX_CLASSES]],
            "matrix": [row[:MAX_CLASSES] for row in matrix[:MAX_CLASSES]],
            "row_totals": totals[:MAX_CLASSES],
            "total": sum(totals),
        }

    def curves(self, curves):
        kept = []
        for curve in self.cap("curves", as_list(curves), MAX_CURVES):
            curve = as_dict(curve)
            ks = as_list(curve.get("ks"))
            series = self.cap("series", as_list(curve.get("series")), MAX_SERIES)
            kept.append(
                {
                    "title": short_text(curve.get("title") or ""),
                    "y_label": short_text(curve.get("y_label") or ""),
                    "ks": every_nth(ks),
                    "series": [self._line(s, len(ks)) for s in series],
                }
            )
        return kept

    @staticmethod
    def _line(series, points: int) -> dict:
        series = as_dict(series)
        values = as_list(series.get("values"))[:points]
        if values and len(values) < points:  # the missing end as gaps, so the same positions are picked
            values = values + [None] * (points - len(values))
        return {
            "name": short_text(series.get("name") or ""),
            "label": short_text(series.get("label") or ""),
            "emphasis": series.get("emphasis"),
            "values": every_nth(values),
        }

    def buckets(self, buckets):
        buckets = as_dict(buckets)
        rows = [as_dict(r) for r in self.cap("buckets", as_list(buckets.get("rows")), MAX_BUCKETS)]
        chart = [as_dict(s) for s in as_list(buckets.get("series")) if as_dict(s).get("name")]
        if not chart:  # an older report: every value the buckets carry
            chart = [{"name": n} for n in dict.fromkeys(n for r in rows for n in as_dict(r.get("values")))]
        chart = self.cap("bars", chart, MAX_BAR_SERIES)
        names = [s["name"] for s in chart]
        return {
            **{k: short_text(v) for k, v in buckets.items() if k in ("title", "by", "unit") and v},
            "series": [
                {"name": s["name"], "label": short_text(s.get("label") or ""), "curve": s.get("curve")} for s in chart
            ],
            "rows": [
                {
                    "label": short_text(r.get("label", "?"), 24),
                    "count": r.get("count"),
                    "values": {n: as_dict(r.get("values")).get(n) for n in names if isinstance(n, str)},
                }
                for r in rows
            ],
        }

    def histogram(self, histogram):
        histogram = as_dict(histogram)
        edges = as_list(histogram.get("edges"))
        series = [
            as_dict(s) for s in self.cap("histogram series", as_list(histogram.get("series")), MAX_HISTOGRAM_SERIES)
        ]
        bins = len(edges) - 1
        out = {"title": short_text(histogram.get("title") or "")}
        if bins <= MAX_BINS:
            return {
                **out,
                "edges": edges,
                "series": [
                    {"name": short_text(s.get("name", "")), "counts": as_list(s.get("counts"))[: max(bins, 0)]}
                    for s in series
                ],
            }
        group = -(-bins // MAX_BINS)  # adjacent bins merged, `group` at a time
        merged_edges = edges[::group] if bins % group == 0 else [*edges[::group], edges[-1]]
        return {
            **out,
            "edges": merged_edges,
            "series": [
                {
                    "name": short_text(s.get("name", "")),
                    "counts": [sum(_number(c) for c in counts[i : i + group]) for i in range(0, bins, group)],
                }
                for s in series
                for counts in [as_list(s.get("counts"))[:bins]]
            ],
        }


def bounded_report(report) -> BoundedReport | None:
    """`report` cut down to what the view draws in bounded time (None and non-dicts as they are)."""
    if report is None or isinstance(report, BoundedReport):
        return report
    if not isinstance(report, dict):
        return BoundedReport(report)  # type: ignore[arg-type]
    bounder = _Bounder()
    return BoundedReport(bounder.report(report), bounder.more)
