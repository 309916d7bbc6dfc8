"""benchmarks/recommender_step.py --quick: the engine's recommender step and the hand-written SASRec both train
and are reported side by side (no timing is asserted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# The smallest recommender the task's options allow a step of: the benchmark's code paths, not its figures.
SMALL = "interactions=2000,items=100,mean_len=10,max_len=10,d_model=16,layers=1"


@pytest.mark.slow  # seconds of training in this process
def test_quick_mode_reports_the_engine_and_the_reference(capsys):
    from recommender_step import main

    assert main(["--quick", "--cpu", "-1", "--json", "--batch-size", "16", "--options", SMALL]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.strip().startswith("reference") and "positions/s" in line for line in lines)
    assert any(line.strip().startswith("engine") and "positions/s" in line and "ratio" in line for line in lines)
    result = json.loads(lines[-1])
    (row,) = result["rows"]
    assert row["engine"] > 0 and row["reference"] > 0 and row["rounds"] >= 2
    assert row["ratio"] == pytest.approx(row["engine"] / row["reference"])
    assert row["engine_loss"] == row["engine_loss"] and row["reference_loss"] == row["reference_loss"]  # not NaN
    assert result["batch_size"] == 16
    assert result["options"] == {
        "interactions": 2000,
        "items": 100,
        "mean_len": 10,
        "max_len": 10,
        "d_model": 16,
        "layers": 1,
    }
