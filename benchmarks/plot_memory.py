"""What does a very long run cost the live plots? Memory of the plot series and the time of a redraw.

The real PlotsPanel (offscreen unless a display is set) is fed the equivalent of `--steps` logged steps for
every curve: StepMetrics columns in blocks through `PlotsPanel.extend_steps` (the same Series code and
decimation as `handle_event`, vectorised), and as many points for two validation-metric curves (created by a
real EvalMetrics event) through `PlotsPanel.extend_series`. GradScaler skips a step every 100 logged steps,
so even the overflow markers are a long series. Then it measures:

- series memory: the sum of the numpy bytes every series holds (`Series.nbytes`), and tracemalloc's view of
  the ingest: what stays allocated afterwards, and the peak (which includes one block of input columns and
  the fold's temporaries, not kept);
- redraw: one more StepMetrics through `handle_event` (so every series' drawn arrays are rebuilt), every curve
  forced dirty, then `PlotsPanel.redraw()` timed (setData of every curve and the y-range fit); median of
  `--repeats`. "+ paint" also renders the whole panel into a pixmap (`QWidget.grab`), the cost of putting it
  on screen.

    python benchmarks/plot_memory.py [--steps 10000000] [--block 250000] [--repeats 7] [--baseline-steps 0] [--json]

Targets: <= 50 MiB of series memory and <= 20 ms per redraw of every curve at 10,000,000 steps. With
`--baseline-steps N` (e.g. 1000000) the same is measured for the old, unbounded buffers (a copy of the
previous `app.series.Series`, which doubled when full) with pyqtgraph's peak downsampling and clip-to-view,
as the panel had them before. With --json the last line is {"steps": ..., "series_mib": ..., "redraw_ms": ...,
...}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np

MIB = 2**20
EVAL_METRICS = ("accuracy", "f1")


class UnboundedSeries:
    """The previous app.series.Series: buffers that double when full and keep every point."""

    def __init__(self, capacity: int = 256):
        self._x = np.empty(capacity)
        self._y = np.empty(capacity)
        self._n = 0
        self.ymin, self.ymax = np.inf, -np.inf

    def __len__(self) -> int:
        return self._n

    def append(self, x, y) -> None:
        self.extend([x], [np.nan if y is None else y])

    def extend(self, xs, ys) -> None:
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        end = self._n + len(xs)
        if end > len(self._x):
            capacity = len(self._x)
            while capacity < end:
                capacity *= 2
            for name in ("_x", "_y"):
                new = np.empty(capacity)
                new[: self._n] = getattr(self, name)[: self._n]
                setattr(self, name, new)
        self._x[self._n : end] = xs
        self._y[self._n : end] = ys
        self._n = end
        finite = ys[np.isfinite(ys)]
        if len(finite):
            self.ymin, self.ymax = min(self.ymin, finite.min()), max(self.ymax, finite.max())

    @property
    def x(self):
        return self._x[: self._n]

    @property
    def y(self):
        return self._y[: self._n]

    @property
    def stored(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        return self._x.nbytes + self._y.nbytes

    def clear(self) -> None:
        self._n = 0


def make_panel(total_steps: int, legacy: bool):
    from app.panels.plots import PlotsPanel
    from core.engine.events import EvalMetrics, RunStarted

    panel = PlotsPanel()
    panel.resize(1400, 700)
    panel.show()
    panel.build()
    panel.handle_event(
        RunStarted(
            task="tiny",
            device="cpu",
            device_name="CPU",
            precision="fp16",
            autocast_dtype="float16",
            param_dtype="float32",
            scaler=True,
            param_count=1,
            total_steps=total_steps,
            steps_per_epoch=1000,
            start_step=0,
            config={},
        )
    )
    panel.handle_event(EvalMetrics(step=1, epoch=0, split="val", metrics={m: 0.5 for m in EVAL_METRICS}))
    if legacy:  # the old buffers, and pyqtgraph's reduction as the panel used to set it
        for key in panel._series:
            panel._series[key] = UnboundedSeries()
        for widget in panel.plots.values():
            widget.getPlotItem().setDownsampling(auto=True, mode="peak")
        for curve in panel._curves.values():
            curve.setDownsampling(auto=True, method="peak")
    return panel


def block_columns(start: int, end: int) -> dict[str, np.ndarray]:
    """StepMetrics columns for logged steps start+1 .. end: a decaying noisy loss with rare spikes, an inf norm
    now and then, a skipped step every 100 (the loss scale halving and growing back)."""
    steps = np.arange(start + 1, end + 1, dtype=np.float64)
    rng = np.random.default_rng(start)
    loss = 2.0 * np.exp(-steps / 2e6) + 0.1 * rng.random(len(steps))
    loss[steps % 1_000_003 == 0] = 25.0
    norm = 1.0 + rng.random(len(steps))
    norm[steps % 777_777 == 0] = np.inf
    skipped = (steps // 100).astype(np.int64)
    scale = 2.0 ** (16 - (steps % 100) / 50)
    return {
        "steps": steps,
        "loss": loss,
        "samples_per_second": 5000 + 500 * rng.random(len(steps)),
        "lr": 1e-3 * (1 - steps / (end + 1)),
        "grad_norm": norm,
        "grad_scale": scale,
        "skipped_steps": skipped,
        "memory_bytes": 2**30 + (steps % 4096) * 2**20,
    }


def measure(app, steps: int, block: int, repeats: int, legacy: bool = False) -> dict:
    from app.series import Series, SmoothedSeries
    from core.engine.events import StepMetrics

    panel = make_panel(steps, legacy)
    app.processEvents()
    for warm_up in (Series(budget=64), SmoothedSeries(budget=64)):  # one-time imports and caches, not series
        warm_up.extend(*block_columns(0, 1000)["steps"].reshape(1, -1).repeat(2, axis=0))
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    started = time.perf_counter()
    for start in range(0, steps, block):
        columns = block_columns(start, min(start + block, steps))
        panel.extend_steps(**columns)
        for i, metric in enumerate(EVAL_METRICS):  # a validation metric rising as the (noisy) loss falls
            values = 0.9 - 0.2 * columns["loss"] - 0.1 * i
            panel.extend_series(f"eval:{metric}", columns["steps"], values)
        del columns, values  # the next block replaces them: not part of what the series keep
    ingest_s = time.perf_counter() - started
    gc.collect()  # what is still held, not what waits for the cycle collector
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    series_bytes = sum(s.nbytes for s in panel._series.values())
    appended = {key: len(s) for key, s in panel._series.items()}

    redraw_ms, paint_ms = [], []
    for r in range(repeats + 1):  # the first is a warm-up
        step = steps + 1 + r
        panel.handle_event(
            StepMetrics(
                step=step,
                epoch=0,
                loss=1.0,
                lr=1e-4,
                samples_per_second=5000.0,
                grad_scale=65536.0,
                grad_norm=1.5,
                skipped_steps=step // 100,
                memory_bytes=2**30,
                elapsed_seconds=1.0,
            )
        )
        panel._dirty = set(panel._curves)
        t0 = time.perf_counter()
        panel.redraw()
        t1 = time.perf_counter()
        panel.grab()
        t2 = time.perf_counter()
        if r:
            redraw_ms.append((t1 - t0) * 1000)
            paint_ms.append((t2 - t0) * 1000)
    drawn = {key: len(curve.xData) for key, curve in panel._curves.items()}
    panel.close()
    panel.deleteLater()
    app.processEvents()
    return {
        "behaviour": "old (unbounded, pyqtgraph peak downsampling)" if legacy else "decimated on ingest",
        "steps": steps,
        "curves": len(drawn),
        "points_appended": sum(appended.values()),
        "max_points_per_curve": max(drawn.values()),
        "series_mib": series_bytes / MIB,
        "tracemalloc_retained_mib": (retained - before) / MIB,
        "tracemalloc_peak_mib": (peak - before) / MIB,
        "ingest_s": ingest_s,
        "redraw_ms": statistics.median(redraw_ms),
        "redraw_max_ms": max(redraw_ms),
        "redraw_paint_ms": statistics.median(paint_ms),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000_000, help="logged steps fed to every curve")
    parser.add_argument("--block", type=int, default=250_000, help="steps per extend_steps call")
    parser.add_argument("--repeats", type=int, default=7, help="timed redraws (median reported)")
    parser.add_argument(
        "--baseline-steps",
        type=int,
        default=0,
        help="also measure the old unbounded series at this many steps (0: skip)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from PySide6.QtWidgets import QApplication

    from app.assets import apply_theme

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app)
    rows = [measure(app, args.steps, args.block, args.repeats)]
    if args.baseline_steps > 0:
        rows.append(measure(app, args.baseline_steps, args.block, max(3, args.repeats // 2), legacy=True))

    print(
        f"{'behaviour':<46} {'steps':>11} {'curves':>6} {'pts/curve':>9} {'series MiB':>10} "
        f"{'retained':>8} {'peak':>8} {'ingest s':>8} {'redraw ms':>9} {'+paint ms':>9}"
    )
    for r in rows:
        print(
            f"{r['behaviour']:<46} {r['steps']:>11,} {r['curves']:>6} {r['max_points_per_curve']:>9,} "
            f"{r['series_mib']:>10.2f} {r['tracemalloc_retained_mib']:>8.2f} {r['tracemalloc_peak_mib']:>8.1f} "
            f"{r['ingest_s']:>8.1f} {r['redraw_ms']:>9.2f} {r['redraw_paint_ms']:>9.1f}"
        )
    new = rows[0]
    ok = new["series_mib"] <= 50 and new["redraw_ms"] <= 20
    print(
        f"targets at {new['steps']:,} steps: series memory <= 50 MiB, redraw of every curve <= 20 ms: "
        f"{'met' if ok else 'NOT met'}"
    )
    if args.json:
        summary = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in new.items() if k != "behaviour"}
        if len(rows) > 1:
            summary["baseline"] = {
                k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[1].items() if k != "behaviour"
            }
        print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
