"""`amp-console predict` throughput and memory, run as a user would (a subprocess per file):

    python benchmarks/predict_throughput.py            # 1M reviews, 1M ranking candidates, 100k users
    python benchmarks/predict_throughput.py --quick    # a tenth of each, a smoke test

Trains a small run of each task first (a few steps: throughput depends on the model's size, not its quality),
generates the inputs in each task's own format (synthetic reviews; LETOR-shaped candidates; one history of
lesson ids per user, and the same users as raw interactions), then times each `predict` command and reads its
peak RSS from os.wait4 (the child's own ru_maxrss; the set-up runs in a child process of its own, since Linux
carries a parent's peak RSS at fork into its child's). Prints rows/s as the command reports it (scoring only) and
as wall time including start-up and model loading. The point of the memory column: a 1M-row file must not
take memory in proportion to its rows (streaming), only the block and batch in flight.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RANKING_FEATURES = 46  # MQ2007's width: a 136-feature 1M-row CSV is ~1.4 GB of text


def train_runs(folder: Path) -> dict[str, Path]:
    import torch

    from core.config import RunConfig
    from core.engine.trainer import train

    torch.set_num_threads(1)
    specs = {
        "sentiment": dict(task_options={"reviews": 2000}, max_steps=10),
        "ranking": dict(task_options={"queries": 200, "features": RANKING_FEATURES}, max_steps=5),
        "recommender": dict(task_options={"interactions": 20_000}, max_steps=5),
    }
    runs = {}
    for task, settings in specs.items():
        ended = train(RunConfig.for_task(task, device="cpu", threads=1, out_dir=str(folder / task), **settings))
        assert ended.status == "completed", ended.message
        runs[task] = Path(ended.checkpoint)
    return runs


def make_inputs(folder: Path, reviews: int, candidates: int, users: int) -> dict[str, Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from core.data.reviews import generate_reviews
    from core.data.synthetic import generate_interactions, generate_ranking, make_track_chain

    files = {}
    text = generate_reviews(reviews, seed=11).text
    files["sentiment"] = folder / "reviews.csv"
    pacsv.write_csv(pa.table({"text": text}), files["sentiment"])

    data = generate_ranking(max(1, candidates // 20), 20, RANKING_FEATURES, 0.5, seed=11)
    rows = min(candidates, len(data.query))
    columns = {"query_id": data.query[:rows], "doc_id": np.arange(rows)}
    columns.update({f"f{i + 1}": pc.round(pa.array(data.features[:rows, i]), 4) for i in range(RANKING_FEATURES)})
    files["ranking"] = folder / "candidates.csv"
    pacsv.write_csv(pa.table(columns), files["ranking"])

    chain = make_track_chain(1000, 20, 0.7, 1.0, seed=11)
    raw = generate_interactions(chain, users * 30, 30, seed=11)
    keep = raw["user"] < users
    user, item, when = raw["user"][keep], raw["item"][keep], raw["timestamp"][keep]
    files["interactions"] = folder / "interactions.csv"
    pacsv.write_csv(pa.table({"user_id": user, "item_id": item, "timestamp": when}), files["interactions"])
    starts = np.flatnonzero(np.r_[True, np.diff(user) != 0])
    words = pa.ListArray.from_arrays(
        pa.array(np.r_[starts, len(user)].astype(np.int32)), pc.cast(pa.array(item), pa.string())
    )
    history = pc.binary_join(words, " ")
    files["recommender"] = folder / "histories.csv"
    pacsv.write_csv(pa.table({"user_id": user[starts], "history": history}), files["recommender"])
    return files


def run_predict(checkpoint: Path, source: Path, out: Path) -> dict:
    command = [sys.executable, "-m", "core.cli", "predict", str(checkpoint), "--input", str(source), "--out", str(out)]
    began = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    stdout, stderr = child.stdout.read(), child.stderr.read()
    child.stdout.close(), child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"predict failed ({child.returncode}): {stderr.strip().splitlines()[-1:]}")
    summary = stdout.strip().splitlines()[-1]
    found = re.search(r"([\d,]+) rows/s \(([\d.]+) s\)", summary)
    rows_in = sum(1 for _ in open(source, "rb")) - 1
    return {
        "input": source.name,
        "input_mb": source.stat().st_size / 2**20,
        "rows": rows_in,
        "command_rows_per_s": float(found.group(1).replace(",", "")) if found else None,
        "scoring_s": float(found.group(2)) if found else None,
        "wall_s": wall,
        "wall_rows_per_s": rows_in / wall,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "summary": summary,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    parser.add_argument("--json", action="store_true", help="last line: the results as JSON")
    parser.add_argument("--setup", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    if args.setup:  # the child that trains the runs and writes the inputs (see the module doc)
        folder = Path(args.setup)
        runs = train_runs(folder)
        files = make_inputs(folder, 1_000_000 // scale, 1_000_000 // scale, 100_000 // scale)
        (folder / "setup.json").write_text(
            json.dumps({"runs": {k: str(v) for k, v in runs.items()}, "files": {k: str(v) for k, v in files.items()}})
        )
        return 0
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="amp-predict-bench-") as tmp:
        folder = Path(tmp)
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--setup", tmp, *(["--quick"] if args.quick else [])], check=True, cwd=ROOT
        )
        setup = json.loads((folder / "setup.json").read_text())
        runs = {k: Path(v) for k, v in setup["runs"].items()}
        files = {k: Path(v) for k, v in setup["files"].items()}
        print(
            f"set-up (3 small runs, inputs): {time.perf_counter() - began:.0f} s; load average {load:.2f} on "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        results = {}
        for name, task in (
            ("sentiment", "sentiment"),
            ("ranking", "ranking"),
            ("recommender", "recommender"),
            ("interactions", "recommender"),
        ):
            results[name] = result = run_predict(runs[task], files[name], folder / f"{name}.out.csv")
            print(
                f"{name:<13} {result['rows']:>9,} rows ({result['input_mb']:,.0f} MB): "
                f"{result['command_rows_per_s']:>9,.0f} rows/s scoring, {result['wall_rows_per_s']:>9,.0f} "
                f"rows/s wall ({result['wall_s']:.1f} s), peak RSS {result['peak_rss_mb']:,.0f} MB",
                flush=True,
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        print(json.dumps({"load_average": load, "cpus": os.cpu_count(), "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
