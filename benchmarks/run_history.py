"""How long does the run history take on a big runs root: `runs list`, `runs show ID` and the window's list?

Creates N run folders in a temporary runs root, each as the engine leaves it: run.json written by
core.engine.reporting.RunRecord from a run's events (a real config of its task, validation metrics, best and
last checkpoints), a metrics.jsonl of a few hundred event lines, a note.txt on every seventh, a few runs
"running" with no live process (listed as interrupted) and a sweep folder with trials one level down; file
times are set to when each run ended (days ago), as on a real disk. Then, each in a fresh process (the OS page
cache is warm, since the files were just written):

- cold list: `python -m core.cli runs --runs-dir R list` with no index yet (<root>/.history.sqlite is built);
- warm list: the same again (the index is reused: one stat per file read_run reads, one query);
- show: `runs show ID` of a run in the middle;
- window: the Run history panel (app.panels.history.HistoryPanel, offscreen) opened on the root, cold (no index)
  and warm, with the garbage collection the window does (app.run.jobs.GuiThreadGarbageCollector: on the GUI
  thread only): seconds to a filled table, and the longest gap of a 5 ms QTimer heartbeat on the GUI thread
  (a stall; in brackets the most CPU time the GUI thread itself spent between two beats, which other
  processes on a busy machine do not stretch; and, cold, the longest gap less the time the GUI thread waited
  for a core, from Linux's schedstat: its own work and its waits on the scan's thread) while it loads; then a
  filter typed one key at a time and cleared: the first two;
  and how long one full garbage collection takes with the runs loaded (the window runs one now and then).

Each CLI figure is the whole process as a user waits for it (Python start-up and imports included) and, in
brackets, the command's own work (main() in a process that has imported core.cli.main) and its CPU time (what
a busy machine cannot inflate), each the quickest of --repeat runs. Output goes to /dev/null, laid out for 100
columns as when piped.

    python benchmarks/run_history.py [--runs 1000 10000] [--json]

Targets at 10,000 runs: list <= 0.5 s warm and <= 2 s cold, show <= 0.2 s, no GUI-thread stall > 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = ("tiny", "sentiment", "recommender", "ranking")
PRECISIONS = ("fp32", "bf16", "fp16", "fp32")
ENDINGS = ("completed", "completed", "completed", "stopped", "failed", "completed", "completed", "stopped")
STEP_LINES = 200  # StepMetrics lines in each metrics.jsonl (plus its evaluations, start and end)
DAY = 86_400


def _templates() -> dict:
    """Per task: the RunStarted event (a real config of the task) and the metrics.jsonl body of a run."""
    from core.config import RunConfig
    from core.engine.events import EvalMetrics, RunStarted, StepMetrics, event_to_dict
    from core.tasks import get_task_info

    out = {}
    for task in TASKS:
        config = RunConfig.for_task(task, device="cpu").to_dict()
        metric = get_task_info(task).primary_metric
        started = RunStarted(
            task=task,
            device="cpu",
            device_name="CPU",
            precision="fp32",
            autocast_dtype="float32",
            param_dtype="float32",
            scaler=False,
            param_count=12_345,
            total_steps=STEP_LINES * 10,
            steps_per_epoch=100,
            start_step=0,
            config=config,
            notes=[],
        )
        lines = []
        for i in range(1, STEP_LINES + 1):
            lines.append(
                event_to_dict(
                    StepMetrics(
                        step=i * 10,
                        epoch=i // 10,
                        loss=1.0 / i,
                        lr=1e-3,
                        samples_per_second=12_000.0 + i,
                        grad_scale=None,
                        grad_norm=0.5,
                        skipped_steps=0,
                        memory_bytes=50_000_000,
                        elapsed_seconds=i * 0.4,
                    )
                )
            )
            if i % 20 == 0:
                lines.append(
                    event_to_dict(
                        EvalMetrics(
                            step=i * 10, epoch=i // 10, split="val", metrics={metric: 0.5 + i / 1000, "loss": 1.0 / i}
                        )
                    )
                )
        body = "".join(json.dumps(line) + "\n" for line in lines)
        out[task] = (started, metric, body)
    return out


def make_runs(root: Path, n: int, now: float | None = None) -> list[str]:
    """N run folders under `root` (see the module doc); returns their ids in folder order."""
    from dataclasses import replace

    from core.engine.events import CheckpointSaved, EvalMetrics, RunEnded, event_to_dict
    from core.engine.reporting import RunRecord, json_ready

    templates = _templates()
    now = time.time() if now is None else now
    root.mkdir(parents=True, exist_ok=True)
    ids = []
    sweep = root / "20250101-000000-sweep-tiny"
    for i in range(n):
        task, precision = TASKS[i % len(TASKS)], PRECISIONS[(i // 4) % len(PRECISIONS)]
        when = now - DAY * (1 + (n - i) / 24)  # one an hour, the last a day ago
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
        if i % 97 == 5:  # a few trials of a sweep, one level down
            folder = sweep / f"trial-{i:05d}"
        else:
            folder = root / f"{stamp}-{task}-{precision}"  # as new_run_folder names them
        folder.mkdir(parents=True)
        started, metric, body = templates[task]
        started = replace(
            started,
            precision=precision,
            config={**started.config, "precision": precision, "seed": i, "out_dir": str(folder)},
        )
        record = RunRecord(folder)
        record.write = lambda: None  # written once below, without the fsyncs of an atomic write
        record.update(started)
        steps = 10 * STEP_LINES - 10 * (i % 37)  # some stopped early
        record.update(EvalMetrics(step=steps, epoch=20, split="val", metrics={metric: 0.5 + (i % 400) / 1000}))
        record.update(
            CheckpointSaved(step=steps, path=str(folder / "best.pt"), kind="best", metric=metric, value=0.7, rank=1)
        )
        record.update(CheckpointSaved(step=steps, path=str(folder / "checkpoint.pt"), kind="last"))
        running = i % 50 == 7  # killed: run.json still says running, no process holds the folder
        ending = RunEnded(
            status=ENDINGS[i % len(ENDINGS)],
            message="",
            step=steps,
            epoch=20,
            final_loss=0.01,
            metrics={metric: 0.7},
            checkpoint=str(folder / "checkpoint.pt"),
            samples_per_second=12_000.0,
            elapsed_seconds=80.0 + i % 300,
        )
        if not running:
            record.update(ending)
        data = record.data
        data["id"] = f"{i:04x}{data['id'][4:]}"  # unique and easy to name
        data["start_time"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when))
        (folder / "run.json").write_text(json.dumps(json_ready(data), indent=2, default=str) + "\n", encoding="utf-8")
        lines = json.dumps(event_to_dict(started)) + "\n" + body
        if not running:
            lines += json.dumps(event_to_dict(ending)) + "\n"
        (folder / "metrics.jsonl").write_text(lines, encoding="utf-8")
        if i % 7 == 3:
            (folder / "note.txt").write_text(f"note on run {i}: baseline, lr 1e-3\n", encoding="utf-8")
        ended = when + 80
        for path in (*folder.iterdir(), folder):
            os.utime(path, (ended, ended))
        ids.append(data["id"])
    if sweep.exists():
        os.utime(sweep, (now - DAY, now - DAY))
    os.utime(root, (now - DAY, now - DAY))
    return ids


# ---- measuring, each in a fresh process ----------------------------------------------------------------------------


def measure_cli(argv: list[str]) -> dict:
    """In this process: import the CLI, then time main(argv) with stdout to /dev/null."""
    t0 = time.perf_counter()
    from core.cli.main import main

    imported = time.perf_counter()
    cpu = time.process_time()
    with open(os.devnull, "w", encoding="utf-8") as sink:
        saved, sys.stdout = sys.stdout, sink
        try:
            code = main(argv)
        finally:
            sys.stdout = saved
    done = time.perf_counter()
    return {
        "code": code,
        "import_s": round(imported - t0, 3),
        "work_s": round(done - imported, 3),
        "work_cpu_s": round(time.process_time() - cpu, 3),
        "torch": "torch" in sys.modules,
    }


def measure_window(root: str) -> dict:
    """The history panel opened on `root` (offscreen): seconds to a filled table and the longest GUI-thread
    stall while it loads; then a filter typed a key at a time and cleared: the longest stall and its rows."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    from app.panels.history import HistoryPanel
    from app.run.jobs import GuiThreadGarbageCollector

    app = QApplication.instance() or QApplication([])
    clock = QElapsedTimer()
    clock.start()
    # the longest gap between heartbeats, the most CPU the GUI thread spent in one (what a busy machine
    # does not inflate: its other processes stretch the gaps, not the GUI thread's own work) and the longest gap
    # less the time the GUI thread waited for a core (Linux's schedstat): its own work and its waits on this
    # process's other threads (the GIL)
    schedstat = f"/proc/self/task/{threading.get_native_id()}/schedstat"

    def queued() -> float:
        try:
            with open(schedstat, encoding="ascii") as file:
                return int(file.read().split()[1]) / 1e6
        except OSError:
            return 0.0

    gaps = {"last": 0.0, "max": 0.0, "cpu_last": time.thread_time(), "cpu_max": 0.0, "q_last": queued(), "own": 0.0}

    def beat():
        t, cpu, q = clock.nsecsElapsed() / 1e6, time.thread_time(), queued()
        gaps["max"] = max(gaps["max"], t - gaps["last"])
        gaps["cpu_max"] = max(gaps["cpu_max"], (cpu - gaps["cpu_last"]) * 1000)
        gaps["own"] = max(gaps["own"], t - gaps["last"] - (q - gaps["q_last"]))
        gaps["last"], gaps["cpu_last"], gaps["q_last"] = t, cpu, q

    heart = QTimer(interval=5)
    heart.timeout.connect(beat)

    def reset_gap():
        gaps["last"], gaps["max"] = clock.nsecsElapsed() / 1e6, 0.0
        gaps["cpu_last"], gaps["cpu_max"], gaps["q_last"], gaps["own"] = time.thread_time(), 0.0, queued(), 0.0

    def wait(condition, seconds=600.0):
        end = time.monotonic() + seconds
        while not condition():
            app.processEvents()
            if time.monotonic() > end:
                raise TimeoutError("the history panel did not finish")
            time.sleep(0.001)

    GuiThreadGarbageCollector.freeze_loaded()  # as the window does once its modules are imported
    panel = HistoryPanel(lambda: Path(root))
    collector = GuiThreadGarbageCollector(panel)
    panel.resize(1100, 480)
    heart.start()
    app.processEvents()
    t0 = time.perf_counter()
    panel.show()  # starts the scan (a job); the first paint is the next processEvents
    reset_gap()
    app.processEvents()
    first_paint = gaps["max"] if gaps["max"] else (clock.nsecsElapsed() / 1e6 - gaps["last"])
    reset_gap()
    wait(lambda: not panel.busy and panel.model.rowCount() > 0)
    for _ in range(20):  # the paint after the fill
        app.processEvents()
    opened = time.perf_counter() - t0
    open_gap, open_cpu, open_own = gaps["max"], gaps["cpu_max"], gaps["own"]
    rows = panel.model.rowCount()
    reset_gap()
    text = "bf16 completed"
    for i in range(1, len(text) + 1):
        panel.filterEdit.setText(text[:i])
        for _ in range(3):
            app.processEvents()
    filtered = panel.model.rowCount()
    panel.filterEdit.clear()
    for _ in range(10):
        app.processEvents()
    filter_gap, filter_cpu = gaps["max"], gaps["cpu_max"]
    heart.stop()
    import gc

    t0 = time.perf_counter()
    gc.collect()
    collect = time.perf_counter() - t0
    collector.stop()
    panel.shutdown()
    return {
        "window_open_s": round(opened, 3),
        "window_first_paint_ms": round(first_paint, 1),
        "window_open_stall_ms": round(open_gap, 1),
        "window_open_busy_ms": round(open_cpu, 1),
        "window_open_own_ms": round(open_own, 1),
        "rows": rows,
        "filter_stall_ms": round(filter_gap, 1),
        "filter_busy_ms": round(filter_cpu, 1),
        "filtered_rows": filtered,
        "full_gc_ms": round(collect * 1000, 1),
        "cleared_rows": panel.model.rowCount(),
    }


