"""How long does the Run history window take to list a big runs folder?

Creates N synthetic run folders (a run.json like the trainer writes, and a small metrics.jsonl) in a temporary
folder, then, in a fresh Python process for each N (cold: nothing imported or cached in the process; the OS
page cache is warm, since the files were just written), measures:

- find_runs: core.engine.run_record.find_runs(root), what the panel's background scan runs;
- model: app.panels.history.RunsModel.set_runs (each row's texts and sort keys), what the GUI thread does;
- sort: the panel's proxy sorted by start time (as shown) and re-sorted by steps;
- then the same again in the same process (warm), as a Refresh would.

    python benchmarks/run_history.py [--runs 1000 10000] [--json]

Goal: <= 0.5 s from scan to filled model for 1,000 runs. One JSON object per N on stdout (with --json only
those lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = ("tiny", "mnist_mlp", "char_lm", "regression")
PRECISIONS = ("fp32", "bf16", "fp16", "tf32")
STATUSES = ("completed", "completed", "completed", "stopped", "failed", "running")  # running: no lock, interrupted


def make_runs(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"run-{i:05d}"
        folder.mkdir(parents=True)
        task, precision = TASKS[i % len(TASKS)], PRECISIONS[i % len(PRECISIONS)]
        status = STATUSES[i % len(STATUSES)]
        steps = 100 + i % 900
        record = {
            "version": 1, "id": f"{i:010x}", "name": folder.name, "task": task, "status": status,
            "device": "cuda:0" if i % 2 else "cpu", "device_name": "Synthetic", "precision": precision,
            "autocast_dtype": "bfloat16" if precision == "bf16" else None,
            "versions": {"python": "3.12", "torch": "2.x"},
            "start_time": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00+00:00",
            "resumed_at": [], "end_time": None, "wall_seconds": 1.5 * steps, "steps": steps, "start_step": 0,
            "total_steps": 1000, "final_loss": 1.0 / (1 + i % 50), "samples_per_second": 1000.0 + i,
            "metrics": {"accuracy": 0.5 + (i % 50) / 100}, "test_metrics": {},
            "best": {"name": "accuracy", "value": 0.5 + (i % 50) / 100, "step": steps},
            "checkpoints": {"last": {"path": str(folder / "checkpoint.pt"), "step": steps}},
            "config": {"task": task, "precision": precision, "lr": 0.001, "batch_size": 64, "max_steps": 1000,
                       "out_dir": str(folder), "seed": i},
            "notes": [], "message": "",
        }
        (folder / "run.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        lines = [json.dumps({"event": "RunStarted", "task": task, "start_step": 0, "total_steps": 1000})]
        lines += [json.dumps({"event": "StepMetrics", "step": s, "loss": 1.0 / s, "lr": 0.001,
                              "samples_per_second": 1000.0}) for s in range(10, 110, 10)]
        (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def measure(root: str) -> dict:
    """In this (fresh) process: import, scan, fill the model, sort; then scan + fill again (warm)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    t0 = time.perf_counter()
    from PySide6.QtCore import QCoreApplication, Qt

    from app.panels.history import RunsFilter, RunsModel
    from core.engine.run_record import find_runs

    app = QCoreApplication.instance() or QCoreApplication([])  # noqa: F841 (models want an application)
    imported = time.perf_counter()
    runs = find_runs(root)
    scanned = time.perf_counter()
    model = RunsModel()
    model.set_runs(runs)
    filled = time.perf_counter()
    proxy = RunsFilter()
    proxy.setSourceModel(model)
    proxy.sort(8, Qt.SortOrder.DescendingOrder)
    proxy.sort(5, Qt.SortOrder.AscendingOrder)
    sorted_only = time.perf_counter()
    proxy.set_text("bf16 completed")
    shown = proxy.rowCount()
    sorted_at = time.perf_counter()
    again = find_runs(root)
    model.set_runs(again)
    warm = time.perf_counter()
    return {
        "runs": len(runs), "import_s": round(imported - t0, 3), "find_runs_s": round(scanned - imported, 3),
        "model_fill_s": round(filled - scanned, 3), "scan_and_fill_s": round(filled - imported, 3),
        "sort_and_filter_s": round(sorted_at - filled, 3), "sort_s": round(sorted_only - filled, 3),
        "filtered_rows": shown,
        "warm_scan_and_fill_s": round(warm - sorted_at, 3),
        "interrupted": sum(1 for r in runs if r.get("status") == "interrupted"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for n in args.runs:
        with tempfile.TemporaryDirectory(prefix="amp-history-bench-") as folder:
            t0 = time.perf_counter()
            make_runs(Path(folder), n)
            made = time.perf_counter() - t0
            out = subprocess.run([sys.executable, __file__, "--measure", folder], env=env, cwd=REPO,
                                 capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            result["create_s"] = round(made, 2)
            result["goal_s"] = 0.5 * n / 1000
            if not args.json:
                print(f"{n:,} runs: scan {result['find_runs_s']} s + model {result['model_fill_s']} s = "
                      f"{result['scan_and_fill_s']} s cold ({result['warm_scan_and_fill_s']} s warm); "
                      f"sort+filter {result['sort_and_filter_s']} s", file=sys.stderr)
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
