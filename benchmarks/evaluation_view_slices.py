"""How long does the evaluation view hold the window's thread while it draws a large report?

The real EvaluationView (offscreen unless a display is set) at 1000 x 720 is given a report as large as
app.panels.evaluation_limits lets through (a ROC curve, a 20-class confusion grid, 4 curve plots of 8 lines,
40 buckets, a 200-bin histogram: eight widgets), already cut down as the caller's worker does. It draws a
section per turn of the event loop; run inside app.exec(), a 1 ms heartbeat timer records the gaps between
turns (building, layout and painting included), and each section's own slice is timed with QElapsedTimer.
The first repeat includes the process's first pyqtgraph paint and is reported apart.

    QT_QPA_PLATFORM=offscreen python benchmarks/evaluation_view_slices.py [--repeats 5] [--json]

Goal: no slice over 50 ms (a plot widget costs ~20 ms to build on an idle desktop CPU).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

GOAL_MS = 50.0


def large_report() -> dict:
    points = 2_000
    ks = list(range(1, points + 1))
    curves = [
        {
            "title": f"curve {c}",
            "y_label": "hit rate",
            "ks": ks,
            "series": [
                {
                    "name": f"s{s}",
                    "label": f"series {s}",
                    "values": [min(1.0, (k / points) ** 0.5 - s / 100) for k in ks],
                }
                for s in range(8)
            ],
        }
        for c in range(4)
    ]
    classes = 20
    return {
        "task": "benchmark",
        "split": "test",
        "primary_metric": "accuracy",
        "metrics": {"accuracy": 0.75, **{f"m{i}": 0.5 for i in range(11)}},
        "roc": {
            "fpr": [i / points for i in range(points)],
            "tpr": [(i / points) ** 0.5 for i in range(points)],
            "auc": 0.66,
        },
        "confusion": {
            "labels": [str(i) for i in range(classes)],
            "matrix": [[5 if r == c else 1 for c in range(classes)] for r in range(classes)],
        },
        "curves": curves,
        "buckets": {
            "title": "by size",
            "rows": [{"label": str(i), "count": 10, "values": {"s0": 0.5}} for i in range(40)],
            "series": [{"name": "s0"}],
        },
        "histogram": {
            "edges": [i / 200 for i in range(201)],
            "series": [{"name": "0", "counts": [10] * 200}, {"name": "1", "counts": [5] * 200}],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    import pyqtgraph  # noqa: F401  (loaded before the timing, as in the window)

    from app.panels.evaluation_limits import bounded_report
    from app.panels.evaluation_view import EvaluationView

    view = EvaluationView()
    view.resize(1000, 720)
    view.show()
    bounded = bounded_report(large_report())
    slices: list[float] = []
    draw_next = EvaluationView._draw_next

    def timed(self, chain):
        clock = QElapsedTimer()
        clock.start()
        draw_next(self, chain)
        slices.append(clock.nsecsElapsed() / 1e6)

    EvaluationView._draw_next = timed

    def one_repeat() -> dict:
        ticks: list[float] = []
        beat = QTimer(interval=1)
        beat.timeout.connect(lambda: ticks.append(time.perf_counter()))
        slices.clear()
        call: list[float] = []

        def go():
            beat.start()
            clock = QElapsedTimer()
            clock.start()
            view.show_report(bounded)
            call.append(clock.nsecsElapsed() / 1e6)

        view.drawn.connect(lambda: QTimer.singleShot(300, app.quit))  # and the paints after the last section
        QTimer.singleShot(100, go)
        app.exec()
        beat.stop()
        view.drawn.disconnect()
        gaps = [(b - a) * 1000 for a, b in itertools.pairwise(ticks)]
        return {
            "call_ms": call[0],
            "longest_turn_ms": max(gaps),
            "longest_slice_ms": max(slices),
            "sections": len(slices) - 1,
            "sections_drawn": list(view.sections),
        }

    results = [one_repeat() for _ in range(args.repeats)]
    warm = results[1:] or results
    summary = {
        "first": results[0],
        "longest_turn_ms": max(r["longest_turn_ms"] for r in warm),
        "median_longest_turn_ms": statistics.median(r["longest_turn_ms"] for r in warm),
        "longest_slice_ms": max(r["longest_slice_ms"] for r in warm),
        "goal_ms": GOAL_MS,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    if args.json:
        print(json.dumps({"repeats": results, **summary}, indent=2))
    else:
        first = results[0]
        print(f"first (cold): show_report {first['call_ms']:.1f} ms, longest turn {first['longest_turn_ms']:.1f} ms")
        print(
            f"warm: longest turn {summary['longest_turn_ms']:.1f} ms (median {summary['median_longest_turn_ms']:.1f}),"
            f" longest section slice {summary['longest_slice_ms']:.1f} ms over {warm[0]['sections']} sections;"
            f" goal <= {GOAL_MS:.0f} ms; load average {summary['load_average']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
