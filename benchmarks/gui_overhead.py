"""What does the GUI cost a training run? Same config trained headless and through the GUI worker.

Headless: core.engine.trainer.Trainer.run() on a plain thread, no listeners. GUI: the real MainWindow (offscreen
unless a display is set) starts the run the way a user does, with the live plots redrawing, while a 10 ms
QTimer probe measures how late the UI event loop serves it. Two ways the window can run it:

- separate process (the app's default): `core.cli train --events` as a child process, its events followed from
  metrics.jsonl into the window;
- thread: core's Trainer on the window's QThread worker, in the window's own process.

Runs are interleaved (order rotating) after one warm-up of each; throughput is the engine's own samples/s
over training time (process start-up is not in it).

    python benchmarks/gui_overhead.py [--repeats 3] [--steps 2000] [--realistic-steps 100] [--threads N] [--json]

Two configs: the worst case (tiny model, ~1 ms Python-bound steps, where a training thread in the window's
process competes with the UI thread for the GIL) and a realistic one (the default recommender task, torch
kernels that release the GIL). Prints, for each config and mode, the GUI/headless throughput ratio (target
>= 0.95) and the UI latency p99 (target <= 50 ms). With --json the last line is
{"throughput_ratio": ..., "ui_latency_p99_ms": ...}: the lower ratio and higher p99 of the two configs in the
app's default mode, then the same per config and mode ("worst_case_throughput_ratio",
"realistic_thread_throughput_ratio", ...).
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


def make_config(out_dir: Path, steps: int, threads: int, case: str = "worst"):
    """'worst': tiny model, ~1 ms steps, Python-bound (the GUI thread competes for the GIL on every step).
    'realistic': the default recommender task, whose steps are torch kernels that release the GIL."""
    from core.config import RunConfig

    if case == "realistic":
        return RunConfig.for_task(
            "recommender",
            max_steps=steps,
            eval_interval=0,
            device="cpu",
            precision="fp32",
            threads=threads,
            out_dir=str(out_dir),
        )
    return RunConfig.for_task(
        "tiny",
        task_options={"hidden": 512, "samples": 65_536},
        batch_size=256,
        max_steps=steps,
        log_interval=10,
        eval_interval=0,
        device="cpu",
        precision="fp32",
        threads=threads,
        out_dir=str(out_dir),
    )


def run_headless(config) -> float:
    """Trainer.run() with no listeners, on a plain thread: the same kind of native thread the GUI worker uses.

    Not the main thread: torch's intra-op (OpenMP) team is per calling thread, and on a loaded machine the
    main thread's 2-thread team measured up to 10x slower than a fresh thread's. Comparing like with like
    isolates what the GUI costs.
    """
    import threading

    from core.engine.trainer import Trainer

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


def run_gui(app, window, config, probe: LatencyProbe, separate: bool = True) -> float:
    result = {}

    def on_event(event):
        if type(event).__name__ == "RunEnded":
            result["ended"] = event

    from PySide6.QtCore import QEventLoop

    window.controller.event.connect(on_event)
    window.apply_config(config)
    window.setupPanel.separateProcessCheck.setChecked(separate)
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
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps per worst-case run (0 skips it)")
    parser.add_argument(
        "--realistic-steps", type=int, default=100, help="optimizer steps per realistic (recommender) run (0 skips it)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=max(1, (os.cpu_count() or 2) - 1),
        help="torch intra-op threads for both runs (default: all cores but one, which the UI "
        "needs: a UI thread on a core of the trainer's OpenMP team stalls the whole team)",
    )
    parser.add_argument(
        "--start-latency",
        action="store_true",
        help="also time Start -> first step report: thread, new process, prestarted process",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.assets import apply_theme
    from app.main_window import MainWindow
    from core.devices import cpu_info

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        settings = QSettings(str(root / "settings.ini"), QSettings.Format.IniFormat)
        # No spare process: preparing the next one right after a run ends would import torch alongside the
        # next measured run. (A spare only saves start-up time, which the throughput here leaves out anyway.)
        window = MainWindow(settings=settings, devices=[cpu_info()], prestart_runs=False)
        window.resize(1400, 860)
        window.show()
        window.load_engine()
        app.processEvents()
        for case, steps in (("worst", args.steps), ("realistic", args.realistic_steps)):
            if steps <= 0:
                continue
            config = make_config(root / case, steps, args.threads, case)
            results[case] = measure(app, window, config, args.repeats, quiet=args.json, label=case)
        latency = start_latency(app, window, root) if args.start_latency else {}
        window.close()
        window.deleteLater()
        app.processEvents()
    for mode, seconds in latency.items():
        print(f"Start -> first step report, {mode}: median {seconds:.2f} s")

    names = {
        "worst": "worst case (tiny, ~1 ms Python-bound steps)",
        "realistic": "realistic (default recommender task)",
    }
    for case, by_mode in results.items():
        print(
            f"{names[case]}: headless median {by_mode['headless']:,.0f} samples/s "
            f"({args.repeats} interleaved repeats, {by_mode['seconds']:.0f} s)"
        )
        for mode, label in MODES.items():
            r = by_mode[mode]
            print(
                f"  GUI, {label}: median {r['gui']:,.0f} samples/s; throughput ratio GUI/headless "
                f"{r['ratio']:.3f} (target >= 0.95)"
            )
            print(
                f"    UI event-loop latency: p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms "
                f"over {r['ticks']} ticks (target p99 <= 50 ms)"
            )
    if args.json:
        default = [by_mode["separate"] for by_mode in results.values()]
        summary = {
            "throughput_ratio": round(min(r["ratio"] for r in default), 4) if default else None,
            "ui_latency_p99_ms": round(max(r["p99"] for r in default), 2) if default else None,
        }
        for case, by_mode in results.items():
            prefix = "worst_case" if case == "worst" else "realistic"
            for mode in MODES:
                infix = "" if mode == "separate" else "_thread"
                summary[f"{prefix}{infix}_throughput_ratio"] = round(by_mode[mode]["ratio"], 4)
                summary[f"{prefix}{infix}_ui_latency_p99_ms"] = round(by_mode[mode]["p99"], 2)
        print(json.dumps(summary))
    return 0


def start_latency(app, window, root: Path, tries: int = 3) -> dict[str, float]:
    """Seconds from Start to the first StepMetrics on a short tiny run, per way of running it."""
    from PySide6.QtCore import QEventLoop

    from core.config import RunConfig

    config = RunConfig.for_task(
        "tiny", max_steps=5, log_interval=1, eval_interval=0, device="cpu", out_dir=str(root / "latency")
    )
    times: dict[str, list[float]] = {"thread": [], "new process": [], "prestarted process": []}
    for _ in range(tries):
        for mode in times:
            window.apply_config(config)
            window.setupPanel.separateProcessCheck.setChecked(mode != "thread")
            if mode == "prestarted process":
                window.controller.prepare_spare()
                deadline = time.monotonic() + 60
                while window.controller.spare is not None and not window.controller.spare.warm:
                    if time.monotonic() > deadline:
                        raise SystemExit("the prestarted training process did not load the engine in 60 s")
                    app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 100)
                if window.controller.spare is None:
                    raise SystemExit("the prestarted training process exited before it was used")
            else:
                window.controller.discard_spare()
            first = {}

            def on_event(event, first=first):
                if type(event).__name__ == "StepMetrics" and "at" not in first:
                    first["at"] = time.perf_counter()

            window.controller.event.connect(on_event)
            loop = QEventLoop()
            window.controller.runningChanged.connect(loop.quit)
            started = time.perf_counter()
            assert window.start_run()
            loop.exec()
            window.controller.runningChanged.disconnect(loop.quit)
            window.controller.event.disconnect(on_event)
            if "at" not in first:
                raise SystemExit(f"{mode}: the run reported no step ({window.statusBarWidget.message.text()})")
            times[mode].append(first["at"] - started)
    window.controller.discard_spare()
    return {mode: statistics.median(values) for mode, values in times.items()}


MODES = {"separate": "separate process (default)", "thread": "thread in the window's process"}


def measure(app, window, config, repeats: int, quiet: bool, label: str) -> dict:
    """Interleaved headless and GUI runs (both modes) of `config` after one warm-up of each."""
    probes = {mode: LatencyProbe() for mode in MODES}
    speeds: dict[str, list[float]] = {"headless": [], **{mode: [] for mode in MODES}}
    run_headless(config)  # warm-ups: first-touch allocations, lazy imports, kernel caches
    for mode in MODES:
        run_gui(app, window, config, LatencyProbe(), separate=mode == "separate")
    kinds = ["headless", *MODES]
    started = time.perf_counter()
    for repeat in range(repeats):
        order = kinds[repeat % len(kinds) :] + kinds[: repeat % len(kinds)]  # rotate: no kind always first
        for kind in order:
            if kind == "headless":
                speeds[kind].append(run_headless(config))
            else:
                speeds[kind].append(run_gui(app, window, config, probes[kind], separate=kind == "separate"))
            if not quiet:
                print(f"  {label} repeat {repeat + 1} {kind:8s} {speeds[kind][-1]:>10,.0f} samples/s", flush=True)
    headless = statistics.median(speeds["headless"])
    result = {"headless": headless, "seconds": time.perf_counter() - started}
    for mode in MODES:
        lateness = probes[mode].lateness_ms
        gui = statistics.median(speeds[mode])
        result[mode] = {
            "gui": gui,
            "ratio": gui / headless,
            "p50": percentile(lateness, 50),
            "p99": percentile(lateness, 99),
            "max": max(lateness),
            "ticks": len(lateness),
        }
    return result


if __name__ == "__main__":
    sys.exit(main())
