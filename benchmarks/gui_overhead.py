"""What does the GUI cost a training run? Same config trained headless and through the GUI worker.

Headless: core.trainer.Trainer.run() on the main thread, no listeners. GUI: the real MainWindow
(offscreen unless a display is set) starts the run on its QThread worker with the live plots redrawing,
while a 10 ms QTimer probe measures how late the UI event loop serves it. Runs are interleaved (order
alternating) after one warm-up of each; throughput is the engine's own samples/s over training time.

    python benchmarks/gui_overhead.py [--repeats 3] [--steps 2000] [--threads N] [--json]

Prints the GUI/headless throughput ratio (target >= 0.95) and the UI latency p99 (target <= 50 ms); with
--json the last line is {"throughput_ratio": ..., "ui_latency_p99_ms": ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def make_config(out_dir: Path, steps: int, threads: int):
    from core.config import RunConfig

    return RunConfig.for_task(
        "tiny", task_options={"hidden": 512, "samples": 65_536}, batch_size=256, max_steps=steps,
        log_interval=10, eval_interval=0, device="cpu", precision="fp32", threads=threads, out_dir=str(out_dir))


def run_headless(config) -> float:
    """Trainer.run() with no listeners, on a plain thread: the same kind of native thread the GUI worker uses.

    Not the main thread: torch's intra-op (OpenMP) team is per calling thread, and on a loaded machine the
    main thread's 2-thread team measured up to 10x slower than a fresh thread's. Comparing like with like
    isolates what the GUI costs.
    """
    import threading

    from core.trainer import Trainer

    result = {}
    runner = threading.Thread(target=lambda: result.setdefault("ended", Trainer(config).run()))
    runner.start()
    runner.join()
    ended = result["ended"]
    assert ended.status == "completed", ended.message
    return ended.samples_per_second


class LatencyProbe:
    """A 10 ms timer; lateness = how much later than due each tick arrives (the UI's responsiveness)."""

    def __init__(self, interval_ms: int = 10):
        from PySide6.QtCore import Qt, QTimer

        self.interval = interval_ms / 1000
        self.lateness_ms: list[float] = []
        self._last = None
        self._timer = QTimer(interval=interval_ms)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.lateness_ms.append(max(0.0, (now - self._last - self.interval) * 1000))
        self._last = now


def run_gui(app, window, config, probe: LatencyProbe) -> float:
    result = {}

    def on_event(event):
        if type(event).__name__ == "RunEnded":
            result["ended"] = event

    from PySide6.QtCore import QEventLoop

    window.controller.event.connect(on_event)
    window.apply_config(config)
    loop = QEventLoop()
    window.controller.runningChanged.connect(loop.quit)
    probe.start()
    assert window.start_run(), window.setupPanel.errors()
    loop.exec()  # the app's real event loop: it sleeps until an event, a timer or the probe wakes it
    probe.stop()
    window.controller.runningChanged.disconnect(loop.quit)
    app.processEvents()
    window.controller.event.disconnect(on_event)
    ended = result["ended"]
    assert ended.status == "completed", ended.message
    assert window.plotsPanel.redraws > 0
    return ended.samples_per_second


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps per run")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="torch intra-op threads for both runs (default: all cores but one, which the UI "
                             "needs: a UI thread on a core of the trainer's OpenMP team stalls the whole team)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.assets import apply_theme
    from app.main_window import MainWindow

    from core.devices import cpu_info

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        settings = QSettings(str(root / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings, devices=[cpu_info()])
        window.resize(1400, 860)
        window.show()
        window.load_engine()
        app.processEvents()
        probe = LatencyProbe()
        config = make_config(root / "run", args.steps, args.threads)
        headless, gui = [], []
        run_headless(config)  # warm-ups: first-touch allocations, lazy imports, kernel caches
        run_gui(app, window, config, LatencyProbe())
        started = time.perf_counter()
        for repeat in range(args.repeats):
            order = ("headless", "gui") if repeat % 2 == 0 else ("gui", "headless")
            for kind in order:
                if kind == "headless":
                    headless.append(run_headless(config))
                else:
                    gui.append(run_gui(app, window, config, probe))
                if not args.json:
                    print(f"  repeat {repeat + 1} {kind:8s} {(headless if kind == 'headless' else gui)[-1]:>10,.0f} "
                          f"samples/s", flush=True)
        window.close()
        window.deleteLater()
        app.processEvents()

    ratio = statistics.median(gui) / statistics.median(headless)
    p99 = percentile(probe.lateness_ms, 99)
    print(f"headless median {statistics.median(headless):,.0f} samples/s   GUI median {statistics.median(gui):,.0f} "
          f"samples/s   ({args.repeats} interleaved repeats of {args.steps} steps, {time.perf_counter() - started:.0f} s)")
    print(f"throughput ratio GUI/headless: {ratio:.3f} (target >= 0.95)")
    print(f"UI event-loop latency: p50 {percentile(probe.lateness_ms, 50):.1f} ms, p99 {p99:.1f} ms, "
          f"max {max(probe.lateness_ms):.1f} ms over {len(probe.lateness_ms)} ticks (target p99 <= 50 ms)")
    if args.json:
        print(json.dumps({"throughput_ratio": round(ratio, 4), "ui_latency_p99_ms": round(p99, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
