"""Each task against the baseline a user would try first, on the same split, over several seeds:

    ranking       LightGBM LGBMRanker(lambdarank)          NDCG@10 on the same test queries
    sentiment     TF-IDF (1-2 grams) + logistic regression  accuracy on the same test reviews
    recommender   popularity and item-kNN                   HR@10 / NDCG@10, whole catalogue, history removed

Each line is mean +- standard error over the seeds, then the paired difference (engine - baseline) with its
standard error and the number of seeds the engine wins; "beyond 2 s.e." says whether the lead is larger than
the noise. Synthetic data of realistic shape (benchmarks/quality_<task>.py says which); public benchmark data
is not shipped. Needs the optional `quality` extra (pip install -e '.[quality]': lightgbm, scikit-learn).

    python benchmarks/quality.py [--seeds N] [--quick] [--tasks ranking,sentiment,recommender] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TASKS = ("ranking", "sentiment", "recommender")


def headline(task: str, summary: dict) -> tuple[str, float, float, int, int]:
    """(what is compared, paired difference, its s.e., wins, seeds) of one task's summary."""
    if task == "recommender":
        metric = summary["metrics"][0]
        d = summary[f"diff:{metric}"]
        return f"{metric} vs {d['against']}", d["mean_se"][0], d["mean_se"][1], d["wins"], summary["seeds"]
    if task == "sentiment":
        d = summary["difference"]
        return ("accuracy vs TF-IDF + logistic regression", d["mean"], d["se"], summary["wins"], summary["seeds"])
    return (
        f"{summary['metric']} vs {summary['baseline']}",
        summary["diff"],
        summary["diff_se"],
        summary["wins"],
        summary["seeds"],
    )


def beyond(diff: float, se: float, seeds: int) -> str:
    if seeds < 2:
        return "n/a (one seed has no standard error)"
    return "yes" if diff > 0 and diff > 2 * se else "no"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="each task's smaller data set")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--json", metavar="FILE", help="also write every task's summary as JSON")
    args = parser.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    summaries, lines = {}, []
    for task in tasks:
        module = importlib.import_module(f"quality_{task}")
        started = time.perf_counter()
        summary = module.run(seeds=args.seeds, quick=args.quick)
        summaries[task] = summary
        print(module.report(summary), flush=True)
        what, diff, se, wins, seeds = headline(task, summary)
        lines.append(
            f"{task:<12} {what:<58} {diff:+.4f} +- {se:.4f}  wins {wins}/{seeds}  "
            f"beyond 2 s.e.: {beyond(diff, se, seeds)}  "
            f"({time.perf_counter() - started:.0f} s)"
        )
    print("\nengine - baseline, paired over the same splits (mean +- s.e.):")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
