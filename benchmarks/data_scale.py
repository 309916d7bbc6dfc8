"""Data-scale benchmark: generation, import, one recommender epoch, and quality against the planted ceilings.

    python benchmarks/data_scale.py            # full sizes (10M interactions); --json adds a JSON last line
    python benchmarks/data_scale.py --quick    # small sizes, a smoke test

Each phase runs in its own subprocess so its peak RSS (ru_maxrss) is its own, not the parent's.
Targets (2-core CPU): generate 10M interactions <= 30 s, import a 10M-row CSV <= 30 s, peak RSS <= 3 GB,
and each task's final validation metric >= 90% of its planted ceiling.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RSS_LIMIT_GB = 3.0
SECONDS_LIMIT = 30.0


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def phase_generate(rows: int, out: str) -> dict:
    """Generate `rows` interactions in memory (timed), then write them as CSV for the import phase (timed)."""
    from core.data.importers import write_table
    from core.data.synthetic import generate_interactions, interactions_table, make_track_chain

    start = time.perf_counter()
    chain = make_track_chain(1000, 20, 0.7, 1.0, seed=0)
    data = generate_interactions(chain, rows, 50, seed=0)
    generated = time.perf_counter() - start
    write_table(interactions_table(data), out)
    written = time.perf_counter() - start - generated
    return {
        "rows": int(len(data["item"])),
        "generate_s": generated,
        "write_csv_s": written,
        "csv_mb": Path(out).stat().st_size / 2**20,
        "peak_rss_gb": _peak_rss_gb(),
    }


def phase_import(path: str, max_len: int) -> dict:
    """Read the CSV (parse, check, map ids, sort by user and time), then build the training tensors."""
    from core.data.importers import read_table
    from core.data.sequences import INTERACTION_COLUMNS, encode_interactions, sequence_splits

    start = time.perf_counter()
    raw = encode_interactions({"all": read_table(path, INTERACTION_COLUMNS)})["all"]
    read = time.perf_counter() - start
    train, _, _ = sequence_splits(raw["user"], raw["item"], raw["n_items"], max_len, 100, seed=0)
    tensors = time.perf_counter() - start - read
    return {
        "rows": int(len(raw["item"])),
        "import_s": read,
        "to_tensors_s": tensors,
        "train_windows": int(train["seq"].shape[0]),
        "users": int(raw["n_users"]),
        "peak_rss_gb": _peak_rss_gb(),
    }


def phase_train(task: str, options: dict, overrides: dict, out_dir: str, threads: int = 0) -> dict:
    """Train `task` with its defaults (plus overrides) on synthetic data; metrics, ceiling and baseline."""
    import torch

    from core.config import RunConfig
    from core.engine.trainer import train
    from core.tasks import create_task

    if threads:  # on a CPU shared with other jobs, fewer intra-op threads can be faster (no spin-waiting)
        torch.set_num_threads(threads)
    start = time.perf_counter()
    data = create_task(task, options).load_data("", 0)
    load = time.perf_counter() - start
    config = RunConfig.for_task(task, task_options=options, device="cpu", out_dir=out_dir, log_interval=50, **overrides)
    ended = train(config)
    ratio = {k: ended.metrics[k] / v for k, v in data.ceiling.items() if k in ended.metrics and v > 0}
    return {
        "task": task,
        "status": ended.status,
        "parameters": create_task(task, options).parameter_count(),
        "load_s": load,
        "train_s": ended.elapsed_seconds,
        "steps": ended.step,
        "samples_per_s": ended.samples_per_second,
        "metrics": ended.metrics,
        "ceiling": data.ceiling,
        "baseline": data.baseline,
        "fraction_of_ceiling": ratio,
        "peak_rss_gb": _peak_rss_gb(),
    }


def run_phase(name: str, **kwargs) -> dict:
    """Run one phase in a fresh interpreter and return its JSON result."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import data_scale as d; "
        f"print(json.dumps(d.phase_{name}(**json.loads(sys.argv[1]))))"
    )
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run every phase, print the figures (and a JSON summary with --json); exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the script")
    parser.add_argument("--rows", type=int, default=None, help="interactions to generate and import (10M)")
    parser.add_argument("--skip-quality", action="store_true", help="skip the long runs against the ceilings")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads for training (0 = default)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 10_000_000)
    results: dict = {"rows": rows}
    with tempfile.TemporaryDirectory() as tmp:
        csv = str(Path(tmp) / "interactions.csv")
        gen = results["generate"] = run_phase("generate", rows=rows, out=csv)
        print(
            f"generate {gen['rows']:,} interactions: {gen['generate_s']:.2f} s in memory, "
            f"+{gen['write_csv_s']:.2f} s to write {gen['csv_mb']:.0f} MB CSV; peak RSS {gen['peak_rss_gb']:.2f} GB"
        )
        imp = results["import"] = run_phase("import", path=csv, max_len=50)
        print(
            f"import {imp['rows']:,}-row CSV: {imp['import_s']:.2f} s (parse, check, map ids, sort), "
            f"+{imp['to_tensors_s']:.2f} s to {imp['train_windows']:,} training windows; "
            f"peak RSS {imp['peak_rss_gb']:.2f} GB"
        )
        epoch_rows = 100_000 if args.quick else 1_000_000
        ep = results["recommender_epoch"] = run_phase(
            "train",
            task="recommender",
            options={"interactions": epoch_rows},
            overrides={"epochs": 1},
            out_dir=str(Path(tmp) / "epoch"),
            threads=args.threads,
        )
        print(f"recommender, default options: {ep['parameters']:,} parameters")
        print(
            f"one epoch of the default recommender over {epoch_rows:,} interactions (CPU, fp32): "
            f"{ep['train_s']:.1f} s, {ep['steps']} steps, {ep['samples_per_s']:,.0f} sequences/s"
        )
        if not args.skip_quality:
            results["quality"] = quality_runs(args.quick, tmp, args.threads)
    checks = {
        "generate_s": results["generate"]["generate_s"] <= SECONDS_LIMIT,
        "import_s": results["import"]["import_s"] <= SECONDS_LIMIT,
        "peak_rss_gb": max(gen["peak_rss_gb"], imp["peak_rss_gb"]) <= RSS_LIMIT_GB,
    }
    for run in results.get("quality", []):
        checks[f"{run['task']}_ceiling_90pct"] = all(v >= 0.9 for v in run["fraction_of_ceiling"].values())
    results["checks"] = checks
    print("targets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in checks.items()))
    if args.json:
        print(json.dumps(results))
    return 0 if all(checks.values()) or args.quick else 1


def quality_runs(quick: bool, tmp: str, threads: int) -> list[dict]:
    """Default hyperparameters on larger synthetic data; metric / ceiling for every ceiling metric."""
    sizes = {
        "recommender": {"interactions": 60_000 if quick else 300_000},
        "ranking": {"queries": 2000 if quick else 20_000},
        "sentiment": {"reviews": 10_000 if quick else 100_000},
    }
    runs = []
    for task, options in sizes.items():
        run = run_phase(
            "train", task=task, options=options, overrides={}, out_dir=str(Path(tmp) / task), threads=threads
        )
        runs.append(run)
        parts = [
            f"{k} {run['metrics'][k]:.4f} / ceiling {v:.4f} = {run['fraction_of_ceiling'][k]:.1%} "
            f"(baseline {run['baseline'].get(k, float('nan')):.4f})"
            for k, v in run["ceiling"].items()
        ]
        print(f"{task} {options}: {run['train_s']:.0f} s, {run['steps']} steps; " + "; ".join(parts))
    return runs


if __name__ == "__main__":
    sys.exit(main())