def _child(*args: str) -> tuple[dict, float]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("COLUMNS", None)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, *args], env=env, cwd=REPO, capture_output=True, text=True, check=False, timeout=900
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


def _cli(root: Path, *argv: str, repeat: int = 1, cold: bool = False) -> dict:
    """The quickest of `repeat` runs of the command (each figure its own minimum: a shared machine's noise
    only ever adds); `cold`: the index removed before each."""
    best: dict = {}
    for _ in range(repeat):
        if cold:
            for path in root.glob(".history.sqlite*"):
                path.unlink()
        result, wall = _child("--measure-cli", json.dumps(["runs", "--runs-dir", str(root), *argv]))
        if result["code"] != 0:
            raise RuntimeError(f"runs {' '.join(argv)} exited {result['code']}")
        result["process_s"] = round(wall, 3)
        for key, value in result.items():
            best[key] = min(best[key], value) if isinstance(value, float) and key in best else best.get(key, value)
    return best


def bench(n: int, window: bool = True, repeat: int = 3) -> dict:
    with tempfile.TemporaryDirectory(prefix="amp-history-bench-") as folder:
        root = Path(folder) / "runs"
        t0 = time.perf_counter()
        ids = make_runs(root, n)
        result: dict = {"runs": n, "create_s": round(time.perf_counter() - t0, 1)}
        index = root / ".history.sqlite"
        result["cold_list"] = _cli(root, "list", repeat=repeat, cold=True)
        result["index_mib"] = round(index.stat().st_size / 2**20, 1) if index.exists() else None
        result["warm_list"] = _cli(root, "list", repeat=repeat)
        result["warm_list_json"] = _cli(root, "list", "--json", repeat=repeat)
        result["show"] = _cli(root, "show", ids[len(ids) // 2], repeat=repeat)
        if window:
            for path in root.glob(".history.sqlite*"):
                path.unlink()
            result["window_cold"], _ = _child("--measure-window", str(root))
            result["window_warm"], _ = _child("--measure-window", str(root))
        return result


def table(results: list[dict]) -> str:
    def cli(r, key):
        m = r.get(key)
        return f"{m['process_s']:.2f} s ({m['work_s']:.2f} / {m['work_cpu_s']:.2f})" if m else "-"

    def win(r, key, field, unit, busy=None):
        m = r.get(key)
        if not m:
            return "-"
        if unit == "s":
            return f"{m[field]:.2f} s"
        return f"{m[field]:.0f} ms" + (f" ({m[busy]:.0f} ms)" if busy else "")

    rows = [
        ("runs", [f"{r['runs']:,}" for r in results]),
        ("runs list, cold (no index)", [cli(r, "cold_list") for r in results]),
        ("runs list, warm", [cli(r, "warm_list") for r in results]),
        ("runs list --json, warm", [cli(r, "warm_list_json") for r in results]),
        ("runs show ID", [cli(r, "show") for r in results]),
        ("index file", [f"{r['index_mib']} MiB" for r in results]),
        ("window: open, cold", [win(r, "window_cold", "window_open_s", "s") for r in results]),
        ("window: first paint (any root)", [win(r, "window_cold", "window_first_paint_ms", "ms") for r in results]),
        (
            "window: longest stall (GUI CPU), cold open",
            [win(r, "window_cold", "window_open_stall_ms", "ms", "window_open_busy_ms") for r in results],
        ),
        (
            "window: longest stall less waits for a core, cold open",
            [win(r, "window_cold", "window_open_own_ms", "ms") for r in results],
        ),
        ("window: open, warm", [win(r, "window_warm", "window_open_s", "s") for r in results]),
        (
            "window: longest stall (GUI CPU), warm open",
            [win(r, "window_warm", "window_open_stall_ms", "ms", "window_open_busy_ms") for r in results],
        ),
        (
            "window: longest stall (GUI CPU), filtering",
            [win(r, "window_warm", "filter_stall_ms", "ms", "filter_busy_ms") for r in results],
        ),
        ("window: one full garbage collection", [win(r, "window_warm", "full_gc_ms", "ms") for r in results]),
    ]
    width = max(len(label) for label, _ in rows)
    cells = [max(len(values[j]) for _label, values in rows) for j in range(len(results))]
    return "\n".join(
        f"{label:<{width}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(values, cells)) for label, values in rows
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--no-window", action="store_true", help="the CLI figures only")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each CLI command; the quickest counts")
    parser.add_argument("--json", action="store_true", help="one JSON object per N on stdout, no table")
    parser.add_argument("--measure-cli", help=argparse.SUPPRESS)
    parser.add_argument("--measure-window", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_cli:
        print(json.dumps(measure_cli(json.loads(args.measure_cli))))
        return 0
    if args.measure_window:
        print(json.dumps(measure_window(args.measure_window)))
        return 0
    results = []
    for n in args.runs:
        result = bench(n, window=not args.no_window, repeat=args.repeat)
        results.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{n:,} runs done", file=sys.stderr, flush=True)
    if not args.json:
        print(
            f"CLI: the whole process (the command's own work / its CPU time), stdout to /dev/null; the quickest "
            f"of {args.repeat}"
        )
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
