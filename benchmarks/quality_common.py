"""What the quality benchmarks share: the engine trained as a user's `amp-console train` would train it (its
test metrics), mean and standard error, and the KEY=VALUE arguments of their command lines."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def engine_test_metrics(
    task: str, options: dict, seed: int, threads: int, overrides: dict, checkpoint: str = "last"
) -> tuple[dict, float]:
    """Test metrics of the engine trained on `task` with the task's defaults, then `overrides` (CPU, fp32, in a
    throwaway folder), and its training seconds. A run that does not complete is an error.

    `checkpoint`: "last" = the run's own end-of-run test metrics (its final weights); "best" = the test metrics
    of its best-on-validation checkpoint (the task's primary metric, kept by default: keep_best 1), found and
    measured as `amp-console evaluate RUN --best` does - the fair match for a baseline that early-stops on the
    same validation split; "both" = the last weights' test metrics with the run summary's `best` (the best
    checkpoint's test metrics, core.engine.small_validation), `best_step`, `last_step` and `advice` (which to use).
    The seconds are training's either way."""
    from core.config import RunConfig
    from core.engine.trainer import train

    if checkpoint not in ("last", "best", "both"):
        raise ValueError(f"checkpoint: {checkpoint!r} is not last, best or both")
    with tempfile.TemporaryDirectory(prefix=f"quality-{task}-") as folder:
        config = RunConfig.for_task(
            task,
            task_options=options,
            device="cpu",
            precision="fp32",
            seed=seed,
            threads=threads,
            out_dir=folder,
            **overrides,
        )
        ended = train(config)
        if ended.status != "completed":
            raise RuntimeError(f"engine run {ended.status}: {ended.message}")
        if checkpoint == "last":
            return ended.test_metrics, ended.elapsed_seconds
        if checkpoint == "both":
            best = ended.best_test_metrics if ended.best_step is not None else ended.test_metrics  # no best kept
            return {
                **ended.test_metrics,
                "best": dict(best),
                "best_step": ended.best_step,
                "last_step": ended.step,
                "advice": ended.checkpoint_advice,
            }, ended.elapsed_seconds
        from core.cli.evaluate import find_checkpoint
        from core.runs.evaluate import evaluate_checkpoint

        best = evaluate_checkpoint(find_checkpoint(folder, best=True, runs_dir=None), split="test")
        return {**best.metrics, "best_step": best.step, "last_step": ended.step}, ended.elapsed_seconds


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n); 0 for one value)."""
    values = [float(v) for v in values]
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))


def parse_value(text: str):
    """A command-line value: JSON when it parses (3, 1e-3, true, [1,2]), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_pairs(items: list[str]) -> dict:
    """['hidden=128', 'loss=lambda'] -> {'hidden': 128, 'loss': 'lambda'}."""
    return {key: parse_value(value) for key, value in (item.split("=", 1) for item in items)}
