"""benchmarks/loop_overhead.py: the reference loop trains the same steps however its calls are cut (the
interleaved mode runs it in chunks), and every mode (separate runs, interleaved in one process, concurrent on
one CPU) runs end to end on a tiny window and reports its rows."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_reference_loop_in_chunks_is_the_same_loop(monkeypatch):
    import torch
    from loop_overhead import ReferenceLoop

    def losses(chunks: list[int]) -> list[float]:
        torch.manual_seed(0)
        loop = ReferenceLoop(
            "tiny", batch_size=2048, log_interval=2, optimizer="adamw", lr=0.01, momentum=0.9, weight_decay=0.0
        )
        assert loop.per_epoch == 3  # so the chunks below cross epochs
        for n in chunks:
            loop.run(n)
        assert loop.step == sum(chunks)
        return loop.losses

    whole = losses([10])
    assert len(whole) == 5 and all(math.isfinite(x) for x in whole)
    assert losses([1, 4, 2, 3]) == whole  # same batches, same order, same updates


def bench(capsys, *argv: str) -> tuple[dict, str]:
    """benchmarks/loop_overhead.py's main() here, its own processes (the reference's, the engine's CLI) started as
    it starts them; the CPU it pins this process to (--interleaved) is given back after. Returns the --json line
    and all of stdout."""
    from loop_overhead import main

    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        assert main([*argv, "--json"]) == 0
    finally:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1]), out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_mode_runs_and_reports_its_rows(capsys):
    result, out = bench(
        capsys,
        "--batch-sizes",
        "64",
        "--log-intervals",
        "2",
        "--steps",
        "4",
        "--repeats",
        "1",
        "--seconds",
        "0",
        "--chunk-seconds",
        "0",
        "--interleaved",
        "--concurrent",
    )
    (row,) = result["rows"]
    assert (row["batch_size"], row["log_interval"], row["steps"]) == (64, 2, 4) and row["ratio"] > 0
    (mixed,) = result["interleaved"]
    assert mixed["rounds"] >= 2 and mixed["chunk_steps"] % 2 == 0
    assert mixed["reference_us_per_step"] > 0 and mixed["engine_us_per_step"] > 0
    assert mixed["low"] <= mixed["ratio"] * 1.5 and mixed["high"] >= mixed["low"]
    assert "ABBA" in out and "pinned to cpu" in out
    (paired,) = result["concurrent"]
    assert paired["steps"] == 4 and paired["engine"] > 0 and paired["reference"] > 0
    assert paired["ratio"] == pytest.approx(paired["engine"] / paired["reference"], rel=1e-9)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_dataset_mode_reports_engine_against_a_loop_over_the_same_dataloader(capsys):
    result, _ = bench(
        capsys,
        "--dataset",
        "--workers",
        "0",
        "--samples",
        "2048",
        "--batch-sizes",
        "32",
        "--log-intervals",
        "5",
        "--steps",
        "5",
        "--repeats",
        "1",
    )
    (row,) = result["dataset"]
    assert (row["workers"], row["batch_size"], row["steps"]) == (0, 32, 5)
    assert len(row["engine_runs"]) == len(row["reference_runs"]) == 1 and row["ratio"] > 0
